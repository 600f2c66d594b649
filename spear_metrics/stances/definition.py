"""Stances dimension: ``stance_same_as_question_%``, ``stance_more_negative_%``,
``stance_more_positive_%``.

Definitions: ``SPEAR_PROTOCOL.md`` section 2 ("Stances"), re-stating SPEAR's code:
``bin/STANCE/make_questions.py`` (usable pairs, target speaker, role, category),
``30_run_LLM_inference_STANCEs.sh`` (the role list of each question, :data:`STANCE_ROLES`),
``bin/STANCE/score.py`` (patched audio, prompt, JSON schema, temperature 0, P/N -> −2…+2) and
``bin/reports/benchmark_line.py`` (``known_stance_reference``, ``orient_stance_scores``,
``stance_metrics``).

Inputs the user passes by path (STANCE/Seamless files, not shipped):

- ``stance_questions``: the questions JSON (``{"outside_judge": [{"index", "question",
  "related_categories", "positive_defination", "negative_defination", ...}]}``); the questions
  used are those whose ``index`` has a role list in :data:`STANCE_ROLES` (SPEAR runs 0-9);
- ``stance_assets``: the folder with ``interactions_role_ABmapped.csv`` (``a_id``, ``b_id``,
  ``role_a``, ``role_b``, optional ``category_a``/``category_b``, ``participant_a_prompt_text``,
  ``participant_b_prompt_text``, ``interaction_type``...) and optionally ``relationships.csv``
  (``vendor_id``, ``session_id``, ``relationship_detail`` or ``relationship``);
- ``stance_category_roles`` (optional, as in SPEAR where a missing file gives no mapping): the
  category -> roles table (``category_name``, ``Adjectives assigned`` = comma-separated roles).

Per row (:func:`stance_target`): the asset row is the one whose ``a_id``/``b_id`` equals the
first ``V.._S.._I.._P...`` id found in ``audio_path`` or ``conversation_id``; the target speaker
is inferred from the transcript (the speaker who did not ask the last question ending with
``?``; SPEAR reads a ``transcript`` column holding the question turns, then ``<...>``, then
the answer: here ``transcript_question + "<...>" + transcript_answer``); its side (``a``/``b``:
id contained in ``a_id``/``b_id``, else its position in ``speakers``), role
(``role_<side>``) and category (``category_<side>``, else the table's category of the role).
A (row, question) pair is usable when the role is in the question's role list or the category
is one of its ``related_categories`` (case-insensitive).

Reference (``known_stance_reference``): +2 when the target category is the question's first
related category, −2 when it is the second, else none: such a pair never enters the keys, so it
is not sent to the judge. The judge (:class:`spear_metrics.core.judge.Judge`, any
OpenAI-compatible endpoint; SPEAR's default model ``gpt-audio-2025-08-28``) hears the question
clip and the answer patched onto one mono 16-bit track at ``answer_start_time``
(:func:`patch_question_answer`) with SPEAR's prompt (:func:`build_prompt`); its reply ``{choice
P|N, probability, evidence}`` gives ``0`` if ``p < 0.45``, ``±1`` if ``p < 0.75``, else ``±2``
(:func:`stance_score`). Orientation (``orient_stance_scores``): when the first word of the
target category (else of the related categories, else of the question) is ``aggression``,
``inhibition``, ``callousness`` or ``disorganization``, both the reference and the judge's score
are multiplied by −1. Summary over the pairs with both values: % with the same sign, % with a
lower score (more negative), % with a higher score (more positive).
"""

from __future__ import annotations

import base64
import csv
import io
import re
import wave
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from spear_datasets.files import read_json, read_limited
from spear_datasets.schema import SpearRow
from spear_metrics.core.dimension import Dimension, MetricKey, Option, OptionError, Sample

