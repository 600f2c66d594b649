"""Reader of Full-Duplex-Bench (v1.0) task folders, in the upstream layout.

Source: ``DanielLin94144/Full-Duplex-Bench`` (arXiv 2503.04721); the layout is described in
``FDB_PROTOCOL.md``. One folder per sample, ``<task_dir>/<id>/``:

- ``input.wav`` (user channel) and ``output.wav`` (the model's channel), both from t = 0 s
  (the scorer requires both for the ASR-based tasks and ``output.wav`` for backchannel);
- ``output.json``: word-timed ASR of ``output.wav``
  ``{"text": str, "chunks": [{"text": word, "timestamp": [start_s, end_s]}]}`` (may be absent:
  the scorer then transcribes ``output.wav``);
- the task file: ``pause.json`` (pause handling), ``turn_taking.json`` (smooth turn-taking),
  ``interrupt.json`` (user interruption); backchannel folders (numeric ICC ids) need none.

Nothing here raises on a bad *sample*: :func:`list_samples` lists every sample folder and the
per-file readers raise :class:`FDBFormatError` (one line) so the caller fails that sample only.
Times are checked where they are read: a time must be a finite number >= 0 s (``null`` is kept as
``None``) and a span's end must not come before its start. Whether a time lies inside the audio
is checked by the scorer, which knows the durations.

The public FDB v1.0 **model-outputs release** (e.g. ``MagicLuke/fdb-v1-outputs-v1`` on the Hub,
CC BY-NC 4.0, gated) keeps each run's replies apart from the stimuli:
``metadata/<run>.jsonl`` (one row per stimulus: ``category``, ``sample_id``, ``stimulus`` =
``<category>/<id>``, ...), ``data/<run>/<category>/<id>/{output.flac, output.json, rating.json}``
(the reply channel at 24 kHz, time-synchronous with the stimulus; its Parakeet ASR; FDB's judge
rating for user interruption) and ``results/<run>/*.txt`` (FDB's own scripts' printouts). The
stimuli (``<category>/<id>/input.wav`` + task file) come from FDB's v1.0 download.
:func:`read_release_metadata`, :func:`release_sample` and :func:`fetch_release` read it.
"""

from __future__ import annotations

import json
import math
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple

from spear_datasets.files import parse_json, read_limited

#: task name -> the task file each sample folder must hold (``None``: none needed)
TASK_FILES: dict[str, str | None] = {
    "pause_handling": "pause.json",
    "smooth_turn_taking": "turn_taking.json",
    "backchannel": None,
    "user_interruption": "interrupt.json",
}
TASKS = tuple(TASK_FILES)


class FDBFormatError(ValueError):
    """A sample file is missing or malformed; the message is one line and names the file."""


class Chunk(NamedTuple):
    """One ASR word: ``text`` and its ``start``/``end`` in seconds from the start of
    ``output.wav`` (either may be ``None`` when the ASR gave no time)."""

    text: str
    start: float | None
    end: float | None


@dataclass(frozen=True)
class OutputTranscript:
    """The ASR of ``output.wav``: full ``text``, word ``chunks`` (in file order) and ``source``
    (``"output.json"`` or the ASR model that made it)."""

    text: str
    chunks: tuple[Chunk, ...]
    source: str = "output.json"


@dataclass(frozen=True)
class FDBSample:
    """One sample. Paths are given whether or not the files exist.

    ``dir`` is the sample folder (``input.wav`` and the task file). The reply's files default to
    the same folder (``output.wav``, ``output.json``); a release keeps them apart, so
    ``output_audio`` / ``output_asr`` name them explicitly (e.g. ``output.flac``), and
    ``rating_json`` names FDB's judge rating of the reply when the release has one.
    """

    id: str
    task: str
    dir: Path
    output_audio: Path | None = None
    output_asr: Path | None = None
    rating_json: Path | None = None

    @property
    def input_wav(self) -> Path:
        """The stimulus played to the model (``input.wav`` of the sample folder)."""
        return self.dir / "input.wav"

    @property
    def output_wav(self) -> Path:
        """The reply audio (``output.wav`` of the folder unless ``output_audio`` is set)."""
        return self.output_audio if self.output_audio is not None else self.dir / "output.wav"

    @property
    def output_json(self) -> Path:
        """The reply's word-timed transcript (``output.json`` of the folder unless ``output_asr`` is set)."""
        return self.output_asr if self.output_asr is not None else self.dir / "output.json"

    @property
    def task_json(self) -> Path | None:
        """The task's own timing file (:data:`TASK_FILES`: e.g. ``pause.json``), ``None`` for a task
        that has none."""
        name = TASK_FILES[self.task]
        return None if name is None else self.dir / name


