"""Stances dimension: ``stance_same_as_question_%``, ``stance_more_negative_%``,
``stance_more_positive_%``.

Definitions: ``SPEAR_PROTOCOL.md`` section 2 ("Stances"), following upstream
``bin/STANCE/score.py``: an LLM judge (:class:`spear_metrics.core.judge.Judge`, any
OpenAI-compatible chat endpoint) reads the stance question of the sample's reference dimension
with its P / N definitions and the answer — audio (``input_audio`` part, question clip mixed
with the answer placed at ``len(q) + answer_start_time``, as upstream) when
``judge_audio=true``, else the ASR transcript of the answer (:func:`spear_metrics.core.asr.load_asr`)
— and returns JSON ``{"choice": "P"|"N", "probability": p}``. Score on −2…+2
(:func:`stance_score`): ``p < 0.45`` -> 0; ``p >= 0.75`` -> ±2; else ±1 (sign + for P).

The stance questions and the reference scores are not SPEAR metadata columns: option
``stance_questions`` names a CSV with ``audio_path`` (file name of the input clip),
``stance_question``, ``positive_definition``, ``negative_definition`` and ``reference_score``
(the judge's −2…+2 score of the human answer). Rows without an entry are not judged (values
``null``); without the file every key is ``null`` with a note.

Summary over judged rows: % with the same sign as the reference (``sign(0) = 0``), % with a
lower score, % with a higher score.
"""

from __future__ import annotations

import base64
import csv
import io
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from spear_datasets.schema import SpearRow
from spear_metrics.core.dimension import Dimension, MetricKey, Sample, percent_or_none

TAU0 = 0.45
TAU2 = 0.75
REQUIRED = ("choice", "probability")


def stance_score(choice: str, probability: float) -> int:
    """Upstream mapping of a judge reply to −2…+2.

    Raises:
        ValueError: choice not P/N or probability not a number in [0, 1].
    """
    c = str(choice).strip().upper()
    if c not in ("P", "N"):
        raise ValueError(f"judge choice {choice!r} is not 'P' or 'N'")
    p = float(probability)
    if not (0.0 <= p <= 1.0):
        raise ValueError(f"judge probability {probability!r} is not in [0, 1]")
    sign = 1 if c == "P" else -1
    if p < TAU0:
        return 0
    return 2 * sign if p >= TAU2 else sign


def compare_to_reference(score: int | None, reference: int | None) -> dict[str, bool | None]:
    """Flags of one judged answer against its reference score (``None`` when either is missing)."""
    if score is None or reference is None:
        return {"stance_same_sign": None, "stance_more_negative": None, "stance_more_positive": None}
    return {"stance_same_sign": bool(np.sign(score) == np.sign(reference)),
            "stance_more_negative": score < reference, "stance_more_positive": score > reference}


def build_prompt(q: dict[str, str], transcript: str | None) -> str:
    """The judge's user text (upstream ``build_prompt`` minus the Seamless-only fields)."""
    parts = [
        "Judge the TARGET speaker's stance/tone/style in the answer to the question.",
        f"Question: {q.get('stance_question', '')}",
        f"Definition P:\n{q.get('positive_definition', '')}",
        f"Definition N:\n{q.get('negative_definition', '')}",
    ]
    if transcript is not None:
        parts.append(f"Transcript of the TARGET answer: {transcript}")
    parts.append("Return ONLY JSON with keys 'choice' and 'probability'. 'choice' must be 'P' or 'N'. "
                 "'probability' must be 0.0 to 1.0.")
    return "\n\n".join(parts)


def _wav_b64(wav: np.ndarray, sr: int = 16000) -> str:
    import soundfile as sf

    buf = io.BytesIO()
    sf.write(buf, np.clip(wav, -1, 1), sr, format="WAV", subtype="PCM_16")
    return base64.b64encode(buf.getvalue()).decode("ascii")


