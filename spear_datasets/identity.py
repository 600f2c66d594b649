"""What data a run scored: SPEAR's own split, or other ("custom") data.

SPEAR's published splits (``docs/protocols/SPEAR_PROTOCOL.md`` section 1, from the SPEAR website and
``thomasthebaud/SPEAR-benchmark-code``): clips per subset

============  ============  ==============
split         improvised    naturalistic
============  ============  ==============
``test``      994           1,731
``dev``       1,165         1,529
============  ============  ==============

A set of rows is labelled as SPEAR's split only when it passes the schema and count check
(:func:`spear_split_of`): its input clips lie in ``<split>/<subset>/`` folders of one split,
each subset of that split holds exactly the published number of clips, every clip is named as
SPEAR names them (``V<v>_S<s>_I<i>_<P1>_<P2>_<k>.wav``) and no clip repeats. Anything else is
"custom data". The check cannot prove that the clips are SPEAR's (their audio is not compared);
the fingerprint (:func:`fingerprint`) is recorded so that two runs can be compared on the data
they scored.

Light: no audio is read (standard library only).
"""

from __future__ import annotations

import hashlib
import re
from collections import Counter
from pathlib import PurePosixPath, PureWindowsPath
from typing import Any, Iterable, Mapping, Optional

#: published clips per split and subset
SPEAR_SPLIT_SIZES: dict[str, dict[str, int]] = {
    "test": {"improvised": 994, "naturalistic": 1731},
    "dev": {"improvised": 1165, "naturalistic": 1529},
}
SUBSETS = ("improvised", "naturalistic")
#: SPEAR's clip file name: ``<V_S_I>_<P1>_<P2>_<k>.wav``
CLIP_NAME_RE = re.compile(r"V\d+_S\d+_I\d+_P\d{4}A?_P\d{4}A?_\d+\.wav")
#: the label of a run on SPEAR's split / on anything else
SPEAR_LABEL = "SPEAR {split} split"
CUSTOM_LABEL = "custom data"


class DataCheckError(ValueError):
    """Data that fails SPEAR's schema and count check where SPEAR's split is required (one line)."""


def _parts(path: str) -> tuple[str, ...]:
    p = str(path or "")
    return (PureWindowsPath(p) if "\\" in p else PurePosixPath(p)).parts


def clip_place(path: str) -> tuple[Optional[str], Optional[str], str]:
    """``(split, subset, file name)`` of an input clip path: ``subset`` the last ``improvised`` /
    ``naturalistic`` folder, ``split`` the folder just above it when it is ``test`` or ``dev``
    (``None`` where absent)."""
    parts = _parts(path)
    name = parts[-1] if parts else ""
    for i in range(len(parts) - 2, -1, -1):
        if parts[i] in SUBSETS:
            split = parts[i - 1] if i > 0 and parts[i - 1] in SPEAR_SPLIT_SIZES else None
            return split, parts[i], name
    return None, None, name


def fingerprint(audio_paths: Iterable[str]) -> str:
    """sha256 (hex) of the sorted ``<split>/<subset>/<file name>`` lines of the input clips:
    the same clips give the same fingerprint wherever they are stored."""
    lines = sorted("/".join(x or "-" for x in clip_place(p)) for p in audio_paths)
    return hashlib.sha256("\n".join(lines).encode("utf-8")).hexdigest()


