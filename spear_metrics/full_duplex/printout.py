"""FDB's own printouts (``results/<run>/*.txt`` of the model-outputs release) read back, and our
figures set beside them.

The printouts are what FDB v1.0's evaluation scripts print (``eval_pause_handling.py``,
``eval_smooth_turn_taking.py``, ``eval_backchannel.py``, ``eval_user_interruption.py`` of
``DanielLin94144/Full-Duplex-Bench``). Aggregates follow a ``[Result]`` line:
``Average take turn:``, ``Average latency:``, ``Average rating:`` and, for backchannel,
``JSD - Mean: x ± s`` / ``TOR - Mean:`` / ``Frequency - Mean:`` (or the older ``JSD : x``,
``TOR : x``, ``BCR : x``). Per sample, only some lines name their sample: smooth turn-taking prints
the ``.../<id>/output.json`` path, then ``the TOR is 1`` and ``the latency is 1.35`` (raw, before
negatives become 0); backchannel prints ``JSD: x`` after ``Processing output file .../<id>/output.json``
in the versions that print that line; user interruption prints ``Processing .../<id> ...`` then
the parsed judge answer (``'rating': 4``). Unlabelled lines are not matched to samples.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

from spear_datasets.sources.fdb import RELEASE_RESULT_FILES

_NUM = r"([-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?|nan|None)"
#: aggregate lines (after ``[Result]``) -> per-sample key they average
_AGGREGATES = [
    (re.compile(r"Average take turn:\s*" + _NUM), "tor"),
    (re.compile(r"Average latency:\s*" + _NUM), "latency_s"),
    (re.compile(r"Average rating:\s*" + _NUM), "relevance"),
    (re.compile(r"\bJSD(?:\s*-\s*Mean)?\s*:\s*" + _NUM), "jsd"),
    (re.compile(r"\bTOR(?:\s*-\s*Mean)?\s*:\s*" + _NUM), "tor"),
    (re.compile(r"\b(?:Frequency(?:\s*-\s*Mean)?|BCR)\s*:\s*" + _NUM), "backchannel_frequency"),
]
_SAMPLE_PATH = [
    re.compile(r"^\s*(?:\S*/)?([^/\s]+)/output\.json\s*$"),          # smooth turn-taking: the path alone
    re.compile(r"Processing output file\s+(?:\S*/)?([^/\s]+)/output\.json"),  # backchannel (some versions)
    re.compile(r"^Processing\s+(?:\S*/)?([^/\s]+)/?\s*\.\.\.\s*$"),    # user interruption: the folder
]
_PER_SAMPLE = [
    (re.compile(r"the TOR is\s+" + _NUM), "tor"),
    (re.compile(r"the latency is\s+" + _NUM), "latency_s"),
    (re.compile(r"^JSD:\s*" + _NUM), "jsd"),
    (re.compile(r"'rating':\s*" + _NUM), "relevance"),
]
#: per-sample agreement: |ours - theirs| at most this (values are printed with full precision)
AGREE_ABS = 1e-6


def _num(text: str) -> float | None:
    if text == "None":
        return None
    v = float(text)
    return v if math.isfinite(v) else None


@dataclass
class Printout:
    """One FDB printout read back: ``aggregates`` (per-sample key -> the printed mean) and
    ``per_sample`` (sample id -> key -> value) for the lines that name their sample."""

    aggregates: dict[str, float | None] = field(default_factory=dict)
    per_sample: dict[str, dict[str, float | None]] = field(default_factory=dict)


def parse_printout(text: str) -> Printout:
    """Read an FDB evaluation script's printout (see the module docstring); lines it does not
    know are ignored. Values printed as ``None`` or ``nan`` read as ``None``."""
    out = Printout()
    current: str | None = None
    in_result = False
    for line in text.splitlines():
        if "[Result]" in line:
            in_result, current = True, None
            continue
        if in_result:
            for rx, key in _AGGREGATES:
                m = rx.search(line)
                if m and key not in out.aggregates:
                    out.aggregates[key] = _num(m.group(1))
            continue
        for rx in _SAMPLE_PATH:
            m = rx.search(line)
            if m:
                current = m.group(1)
                break
        else:
            if current is None:
                continue
            for rx, key in _PER_SAMPLE:
                m = rx.search(line)
                if m:
                    out.per_sample.setdefault(current, {})[key] = _num(m.group(1))
    return out


def _agree(key: str, ours: Any, theirs: float | None) -> bool:
    if key == "latency_s" and theirs is not None:
        theirs = max(0.0, theirs)  # FDB prints the raw latency and averages negatives as 0, as we store it
    if ours is None or theirs is None:
        return ours is None and theirs is None
    return abs(float(ours) - theirs) <= AGREE_ABS


def compare_with_printouts(release: str | Path, run: str, summary: dict[str, Any], results: Sequence[Any]) -> dict[str, Any]:
    """Our figures of one release run beside FDB's printouts in ``results/<run>/``.

    Args:
        summary: the run's ``summary.json`` (the ten release columns).
        results: its per-sample :class:`~spear_metrics.core.records.SampleResult` list.

    Returns:
        ``{"run", "categories": {category: {"file", "present", "keys": {column: {"ours", "theirs",
        "diff"}}, "per_sample": {"n_identified", "n_compared", "n_agree", "differing": [...],
        "not_scored_by_us": [...]}}}}``. ``diff`` = ours - theirs (``None`` when either is
        missing); per-sample latencies are compared with FDB's negatives as 0.
    """
    from spear_metrics.full_duplex.runs import RELEASE_COLUMNS

    root = Path(release) / "results" / run
    out: dict[str, Any] = {"run": run, "categories": {}}
    for cat, fname in RELEASE_RESULT_FILES.items():
        path = root / fname
        entry: dict[str, Any] = {"file": f"results/{run}/{fname}", "present": path.is_file(), "keys": {}, "per_sample": None}
        out["categories"][cat] = entry
        if not path.is_file():
            continue
        p = parse_printout(path.read_text(encoding="utf-8", errors="replace"))
        for col, (c, key) in RELEASE_COLUMNS.items():
            if c != cat:
                continue
            ours, theirs = summary.get(col), p.aggregates.get(key)
            entry["keys"][col] = {"ours": ours, "theirs": theirs,
                                  "diff": None if ours is None or theirs is None else ours - theirs}
        if not p.per_sample:
            continue
        mine = {str(r.values.get("id")): r for r in results if r.values.get("category") == cat}
        differing, absent, compared, agree = [], [], 0, 0
        for sid, vals in p.per_sample.items():
            r = mine.get(sid)
            if r is None or not r.ok:
                absent.append(sid)
                continue
            compared += 1
            bad = [{"id": sid, "key": k, "ours": r.values.get(k), "theirs": t} for k, t in vals.items()
                   if not _agree(k, r.values.get(k), t)]
            differing += bad
            agree += not bad
        entry["per_sample"] = {"n_identified": len(p.per_sample), "n_compared": compared, "n_agree": agree,
                               "differing": differing, "not_scored_by_us": absent}
    return out


def _f(v: Any) -> str:
    return "-" if v is None else f"{float(v):.4f}"


def format_comparison(comp: dict[str, Any], *, max_differing: int = 10) -> list[str]:
    """The comparison as printed lines: per category and column, ours, FDB's and the difference;
    then the per-sample agreement where FDB's printout names its samples."""
    lines = [f"run {comp['run']}: ours vs FDB's printouts (results/{comp['run']}/*.txt)",
             f"  {'category':<28} {'column':<24} {'ours':>9} {'FDB':>9} {'diff':>9}"]
    for cat, e in comp["categories"].items():
        if not e["present"]:
            lines.append(f"  {cat:<28} (no {e['file']})")
            continue
        for col, k in e["keys"].items():
            d = k["diff"]
            lines.append(f"  {cat:<28} {col:<24} {_f(k['ours']):>9} {_f(k['theirs']):>9} "
                         f"{'-' if d is None else f'{d:+.4f}':>9}")
        ps = e["per_sample"]
        if ps:
            lines.append(f"  {cat:<28} per sample: {ps['n_agree']} of {ps['n_compared']} agree "
                         f"({ps['n_identified']} named in the printout, {len(ps['not_scored_by_us'])} not scored by us)")
            for d in ps["differing"][:max_differing]:
                lines.append(f"    {d['id']}: {d['key']} ours {_f(d['ours'])} FDB {_f(d['theirs'])}")
            if len(ps["differing"]) > max_differing:
                lines.append(f"    ... {len(ps['differing']) - max_differing} more in vs_release.json")
    return lines