TAU0 = 0.45
TAU2 = 0.75
JUDGE_MODEL = "gpt-audio-2025-08-28"
SYSTEM_PROMPT = "You are a careful dialogue analyst. You judge audio prosody, wording, and interactional stance."
#: The request fields of SPEAR's stance client besides model, messages and temperature.
JUDGE_REQUEST = {
    "max_completion_tokens": 128,
    "modalities": ["text"],
    "response_format": {
        "type": "json_schema",
        "json_schema": {
            "name": "stance_judge_output",
            "schema": {
                "type": "object",
                "additionalProperties": False,
                "properties": {
                    "choice": {"type": "string", "enum": ["P", "N"]},
                    "probability": {"type": "number", "minimum": 0.0, "maximum": 1.0},
                    "evidence": {"type": "array", "items": {"type": "string"}, "minItems": 2, "maxItems": 4},
                },
                "required": ["choice", "probability", "evidence"],
            },
            "strict": True,
        },
    },
}
#: Roles of interest of each stance question index (``30_run_LLM_inference_STANCEs.sh``).
STANCE_ROLES: dict[int, tuple[str, ...]] = {
    0: ("Friendly", "Warm", "Approachable", "Welcoming", "Aloof", "Distant", "Impersonal", "Indifferent"),
    1: ("Empathetic", "Considerate", "Understanding", "Concerned", "Insensitive", "Unsympathetic", "Inconsiderate", "Callous"),
    2: ("Polite", "Respectful", "Courteous", "Disrespectful", "Impolite", "Uncivil"),
    3: ("Assertive", "Decisive", "Self-assured", "Firm", "Indecisive", "Self-doubting", "Unassertive", "Timid"),
    4: ("Honest", "Ingenuous", "Uncalculating", "Manipulative", "Calculating", "Devious"),
    5: ("Alert", "Attentive", "Concentrating", "Engaged", "Bewildered", "Distracted", "Drowsy", "Unfocused"),
    6: ("Goal-oriented", "Driven", "Self-disciplined", "Organized", "Unmotivated", "Disorganized", "Inconsistent", "Unproductive"),
    7: ("Engaging", "Sociable", "Gregarious", "Outgoing", "Withdrawn", "Disengaged", "Reticent", "Taciturn"),
    8: ("Submissive", "Meek", "Yielding", "Undemanding", "Forceful", "Overbearing", "Dominant", "Domineering"),
    9: ("Stable", "Steady", "Unaggressive", "Unargumentative", "Aggressive", "Cruel", "Ruthless", "Vindictive"),
}
#: Labels whose scores are flipped before comparison (``benchmark_line.STANCE_LABEL_OVERRIDES`` keys).
STANCE_LABEL_OVERRIDES = {"aggression": "Calmness", "inhibition": "Disinhibition", "callousness": "Empathy",
                          "disorganization": "Organization"}

_FILE_ID = re.compile(r"(V\d+_S\d+_I\d+_P[^_./\\]+)", re.I)
_TURN = re.compile(r"(?P<speaker>[A-Za-z0-9]+):\s*(?P<text>.*?)(?=\s+[A-Za-z0-9]+:\s*|$)")


def _s(value: Any) -> str:
    """SPEAR's ``safe_str``: ``None``/"nan"/"none"/"null" -> ``""``, else stripped text."""
    if value is None:
        return ""
    text = str(value)
    return "" if text.lower() in {"nan", "none", "null"} else text.strip()


def stance_score(choice: str, probability: float) -> int:
    """SPEAR's ``map_choice_probability_to_score``: ``p`` clamped to [0, 1]; 0 if ``p < 0.45``,
    ``±1`` if ``p < 0.75``, else ``±2`` (+ for P).

    Raises:
        ValueError: choice not P/N (case-insensitive) or probability not a number.
    """
    c = _s(choice).upper()
    if c not in ("P", "N"):
        raise ValueError(f"judge choice {choice!r} is not 'P' or 'N'")
    p = max(0.0, min(1.0, float(probability)))
    sign = 1 if c == "P" else -1
    if p < TAU0:
        return 0
    return 2 * sign if p >= TAU2 else sign


