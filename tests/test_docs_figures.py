"""The docs quote no figure that depends on the machine unless the page says so: a page that
prints a model-based value of a run (Whisper's WER, DNSMOS, DistillMOS, UTMOS) or a measured
time must say that its figures depend on the machine."""

from __future__ import annotations

import re
from pathlib import Path

DOCS = Path(__file__).resolve().parents[1] / "docs"
#: a printed value of a model-based key (a table row or a "key: value"), or a measured run time
MACHINE_FIGURE = re.compile(r"^\s*(?:WER_norm_%|CER_norm_%|WER_%_\S+|DNSMOS_\w+|DistillMOS|UTMOS)\s*[:=]?\s+\d+\.\d+"
                            r"|\b(?:took|in) \d+(?:\.\d+)? s\b|\bMeasured: \d+", re.M)
SAYS_SO = re.compile(r"depends? on the machine|machine-dependent|one machine's|on (?:a|this|that) machine", re.I)


def test_pages_with_machine_dependent_figures_say_so():
    offenders = [p.relative_to(DOCS).as_posix() for p in sorted(DOCS.rglob("*.md"))
                 if MACHINE_FIGURE.search(p.read_text(encoding="utf-8")) and not SAYS_SO.search(p.read_text(encoding="utf-8"))]
    assert not offenders, f"pages quoting machine-dependent figures without saying so: {offenders}"


def test_the_figure_pattern_finds_the_demos_table_row():
    assert MACHINE_FIGURE.search("WER_norm_%                              5.000             5.000")
    assert MACHINE_FIGURE.search("demo took 27 s")
    assert not MACHINE_FIGURE.search("latency_ms                            250.500           800.000")