def _sort_key(name: str) -> tuple:
    return (0, int(name), name) if name.isdigit() else (1, 0, name)


def list_samples(root: str | os.PathLike, task: str) -> list[FDBSample]:
    """Every sample folder of a task directory, numeric ids in numeric order, then the others.

    Hidden folders (``.name``) are skipped; every other sub-folder is a sample, even one that
    lacks files (it fails when scored, with the reason).

    The folder must look like ``task``'s (:func:`check_task_folder`): a smooth-turn-taking folder
    scored as backchannel would otherwise be scored silently (backchannel needs no task file).

    Raises:
        ValueError: unknown ``task``, or a folder whose sample folders hold another task's files.
        FileNotFoundError: ``root`` is not a folder.
    """
    if task not in TASK_FILES:
        raise ValueError(f"unknown FDB task {task!r}; known: {', '.join(TASKS)}")
    r = Path(root)
    if not r.is_dir():
        raise FileNotFoundError(f"FDB task folder not found: {r}")
    names = sorted((p.name for p in r.iterdir() if p.is_dir() and not p.name.startswith(".")), key=_sort_key)
    samples = [FDBSample(id=n, task=task, dir=r / n) for n in names]
    check_task_folder(samples, task, r)
    return samples


def folder_task(sample_dir: Path) -> str | None:
    """The task a sample folder's files say it belongs to: the task whose task file it holds
    (``pause.json`` -> ``pause_handling``...), ``"backchannel"`` when it holds none of them, and
    ``None`` when it holds several (ambiguous)."""
    found = [t for t, name in TASK_FILES.items() if name is not None and (sample_dir / name).is_file()]
    if len(found) > 1:
        return None
    return found[0] if found else "backchannel"


def check_task_folder(samples: list[FDBSample], task: str, root: Path) -> None:
    """Refuse a task folder that holds another task's samples.

    Each sample folder votes for the task its files name (:func:`folder_task`); when another
    task has more votes than ``task``, the folder is another task's (one line naming it).
    Single stray folders do not stop the run: a sample of ``task`` that lacks its task file
    fails alone when scored.

    Raises:
        ValueError: the folder is another task's.
    """
    votes: dict[str | None, int] = {}
    for s in samples:
        t = folder_task(s.dir)
        votes[t] = votes.get(t, 0) + 1
    own = votes.get(task, 0)
    other = max((t for t in votes if t not in (task, None)), key=lambda t: votes[t], default=None)
    if other is not None and votes[other] > own:
        need = TASK_FILES[task] if TASK_FILES[task] else "none of " + ", ".join(n for n in TASK_FILES.values() if n)
        held = f"hold {TASK_FILES[other]}" if TASK_FILES[other] else "hold no task file"
        raise ValueError(f"{root} looks like a {other} folder, not {task}: {votes[other]} of {len(samples)} sample "
                         f"folders {held} ({task} samples hold {need}); pass --task {other} or the {task} folder")


#: the largest FDB JSON file read (bytes): metadata, timestamps, word-timed transcripts
MAX_JSON_BYTES = 64 * 1024 * 1024


