"""SpeechRole-Eval's files: the test data, a system's model-output folder, and the check that
pairs them dialogue by dialogue before anything is judged.

Layouts (``yuhui1038/SpeechRole``, the Hub dataset ``yuhui1038/SpeechRole-Eval``):

- test data: ``<root>/test_data/{single,multi}_turn/<role>.json`` (or a folder holding
  ``single_turn/`` and ``multi_turn/`` itself): a list of dialogues ``{"system_prompt",
  "dialogue": [{"user", "user_speech_path", "role_speech_path" | "role_speech_path1/2/3", ...}],
  "context", "category"}``; the role is the file name. Relative audio paths are relative to
  ``<root>`` (the folder holding ``test_data/``, as the Hub dataset's scripts resolve them).
- model outputs: ``model_output/<model>/{single,multi}_result/json/<role>.json`` =
  ``{"role", "dialogue_0": [{"turn", "user_input": {"text"}, "model_output": {"text",
  "audio_path"}}], "dialogue_1": ...}``; a legacy file holds one ``"dialogue"`` list instead
  (read as dialogue 0 only: the v1 script reused it for every dialogue of the role). Audio under
  ``.../<mode>_result/audio/<role>/<role>_<d>_<t>.wav``; a relative ``audio_path`` is relative to
  the folder two levels above ``model_output/<model>`` (the scripts' working directory), else to
  the model folder itself.

:func:`validate_dialogues` turns every test dialogue into a :class:`Case` ready to judge or a
failed one with its one-line reason (no output for the role, a missing ``dialogue_<i>``, turn
counts that differ, an audio file missing or not decodable by :func:`spear_datasets.audio.decode`,
a relative path escaping its root): bad input never stops the others.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Sequence

from spear_metrics.speechrole.protocol import role_name

MODES: tuple[str, ...] = ("single", "multi")
#: the reference speech set the judge compares with by default (the Hub version has three:
#: ``role_speech_path1/2/3``; the original test data one ``role_speech_path``, the fallback)
DEFAULT_REFERENCE_KEY = "role_speech_path1"
LEGACY_REFERENCE_KEY = "role_speech_path"
REFERENCE_KEYS = ("role_speech_path1", "role_speech_path2", "role_speech_path3", LEGACY_REFERENCE_KEY)
#: the Hub dataset of the test data
HUB_DATASET = "yuhui1038/SpeechRole-Eval"


class SpeechRoleDataError(ValueError):
    """A whole input cannot be used (no test data folder, no role file at all...): one line."""


@dataclass
class EvalDialogue:
    """One dialogue of the test data.

    Attributes:
        mode: ``"single"`` or ``"multi"``; ``role``: the role file's name; ``index``: position
            in the role file (the judge's ``idx``, the output's ``dialogue_<index>``).
        system_prompt: the dialogue's system prompt; ``turns``: its raw turn objects.
        context, category: as in the file (``""`` when absent).
        error: why the dialogue cannot be used (``None`` when it can).
        root: the folder its relative audio paths resolve against.
    """

    mode: str
    role: str
    index: int
    system_prompt: str
    turns: list[dict[str, Any]]
    context: str = ""
    category: str = ""
    error: str | None = None
    root: Path = field(default_factory=Path)

    @property
    def users(self) -> list[str]:
        """The user turns' texts."""
        return [str(t.get("user", "")) for t in self.turns]

    @property
    def key(self) -> str:
        return f"{self.mode}/{self.role}/{self.index}"


@dataclass
class Case:
    """A dialogue checked and ready to judge (or failed, with ``error``).

    Attributes:
        dialogue: the test dialogue.
        system_audio: Model A's answer audio per turn (resolved paths), in turn order.
        reference_audio: the reference speech per turn (resolved paths).
        reference_key: the turn key the reference came from.
        error: one-line reason when the dialogue cannot be judged (``None`` otherwise).
    """

    dialogue: EvalDialogue
    system_audio: list[Path] = field(default_factory=list)
    reference_audio: list[Path] = field(default_factory=list)
    reference_key: str | None = None
    error: str | None = None

    @property
    def ok(self) -> bool:
        return self.error is None

    @property
    def role_name(self) -> str:
        return role_name(self.dialogue.system_prompt)


