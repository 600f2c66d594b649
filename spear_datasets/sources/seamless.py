"""Reader of Meta's Seamless Interaction raw layout for the SPEAR selection protocol.

Layout (``SPEAR_PROTOCOL.md`` section 1): one 48 kHz WAV per participant named
``V<vendor>_S<session>_I<interaction>_P<participant>.wav``, a transcript JSON beside it (same
stem) holding a list of ``{start, end, transcript, words: [{word, start, end, score}]}`` (or a record
holding that list under ``metadata:transcript``); a
dyad is the two participants sharing ``V_S_I``. Data licence: CC BY-NC 4.0.
"""

from __future__ import annotations

import os
import re
from collections import defaultdict
from pathlib import Path
from typing import Optional, Sequence

import numpy as np

from spear_datasets.audio import TARGET_SR, load_audio
from spear_datasets.protocol import Turn
from spear_datasets.schema import NumberError, parse_number

#: the largest Seamless transcript JSON read (bytes; a conversation's is a few hundred KB)
MAX_TRANSCRIPT_BYTES = 16 * 2 ** 20

STEM_RE = re.compile(r"^(?P<conv>V\d+_S\d+_I\d+)_(?P<pid>P\d{4}A?)$")


def read_transcript(path: str | os.PathLike, speaker: str) -> list[Turn]:
    """Turns of one participant from a Seamless transcript JSON (seconds): a list of segments, or
    the release's record holding it under ``transcript`` or ``metadata:transcript`` (as SPEAR's
    ``bin/prepare_data_from_seamless.py`` ``extract_turns`` reads it).

    Entries without text are skipped. At most :data:`MAX_TRANSCRIPT_BYTES` are read.

    Raises:
        ValueError: the file is not a regular file, over the limit, not JSON, or not a JSON list; an entry with text whose ``start``/``end`` are
            missing, not finite numbers >= 0 (:func:`parse_number`) or out of order (a turn the
            selection would otherwise lose silently: the conversation fails with this reason).
    """
    from spear_datasets.files import read_json

    data = read_json(path, MAX_TRANSCRIPT_BYTES)
    if isinstance(data, dict):  # the release's per-participant record: its "transcript" or "metadata:transcript"
        data = data.get("transcript") if data.get("transcript") is not None else data.get("metadata:transcript", [])
    if not isinstance(data, list):
        raise ValueError(f"{path}: a Seamless transcript is a JSON list of segments, or a record holding one "
                         "under 'transcript' / 'metadata:transcript'")
    out = []
    for k, e in enumerate(data):
        text = str(e.get("transcript") or "").strip() if isinstance(e, dict) else ""
        if not text:
            continue
        try:
            start = parse_number(e.get("start"), what="start", minimum=0)
            end = parse_number(e.get("end"), what="end", minimum=0)
        except (TypeError, NumberError) as err:
            raise ValueError(f"{Path(path).name}: segment {k} ({text[:40]!r}): {err}") from None
        if end < start:
            raise ValueError(f"{Path(path).name}: segment {k} ({text[:40]!r}) ends at {end} s, before its start {start} s")
        out.append(Turn(speaker, start, end, text))
    return out


def load_dyad(participants: dict[str, Path], sr: int = TARGET_SR) -> tuple[list[Turn], dict[str, np.ndarray]]:
    """Turns of both participants and their mono channels resampled to ``sr`` Hz.

    Raises:
        AudioError: a WAV cannot be decoded.
    """
    turns: list[Turn] = []
    channels: dict[str, np.ndarray] = {}
    for pid, wav in participants.items():
        turns.extend(read_transcript(wav.with_suffix(".json"), pid))
        channels[pid] = load_audio(wav, sr=sr, channels="mix")[0]
    return turns, channels


def clip_key(stem: str) -> Optional[tuple[str, frozenset, int]]:
    """``(conversation_id, {P1, P2}, k)`` of a SPEAR clip stem ``<V_S_I>_<P1>_<P2>_<k>`` (the
    speaker order left out: upstream orders them as its dyad table, the project sorts them);
    ``None`` for another name."""
    m = CLIP_STEM_RE.match(stem)
    return (m["conv"], frozenset((m["p1"], m["p2"])), int(m["k"])) if m else None