def load_json(path: Path) -> Any:
    """The JSON of an FDB file, at most :data:`MAX_JSON_BYTES` read
    (:func:`spear_datasets.files.read_limited`).

    Raises:
        FDBFormatError: missing, not a regular file, over the limit, or not JSON (one line)."""
    if not path.is_file():
        raise FDBFormatError(f"missing file: {path}")
    try:
        raw = read_limited(path, MAX_JSON_BYTES)  # never more than the limit in memory
    except OSError as e:
        why = " ".join(str(e.strerror or e).split())[:300]
        raise FDBFormatError(why if str(path) in why else f"{path}: {why}") from None
    try:
        return parse_json(raw)
    except ValueError as e:
        raise FDBFormatError(f"not valid JSON: {path} ({e})") from None


def _time(v: Any, path: Path, what: str) -> float | None:
    """A time in seconds: ``None`` stays ``None``; else a finite number >= 0 (FDBFormatError otherwise)."""
    if v is None:
        return None
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        raise FDBFormatError(f"{path}: {what} is not a number: {v!r}")
    try:
        t = float(v)
    except OverflowError:  # an integer of hundreds of digits
        t = math.inf
    if not math.isfinite(t):
        raise FDBFormatError(f"{path}: {what} is not a finite time: {v!r}")
    if t < 0:
        raise FDBFormatError(f"{path}: {what} is a negative time: {v!r} s")
    return t


def _span(s: float | None, e: float | None, path: Path, what: str) -> None:
    if s is not None and e is not None and e < s:
        raise FDBFormatError(f"{path}: {what} ends before it starts: [{s!r}, {e!r}]")


def parse_chunks(raw: Any, path: Path | str = "output.json") -> tuple[Chunk, ...]:
    """``[{"text", "timestamp": [s, e]}, ...]`` -> chunks; times may be ``null`` (-> ``None``).

    Raises:
        FDBFormatError: not a list, an entry without a two-element ``timestamp``, a time that is
            not a finite number >= 0, or a word whose end comes before its start.
    """
    p = Path(path)
    if not isinstance(raw, list):
        raise FDBFormatError(f"{p}: 'chunks' is not a list")
    out = []
    for i, c in enumerate(raw):
        if not isinstance(c, dict) or not isinstance(c.get("timestamp"), (list, tuple)) or len(c["timestamp"]) != 2:
            raise FDBFormatError(f"{p}: chunk {i} has no [start, end] timestamp")
        s, e = _time(c["timestamp"][0], p, f"chunk {i} start"), _time(c["timestamp"][1], p, f"chunk {i} end")
        _span(s, e, p, f"chunk {i}")
        out.append(Chunk(str(c.get("text", "")), s, e))
    return tuple(out)


def read_output_json(path: str | os.PathLike) -> OutputTranscript:
    """Read an ``output.json`` (word-timed ASR of ``output.wav``; times in seconds).

    Raises:
        FDBFormatError: missing file, invalid JSON, no ``chunks`` list, malformed chunk or bad
            time (see :func:`parse_chunks`).
    """
    p = Path(path)
    data = load_json(p)
    if not isinstance(data, dict) or "chunks" not in data:
        raise FDBFormatError(f"{p}: no 'chunks' list")
    return OutputTranscript(text=str(data.get("text") or ""), chunks=parse_chunks(data["chunks"], p))


def _first_entry(path: Path) -> dict:
    data = load_json(path)
    if not isinstance(data, list) or not data or not isinstance(data[0], dict):
        raise FDBFormatError(f"{path}: expected a non-empty list of objects")
    return data[0]


def timestamp_pair(entry: dict, path: Path) -> tuple[float, float]:
    """``entry["timestamp"]`` as ``(start_s, end_s)``: two finite numbers >= 0, end not before start.

    Raises:
        FDBFormatError: not a ``[start, end]`` pair, a null or bad time, or end before start
            (``path`` names the file in the one line)."""
    ts = entry.get("timestamp")
    if not isinstance(ts, (list, tuple)) or len(ts) != 2:
        raise FDBFormatError(f"{path}: first entry has no [start, end] timestamp")
    s, e = _time(ts[0], path, "timestamp start"), _time(ts[1], path, "timestamp end")
    if s is None or e is None:
        raise FDBFormatError(f"{path}: null timestamp {list(ts)!r}")
    _span(s, e, path, "first entry")
    return s, e