def known_reference(target_category: str, related_categories: Sequence[str]) -> int | None:
    """``benchmark_line.known_stance_reference`` (category rule): +2 when the target category is
    the first related category, −2 when it is the second, else ``None`` (case-insensitive)."""
    cats = [_s(c).lower() for c in related_categories]
    t = _s(target_category).lower()
    if cats and t == cats[0]:
        return 2
    if len(cats) >= 2 and t == cats[1]:
        return -2
    return None


def stance_label(target_category: str, related_categories: Sequence[str], question: str) -> str:
    """``benchmark_line.stance_row_label``: first word (``|`` and ``/`` as spaces, lower case) of the
    first non-empty of target category, related categories (``|``-joined), question."""
    for value in (target_category, "|".join(_s(c) for c in related_categories), question):
        v = _s(value)
        if v and v.lower() not in {"nan", "none"}:
            return v.replace("|", " ").replace("/", " ").split()[0].lower()
    return ""


def compare_oriented(score: int | None, reference: int | None, flip: bool) -> dict[str, bool | None]:
    """Flags of one pair after orientation (both multiplied by −1 when ``flip``); ``None`` when
    either value is missing. Source: ``benchmark_line.stance_metrics``."""
    if score is None or reference is None:
        return {"same_sign": None, "lower": None, "higher": None}
    m = -1 if flip else 1
    s, r = m * score, m * reference
    return {"same_sign": bool(np.sign(s) == np.sign(r)), "lower": s < r, "higher": s > r}


def infer_target_speaker(transcript: str, speakers: str) -> str:
    """``make_questions.infer_target_speaker``: turns (``SPK: text``) of ``transcript`` before
    ``<...>``; the speaker of the last turn ending with ``?`` is the questioner and the other
    listed speaker is the target; else the last turn's speaker; else the last listed speaker."""
    text = _s(transcript)
    before = text.split("<...>", 1)[0]
    turns = [(_s(m.group("speaker")), _s(m.group("text"))) for m in _TURN.finditer(before or text)]
    turns = [(sp, t) for sp, t in turns if sp and t]
    spk = [x.strip() for x in _s(speakers).split("|") if x.strip()]
    asker = ""
    for sp, t in turns:
        if t.rstrip().endswith("?"):
            asker = sp
    if asker and len(spk) >= 2:
        for sp in spk:
            if sp != asker:
                return sp
    if turns:
        return turns[-1][0]
    return spk[-1] if spk else ""


class StanceAssets:
    """The STANCE/Seamless files of the protocol, read once (see module docstring).

    Raises:
        OptionError: a path that does not exist or a file that cannot be read as its schema
            (one line naming it).
    """

    def __init__(self, questions: str | Path, assets: str | Path, category_roles: str | Path | None = None):
        qpath, apath = Path(questions), Path(assets)
        try:
            data = read_json(qpath, MAX_ASSET_BYTES)  # a FIFO, a device or a huge file refused, never read whole
            items = data.get("outside_judge") if isinstance(data, dict) else None
            if not isinstance(items, list):
                raise ValueError("no 'outside_judge' list")
            self.questions = [q for q in items if isinstance(q, dict) and int(q.get("index", -1)) in STANCE_ROLES]
        except (OSError, ValueError, TypeError, RecursionError) as e:  # RecursionError: JSON nested too deeply
            raise OptionError(f"stance_questions {qpath}: unreadable questions JSON ({type(e).__name__}: {e})") from None
        if not self.questions:
            raise OptionError(f"stance_questions {qpath}: no question with an index in 0-9 (SPEAR's role lists)")
        ab = apath / "interactions_role_ABmapped.csv"
        if not ab.is_file():
            raise OptionError(f"stance_assets {apath}: missing asset file {ab.name}")
        self.by_file_id: dict[str, dict[str, str]] = {}
        for row in _read_csv(ab, "stance_assets"):
            for side in ("a", "b"):
                fid = _s(row.get(f"{side}_id"))
                if fid:
                    self.by_file_id[fid] = row
        self.relationships: dict[tuple[str, str], str] = {}
        rel = apath / "relationships.csv"
        if rel.is_file():
            for row in _read_csv(rel, "stance_assets"):
                v, sess = _s(row.get("vendor_id")), _s(row.get("session_id"))
                if v and sess:
                    self.relationships[(v, sess)] = _s(row.get("relationship_detail")) or _s(row.get("relationship"))
        self.role_category: dict[str, str] = {}
        if category_roles:
            cpath = Path(category_roles)
            if not cpath.is_file():
                raise OptionError(f"stance_category_roles {cpath}: no such file")
            for row in _read_csv(cpath, "stance_category_roles"):
                for role in _s(row.get("Adjectives assigned")).split(","):
                    if role.strip():
                        self.role_category[role.strip().lower()] = _s(row.get("category_name"))
        self.sources = {"stance_questions": str(qpath), "stance_assets": str(apath),
                        "stance_category_roles": str(category_roles) if category_roles else None}


