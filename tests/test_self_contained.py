"""The tests read nothing outside the repository: a clone alone passes them (no ``../shared``
folder beside it, no absolute path of one machine). A static scan of every file under tests/
(fixtures excepted) for the ways a test reached outside: a parent folder of the repository
(``parents[2]`` and up from a file in tests/), a relative ``../shared`` path, an absolute
``/work`` path. A line that names such a string without reading it ends with ``# not a read``."""

from __future__ import annotations

import re
from pathlib import Path

TESTS = Path(__file__).resolve().parent
# this file itself (which names the patterns) is left out of the scan
OUTSIDE = re.compile("|".join([r"\.\./" + "shared", r"parents\[[2-9]\]", r"(?<![\w.])/" + r"work/", r"['\"]/" + "work['\"]"]))
MARK = "# not a read"


def test_no_test_reads_outside_the_repository():
    hits = []
    for f in sorted(TESTS.rglob("*")):
        if f == Path(__file__).resolve() or not f.is_file() or "fixtures" in f.relative_to(TESTS).parts or f.suffix not in (".py", ".sh", ".json", ".cfg", ".toml", ".ini", ".txt"):
            continue
        for n, line in enumerate(f.read_text(encoding="utf-8", errors="replace").splitlines(), 1):
            if OUTSIDE.search(line) and not line.rstrip().endswith(MARK):
                hits.append(f"{f.relative_to(TESTS)}:{n}: {line.strip()[:120]}")
    assert not hits, "tests reaching outside the repository:\n" + "\n".join(hits)


def test_the_scan_finds_what_it_looks_for():
    """Each pattern on a line of its own (hand-written): all found; a marked line is let through."""
    lines = ["p = Path(__file__).parents[2] / 'x'", "open('../" + "shared/fixtures/a.wav')", "root = '/" + "work/main/x'"]
    assert all(OUTSIDE.search(x) for x in lines)
    assert not OUTSIDE.search("REPO = Path(__file__).resolve().parents[1]")