CLIP_STEM_RE = re.compile(r"^(?P<conv>V\d+_S\d+_I\d+)_(?P<p1>P\d{4}A?)_(?P<p2>P\d{4}A?)_(?P<k>\d+)$")


def package_members(metadata_csv: str | os.PathLike) -> set[tuple[str, frozenset, int]]:
    """The clips a SPEAR package lists for one split/subset (:func:`clip_key` of each row's
    ``audio_path`` stem).

    Raises:
        spear_datasets.schema.MetadataError: the CSV is unusable."""
    from spear_datasets.schema import read_metadata

    keys = set()
    for r in read_metadata(metadata_csv, required=("audio_path",)):
        k = clip_key(Path(str(r.get("audio_path") or "").replace("\\", "/")).stem)
        if k is not None:
            keys.add(k)
    return keys


#: the owner name of a subset folder this command cut (``<subset>/.work/owner.json``)
COMMAND = "data seamless"
#: one record per finished conversation, inside the subset folder's work folder
UNITS_DIR = "units"
#: every failed conversation of the last run with its reason (``{"conversation", "error"}``)
FAILURES_FILE = "failures.jsonl"
#: how far (s) a turn a clip needs may end past the end of its speaker's WAV (rounding, alignment)
END_TOLERANCE_S = 0.1


def find_conversations(root: str | os.PathLike) -> dict[str, dict[str, dict[str, Optional[Path]]]]:
    """``conversation_id -> {participant: {"wav": path | None, "json": path | None}}`` for every
    ``V_S_I_P`` WAV or transcript JSON under ``root``, complete or not (:func:`conversation_problem`
    says what an incomplete one lacks)."""
    convs: dict[str, dict[str, dict[str, Optional[Path]]]] = defaultdict(dict)
    for f in sorted(Path(root).rglob("*")):
        m = STEM_RE.match(f.stem) if f.suffix in (".wav", ".json") else None
        if m and f.is_file():
            convs[m["conv"]].setdefault(m["pid"], {"wav": None, "json": None})[f.suffix[1:]] = f
    return dict(convs)


def conversation_problem(parts: dict[str, dict[str, Optional[Path]]]) -> Optional[str]:
    """Why a conversation of :func:`find_conversations` cannot be cut (one line), ``None`` when
    it has two participants, each with a WAV and its transcript JSON."""
    if len(parts) != 2:
        return f"{len(parts)} participant(s) ({', '.join(sorted(parts))}); a conversation has two"
    for pid, f in sorted(parts.items()):
        if f["wav"] is None:
            return f"{pid}: no WAV beside its transcript {f['json'].name}"
        if f["json"] is None:
            return f"{pid}: no transcript JSON beside its WAV {f['wav'].name}"
    return None


def cut_conversation(conv: str, participants: dict[str, Path], dest: str | os.PathLike, *,
                     keep: Optional[set] = None, sr: int = TARGET_SR) -> list:
    """Cut one conversation's SPEAR samples into ``dest`` (``audios/``, ``answers/``): its turns
    and channels (:func:`load_dyad`), the selection protocol
    (:func:`spear_datasets.protocol.select_samples`), then the clips of the samples kept
    (``keep``: :func:`clip_key` values, ``None``: all).

    Returns:
        the :class:`~spear_datasets.schema.SpearRow` of each clip written.

    Raises:
        AudioError: a WAV that cannot be decoded.
        ValueError: a transcript that is not JSON or not a list of segments, more than two
            speakers, or a turn a kept clip needs that ends more than :data:`END_TOLERANCE_S`
            past the end of its speaker's WAV (a short or truncated recording).
        spear_datasets.files.OutputError: ``dest`` cannot be written.
    """
    from spear_datasets.protocol import select_samples, write_samples

    turns, channels = load_dyad(participants, sr)
    samples = select_samples(turns)
    speakers = frozenset(channels)
    wanted = [k for k in range(len(samples)) if keep is None or (conv, speakers, k) in keep]
    for k in wanted:
        smp = samples[k]
        for t in (*smp.context, smp.question, *smp.answer):
            have = channels[t.speaker].size / sr
            if t.end > have + END_TOLERANCE_S:
                raise ValueError(f"{t.speaker}'s WAV ends at {have:.2f} s, before the turn of clip {k} that ends at "
                                 f"{t.end:.2f} s (a short or truncated recording)")
    return write_samples(samples, channels, dest, conversation_id=conv, only=set(wanted))