#: the largest STANCE/Seamless asset file read (bytes; the questions JSON and the asset CSVs are a few MB)
MAX_ASSET_BYTES = 256 * 2 ** 20


def _read_csv(path: Path, option: str) -> list[dict[str, str]]:
    """The rows of an asset CSV (at most :data:`MAX_ASSET_BYTES` read: a FIFO or a device is
    refused, never read for ever).

    Raises:
        OptionError: unreadable, not a regular file, over the limit, not UTF-8 or not CSV (one line)."""
    try:
        text = read_limited(path, MAX_ASSET_BYTES).decode("utf-8")
        return list(csv.DictReader(io.StringIO(text, newline="")))
    except (OSError, ValueError, csv.Error) as e:  # ValueError: over the limit, not UTF-8
        raise OptionError(f"{option} {path}: unreadable CSV ({type(e).__name__}: {e})") from None


def stance_target(meta: SpearRow, assets: StanceAssets) -> dict[str, str]:
    """Target speaker, side, role, category and the prompt fields of one row
    (``make_questions.py``; see the module docstring for the transcript SPEAR reads)."""
    fids = []
    for text in (meta.audio_path, meta.conversation_id):
        for m in _FILE_ID.findall(_s(text)):
            if m not in fids:
                fids.append(m)
    asset = next((assets.by_file_id[f] for f in fids if f in assets.by_file_id), {})
    transcript = meta.transcript_question + (f"<...>{meta.transcript_answer}" if _s(meta.transcript_answer) else "")
    target = infer_target_speaker(transcript, meta.speakers)
    spk = [x.strip() for x in _s(meta.speakers).split("|") if x.strip()]
    side = ""
    if target and target in _s(asset.get("a_id")):
        side = "a"
    elif target and target in _s(asset.get("b_id")):
        side = "b"
    elif target and spk:
        side = "a" if target == spk[0] else ("b" if len(spk) > 1 and target == spk[1] else "")

    def category(role: str, sd: str) -> str:
        return _s(asset.get(f"category_{sd}")) or assets.role_category.get(_s(role).lower(), "")

    role = _s(asset.get(f"role_{side}")) if side else ""
    conv = _s(meta.conversation_id)  # SPEAR's ``initial_conversation``: V.._S.._I..
    vendor = conv.split("_", 1)[0]
    session = conv.split("_S", 1)[1].split("_", 1)[0] if "_S" in conv else ""
    return {
        "target_speaker": target, "target_side": side.upper(), "target_role": role,
        "target_category": category(role, side) if side else "",
        "participant_a_prompt_text": _s(asset.get("participant_a_prompt_text")),
        "participant_b_prompt_text": _s(asset.get("participant_b_prompt_text")),
        "relationship_detail": assets.relationships.get((vendor, session), "") or _s(asset.get("interaction_type")),
        "transcript": transcript,
    }


