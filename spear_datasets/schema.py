"""The SPEAR metadata format: columns, a typed row, path resolution and validation.

Source of every column: ``SPEAR_PROTOCOL.md`` section 1 (upstream
``thomasthebaud/SPEAR-benchmark-code``). Times are in **seconds**; audio clips are 16 kHz.
"""

from __future__ import annotations

import csv
import functools
import math
import os
import re
from dataclasses import asdict, dataclass
from pathlib import Path, PurePath
from typing import Iterable

from spear_datasets.audio import TARGET_SR

#: Metadata CSV header, in this exact order (upstream submission format).
SPEAR_COLUMNS: tuple[str, ...] = (
    "audio_path",
    "answer_audio_path",
    "context_end_time",
    "question_end_time",
    "answer_duration",
    "speakers",
    "conversation_id",
    "transcript_question",
    "transcript_answer",
    "answer_start_time",
)

#: Columns a scoring run cannot do without.
REQUIRED_COLUMNS: tuple[str, ...] = ("audio_path", "answer_audio_path", "context_end_time", "question_end_time")

#: Participant id of the Seamless Interaction corpus, e.g. ``P1273A``.
PARTICIPANT_RE = re.compile(r"P\d{4}A?")

#: Slack (s) allowed between ``question_end_time`` and the clip's real length (rounding).
TIME_TOLERANCE_S = 0.05
#: Latest accepted answer onset after the question end (s). No conversational answer waits 10
#: minutes; a larger value is a unit or export error and would dominate every mean.
MAX_ANSWER_START_S = 600.0


class MetadataError(ValueError):
    """The metadata as a whole is unusable (no file, wrong header, no rows). One-line message."""


class RowError(ValueError):
    """One metadata row is invalid; the message is the reason stored on its failed result."""


@dataclass(frozen=True)
class SpearRow:
    """One SPEAR sample as typed values; paths are as written in the CSV (not resolved).

    ``answer_start_time`` is ``None`` when the CSV cell is empty ("answer placed at the
    question end": the system did not choose its timing).
    """

    audio_path: str
    answer_audio_path: str | None
    context_end_time: float
    question_end_time: float
    answer_duration: float | None = None
    speakers: str = ""
    conversation_id: str = ""
    transcript_question: str = ""
    transcript_answer: str = ""
    answer_start_time: float | None = None

    def to_csv_dict(self) -> dict[str, str]:
        """The row as CSV cells (``None`` -> empty cell, floats with ``repr`` precision)."""
        out = {}
        for k, v in asdict(self).items():
            out[k] = "" if v is None else (repr(float(v)) if isinstance(v, float) else str(v))
        return out

    @functools.cached_property
    def questioner(self) -> str:
        """Speaker tag of the question (the last turn of ``transcript_question``), or ``""``.
        Computed once per row (aggregates read it on every bootstrap resample)."""
        return last_speaker(self.transcript_question)


_SUBSET_RE = re.compile(r"(?:^|[/\\])(improvised|naturalistic)(?:[/\\]|$)")


def subset_of(path: str | None) -> str | None:
    """``"improvised"`` / ``"naturalistic"`` when the input clip's path names the subset folder
    (SPEAR's layout ``<split>/<subset>/...``), else ``None``."""
    m = _SUBSET_RE.search(path or "")
    return m.group(1) if m else None


def last_speaker(transcript: str) -> str:
    """The last ``SPK:`` tag of a ``SPK: text SPK: text`` transcript (``""`` when none)."""
    tags = re.findall(r"([A-Za-z0-9]+):", transcript or "")
    return tags[-1] if tags else ""


def strip_speaker_tags(text: str, speakers: Iterable[str] = ()) -> str:
    """Remove ``P\\d{4}A?:`` speaker tags, the tags of ``speakers`` (the row's ``speakers``
    column, e.g. ``speaker90|speaker91`` for non-Seamless data) and a bare leading ``:``."""
    text = re.sub(r"P\d{4}A?:\s*", " ", text or "")
    for spk in speakers:
        if spk:
            text = re.sub(rf"(?:^|(?<=\s)){re.escape(spk)}:\s*", " ", text)
    text = re.sub(r"^\s*:\s*", "", text)
    return re.sub(r"\s+", " ", text).strip()


class NumberError(ValueError):
    """A value that is not the number asked for (one-line reason naming what it is)."""


#: A plain decimal number: ASCII digits, optional sign, point and exponent. ``float()`` alone
#: also takes ``"1_000"``, ``"nan"``, ``"infinity"`` and non-ASCII digits; none is a number here.
_NUMBER_RE = re.compile(r"[+-]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?")


