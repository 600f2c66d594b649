"""Hand-made SpeechRole-Eval inputs of the real schema around the real recordings of
``tests/fixtures/real`` (linked, never copied), and a loopback judge that answers as an audio
LLM judge would, deterministically."""

from __future__ import annotations

import base64
import json
import os
import threading
from pathlib import Path

from spear_metrics.speechrole.protocol import ASPECT_DEFINITIONS, ASPECTS

SHREK_PROMPT = ("I want you to act like Shrek.\nYou are the ogre Shrek from the Shrek films. Stay in character; "
                "speak as Shrek would.\n")
THOR_PROMPT = "I want you to act like Thor.\nYou are Thor, god of thunder.\n"

#: (mode, role, dialogue) -> user texts, reference audio (role_speech_path1, 2, 3) and the system's answers
DIALOGUES = {
    ("single", "Shrek", 0): (["Why do you live in a swamp?"],
                             ["speechbrain__p225_002.wav"], ["speechbrain__p226_002.wav"], ["speechbrain__p226_002.wav"]),
    ("single", "Shrek", 1): (["What do you think of Donkey?"],
                             ["lhotse__ES2011a.Headset-0-40s-46s.wav"], ["speechbrain__p225_002.wav"],
                             ["faster-whisper__jfk.flac"]),
    ("single", "Thor", 0): (["Where is your hammer?"],
                            ["faster-whisper__stereo_diarization.wav"], ["speechbrain__p226_002.wav"],
                            ["speechbrain__p225_002.wav"]),
    ("multi", "Shrek", 0): (["Are onions like ogres?", "Then what about parfaits?"],
                            ["speechbrain__p225_002.wav", "speechbrain__p226_002.wav"],
                            ["lhotse__ES2011a.Headset-0-40s-46s.wav", "speechbrain__p225_002.wav"],
                            ["speechbrain__p226_002.wav", "lhotse__ES2011a.Headset-0-40s-46s.wav"]),
}
USER_AUDIO = "lhotse__ES2011a.Headset-0-40s-46s.wav"


def _link(src: Path, dst: Path) -> str:
    dst.parent.mkdir(parents=True, exist_ok=True)
    if not dst.exists():
        os.symlink(src, dst)
    return str(dst)


def make_eval_root(tmp: Path, real: Path, *, model: str = "sys") -> Path:
    """``tmp/SR`` holding ``test_data/{single,multi}_turn/<role>.json`` (three reference sets per
    turn, paths relative to ``SR``) and ``model_output/<model>/<mode>_result/{json,audio}`` in the
    benchmark's layout (``audio_path`` relative to ``SR``, as the benchmark's own example files)."""
    root = tmp / "SR"
    tests: dict[tuple[str, str], list] = {}
    outputs: dict[tuple[str, str], dict] = {}
    for (mode, role, d), (users, refs1, refs2, answers) in DIALOGUES.items():
        turns = []
        for t, user in enumerate(users):
            turn = {"user": user, "user_speech_path": f"test_data/user_speech/{role}_{mode}_{d}_{t}.wav"}
            _link(real / USER_AUDIO, root / turn["user_speech_path"])
            for k, refs in ((1, refs1), (2, refs2), (3, refs1)):
                rel = f"test_data/role_speech{k}/{mode}/{role}_{d}_{t}{Path(refs[t]).suffix}"
                _link(real / refs[t], root / rel)
                turn[f"role_speech_path{k}"] = rel
            turns.append(turn)
        prompt = SHREK_PROMPT if role == "Shrek" else THOR_PROMPT
        tests.setdefault((mode, role), []).append({"system_prompt": prompt, "dialogue": turns,
                                                   "context": "a scene", "category": "test"})
        out_turns = []
        for t, ans in enumerate(answers):
            rel = f"model_output/{model}/{mode}_result/audio/{role}/{role}_{d}_{t}{Path(ans).suffix}"
            _link(real / ans, root / rel)
            out_turns.append({"turn": t, "user_input": {"text": users[t]},
                              "model_output": {"text": f"answer {t}", "audio_path": rel}})
        outputs.setdefault((mode, role), {"role": role})[f"dialogue_{d}"] = out_turns
    for (mode, role), data in tests.items():
        p = root / "test_data" / f"{mode}_turn" / f"{role}.json"
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(json.dumps(data, indent=2), encoding="utf-8")
    for (mode, role), data in outputs.items():
        p = root / "model_output" / model / f"{mode}_result" / "json" / f"{role}.json"
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(json.dumps(data, indent=2), encoding="utf-8")
    return root