def usable(target: dict[str, str], question: dict[str, Any]) -> bool:
    """``make_questions.py`` ``can_use_for_stance``: role in the question's role list or category
    among its related categories (case-insensitive)."""
    roles = {r.lower() for r in STANCE_ROLES.get(int(question.get("index", -1)), ())}
    related = {_s(c).lower() for c in question.get("related_categories", [])}
    return _s(target["target_role"]).lower() in roles or _s(target["target_category"]).lower() in related


def build_prompt(target: dict[str, str], question: dict[str, Any], question_end_time: float | str) -> str:
    """The judge's user text, field for field as ``bin/STANCE/score.py`` ``build_prompt``."""
    bits = [
        f"TARGET speaker id: {_s(target.get('target_speaker')) or 'unknown'}",
        f"TARGET role: {_s(target.get('target_role')) or 'unknown'}",
        f"TARGET category: {_s(target.get('target_category')) or 'unknown'}",
    ]
    qend = _s(question_end_time)
    if qend:
        bits.append(f"The original dialogue/question ends at {qend} seconds; evaluate the answer/response after that boundary when present.")
    return (
        "Judge the TARGET speaker's stance/tone/style in the audio.\n"
        "Use any dialogue context only to interpret the TARGET response; do not score the other speaker.\n\n"
        + "\n".join(bits)
        + "\n\n"
        f"Question: {_s(question.get('question'))}\n\n"
        f"Definition P:\n{_s(question.get('positive_defination'))}\n\n"
        f"Definition N:\n{_s(question.get('negative_defination'))}\n\n"
        f"Relationship/context: {_s(target.get('relationship_detail'))}\n"
        f"Participant A prompt: {_s(target.get('participant_a_prompt_text'))}\n"
        f"Participant B prompt: {_s(target.get('participant_b_prompt_text'))}\n"
        f"Transcript: {_s(target.get('transcript'))}\n\n"
        "Return ONLY JSON with keys 'choice', 'probability', and 'evidence'. "
        "'choice' must be 'P' or 'N'. 'probability' must be 0.0 to 1.0. "
        "'evidence' must be 2 to 4 short strings."
    )


def _pcm16_mono(wav: np.ndarray) -> np.ndarray:
    """int16 mono of a decoded ``(C, n)`` file: samples back to 16-bit integers (exact for 16-bit
    PCM files), two channels averaged as ``audioop.tomono(.., 0.5, 0.5)`` (floor of the half sum).

    Raises:
        ValueError: more than two channels (SPEAR's reader refuses them).
    """
    x = np.asarray(wav, dtype=np.float64)
    if x.ndim == 1:
        x = x[None]
    if x.shape[0] > 2:
        raise ValueError(f"stance audio patch: {x.shape[0]} channels (SPEAR reads mono or stereo WAV only)")
    ints = np.clip(np.floor(x * 32768.0), -32768, 32767)
    mono = ints[0] if ints.shape[0] == 1 else np.floor(ints[0] * 0.5 + ints[1] * 0.5)
    return np.clip(mono, -32768, 32767).astype(np.int16)