def parse_number(
    value: object,
    *,
    what: str = "value",
    integer: bool = False,
    minimum: float | None = None,
    maximum: float | None = None,
    above: float | None = None,
) -> float | int:
    """THE number parser of SPEARBench: CSV cells, ``-o``/``-a`` options, CLI numbers, ``compute()``
    arguments and FDB JSON times are read through here.

    Accepts a Python/numpy ``int`` or ``float`` (never a ``bool``) or a string holding a plain
    decimal number (surrounding whitespace ignored). With ``integer=True`` the value must be
    whole (``3``, ``"3"``, ``3.0``) and an ``int`` is returned; else a ``float``.

    Args:
        what: the name used in the error message (a column, an option, a flag).
        minimum, maximum: inclusive bounds; above: exclusive lower bound (``above=0``: > 0).

    Raises:
        NumberError: not a number (with the value, cut at 40 characters), NaN/inf, not whole
            when ``integer``, or out of range.
    """
    if isinstance(value, bool):
        raise NumberError(f"{what} is not a number: {value!r}")
    if isinstance(value, str):
        text = value.strip()
        if not _NUMBER_RE.fullmatch(text):
            low = text.lower().lstrip("+-")
            if low in ("nan", "inf", "infinity"):
                raise NumberError(f"{what} is not finite: {value!r}")
            raise NumberError(f"{what} is not a number: {value[:40]!r}")
        number: float | int = int(text) if integer and re.fullmatch(r"[+-]?[0-9]+", text) else float(text)
    else:
        try:
            import numbers

            if not isinstance(value, numbers.Real):
                raise TypeError
            number = value if isinstance(value, int) else float(value)  # type: ignore[arg-type]
        except (TypeError, ValueError):
            raise NumberError(f"{what} is not a number: {str(value)[:40]!r}") from None
    if isinstance(number, float) and not math.isfinite(number):
        raise NumberError(f"{what} is not finite: {value!r}")
    if integer:
        if isinstance(number, float):
            if not number.is_integer():
                raise NumberError(f"{what} must be a whole number, got {value!r}")
            number = int(number)
        number = int(number)
    else:
        number = float(number)
    if minimum is not None and number < minimum:
        raise NumberError(f"{what} must be >= {minimum:g}, got {_fmt(number)}")
    if above is not None and number <= above:
        raise NumberError(f"{what} must be > {above:g}, got {_fmt(number)}")
    if maximum is not None and number > maximum:
        raise NumberError(f"{what} must be <= {maximum:g}, got {_fmt(number)}")
    return number


def _float(raw: dict, key: str, *, optional: bool) -> float | None:
    value = raw.get(key)
    if value is None or (isinstance(value, str) and value.strip() == ""):
        if optional:
            return None
        raise RowError(f"{key} is empty")
    try:
        return float(parse_number(value, what=key))
    except NumberError as e:
        raise RowError(str(e)) from None


def _fmt(x: float) -> str:
    return f"{x:.6g}"


def parse_row(raw: dict, *, require_answer: bool = True) -> SpearRow:
    """Type and check one metadata row (a ``dict`` of CSV cells).

    Checks: required cells present; times numeric and finite; ``0 <= context_end_time <=
    question_end_time``; ``question_end_time > 0``; ``answer_duration`` >= 0 when given.
    Times against the real clip length are checked by :func:`check_times_against_clip`.

    Raises:
        RowError: with the reason (e.g. ``"question_end_time is not a number: 'abc'"``).
    """
    audio = str(raw.get("audio_path") or "").strip()
    if not audio:
        raise RowError("audio_path is empty")
    answer = str(raw.get("answer_audio_path") or "").strip() or None
    if require_answer and answer is None:
        raise RowError("answer_audio_path is empty")
    ctx = _float(raw, "context_end_time", optional=False)
    q_end = _float(raw, "question_end_time", optional=False)
    if ctx < 0:
        raise RowError(f"context_end_time is negative: {_fmt(ctx)}")
    if q_end <= 0:
        raise RowError(f"question_end_time must be > 0, got {_fmt(q_end)}")
    if ctx > q_end:
        raise RowError(f"context_end_time {_fmt(ctx)} is after question_end_time {_fmt(q_end)}")
    dur = _float(raw, "answer_duration", optional=True)
    if dur is not None and dur < 0:
        raise RowError(f"answer_duration is negative: {_fmt(dur)}")
    ast = _float(raw, "answer_start_time", optional=True)
    if ast is not None and q_end + ast < 0:
        raise RowError(f"answer_start_time {_fmt(ast)} puts the answer onset {_fmt(-(q_end + ast))} s before the input clip starts")
    if ast is not None and ast > MAX_ANSWER_START_S:
        raise RowError(f"answer_start_time {_fmt(ast)} s is beyond {MAX_ANSWER_START_S:g} s after the question (unit error?)")
    return SpearRow(
        audio_path=audio,
        answer_audio_path=answer,
        context_end_time=ctx,
        question_end_time=q_end,
        answer_duration=dur,
        speakers=str(raw.get("speakers") or ""),
        conversation_id=str(raw.get("conversation_id") or ""),
        transcript_question=str(raw.get("transcript_question") or ""),
        transcript_answer=str(raw.get("transcript_answer") or ""),
        answer_start_time=ast,
    )


