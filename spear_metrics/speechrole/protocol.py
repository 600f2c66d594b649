"""SpeechRole-Eval's judge protocol: the aspects, the prompt texts, the message layout and the
reply parsers, as the benchmark's judge scripts define them.

Sources (read, not copied as code; the prompt texts and aspect definitions below are reproduced
as data because they *are* the protocol). Both scripts are MIT-licensed ("MIT License, Copyright
(c) 2025 yuhui1038"):

- **v1**: ``benchmark/gemini_judge.py`` of ``yuhui1038/SpeechRole`` (commit ``25dd361``): one call per
  aspect; the reply is prose ending in ``[Scores]: (a, b)``, read with the regex
  :data:`V1_SCORES` (its first match). Judge ``gemini-2.5-pro-preview-06-05``, no temperature sent.
- **v2**: ``SpeechRole-Eval/gemini_judge.py`` of the fork ``OKHand-Zy/SpeechRole`` (commit
  ``dedc2d8``; the copy ``HF/gemini_judge.py`` of commit ``7708287`` adds ``--baseline_speech_key``):
  one call for all eight aspects, a JSON reply ``{aspect: {reason, score_a, score_b}}``,
  ``temperature=0``, every audio cut to its first 60 s. Judge ``gemini-2.5-pro``.

Message layout (both): a system message ``"You are a helpful assistant."``, then one user message
whose content parts are: the question text block (the dialogue's system prompt, then
``"There are multiple rounds of questions, divided by ###:\\n"`` and the user turns joined by
``"\\n###\\n"``), one ``input_audio`` part per turn of **Model A** (the tested system), a text part,
one ``input_audio`` part per turn of **Model B** (the role's reference speech), then the
instruction text (role name, the aspect definition(s), the reply format). Audio parts are
``{"type": "input_audio", "input_audio": {"data": "data:audio/wav;base64,<b64>", "format": "wav"}}``
(the ``data:`` prefix as both scripts send it; the fork's ``HF/`` copy sends the bare base64,
the form OpenAI's own API documents: :data:`AUDIO_DATA_FORMS`).

Where this module departs from the scripts (each is stated where it happens): bounded retries
instead of retrying forever; a v2 aspect without a score is a malformed reply (the script reads
a missing score as 0); a v2 score must be an integer (the script truncates ``8.7`` to 8).
"""

from __future__ import annotations

import base64
import hashlib
import json
import re
from typing import Any, Sequence

#: The eight aspects, in the scripts' order (keys of their ``metrics`` dict; result keys are
#: ``<aspect>_results``).
ASPECTS: tuple[str, ...] = (
    "Instruction_Adherence",
    "Speech_Fluency",
    "Conversational_Coherence",
    "Speech_Naturalness",
    "Prosodic_Consistency",
    "Emotion_Appropriateness",
    "Personality_Consistency",
    "Knowledge_Consistency",
)

#: Each aspect's definition as the judge reads it (identical in v1 and v2; MIT, yuhui1038/SpeechRole).
ASPECT_DEFINITIONS: dict[str, str] = {
    "Instruction_Adherence": "Instruction Adherence: Do the spoken responses strictly follow the task instruction, "
    "remaining fully in character without any out-of-role explanations or assistant-like meta-comments?",
    "Speech_Fluency": "Speech Fluency: Are the responses delivered fluently, with smooth articulation, appropriate "
    "pacing, and minimal disfluencies such as stuttering or unnatural pauses?",
    "Conversational_Coherence": "Conversational Coherence: Do the responses maintain logical consistency within the "
    "dialogue, aligning with previous content without contradictions or abrupt topic shifts?",
    "Speech_Naturalness": "Speech Naturalness: Do the responses sound natural, human-like, and free from noticeable "
    "artifacts or robotic effects typically associated with synthetic speech?",
    "Prosodic_Consistency": "Prosodic Consistency: Does the prosody, including pitch, stress, and intonation, align "
    "with the character's intended speaking style and remain consistent across the discourse?",
    "Emotion_Appropriateness": "Emotion Appropriateness: Are emotional cues in the speech (e.g., anger, joy, sadness) "
    "well-aligned with the dialogue context and the character's emotional state?",
    "Personality_Consistency": "Personality Consistency: Do the responses consistently reflect the character's "
    "personality traits, such as optimism, sarcasm, or authority?",
    "Knowledge_Consistency": "Knowledge Consistency: Are the responses grounded in the character's established "
    "background, knowledge, and relationships, without fabricating out-of-character facts?",
}