def patch_question_answer(question: np.ndarray, question_sr: int, answer: np.ndarray, answer_sr: int,
                          answer_start_time: float | None) -> tuple[np.ndarray, int]:
    """The mono track SPEAR's stance judge hears (``score.py`` ``patch_question_answer_audio``).

    Args:
        question: decoded input clip ``(C, nq)`` float at ``question_sr``.
        answer: decoded answer ``(C, na)`` float at ``answer_sr``.
        answer_start_time: seconds from the question end (``None`` -> 0).

    Returns:
        ``(int16 track (n,), sample rate = question_sr)``: both sides as 16-bit mono
        (:func:`_pcm16_mono`), the answer brought to ``question_sr`` by ``audioop.ratecv``,
        placed at ``nq + round(answer_start_time * question_sr)``; a negative start puts that
        much silence before the question instead; ``n = max(nq, start + na)``; overlapping
        samples add with 16-bit saturation (``audioop.add``).
    """
    audioop = _audioop()
    q = _pcm16_mono(question)
    a = _pcm16_mono(answer)
    if int(answer_sr) != int(question_sr) and a.size:
        a = np.frombuffer(audioop.ratecv(a.tobytes(), 2, 1, int(answer_sr), int(question_sr), None)[0], dtype=np.int16)
    start = len(q) + int(round(float(answer_start_time or 0.0) * question_sr))
    if start < 0:
        q = np.concatenate([np.zeros(-start, np.int16), q])
        start = 0
    out = np.zeros(max(len(q), start + len(a)), dtype=np.int32)
    out[: len(q)] += q
    out[start: start + len(a)] += a
    return np.clip(out, -32768, 32767).astype(np.int16), int(question_sr)


def _audioop():
    """The ``audioop`` module (standard library up to Python 3.12, ``audioop-lts`` after)."""
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        import audioop
    return audioop