def _reason(e: BaseException) -> str:
    """A failed conversation's one-line reason (the project's own errors as they are, others named)."""
    msg = " ".join(str(e).split()) or type(e).__name__
    own = type(e).__module__.split(".")[0] == "spear_datasets" or type(e) in (ValueError, OSError)
    return msg if own or isinstance(e, FileNotFoundError) else f"{type(e).__name__}: {msg}"


def build_from_seamless(seamless_dir: str | os.PathLike, root: str | os.PathLike, *, split: str = "test",
                        subsets: Sequence[str] = ("improvised", "naturalistic"),
                        members: Optional[dict[str, set]] = None, retry_failed: bool = False,
                        progress: bool = False) -> dict[str, dict]:
    """Cut SPEAR's samples from a local copy of Seamless Interaction into the upstream layout,
    one conversation at a time; resumable.

    Reads ``SEAMLESS/<subset>/<split>/`` (the Hub dataset ``facebook/seamless-interaction``'s
    layout: per-participant ``V.._S.._I.._P....wav`` with its transcript JSON beside it, any
    folders below), pairs the participants of each conversation (:func:`find_conversations`)
    and cuts each (:func:`cut_conversation`: 16 kHz, the selection protocol) into
    ``ROOT/data/seamless_2t_2s_questions/inputs/<split>/<subset>/`` (``audios/`` input clips,
    ``answers/`` human answers, ``metadata.csv``).

    Each conversation is a unit. One that cannot be cut (a participant's WAV or transcript
    missing, a WAV that does not decode or ends before the turns it must hold, a transcript that
    is not JSON) fails alone with a one-line reason (``.work/failures.jsonl`` of the subset
    folder); the others are cut. A finished conversation is logged as it finishes
    (``.work/units/<conversation>.json``: its status, reason or rows); a rerun cuts only the
    conversations without a record or whose clips are no longer all there as written, and the
    failed ones again only with ``retry_failed``. ``metadata.csv`` is written at the end from
    every finished conversation, in conversation order.

    The subset folder follows the project's output-folder rule (docs/safety.md): new, empty or
    this command's (every file it writes is recorded; a folder holding anything else is refused),
    and its lock is held while it is written; a rerun must ask for the same source and members.

    Args:
        members: per subset, the clips to keep (:func:`package_members` of SPEAR's package lists);
            ``None``: every selected clip.
        retry_failed: cut the conversations that failed before again.

    Returns:
        per subset ``{"rows", "n_conversations", "n_cut" (cut this run), "n_resumed" (cut by an
        earlier run), "n_failed" (failed, this run or before; the three add up to n_conversations),
        "failures": [(conversation, reason)], "where": the subset folder}``.

    Raises:
        spear_datasets.identity.DataCheckError: a subset folder missing, no conversation in it,
            a subset folder cut from another source or with other members, or no sample kept.
        spear_datasets.ownership.OutFolderError: the subset folder holds files this command did not
            write, or another live process writes it.
        spear_datasets.files.OutputError: it cannot be written.
    """
    import hashlib
    import json

    from spear_datasets.files import atomic_path
    from spear_datasets.ownership import open_folder
    from spear_datasets.identity import DataCheckError
    from spear_datasets.schema import write_metadata
    from spear_datasets.sources.package import inputs_dir

    out: dict[str, dict] = {}
    for subset in subsets:
        src = Path(seamless_dir) / subset / split
        if not src.is_dir():
            raise DataCheckError(f"{src}: missing (Seamless Interaction's layout is <subset>/<split>/...)")
        convs = find_conversations(src)
        if not convs:
            raise DataCheckError(f"{src}: no conversation (participants' V.._S.._I.._P....wav + transcript JSON)")
        dest = inputs_dir(root) / split / subset
        keep = None if members is None else members.get(subset, set())
        fingerprint = {"source": str(src.resolve()), "split": split, "subset": subset,
                       "members": None if keep is None else hashlib.sha256(json.dumps(
                           sorted(f"{c}_{'_'.join(sorted(p))}_{k}" for c, p, k in keep)).encode()).hexdigest()}
        with open_folder(dest, command=COMMAND, flag="--root") as folder:
            run = folder.work / "run.json"
            try:
                before = json.loads(run.read_text(encoding="utf-8"))
            except (OSError, ValueError):
                before = None
            if before is not None and before != fingerprint:
                raise DataCheckError(f"{dest} holds clips cut from {before.get('source')} with other settings "
                                     "(source, split or package members): build into another --root")
            if before is None:
                with atomic_path(run) as tmp:
                    tmp.write_text(json.dumps(fingerprint, indent=2) + "\n", encoding="utf-8")
            out[subset] = _cut_units(convs, dest, folder, keep=keep, retry_failed=retry_failed,
                                     desc=f"seamless {split}/{subset}" if progress else None)
            rows = out[subset].pop("rows_written")
            fails = [{"conversation": c, "error": e} for c, e in out[subset]["failures"]]
            with atomic_path(folder.work / FAILURES_FILE) as tmp:
                tmp.write_text("".join(json.dumps(f, ensure_ascii=False) + "\n" for f in fails), encoding="utf-8")
            if not rows:
                why = "none of the listed clips" if keep is not None else "no question"
                if fails:
                    why += f"; {len(fails)} conversation(s) failed, see {folder.work / FAILURES_FILE}"
                raise DataCheckError(f"{src}: no sample kept ({why})")
            write_metadata(dest / "metadata.csv", rows)
            out[subset].update(rows=len(rows), where=str(dest))
    return out