class Stances(Dimension):
    """Judge-scored stance of the answer against the human reference.

    Options: ``judge_base_url``, ``judge_model``, ``judge_api_key`` (default ``OPENAI_API_KEY``),
    ``judge_audio`` (false), ``asr_model`` (``load_asr`` name, default ``embedded``),
    ``stance_questions`` (CSV, see module docstring).
    """

    name = "stances"
    version = "1.0.0"
    model_based = True
    keys = (
        MetricKey("stance_same_as_question_%", "%", "higher", "share of judged answers whose stance has the sign of the reference"),
        MetricKey("stance_more_negative_%", "%", "closer_to_human", "share of judged answers scored lower than the reference (-2..+2)"),
        MetricKey("stance_more_positive_%", "%", "closer_to_human", "share of judged answers scored higher than the reference (-2..+2)"),
    )

    def __init__(self, **options: Any):
        super().__init__(**options)
        self._judge = None
        self._asr = None
        self._questions: dict[str, dict[str, str]] | None = None

    def _table(self) -> dict[str, dict[str, str]]:
        if self._questions is None:
            path = self.options.get("stance_questions")
            self._questions = {}
            if path:
                with open(path, newline="", encoding="utf-8") as f:
                    for r in csv.DictReader(f):
                        self._questions[Path(r["audio_path"]).name] = r
        return self._questions

    def _get_judge(self):
        if self._judge is None:
            from spear_metrics.core.judge import Judge

            if not self.options.get("judge_base_url") or not self.options.get("judge_model"):
                raise ValueError("stances needs options judge_base_url and judge_model (an OpenAI-compatible chat endpoint)")
            self._judge = Judge(str(self.options["judge_base_url"]), str(self.options["judge_model"]),
                                api_key=self.options.get("judge_api_key"), max_retries=int(self.options.get("judge_max_retries", 3)),
                                timeout=float(self.options.get("judge_timeout", 60.0)),
                                backoff_s=float(self.options.get("judge_backoff_s", 0.5)))
        return self._judge

    def _transcripts(self, waves: list[np.ndarray]) -> list[str]:
        if self._asr is None:
            from spear_metrics.core.asr import load_asr

            self._asr = load_asr(str(self.options.get("asr_model", "embedded")))
        return [t.text for t in self._asr.transcribe(waves, sr=16000)]

    def score_batch(self, samples: Sequence[Sample]) -> list[dict[str, Any] | BaseException]:
        from spear_metrics.turn_taking.definition import build_dialog

        table = self._table()
        todo = [i for i, s in enumerate(samples) if s.audio_path.name in table]
        out: list[dict[str, Any] | BaseException] = [
            {"stance_score": None, "stance_reference": None, **compare_to_reference(None, None)} for _ in samples]
        if not todo:
            return out
        judge = self._get_judge()
        audio = bool(self.options.get("judge_audio", False))
        texts = None if audio else self._transcripts([samples[i].answer_audio()[0] for i in todo])
        for j, i in enumerate(todo):
            s = samples[i]
            q = table[s.audio_path.name]
            try:
                ref = int(round(float(q["reference_score"]))) if str(q.get("reference_score", "")).strip() else None
                content: list[dict[str, Any]] = [{"type": "text", "text": build_prompt(q, None if audio else texts[j])}]
                if audio:
                    mono = build_dialog(s.input_audio("mix").repeat(2, axis=0), s.answer_audio()[0], 0, s.meta.answer_start_time)[0]
                    content.append({"type": "input_audio", "input_audio": {"data": _wav_b64(mono), "format": "wav"}})
                reply = judge.ask_json([{"role": "system", "content": "You are a careful dialogue analyst."},
                                        {"role": "user", "content": content}], REQUIRED)
                score = stance_score(reply["choice"], reply["probability"])
                out[i] = {"stance_score": score, "stance_reference": ref, **compare_to_reference(score, ref)}
            except Exception as e:  # JudgeError or an unusable reply: this row fails with the reason
                out[i] = e
        return out

    def aggregate(self, rows: Sequence[SpearRow], values: Sequence[dict[str, Any]]) -> dict[str, Any]:
        out = {
            "stance_same_as_question_%": percent_or_none([v.get("stance_same_sign") for v in values]),
            "stance_more_negative_%": percent_or_none([v.get("stance_more_negative") for v in values]),
            "stance_more_positive_%": percent_or_none([v.get("stance_more_positive") for v in values]),
        }
        if not self.options.get("stance_questions"):
            out["stances_note"] = "null: no stance questions with reference scores given (option stance_questions)"
        return out

    def models(self) -> dict[str, str]:
        m = {"stance_judge": f"{self.options.get('judge_model')} @ {self.options.get('judge_base_url')}"}
        if not self.options.get("judge_audio"):
            m["stance_asr"] = str(self.options.get("asr_model", "embedded"))
        return m