def spear_split_of(audio_paths: Iterable[str]) -> tuple[Optional[str], str]:
    """``(split, why)``: the SPEAR split these input clips are (``None`` when they are not),
    and one sentence saying why (the first check that failed, or what matched)."""
    places = [clip_place(p) for p in audio_paths]
    if not places:
        return None, "no rows"
    splits = {s for s, _, _ in places}
    if len(splits) != 1 or None in splits:
        return None, "the input clips are not all in <split>/<subset>/ folders of one split (test or dev)"
    split = next(iter(splits))
    counts = Counter(sub for _, sub, _ in places)
    want = SPEAR_SPLIT_SIZES[split]
    if dict(counts) != want:
        got = ", ".join(f"{k} {counts.get(k, 0)}" for k in SUBSETS)
        need = ", ".join(f"{k} {v}" for k, v in want.items())
        return None, f"{split} clips per subset: {got}; SPEAR's {split} split has {need}"
    bad = next((n for _, _, n in places if not CLIP_NAME_RE.fullmatch(n)), None)
    if bad is not None:
        return None, f"clip {bad!r} is not named as SPEAR's clips (V.._S.._I.._P1_P2_k.wav)"
    dup = next((k for k, n in Counter((s, n) for _, s, n in places).items() if n > 1), None)
    if dup is not None:
        return None, f"clip {dup[0]}/{dup[1]} appears more than once"
    return split, f"{sum(want.values())} clips ({', '.join(f'{k} {v}' for k, v in want.items())}), SPEAR's names"


def data_identity(audio_paths: Iterable[str], *, source: Optional[str] = None) -> dict[str, Any]:
    """What a run scored, for ``run_info.json``, ``summary.json``, the results card and the Space.

    Args:
        audio_paths: every row's input clip path (``audio_path``), failed rows included.
        source: where the rows came from (e.g. the metadata CSV's path), recorded as given.

    Returns:
        ``{"label", "spear_split", "split", "subsets", "n_rows", "fingerprint", "check", "source"}``:
        ``label`` ``"SPEAR test split"`` (or dev) only when :func:`spear_split_of` passes, else
        ``"custom data"``; ``spear_split`` that split or ``None``; ``split`` the clips' own split
        folder when they share one; ``subsets`` rows per subset folder; ``check`` the reason.
    """
    paths = [str(p) for p in audio_paths]
    spear, why = spear_split_of(paths)
    places = [clip_place(p) for p in paths]
    splits = {s for s, _, _ in places}
    return {
        "label": SPEAR_LABEL.format(split=spear) if spear else CUSTOM_LABEL,
        "spear_split": spear,
        "split": next(iter(splits)) if len(splits) == 1 else None,
        "subsets": dict(sorted(Counter(sub or "-" for _, sub, _ in places).items())),
        "n_rows": len(paths),
        "fingerprint": fingerprint(paths),
        "check": why,
        "source": source,
    }


def is_spear_data(info: Any) -> bool:
    """Whether a recorded :func:`data_identity` block says SPEAR's split (a missing block: no)."""
    return isinstance(info, Mapping) and bool(info.get("spear_split")) and info.get("label") == SPEAR_LABEL.format(
        split=info.get("spear_split"))


def data_label(info: Any) -> str:
    """The label of a recorded identity block (``custom data`` when it is missing or not SPEAR's)."""
    return str(info["label"]) if is_spear_data(info) else CUSTOM_LABEL


def check_counts(counts: Mapping[str, int], split: str, *, where: str = "data") -> None:
    """Check rows per subset of ``split`` against SPEAR's published sizes.

    Args:
        counts: rows per subset (``{"improvised": n, "naturalistic": m}``).

    Raises:
        DataCheckError: an unknown split, or counts that differ (the message gives both).
    """
    if split not in SPEAR_SPLIT_SIZES:
        raise DataCheckError(f"{where}: unknown split {split!r} (SPEAR's: {', '.join(SPEAR_SPLIT_SIZES)})")
    want = SPEAR_SPLIT_SIZES[split]
    got = {k: int(counts.get(k, 0)) for k in SUBSETS}
    if got != want:
        raise DataCheckError(
            f"{where}: {split} rows per subset are " + ", ".join(f"{k} {v}" for k, v in got.items())
            + f" ({sum(got.values())}); SPEAR's {split} split has " + ", ".join(f"{k} {v}" for k, v in want.items())
            + f" ({sum(want.values())})")