def read_turn_taking(path: str | os.PathLike) -> tuple[float, float]:
    """``turn_taking.json`` (or ``pause.json``): ``(start_s, end_s)`` of its first entry.

    For turn-taking, the *start* of this span is where the user's turn ends (FDB measures
    latency from ``timestamp[0]``).

    Raises:
        FDBFormatError: missing/invalid file, empty list, missing or null timestamp, a time
            that is not a finite number >= 0, an end before the start.
    """
    p = Path(path)
    return timestamp_pair(_first_entry(p), p)


@dataclass(frozen=True)
class Interrupt:
    """First entry of ``interrupt.json``: the ``context`` turn, the ``interrupt`` turn text and
    the interrupting turn's ``start_s``/``end_s`` (seconds from the start of ``input.wav``)."""

    context: str
    interrupt: str
    start_s: float
    end_s: float


def read_interrupt(path: str | os.PathLike) -> Interrupt:
    """Read ``interrupt.json``.

    Raises:
        FDBFormatError: missing/invalid file, empty list, missing or null timestamp, a time
            that is not a finite number >= 0, an end before the start.
    """
    p = Path(path)
    entry = _first_entry(p)
    s, e = timestamp_pair(entry, p)
    return Interrupt(context=str(entry.get("context") or ""), interrupt=str(entry.get("interrupt") or ""), start_s=s, end_s=e)


def read_reference_distribution(path: str | os.PathLike) -> dict[str, Any]:
    """FDB's human backchannel distribution (``icc_gt_distribution.json``: id -> time histogram).

    The file belongs to FDB (CC BY-NC 4.0); users pass its path, the project does not ship it.

    An entry that is a list of numbers comes back as a list of floats; any other entry (empty
    list, non-numbers, ...) is kept as given, so that only the samples of that id fail when
    scored (the scorer's ``reference_histogram`` says why), not the run.

    Raises:
        FDBFormatError: missing/invalid file, or not a JSON object.
    """
    p = Path(path)
    data = load_json(p)
    if not isinstance(data, dict):
        raise FDBFormatError(f"{p}: expected an object id -> list of numbers")
    out: dict[str, Any] = {}
    for k, v in data.items():
        numeric = isinstance(v, list) and all(isinstance(x, (int, float)) and not isinstance(x, bool) for x in v)
        out[str(k)] = [float(x) for x in v] if numeric else v
    return out


def read_rating_json(path: str | os.PathLike) -> int:
    """FDB's judge rating of one user-interruption reply (``rating.json``: ``{"analysis", "rating"}``,
    written by upstream ``eval_user_interruption.py`` for TOR = 1 samples), an integer 0..5.

    Raises:
        FDBFormatError: missing/invalid file, no ``rating``, or a rating that is not an integer
            from 0 to 5 (``4.0`` is accepted as 4).
    """
    p = Path(path)
    data = load_json(p)
    if not isinstance(data, dict) or "rating" not in data:
        raise FDBFormatError(f"{p}: no 'rating'")
    r = data["rating"]
    if isinstance(r, bool) or not isinstance(r, (int, float)) or not math.isfinite(r) or not float(r).is_integer() \
            or not 0 <= r <= 5:
        raise FDBFormatError(f"{p}: rating {r!r} is not an integer from 0 to 5")
    return int(r)


# ----------------------------------------------------------------------------- model-outputs release