def wav_base64(track: np.ndarray, sr: int) -> str:
    """Base64 of a mono 16-bit WAV file of ``track`` written by the ``wave`` module (as SPEAR)."""
    buf = io.BytesIO()
    with wave.open(buf, "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(int(sr))
        w.writeframes(np.asarray(track, dtype="<i2").tobytes())
    return base64.b64encode(buf.getvalue()).decode("ascii")


class Stances(Dimension):
    """Judge-scored stance of the answer against the category reference (SPEAR's protocol).

    Options: ``stance_questions`` (questions JSON), ``stance_assets`` (folder),
    ``stance_category_roles`` (CSV, optional), and the judge options every benchmark shares
    (:class:`spear_metrics.core.judge.JudgeConfig`): ``judge_url``, ``judge_model`` (default
    ``gpt-audio-2025-08-28``), ``judge_key_env`` (default ``OPENAI_API_KEY`` when set),
    ``judge_retries`` (6), ``judge_timeout_s`` (120 s, total per request), ``judge_seed``,
    ``judge_cache``, ``judge_require_pinned``, ``judge_backoff_s`` (1.5).

    Raises (at construction, before any row): :class:`OptionError` for unreadable or missing
    stance files, stance files without ``judge_url``, a key given on the command line
    (``judge_api_key``), a key problem or a refused moving alias.
    """

    name = "stances"
    version = "2.0.0"
    model_based = True
    keys = (
        MetricKey("stance_same_as_question_%", "%", "higher",
                  "share of judged (row, stance question) pairs whose oriented −2…+2 score has the sign of the oriented "
                  "reference", group="Stances", published=True, order=17),
        MetricKey("stance_more_negative_%", "%", "closer_to_human", "share of those pairs scored lower than the reference",
                  group="Stances", published=True, order=18),
        MetricKey("stance_more_positive_%", "%", "closer_to_human", "share of those pairs scored higher than the reference",
                  group="Stances", published=True, order=19),
    )
    option_schema = (
        Option("stance_questions", str, None, "SPEAR's stance questions JSON (none: keys null with a note)"),
        Option("stance_assets", str, None, "folder with SPEAR's role assets (interactions_role_ABmapped.csv)"),
        Option("stance_category_roles", str, None, "CSV of category roles (optional)"),
        # the judge options every benchmark shares (spear_metrics.core.judge.JudgeConfig), as -o judge_*=
        Option("judge_url", str, None, "OpenAI-compatible API root of the judge, e.g. http://127.0.0.1:8000/v1"),
        Option("judge_model", str, JUDGE_MODEL, "judge model id"),
        Option("judge_key_env", str, None, "environment variable holding the judge's key (default: OPENAI_API_KEY "
                                           "when set; 'none': send none); never the key itself"),
        Option("judge_retries", int, 6, "retries of a failed judge call", minimum=0),
        Option("judge_timeout_s", float, 120.0, "total time limit of one judge request, s", minimum=0.1),
        Option("judge_seed", int, None, "seed sent with each judge request (default: none, as SPEAR)"),
        Option("judge_cache", str, "readwrite", "judge reply cache (SPEARBENCH_JUDGE_CACHE moves it)",
               choices=("readwrite", "read", "off")),
        Option("judge_require_pinned", bool, False, "refuse a judge model id that is a moving alias"),
        Option("judge_backoff_s", float, 1.5, "seconds before the first retry (doubled each time)", minimum=0),
        # older spellings, one release: judge_base_url, judge_max_retries, judge_timeout (a warning says the new
        # one); judge_api_key (a key on the command line) is refused
        Option("judge_base_url", str, None, "deprecated: judge_url"),
        Option("judge_max_retries", int, None, "deprecated: judge_retries", minimum=0),
        Option("judge_timeout", float, None, "deprecated: judge_timeout_s", minimum=0.1),
        Option("judge_api_key", str, None, "refused: give judge_key_env=VAR (the key stays in the environment)",
               secret=True),
    )

    #: deprecated option -> its new name
    DEPRECATED = {"judge_base_url": "judge_url", "judge_max_retries": "judge_retries", "judge_timeout": "judge_timeout_s"}

    def __init__(self, **options: Any):
        super().__init__(**options)
        import sys

        if self.options.get("judge_api_key") is not None:
            raise OptionError("stances: judge_api_key= would put the key on the command line; set it in an environment "
                              "variable and give judge_key_env=VAR")
        for old, new in self.DEPRECATED.items():
            if self.options.get(old) is not None:
                print(f"warning: -o {old}= is deprecated and goes in the next release; use -o {new}=", file=sys.stderr)
                self.options[new] = self.options[old]
        self._judge = None
        self.assets: StanceAssets | None = None
        if options.get("stance_questions") or options.get("stance_assets"):
            if not options.get("stance_questions") or not options.get("stance_assets"):
                raise OptionError("stances needs both stance_questions (questions JSON) and stance_assets "
                                  "(folder with interactions_role_ABmapped.csv)")
            if not self.options.get("judge_url"):
                raise OptionError("stances needs judge_url (an OpenAI-compatible API root, e.g. http://host:8000/v1)")
            self.assets = StanceAssets(options["stance_questions"], options["stance_assets"], options.get("stance_category_roles"))
            try:  # a key that cannot be sent, a moving alias refused: the run fails here, not every row
                self._get_judge()
            except ValueError as e:
                raise OptionError(str(e)) from None

    def judge_config(self):
        """The :class:`spear_metrics.core.judge.JudgeConfig` of this dimension's ``judge_*`` options."""
        from spear_metrics.core.judge import JudgeConfig

        o = self.options
        return JudgeConfig(url=o.get("judge_url"), model=str(o.get("judge_model") or JUDGE_MODEL),
                           key_env=o.get("judge_key_env"), timeout_s=float(o.get("judge_timeout_s") or 120.0),
                           retries=int(o.get("judge_retries") if o.get("judge_retries") is not None else 6),
                           seed=o.get("judge_seed"), cache=str(o.get("judge_cache") or "readwrite"),
                           require_pinned=bool(o.get("judge_require_pinned")), temperature=0.0,
                           backoff_s=float(o.get("judge_backoff_s") if o.get("judge_backoff_s") is not None else 1.5))

    def judge_calls(self) -> dict[str, Any] | None:
        """The judge's :meth:`~spear_metrics.core.judge.Judge.report` once it was made (``None``: no judge)."""
        return self._judge.report() if self._judge is not None and hasattr(self._judge, "report") else None

    def _get_judge(self):
        if self._judge is None:
            import sys

            from spear_metrics.core.judge import make_judge

            self._judge = make_judge(self.judge_config(), warn=lambda line: print(line, file=sys.stderr))
        return self._judge

    def score_sample(self, sample: Sample) -> dict[str, Any]:
        v: dict[str, Any] = {"stance_pairs": 0, "stance_same_sign_n": 0, "stance_lower_n": 0, "stance_higher_n": 0}
        if self.assets is None:
            return v
        target = stance_target(sample.meta, self.assets)
        todo = []
        for q in self.assets.questions:
            if not usable(target, q):
                continue
            k = int(q["index"])
            cats = [_s(c) for c in q.get("related_categories", [])]
            ref = known_reference(target["target_category"], cats)
            v[f"stance_q{k}_reference"] = ref
            v[f"stance_q{k}_flip"] = stance_label(target["target_category"], cats, _s(q.get("question"))) in STANCE_LABEL_OVERRIDES
            v[f"stance_q{k}_score"] = None
            if ref is not None:  # a pair without a reference never enters the keys: not judged
                todo.append((k, q, ref))
        if not todo:
            return v
        from spear_datasets.audio import decode

        track, sr = patch_question_answer(*decode(sample.audio_path), *decode(sample.answer_audio_path), sample.meta.answer_start_time)
        audio = {"type": "input_audio", "input_audio": {"data": wav_base64(track, sr), "format": "wav"}}
        judge = self._get_judge()
        for k, q, ref in todo:
            prompt = build_prompt(target, q, repr(float(sample.meta.question_end_time)))
            reply = judge.ask_json([{"role": "system", "content": SYSTEM_PROMPT},
                                    {"role": "user", "content": [{"type": "text", "text": prompt}, audio]}],
                                   ("choice", "probability"), extra_body=JUDGE_REQUEST, outer_braces=True)
            try:
                score = stance_score(reply["choice"], reply["probability"])
            except (TypeError, ValueError) as e:
                raise ValueError(f"stance judge reply for question {k}: {e}") from None
            v[f"stance_q{k}_score"] = score
            flags = compare_oriented(score, ref, v[f"stance_q{k}_flip"])
            v["stance_pairs"] += 1
            v["stance_same_sign_n"] += int(flags["same_sign"])
            v["stance_lower_n"] += int(flags["lower"])
            v["stance_higher_n"] += int(flags["higher"])
        return v

    def aggregate_counts(self, rows: Sequence[SpearRow], values: Sequence[dict[str, Any]], keys: Sequence[str]) -> dict[str, int]:
        """The three shares: judged (row, stance question) pairs with a reference (``stance_pairs``
        of each row; resampling rows keeps a row's pairs together)."""
        out = super().aggregate_counts(rows, values, keys)
        n = sum(int(v.get("stance_pairs") or 0) for v in values)
        out.update({k: n for k in ("stance_same_as_question_%", "stance_more_negative_%", "stance_more_positive_%")})
        return out

    def aggregate(self, rows: Sequence[SpearRow], values: Sequence[dict[str, Any]]) -> dict[str, Any]:
        n = sum(int(v.get("stance_pairs") or 0) for v in values)

        def pct(key: str) -> float | None:
            return 100.0 * sum(int(v.get(key) or 0) for v in values) / n if n else None

        out: dict[str, Any] = {
            "stance_same_as_question_%": pct("stance_same_sign_n"),
            "stance_more_negative_%": pct("stance_lower_n"),
            "stance_more_positive_%": pct("stance_higher_n"),
            "stance_n_pairs": n,
        }
        if self.assets is None:
            out["stances_note"] = ("null: no stance files given (options stance_questions=<questions JSON>, "
                                   "stance_assets=<folder with interactions_role_ABmapped.csv>, stance_category_roles=<CSV>)")
        elif not n:
            out["stances_note"] = "null: no row has a usable stance question with a category reference"
        return out

    def models(self) -> dict[str, str]:
        if self.assets is None:
            return {}
        m = {"stance_judge": f"{self.options.get('judge_model', JUDGE_MODEL)} @ {self.options.get('judge_url')}"}
        m.update({k: v for k, v in self.assets.sources.items() if v})
        return m