PROTOCOLS: tuple[str, ...] = ("v1", "v2")
#: How an ``input_audio`` part carries its bytes: ``"data-uri"`` (``data:audio/wav;base64,...``,
#: as both judge scripts send it) or ``"base64"`` (bare base64: OpenAI's documented form, and the
#: fork's ``HF/gemini_judge.py``).
AUDIO_DATA_FORMS: tuple[str, ...] = ("data-uri", "base64")
#: v2 cuts every audio to its first 60 s (``wav_to_base64(..., max_duration_seconds=60)``).
V2_MAX_AUDIO_S = 60.0
#: Sampling temperature each script sends (``None``: none sent, the server's default).
JUDGE_TEMPERATURE = {"v1": None, "v2": 0.0}

SYSTEM_MESSAGE = "You are a helpful assistant."
ROLE_PREFIX = "I want you to act like "
QUESTION_ROUNDS = "There are multiple rounds of questions, divided by ###:\n"
TURN_SEPARATOR = "\n###\n"
QUESTION_OPEN = "## **[Question Start]**\n\n"
QUESTION_CLOSE_A_OPEN = (
    "\n\n## **[Question End]**\n\n\n## **[Model A's response start, with one answer audio in each round]**\n\n")
A_CLOSE_B_OPEN = (
    "\n\n## **[Model A's Response End]**\n\n\n## **[Model B's response start, with one answer audio in each round]**\n\n")
B_CLOSE_INSTRUCTION = (
    "\n\n## **[Model B's Response End]**\n\n\n## **[Instruction]**\n\nThe task instruction of the two models is to "
    "directly role-play as ")
V1_ASPECT_INTRO = ".\n\nPlease evaluate the following aspect of each model's response:\n"
V1_FORMAT = (
    "\n\nPlease provide a brief qualitative evaluation for the relative performance of the two models, followed by "
    "paired quantitative scores from 1 to 10, where 1 indicates poor performance and 10 indicates excellent "
    "performance.\n\nThe output should be in the following format:\n{Qualitative Evaluation}, [Scores]: ({the score "
    "of Model A}, {the score of Model B})\n\nPlease ensure that your evaluations are unbiased and that the order in "
    "which the responses were presented does not affect your judgment.")
V2_ASPECTS_INTRO = ".\n\nPlease evaluate the following aspects of each model's response:\n\n"
V2_FORMAT_INTRO = (
    "\n\nFor each aspect, please provide a brief qualitative evaluation for the relative performance of the two "
    "models, followed by paired quantitative scores from 1 to 10, where 1 indicates poor performance and 10 indicates "
    "excellent performance.\n\nYou must output your response in JSON format only, with the following structure:\n")
V2_FORMAT_OUTRO = (
    "\n\nPlease ensure that your evaluations are unbiased and that the order in which the responses were presented "
    "does not affect your judgment. Output only valid JSON, no additional text or markdown formatting.")
#: v1's score pattern (``parse_gemini_result``; its first match is read).
V1_SCORES = re.compile(r"\[Scores\]:\s*\((\d+),\s*(\d+)\)")


def role_name(system_prompt: str) -> str:
    """The role name the instruction names, as the v1 script derives it: the first line of the
    system prompt, the part after ``"I want you to act like "``, without its last character
    (the full stop): ``"I want you to act like Shrek.\\n..."`` -> ``"Shrek"``. Kept as the script
    does it also when the line lacks that phrase (the whole line minus its last character). v2
    reads the same first line from ``role_profiles/<role>_profile.txt`` (stripped) instead."""
    line = str(system_prompt).split("\n")[0]
    return line.split(ROLE_PREFIX)[-1][:-1]