#: FDB v1.0 categories of the model-outputs release -> the task each is scored as (v1.0 sizes:
#: 137, 216, 119, 55, 200 stimuli)
RELEASE_CATEGORIES: dict[str, str] = {
    "synthetic_pause_handling": "pause_handling",
    "candor_pause_handling": "pause_handling",
    "candor_turn_taking": "smooth_turn_taking",
    "icc_backchannel": "backchannel",
    "synthetic_user_interruption": "user_interruption",
}
#: category -> the file of FDB's own printout in ``results/<run>/``
RELEASE_RESULT_FILES: dict[str, str] = {
    "synthetic_pause_handling": "pause_synthetic.txt",
    "candor_pause_handling": "pause_candor.txt",
    "candor_turn_taking": "smooth_turn_taking.txt",
    "icc_backchannel": "backchannel.txt",
    "synthetic_user_interruption": "user_interruption.txt",
}
#: the reply files of one release sample, ``data/<run>/<category>/<id>/``
RELEASE_AUDIO = "output.flac"
RELEASE_ASR = "output.json"
RELEASE_RATING = "rating.json"

_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.+-]*")


def safe_name(value: Any, what: str) -> str:
    """A run name, category or sample id used as one path component: letters, digits, ``_.+-``,
    not starting with a dot (so never ``..``).

    Raises:
        FDBFormatError: anything else, e.g. ``"../x"`` or an empty value.
    """
    text = "" if value is None else str(value)
    if not _NAME.fullmatch(text):
        raise FDBFormatError(f"{what} {text!r} is not a plain name (letters, digits, _ . + -)")
    return text


@dataclass(frozen=True)
class ReleaseRow:
    """One row of ``metadata/<run>.jsonl``: its position ``row``, the raw object (``None`` when
    the line is not a JSON object) and the line's problem (``error``), if any."""

    row: int
    raw: dict[str, Any] | None
    error: str | None = None


def read_release_metadata(release: str | os.PathLike, run: str) -> list[ReleaseRow]:
    """The rows of ``<release>/metadata/<run>.jsonl`` (one JSON object a line, blank lines
    skipped). A line that is not a JSON object is kept as a row with its ``error`` (it becomes a
    failed row, it does not vanish).

    Raises:
        FDBFormatError: the file is missing or unreadable (a whole-run problem).
    """
    p = Path(release) / "metadata" / f"{safe_name(run, 'run')}.jsonl"
    if not p.is_file():
        raise FDBFormatError(f"run {run!r}: no {p} in the release")
    try:
        lines = p.read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as e:
        raise FDBFormatError(f"cannot read {p} ({' '.join(str(e).split())})") from None
    out: list[ReleaseRow] = []
    for n, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except (ValueError, RecursionError) as e:  # RecursionError: a line nested past the parser's depth
            out.append(ReleaseRow(len(out), None, f"{p.name} line {n} is not valid JSON "
                                                  f"({getattr(e, 'msg', None) or type(e).__name__})"))
            continue
        if not isinstance(obj, dict):
            out.append(ReleaseRow(len(out), None, f"{p.name} line {n} is not a JSON object"))
            continue
        out.append(ReleaseRow(len(out), obj))
    return out


def release_sample(row: dict[str, Any], release: str | os.PathLike, run: str,
                   stimuli: str | os.PathLike) -> tuple[str, FDBSample]:
    """Join one release row with its stimulus folder: ``(category, sample)``.

    The reply's files are found by the release layout, ``<release>/data/<run>/<category>/<id>/``
    (``output.flac``, ``output.json``, ``rating.json`` when present); the stimulus folder is
    ``<stimuli>/<category>/<id>/`` (``input.wav`` and the task file of FDB v1.0's download).
    The row's ``stimulus`` column, when given, must name that same ``<category>/<id>``.

    Raises:
        FDBFormatError: unknown category, a sample id or stimulus that is not a plain name, a
            stimulus folder that does not exist, or a missing ``output.flac``.
    """
    category = safe_name(row.get("category"), "category")
    if category not in RELEASE_CATEGORIES:
        raise FDBFormatError(f"unknown category {category!r}; known: {', '.join(RELEASE_CATEGORIES)}")
    sid = safe_name(row.get("sample_id"), "sample_id")
    stimulus = row.get("stimulus")
    if stimulus not in (None, "") and str(stimulus).strip("/") != f"{category}/{sid}":
        raise FDBFormatError(f"stimulus {stimulus!r} is not {category}/{sid}")
    stim_dir = Path(stimuli) / category / sid
    if not stim_dir.is_dir():
        raise FDBFormatError(f"stimulus folder missing: {stim_dir}")
    reply = Path(release) / "data" / run / category / sid
    audio = reply / RELEASE_AUDIO
    if not audio.is_file():
        raise FDBFormatError(f"{RELEASE_AUDIO} missing: {audio}")
    rating = reply / RELEASE_RATING
    return category, FDBSample(id=sid, task=RELEASE_CATEGORIES[category], dir=stim_dir, output_audio=audio,
                               output_asr=reply / RELEASE_ASR, rating_json=rating if rating.is_file() else None)