def test_data_dir(path: str | os.PathLike) -> tuple[Path, Path]:
    """``(mode_parent, root)`` of a local test-data folder: the folder holding ``single_turn/`` /
    ``multi_turn/`` and the root relative audio paths resolve against. ``path`` may be the
    dataset root (holding ``test_data/``) or the ``test_data`` folder itself.

    Raises:
        SpeechRoleDataError: neither layout is found.
    """
    p = Path(path)
    if (p / "test_data").is_dir() and any((p / "test_data" / f"{m}_turn").is_dir() for m in MODES):
        return p / "test_data", p
    if any((p / f"{m}_turn").is_dir() for m in MODES):
        return p, (p.parent if p.name == "test_data" else p)
    raise SpeechRoleDataError(f"{p}: not a SpeechRole test-data folder (expected test_data/{{single,multi}}_turn/"
                              "<role>.json or {single,multi}_turn/<role>.json)")


def fetch_test_data(repo_id: str, modes: Sequence[str], *, roles: Sequence[str] | None = None,
                    reference_key: str = DEFAULT_REFERENCE_KEY, user_speech: bool = False,
                    deadline_s: float | None = None) -> Path:
    """Download the test data of ``modes`` from the Hub dataset ``repo_id`` (the JSON files first,
    then only the audio they name: the reference set ``reference_key``, and the user speech when
    ``user_speech``) with ``huggingface_hub.snapshot_download``, which honours ``HF_HUB_OFFLINE``
    and the cache, each of the two fetches within ``deadline_s`` s in all
    (:func:`spear_datasets.sources.download.hub_snapshot`; default its
    :data:`~spear_datasets.sources.download.DEFAULT_DEADLINE_S`). Returns the local root (holding
    ``test_data/``).

    Raises:
        SpeechRoleDataError: the dataset or its files cannot be had, or a fetch ran past its
            deadline (one line, the error's type).
    """
    from spear_datasets.sources.download import DEFAULT_DEADLINE_S, hub_snapshot

    limit = DEFAULT_DEADLINE_S if deadline_s is None else float(deadline_s)
    try:
        pats = [f"test_data/{m}_turn/{r}.json" for m in modes for r in roles] if roles else \
            [f"test_data/{m}_turn/*.json" for m in modes]
        root = hub_snapshot(repo_id, deadline_s=limit, repo_type="dataset", allow_patterns=pats)
        audio: set[str] = set()
        for m in modes:
            keys = [reference_key, LEGACY_REFERENCE_KEY] + (["user_speech_path"] if user_speech else [])
            for f in sorted((root / "test_data" / f"{m}_turn").glob("*.json")):
                data = _load_json(f)
                for d in data if isinstance(data, list) else []:
                    turns = d.get("dialogue") if isinstance(d, dict) else None
                    for t in turns if isinstance(turns, list) else []:
                        for k in keys:
                            v = t.get(k) if isinstance(t, dict) else None
                            if isinstance(v, str) and v and not Path(v).is_absolute():
                                audio.add(v)
        if audio:
            hub_snapshot(repo_id, deadline_s=limit, repo_type="dataset", allow_patterns=sorted(audio))
    except Exception as e:
        raise SpeechRoleDataError(f"{repo_id}: cannot fetch the test data from the Hub ({type(e).__name__}; "
                                  "HF_HUB_OFFLINE=1 reads the cache only)") from None
    return root


#: the largest test-data or model-output JSON file read (bytes; a role's file is a few MB)
MAX_JSON_BYTES = 256 * 2 ** 20


def _load_json(path: Path) -> Any:
    """The JSON of a test-data or model-output file (:func:`spear_datasets.files.read_json`, at
    most :data:`MAX_JSON_BYTES`); ``None`` when it cannot be read, is too large or is not JSON."""
    from spear_datasets.files import read_json

    try:
        return read_json(path, MAX_JSON_BYTES)
    except (OSError, ValueError):
        return None