def question_text(system_prompt: str, users: Sequence[str]) -> str:
    """The question block: the system prompt, the rounds line, the user turns joined by
    ``"\\n###\\n"`` (no separator between the prompt and the rounds line, as the scripts)."""
    return str(system_prompt) + QUESTION_ROUNDS + TURN_SEPARATOR.join(str(u) for u in users)


def v2_aspects_text() -> str:
    """v2's aspect list: ``"### <aspect>:\\n<definition>"`` blocks joined by a blank line."""
    return "\n\n".join(f"### {a}:\n{ASPECT_DEFINITIONS[a]}" for a in ASPECTS)


def v2_json_example() -> str:
    """v2's reply template: one object per aspect with ``reason``, ``score_a`` 8, ``score_b`` 9."""
    body = "".join(f'  "{a}": {{\n    "reason": "Your qualitative evaluation text here",\n    "score_a": 8,\n'
                   f'    "score_b": 9\n  }},\n' for a in ASPECTS)
    return "{\n" + body.rstrip(",\n") + "\n}"


def instruction_text(protocol: str, role: str, aspect: str | None = None) -> str:
    """The text part after Model B's audio: the role, the aspect(s), the reply format.

    Raises:
        ValueError: an unknown protocol, or v1 without a known ``aspect``.
    """
    if protocol == "v1":
        if aspect not in ASPECT_DEFINITIONS:
            raise ValueError(f"v1 asks one aspect at a time; got {aspect!r}")
        return B_CLOSE_INSTRUCTION + role + V1_ASPECT_INTRO + ASPECT_DEFINITIONS[aspect] + V1_FORMAT
    if protocol == "v2":
        return B_CLOSE_INSTRUCTION + role + V2_ASPECTS_INTRO + v2_aspects_text() + V2_FORMAT_INTRO + v2_json_example() \
            + V2_FORMAT_OUTRO
    raise ValueError(f"protocol must be one of {', '.join(PROTOCOLS)}, got {protocol!r}")


def audio_part(wav_bytes: bytes, audio_data: str = "data-uri") -> dict[str, Any]:
    """One ``input_audio`` content part holding ``wav_bytes`` (a WAV file's bytes).

    Raises:
        ValueError: ``audio_data`` not one of :data:`AUDIO_DATA_FORMS`.
    """
    if audio_data not in AUDIO_DATA_FORMS:
        raise ValueError(f"audio_data must be one of {', '.join(AUDIO_DATA_FORMS)}, got {audio_data!r}")
    b64 = base64.b64encode(wav_bytes).decode("ascii")
    data = "data:audio/wav;base64," + b64 if audio_data == "data-uri" else b64
    return {"type": "input_audio", "input_audio": {"data": data, "format": "wav"}}


def build_messages(protocol: str, *, system_prompt: str, users: Sequence[str], role: str, audio_a: Sequence[dict],
                   audio_b: Sequence[dict], aspect: str | None = None) -> list[dict[str, Any]]:
    """The chat messages of one judge call.

    Args:
        protocol: ``"v1"`` (one ``aspect``) or ``"v2"`` (all aspects).
        system_prompt: the dialogue's system prompt; ``users``: its user turns' texts.
        role: the role name (:func:`role_name`).
        audio_a, audio_b: Model A's and Model B's ``input_audio`` parts (:func:`audio_part`),
            one per turn. In the benchmark's order A is the tested system, B the reference.

    Raises:
        ValueError: see :func:`instruction_text`.
    """
    content = [{"type": "text", "text": QUESTION_OPEN + question_text(system_prompt, users) + QUESTION_CLOSE_A_OPEN}]
    content += list(audio_a)
    content.append({"type": "text", "text": A_CLOSE_B_OPEN})
    content += list(audio_b)
    content.append({"type": "text", "text": instruction_text(protocol, role, aspect)})
    return [{"role": "system", "content": SYSTEM_MESSAGE}, {"role": "user", "content": content}]