def check_times_against_clip(row: SpearRow, clip_duration_s: float) -> None:
    """Check that the question ends inside the input clip (within :data:`TIME_TOLERANCE_S`).

    Raises:
        RowError: ``question_end_time`` beyond the clip's length.
    """
    if row.question_end_time > clip_duration_s + TIME_TOLERANCE_S:
        raise RowError(
            f"question_end_time {_fmt(row.question_end_time)} s is outside the input clip "
            f"({clip_duration_s:.3f} s long)"
        )


def data_root_for(csv_dir: Path, value: str) -> Path:
    """The folder a relative path of the CSV resolves against.

    Upstream-style paths (``data/...``) resolve against the nearest ancestor of the CSV's
    folder that holds a ``data/`` folder; everything else (or when no such ancestor exists)
    against the CSV's own folder.
    """
    csv_dir = Path(os.path.abspath(csv_dir))
    parts = PurePath(value).parts
    if parts and parts[0] == "data":
        for candidate in (csv_dir, *csv_dir.parents):
            if (candidate / "data").is_dir():
                return candidate
    return csv_dir


def resolve_path(value: str, csv_dir: str | os.PathLike) -> Path:
    """Resolve a metadata path: absolute paths as they are, relative ones inside their root.

    The check is lexical (``..`` components are collapsed before comparing), so a relative
    path can never leave its data root, while symlinked audio inside the root still works.

    Raises:
        RowError: a relative path that escapes its root, e.g. ``../../etc/passwd``.
    """
    if not value:
        raise RowError("empty path")
    if "\x00" in value:
        raise RowError("path contains a NUL byte")
    p = Path(value)
    if p.is_absolute():
        return Path(os.path.normpath(p))
    root = data_root_for(Path(csv_dir), value)
    full = Path(os.path.normpath(root / p))
    if full != root and root not in full.parents:
        raise RowError(f"path escapes the data root {root}: {value}")
    return full


def read_metadata(path: str | os.PathLike, *, required: Iterable[str] = REQUIRED_COLUMNS) -> list[dict[str, str]]:
    """Read a SPEAR metadata CSV into a list of raw rows (row ``i`` = CSV data line ``i``).

    Extra columns are kept; missing optional SPEAR columns read as empty cells.

    Raises:
        MetadataError: file missing or unreadable, not a CSV with a header, a required column
            missing, or no data rows.
    """
    p = Path(path)
    if not p.is_file():
        raise MetadataError(f"metadata file not found: {p}")
    csv.field_size_limit(max(csv.field_size_limit(), 64 * 2**20))  # a long transcript is one cell, not an error
    try:
        with open(p, newline="", encoding="utf-8-sig") as f:
            reader = csv.reader(f)
            header = [h.strip() for h in next(reader, [])]
            dup = sorted({h for h in header if h and header.count(h) > 1})
            if dup:
                raise MetadataError(f"metadata {p} repeats column(s) {', '.join(dup)}")
            rows = [dict(zip(header, cells)) for cells in reader if any(c.strip() for c in cells)]
    except (OSError, UnicodeDecodeError, csv.Error) as e:
        raise MetadataError(f"cannot read metadata {p}: {e}") from None
    missing = [c for c in required if c not in header]
    if missing:
        seen = ",".join(header)[:200] or "empty file"
        raise MetadataError(f"metadata {p} lacks column(s) {', '.join(missing)} (header: {seen})")
    if not rows:
        raise MetadataError(f"metadata {p} has no rows")
    for r in rows:
        for c in SPEAR_COLUMNS:
            r.setdefault(c, "")
        r.pop("", None)
    return rows


def write_metadata(path: str | os.PathLike, rows: Iterable[SpearRow | dict]) -> Path:
    """Write rows with the exact SPEAR header (atomically: temp file, then rename).

    Raises:
        spear_datasets.files.OutputError: the file cannot be written; no temporary file is left.
    """
    from spear_datasets.files import atomic_path

    p = Path(path)
    with atomic_path(p) as tmp, open(tmp, "w", newline="", encoding="utf-8") as f:
        w = csv.DictWriter(f, fieldnames=list(SPEAR_COLUMNS), extrasaction="ignore")
        w.writeheader()
        for r in rows:
            w.writerow(r.to_csv_dict() if isinstance(r, SpearRow) else {k: ("" if r.get(k) is None else r.get(k)) for k in SPEAR_COLUMNS})
    return p


def hf_features(*, with_answer_audio: bool = True):
    """``datasets.Features`` of the Hub dataset: ``audio`` (16 kHz stereo input clip),
    ``answer_audio`` (human answer) and the metadata columns (times as float64 seconds)."""
    from datasets import Audio, Features, Value

    feats = {"audio": Audio(sampling_rate=TARGET_SR, num_channels=2)}
    if with_answer_audio:
        feats["answer_audio"] = Audio(sampling_rate=TARGET_SR, num_channels=2)
    for c in SPEAR_COLUMNS:
        if c in ("context_end_time", "question_end_time", "answer_duration", "answer_start_time"):
            feats[c] = Value("float64")
        else:
            feats[c] = Value("string")
    feats["subset"] = Value("string")
    return Features(feats)