def aspect_of(body: dict) -> str | None:
    """The aspect a v1 request asks about (``None`` for a v2 request, which lists all)."""
    text = body["messages"][1]["content"][-1]["text"]
    found = [a for a in ASPECTS if ASPECT_DEFINITIONS[a] in text]
    return found[0] if len(found) == 1 else None


def user_texts(body: dict) -> tuple[str, ...]:
    text = body["messages"][1]["content"][0]["text"]
    return tuple(text.split("There are multiple rounds of questions, divided by ###:\n", 1)[1]
                 .split("\n\n## **[Question End]**")[0].split("\n###\n"))


def audio_data(body: dict) -> list[str]:
    return [p["input_audio"]["data"] for p in body["messages"][1]["content"] if p.get("type") == "input_audio"]


class PositionBiasedJudge:
    """A deterministic judge: in the benchmark order (system first) the system gets
    ``BASE[aspect] + 1`` and the reference 8; with the reference first the reference gets 9 and the
    system ``BASE[aspect]``: both gain 1 point when first. ``malformed`` aspects always get prose
    without scores. Replies in v1 prose or v2 JSON, as the request asks. Counts the 200 replies per
    call (user texts, order, aspect)."""

    BASE = {a: 3 + j % 4 for j, a in enumerate(ASPECTS)}

    def __init__(self, root: Path, *, malformed: tuple[str, ...] = (), fail_after: int | None = None,
                 delay_s: float = 0.0):
        self.root = root
        self.malformed = set(malformed)
        self.fail_after = fail_after
        self.delay_s = delay_s
        self.answered: dict[tuple, int] = {}
        self._lock = threading.Lock()
        real = Path(os.path.realpath(next((root / "test_data").glob("role_speech1/*/*")))).parent
        #: user texts -> the (rate, frames, channels) of the dialogue's first reference file
        self._first_ref = {tuple(v[0]): _shape((real / v[1][0]).read_bytes()) for v in DIALOGUES.values()}

    def _ref_first(self, body: dict) -> bool:
        first = base64.b64decode(audio_data(body)[0].split(",", 1)[-1])
        return _shape(first) == self._first_ref[user_texts(body)]

    def scores(self, aspect: str, ref_first: bool) -> tuple[int, int]:
        return (9, self.BASE[aspect]) if ref_first else (self.BASE[aspect] + 1, 8)

    def __call__(self, body: dict):
        aspect = aspect_of(body)
        ref_first = self._ref_first(body)
        key = (user_texts(body), "swapped" if ref_first else "benchmark", aspect)
        with self._lock:
            n = sum(self.answered.values())
            if self.fail_after is not None and n >= self.fail_after:
                return 401, "invalid key"
            self.answered[key] = self.answered.get(key, 0) + 1
        opts = {"delay_s": self.delay_s} if self.delay_s else {}
        if aspect is not None:  # v1
            if aspect in self.malformed:
                return 200, "Model A is decent but I will not give numbers.", opts
            a, b = self.scores(aspect, ref_first)
            return 200, f"Model B sounds closer to the role.\n\n[Scores]: ({a}, {b})", opts
        obj = {}
        for x in ASPECTS:
            a, b = self.scores(x, ref_first)
            obj[x] = {"reason": f"{x}: B is closer", "score_a": a, "score_b": b}
        return 200, "```json\n" + json.dumps(obj) + "\n```", opts


def _shape(data: bytes) -> tuple[int, int, int]:
    import io

    import soundfile as sf

    info = sf.info(io.BytesIO(data))
    return info.samplerate, info.frames, info.channels