class ReleaseUnavailableError(RuntimeError):
    """A release named by Hub id cannot be had (offline and not cached, gated, not found); one line."""


def release_patterns(runs: list[str]) -> list[str]:
    """The ``allow_patterns`` that fetch only ``runs`` of a release: their metadata, reply files
    and FDB printouts, plus the card."""
    pats = ["README.md"]
    for r in runs:
        pats += [f"metadata/{r}.jsonl", f"data/{r}/**", f"results/{r}/**"]
    return pats


def fetch_release(release: str, runs: list[str], *, revision: str | None = None,
                  deadline_s: float | None = None) -> Path:
    """The local folder of a model-outputs release: a folder as is, or a Hub dataset id
    (``owner/name``, e.g. ``MagicLuke/fdb-v1-outputs-v1``) fetched with
    ``huggingface_hub.snapshot_download(repo_type="dataset", allow_patterns=...)`` for the
    requested ``runs`` only (:func:`release_patterns`), within ``deadline_s`` s in all (default
    :data:`spear_datasets.sources.download.DEFAULT_DEADLINE_S`;
    :func:`spear_datasets.sources.download.hub_snapshot`). ``HF_HUB_OFFLINE=1``: the cache only.

    Raises:
        ReleaseUnavailableError: no such folder and not a Hub id; offline and not cached; the
            dataset is gated and access was not granted (or no token); not found; the download
            failed or ran past its deadline. One line.
    """
    p = Path(os.path.expanduser(release))
    if p.is_dir():
        return p
    if p.exists() or not re.fullmatch(r"[\w.-]+/[\w.-]+", release):
        raise ReleaseUnavailableError(f"--release {release}: no such folder, and not a Hub dataset id owner/name")
    from spear_datasets.hub import hub_offline
    from spear_datasets.sources.download import DEFAULT_DEADLINE_S, HubDeadlineError, HubError, hub_snapshot

    offline = hub_offline()
    try:
        return hub_snapshot(release, deadline_s=DEFAULT_DEADLINE_S if deadline_s is None else float(deadline_s),
                            repo_type="dataset", revision=revision, allow_patterns=release_patterns(runs),
                            local_files_only=offline)
    except HubDeadlineError as e:
        raise ReleaseUnavailableError(f"--release {e}") from None
    except HubError as e:
        if "GatedRepoError" in e.types:
            raise ReleaseUnavailableError(
                f"--release {release} is gated: accept its terms at https://huggingface.co/datasets/{release} "
                "and log in (hf auth login, or HF_TOKEN)") from None
        if "RepositoryNotFoundError" in e.types:
            raise ReleaseUnavailableError(f"--release {release}: no such Hub dataset (or it is private and no token "
                                          "with access was given)") from None
        if "LocalEntryNotFoundError" in e.types:
            if offline:
                raise ReleaseUnavailableError(f"--release {release}: HF_HUB_OFFLINE is set and it is not in the Hugging "
                                              "Face cache; download it once online or pass a local folder") from None
            raise ReleaseUnavailableError(f"--release {release}: cannot reach the Hub and it is not in the cache") from None
        raise ReleaseUnavailableError(f"--release {release}: download failed ({e.types[0] if e.types else 'error'}: "
                                      f"{' '.join(str(e).split())[:200]})") from None