def _cut_units(convs: dict[str, dict[str, dict[str, Optional[Path]]]], dest: Path, folder, *, keep: Optional[set],
               retry_failed: bool, desc: Optional[str]) -> dict:
    """:func:`build_from_seamless`'s loop over one subset's conversations (``folder``: the
    subset folder, held)."""
    import json

    from spear_datasets.files import OutputError, atomic_path

    units = folder.work / UNITS_DIR

    def read_unit(conv: str) -> Optional[dict]:
        try:
            rec = json.loads((units / f"{conv}.json").read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return None
        if not isinstance(rec, dict) or rec.get("status") not in ("ok", "failed"):
            return None
        if rec["status"] == "ok":  # done only while every clip it wrote is there as written
            files = [r.get(k) for r in rec.get("rows") or [] for k in ("audio_path", "answer_audio_path") if r.get(k)]
            if not isinstance(rec.get("rows"), list) or not all((dest / f).is_file() and folder.is_recorded(dest / f)
                                                                 for f in files):
                return None
        return rec

    rows: list[dict] = []
    failures: list[tuple[str, str]] = []
    n_cut = n_resumed = 0
    items = sorted(convs.items())
    if desc is not None:
        from tqdm.auto import tqdm

        items = tqdm(items, desc=desc, unit="conversation")
    for conv, parts in items:
        rec = read_unit(conv)
        if rec is not None and (rec["status"] == "ok" or not retry_failed):
            n_resumed += rec["status"] == "ok"
        else:
            try:
                problem = conversation_problem(parts)
                if problem:
                    raise ValueError(problem)
                written = cut_conversation(conv, {p: f["wav"] for p, f in parts.items()}, dest, keep=keep)
                rec = {"conversation": conv, "status": "ok", "rows": [r.to_csv_dict() for r in written]}
            except OutputError:
                raise  # the folder cannot be written: the run stops, a rerun resumes
            except Exception as e:  # this conversation's fault: it fails alone
                rec = {"conversation": conv, "status": "failed", "error": _reason(e)}
            with atomic_path(units / f"{conv}.json") as tmp:  # logged as it finishes
                tmp.write_text(json.dumps(rec, ensure_ascii=False) + "\n", encoding="utf-8")
            n_cut += rec["status"] == "ok"
        if rec["status"] == "ok":
            rows += rec["rows"]
        else:
            failures.append((conv, rec["error"]))
    return {"rows_written": rows, "n_conversations": len(convs), "n_cut": n_cut, "n_resumed": n_resumed,
            "n_failed": len(failures), "failures": failures}