def read_test_data(path: str | os.PathLike, mode: str, *, roles: Sequence[str] | None = None) -> list[EvalDialogue]:
    """Every dialogue of ``mode`` in a local test-data folder (:func:`test_data_dir`), roles in
    name order. A role file that cannot be read, or is not a list of dialogue objects, gives one
    dialogue with ``index = -1`` and the reason in ``error``; a dialogue without a non-empty
    ``dialogue`` list or a ``system_prompt`` is kept with its ``error``.

    Raises:
        SpeechRoleDataError: no such folder, no ``<mode>_turn`` folder, or none of ``roles``.
    """
    if mode not in MODES:
        raise SpeechRoleDataError(f"mode must be one of {', '.join(MODES)}, got {mode!r}")
    parent, root = test_data_dir(path)
    folder = parent / f"{mode}_turn"
    if not folder.is_dir():
        raise SpeechRoleDataError(f"{parent}: no {mode}_turn/ folder")
    files = sorted(folder.glob("*.json"))
    if roles:
        wanted = set(roles)
        missing = sorted(wanted - {f.stem for f in files})
        if missing:
            raise SpeechRoleDataError(f"{folder}: no test data for role(s) {', '.join(missing)}")
        files = [f for f in files if f.stem in wanted]
    if not files:
        raise SpeechRoleDataError(f"{folder}: no <role>.json files")
    out: list[EvalDialogue] = []
    for f in files:
        data = _load_json(f)
        if not isinstance(data, list) or not all(isinstance(d, dict) for d in data) or not data:
            why = "is not JSON" if data is None else "is not a non-empty list of dialogue objects"
            out.append(EvalDialogue(mode, f.stem, -1, "", [], error=f"test data {f.name} {why}", root=root))
            continue
        for i, d in enumerate(data):
            turns = d.get("dialogue")
            td = EvalDialogue(mode, f.stem, i, str(d.get("system_prompt") or ""),
                              list(turns) if isinstance(turns, list) else [], context=str(d.get("context") or ""),
                              category=str(d.get("category") or ""), root=root)
            if not isinstance(turns, list) or not turns or not all(isinstance(t, dict) for t in turns):
                td.error = "test dialogue has no turns (a non-empty 'dialogue' list of objects)"
            elif not isinstance(d.get("system_prompt"), str) or not d["system_prompt"].strip():
                td.error = "test dialogue has no system_prompt"
            elif any(not isinstance(t.get("user"), str) for t in turns):
                td.error = "a test turn has no 'user' text"
            out.append(td)
    return out


def resolve_in(value: Any, roots: Sequence[Path], what: str) -> Path:
    """Resolve an audio path written in a JSON file: an absolute path as it is; a relative one
    against each of ``roots`` in turn (the first that exists; the first root when none does),
    never leaving its root (:func:`spear_datasets.schema.resolve_path`'s lexical rule).

    Raises:
        ValueError: an empty or non-text value, or a relative path that escapes every root.
    """
    from spear_datasets.schema import RowError, resolve_path

    if not isinstance(value, str) or not value.strip():
        raise ValueError(f"{what}: no audio path")
    value = value.strip()
    if Path(value).is_absolute():
        return resolve_path(value, roots[0])
    candidates = []
    for r in roots:
        try:
            candidates.append(resolve_path(value, r))
        except RowError:
            continue
    if not candidates:
        raise ValueError(f"{what}: path escapes its folder: {value}")
    return next((c for c in candidates if c.is_file()), candidates[0])


def check_audio(path: Path, what: str) -> None:
    """The file exists and decodes through THE audio loader (:func:`spear_datasets.audio.decode`).

    Raises:
        ValueError: one line naming ``what`` and the loader's reason.
    """
    from spear_datasets.audio import AudioError, decode

    try:
        decode(path)
    except AudioError as e:
        raise ValueError(f"{what}: {' '.join(str(e).split())}") from None


@dataclass
class ModelOutputs:
    """A system's output folder ``model_output/<model>`` for one mode.

    Attributes:
        folder: ``model_output/<model>``; ``mode``: ``"single"``/``"multi"``.
        files: role -> its ``<mode>_result/json/<role>.json``.
    """

    folder: Path
    mode: str
    files: dict[str, Path] = field(default_factory=dict)

    @property
    def roots(self) -> list[Path]:
        """Where a relative ``audio_path`` resolves: the scripts' working directory (two levels
        above ``model_output/<model>``), then the model folder."""
        f = Path(os.path.abspath(self.folder))
        return [f.parent.parent, f]

    def role_file(self, role: str) -> Path | None:
        return self.files.get(role)


def read_model_outputs(folder: str | os.PathLike, mode: str) -> ModelOutputs:
    """The role files of ``folder/<mode>_result/json/``.

    Raises:
        SpeechRoleDataError: ``folder`` is not a folder, or has no ``<mode>_result/json/``.
    """
    f = Path(folder)
    if not f.is_dir():
        raise SpeechRoleDataError(f"--outputs {f}: not a folder (model_output/<model>)")
    j = f / f"{mode}_result" / "json"
    if not j.is_dir():
        raise SpeechRoleDataError(f"--outputs {f}: no {mode}_result/json/ folder")
    return ModelOutputs(f, mode, {p.stem: p for p in sorted(j.glob("*.json"))})