def parse_v1(reply: str) -> dict[str, Any]:
    """A v1 reply -> ``{"reason": reply stripped, "score": [a, b]}`` (the script's
    ``parse_gemini_result``: the first ``[Scores]: (a, b)``; any non-negative integers).

    Raises:
        ValueError: no ``[Scores]: (a, b)`` in the reply (the script would retry forever).
    """
    m = V1_SCORES.search(reply or "")
    if m is None:
        raise ValueError("no '[Scores]: (a, b)' in the reply")
    return {"reason": str(reply).strip(), "score": [int(m.group(1)), int(m.group(2))]}


def _int_score(v: Any, what: str) -> int:
    if isinstance(v, bool):
        raise ValueError(f"{what} is not an integer: {v!r}")
    if isinstance(v, int):
        return v
    if isinstance(v, float) and v.is_integer():
        return int(v)
    if isinstance(v, str) and re.fullmatch(r"\s*[+-]?\d+\s*", v):
        return int(v)
    raise ValueError(f"{what} is not an integer: {v!r}")


def parse_v2(reply: str) -> dict[str, dict[str, Any]]:
    """A v2 reply -> ``{aspect: {"reason": str, "score": [a, b]}}`` for all eight aspects.

    The reply is one JSON object, or holds one in a fenced block (the script's two readings;
    :func:`spear_metrics.core.judge.parse_json_reply`). Each aspect's scores are ``score_a`` /
    ``score_b``, else ``score[0]`` / ``score[1]`` (as the script). Departures: a missing score is
    malformed (the script reads 0); a score must be an integer (``8.0`` and ``"8"`` are; the
    script would truncate ``8.7``).

    Raises:
        ValueError: not JSON, an aspect missing or not an object, a score missing or not an integer.
    """
    from spear_metrics.core.judge import parse_json_reply

    obj = parse_json_reply(reply, ASPECTS)
    out: dict[str, dict[str, Any]] = {}
    for a in ASPECTS:
        r = obj[a]
        if not isinstance(r, dict):
            raise ValueError(f"{a} is not an object")
        pair = r.get("score")
        scores = []
        for i, name in enumerate(("score_a", "score_b")):
            if name in r:
                v = r[name]
            elif isinstance(pair, (list, tuple)) and len(pair) == 2:
                v = pair[i]
            else:
                raise ValueError(f"{a} has no {name}")
            scores.append(_int_score(v, f"{a} {name}"))
        reason = r.get("reason", "")
        out[a] = {"reason": reason if isinstance(reason, str) else json.dumps(reason, ensure_ascii=False),
                  "score": scores}
    return out


def prompt_version(protocol: str) -> str:
    """``"<protocol>-<12 hex>"``: the protocol and a SHA-256 of every text that goes into its
    prompt (system message, framing, definitions, format), so a change of wording is a new version."""
    parts = [protocol, SYSTEM_MESSAGE, QUESTION_ROUNDS, TURN_SEPARATOR, QUESTION_OPEN, QUESTION_CLOSE_A_OPEN,
             A_CLOSE_B_OPEN, B_CLOSE_INSTRUCTION, *(f"{a}={ASPECT_DEFINITIONS[a]}" for a in ASPECTS)]
    parts += [V1_ASPECT_INTRO, V1_FORMAT, V1_SCORES.pattern] if protocol == "v1" else \
        [V2_ASPECTS_INTRO, V2_FORMAT_INTRO, v2_json_example(), V2_FORMAT_OUTRO, str(V2_MAX_AUDIO_S)]
    return f"{protocol}-{hashlib.sha256(chr(0).join(parts).encode('utf-8')).hexdigest()[:12]}"


#: Where each protocol comes from (recorded in summary.json).
PROTOCOL_SOURCES = {
    "v1": "yuhui1038/SpeechRole benchmark/gemini_judge.py @ 25dd36196132 (MIT)",
    "v2": "OKHand-Zy/SpeechRole SpeechRole-Eval/gemini_judge.py @ dedc2d8747e8 (MIT)",
}