def output_dialogue(data: Any, index: int) -> list[Any]:
    """The output turns of dialogue ``index`` of a role file's object.

    Raises:
        ValueError: no ``dialogue_<index>`` (nor a legacy ``dialogue`` for index 0), or not a list.
    """
    if not isinstance(data, dict):
        raise ValueError("model output file is not a JSON object")
    key = f"dialogue_{index}"
    if key in data:
        turns = data[key]
    elif index == 0 and "dialogue" in data:
        turns = data["dialogue"]
    else:
        raise ValueError(f"model output has no {key}" + (" (a legacy 'dialogue' list counts as dialogue_0 only)"
                                                          if "dialogue" in data else ""))
    if not isinstance(turns, list):
        raise ValueError(f"model output {key} is not a list of turns")
    return turns


def reference_path_of(turn: dict[str, Any], key: str) -> Any:
    """The reference speech path of a test turn under ``key``, falling back to
    ``role_speech_path`` (the original test data's one set) as the fork's ``HF/gemini_judge.py``.

    Raises:
        ValueError: the turn has neither.
    """
    if key in turn:
        return turn[key]
    if LEGACY_REFERENCE_KEY in turn:
        return turn[LEGACY_REFERENCE_KEY]
    raise ValueError(f"test turn has no {key} (keys: {', '.join(sorted(map(str, turn)))})")


def validate_dialogues(dialogues: Sequence[EvalDialogue], outputs: ModelOutputs | None, *,
                       reference_key: str = DEFAULT_REFERENCE_KEY, check_decode: bool = True) -> list[Case]:
    """Pair each test dialogue with the system's output and check both (see the module docstring).

    Args:
        outputs: the system's folder (``None``: only the test data and its reference audio are
            checked, as ``infer`` needs).
        reference_key: which reference speech set (``role_speech_path1/2/3``).
        check_decode: decode every audio file (``False``: existence only).

    Returns:
        One :class:`Case` per dialogue, in input order; a failed one has ``error``.
    """
    cache: dict[Path, Any] = {}
    decoded: dict[Path, str | None] = {}

    def audio_ok(p: Path, what: str) -> None:
        if p not in decoded:
            try:
                if check_decode:
                    check_audio(p, what)
                elif not p.is_file():
                    raise ValueError(f"{what}: audio file not found: {p}")
                decoded[p] = None
            except ValueError as e:
                decoded[p] = str(e)
        if decoded[p] is not None:
            raise ValueError(decoded[p])

    cases = []
    for d in dialogues:
        case = Case(d, reference_key=reference_key)
        cases.append(case)
        if d.error:
            case.error = d.error
            continue
        try:
            for t, turn in enumerate(d.turns):
                ref = resolve_in(reference_path_of(turn, reference_key), [d.root], f"turn {t} reference")
                audio_ok(ref, f"turn {t} reference speech")
                case.reference_audio.append(ref)
            if outputs is None:
                continue
            f = outputs.role_file(d.role)
            if f is None:
                raise ValueError(f"no model output for role {d.role} ({outputs.mode}_result/json/{d.role}.json)")
            if f not in cache:
                cache[f] = _load_json(f)
            data = cache[f]
            if data is None:
                raise ValueError(f"model output {f.name} is not JSON")
            if isinstance(data, dict) and data.get("role") not in (None, d.role):
                raise ValueError(f"model output {f.name} names role {data.get('role')!r}, not {d.role!r}")
            turns = output_dialogue(data, d.index)
            if len(turns) != len(d.turns):
                raise ValueError(f"turn counts differ: test dialogue {len(d.turns)}, model output {len(turns)}")
            for t, turn in enumerate(turns):
                out = turn.get("model_output") if isinstance(turn, dict) else None
                if not isinstance(out, dict):
                    raise ValueError(f"output turn {t} has no model_output object")
                p = resolve_in(out.get("audio_path"), outputs.roots, f"output turn {t}")
                audio_ok(p, f"output turn {t} audio")
                case.system_audio.append(p)
        except ValueError as e:
            case.error = " ".join(str(e).split())
            case.system_audio, case.reference_audio = [], []
    return cases


def unknown_roles(outputs: ModelOutputs, dialogues: Iterable[EvalDialogue]) -> list[str]:
    """Role files of the outputs that the test data of this mode does not have (not judged;
    reported)."""
    known = {d.role for d in dialogues}
    return sorted(r for r in outputs.files if r not in known)
