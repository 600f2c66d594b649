"""Dynamic-SUPERB Phase-2 metrics: which metric each task uses upstream, and the project's
definitions of the values SPEARBench computes. Pure functions (no model, no network).

**Where the definitions come from.** Upstream's evaluator maps each task instance to a metric
function in ``dynamic_superb/evaluation/task_metrics.py`` (``taskname_to_metrics``) of
``cyhuang-tw/speechlm_eval``: that mapping is read and shipped in ``manifest.csv``. The bodies of
those functions (``from metrics import *``: their text normalisation, corpus- or sentence-level
averaging, number parsing, N/A handling) are not in that repository's public tree. One public
file, an "OpenAI port" of the Phase-2 evaluation, holds four of them: ``llm_classification``,
``word_error_rate``, ``phoneme_error_rate`` and ``pos_estimation`` (the last three through the
``speech_metrics`` package, PyPI speech-metrics 0.2.2). ``llm_classification``'s judge prompt
(``INSTRUCTION_REFINE_COT_SINGLE_AND_MULTI_CHOICE`` of the Phase-2 evaluation code), the driver
that uses it (one user message through the chat template, greedy, 512 new tokens, the row's
``label`` only) and the OpenAI port of the same function (``temperature=0``, ``max_tokens=512``,
``re.search(r"result:\\s*(yes|no)", reply.lower().strip())``, ``yes`` -> 1.0, anything else ->
0.0) are public. So:

- the published key ``llm_classification`` is computed per row as that code does
  (:data:`UPSTREAM_CLASSIFICATION_PROMPT`, :func:`upstream_classification_messages`,
  :func:`upstream_classification_value`); the task value is the mean of the rows' values (the one
  assumption: the code read scores rows, the averaging over a task is not in it);
- the published keys ``word_error_rate``, ``phoneme_error_rate`` and ``pos_estimation`` likewise
  (:func:`upstream_row_rate`: ASCII punctuation deleted, lower case except for
  ``pos_estimation``, ``speech_metrics``' single-space split and token edit distance, the row's
  ``max(0, 1 - rate)``: a score, higher is better), task value = mean of the rows (same assumption);
- every other **published key** (named exactly as the upstream function, e.g. ``sacre_bleu``) is
  ``null`` with ``<key>_note = "unsupported: <reason>"`` (:func:`unreadable_note`);
- the numbers SPEARBench computes go under **project keys** of its own (:data:`PROJECT_KEYS`),
  each defined here and in ``docs/dynamic_superb.md``. They follow what is known of the protocol
  (paper arXiv 2411.05361; the judge's ``Result: YES``/``Result: NO`` verdict parsed as
  ``result:\\s*(yes|no)`` on the lower-cased reply, yes = 1, anything else = 0 and flagged) with
  the project's own prompt wording and text normalisation;
- task-specific upstream functions (speaker counting, beat tracking, diarization...) have no
  project definition: their tasks say ``unsupported`` under both kinds of key.
"""

from __future__ import annotations

import hashlib
import math
import re
import unicodedata
from dataclasses import dataclass
from typing import Any, Optional, Sequence

from spear_metrics.core.dimension import MetricKey

from spear_metrics.dynamic_superb import METRICS_VERSION  # noqa: E402  (the descriptor's; one place)

GROUP = "Dynamic-SUPERB Phase-2"


@dataclass(frozen=True)
class ProjectMetric:
    """A project definition for an upstream metric function.

    Attributes:
        key: the project key the per-task value is written under.
        kind: ``judge``, ``error_rate`` (with ``unit`` tokens), ``bleu`` or ``pearson``.
        tokens: error rates: what a token is (``words``, ``characters``, ``phonemes``, ``mixed``).
    """

    key: str
    kind: str
    tokens: str = ""


#: upstream metric function (``taskname_to_metrics`` value) -> the project's definition
PROJECT_METRICS: dict[str, ProjectMetric] = {
    "llm_classification": ProjectMetric("judge_accuracy", "judge"),
    "word_error_rate": ProjectMetric("WER", "error_rate", "words"),
    "character_error_rate": ProjectMetric("CER", "error_rate", "characters"),
    "phoneme_error_rate": ProjectMetric("PER", "error_rate", "phonemes"),
    "mix_error_rate": ProjectMetric("MER", "error_rate", "mixed"),
    "sacre_bleu": ProjectMetric("BLEU", "bleu"),
    "pearson_correlation_coefficient": ProjectMetric("pearson_r", "pearson"),
}

#: why a published key cannot be computed faithfully: where its body would be and is not
UPSTREAM_UNREADABLE = ("unsupported: the body of upstream's {fn} is not public: cyhuang-tw/speechlm_eval "
                       "dynamic_superb/evaluation/task_metrics.py (7181c58) imports it with `from metrics import *` "
                       "from a metrics module that is not in the public tree, and the OpenAI port of the Phase-2 "
                       "evaluation (the one public file with metric bodies) defines only llm_classification, "
                       "word_error_rate, phoneme_error_rate and pos_estimation{hint}")
#: upstream functions for which the library the OpenAI port imports (``speech_metrics``, PyPI
#: speech-metrics 0.2.2) has a function of that kind; which one upstream calls, and how, is not public
UPSTREAM_LIBRARY_HINTS = {
    "character_error_rate": "cer",
    "sacre_bleu": "sacre_bleu (sacrebleu.corpus_bleu, tokenize 13a)",
    "speaker_diarization": "der_for_dynamic_superb",
    "slot_filling": "slot_type_f1 and slot_value_cer",
}
#: why a task-specific upstream function has no project value either
NO_PROJECT_DEFINITION = ("unsupported: upstream scores this task with its own function {fn}, whose definition is not "
                         "in the public code read; SPEARBench has no definition of its own for it")

#: the project keys (unit, direction, definition): the card's key table is generated from them
PROJECT_KEYS: tuple[MetricKey, ...] = (
    MetricKey("judge_accuracy", "fraction", "higher",
              "LLM-judged classification (upstream function llm_classification): per row 1 when the judge's reply, "
              "lower-cased, holds `result: yes` (first `result:\\s*(yes|no)` match), else 0 (a reply without a "
              "verdict counts 0 and is flagged, as upstream's stated rule); mean over the judged rows. The prompt is "
              "the project's wording of the published protocol (instruction, ground truth, response; single choice: "
              "one and only one answer; multiple labels: exactly the full set), version in summary.json",
              group=GROUP),
    MetricKey("WER", "fraction", "lower",
              "corpus word error rate (upstream function word_error_rate): sum of word edits (token edit distance) over the sum of "
              "reference words, after NFKC, lower case, Unicode punctuation -> space, whitespace collapsed",
              group=GROUP),
    MetricKey("CER", "fraction", "lower",
              "corpus character error rate (upstream character_error_rate): as WER over characters of the "
              "normalised text with whitespace removed", group=GROUP),
    MetricKey("PER", "fraction", "lower",
              "corpus phoneme error rate (upstream phoneme_error_rate): as WER over whitespace-separated phone symbols "
              "of the lower-cased text (punctuation kept: phone symbols may use it)", group=GROUP),
    MetricKey("MER", "fraction", "lower",
              "corpus mixed error rate (upstream mix_error_rate): as WER over mixed tokens of the normalised text, "
              "each CJK character one token and each run of other non-space characters one token", group=GROUP),
    MetricKey("BLEU", "BLEU 0-100", "higher",
              "corpus BLEU of sacrebleu with its defaults (13a tokenisation, exponential smoothing, one reference "
              "per row; upstream function sacre_bleu)", group=GROUP),
    MetricKey("pearson_r", "correlation", "higher",
              "Pearson correlation (upstream pearson_correlation_coefficient) between the label (a number) and the "
              "first number written in the response; rows whose response holds no number are N/A and left out",
              group=GROUP),
)

#: project key -> its MetricKey
KEY_INFO: dict[str, MetricKey] = {k.name: k for k in PROJECT_KEYS}


# --------------------------------------------------------------------------- text


_CJK = re.compile(r"[\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\U00020000-\U0002ffff\u3040-\u30ff]")


def normalize_text(text: str) -> str:
    """The project's text normalisation of error rates: Unicode NFKC, lower case, every Unicode
    punctuation character (categories ``P*``) replaced by a space, whitespace collapsed."""
    s = unicodedata.normalize("NFKC", str(text)).lower()
    s = "".join(" " if unicodedata.category(c).startswith("P") else c for c in s)
    return " ".join(s.split())


def tokens(text: str, kind: str) -> list[str]:
    """The tokens an error rate counts (see :data:`PROJECT_KEYS`).

    Args:
        kind: ``words``, ``characters``, ``phonemes`` or ``mixed``.

    Raises:
        ValueError: an unknown ``kind``.
    """
    if kind == "words":
        return normalize_text(text).split()
    if kind == "characters":
        return [c for c in normalize_text(text) if not c.isspace()]
    if kind == "phonemes":
        return unicodedata.normalize("NFKC", str(text)).lower().split()
    if kind == "mixed":
        out: list[str] = []
        for word in normalize_text(text).split():
            buf = ""
            for c in word:
                if _CJK.match(c):
                    if buf:
                        out.append(buf)
                        buf = ""
                    out.append(c)
                else:
                    buf += c
            if buf:
                out.append(buf)
        return out
    raise ValueError(f"unknown token kind {kind!r}")


def token_edit_distance(reference: Sequence[str], hypothesis: Sequence[str]) -> int:
    """The Levenshtein distance between two token lists: the minimum number of substitutions,
    deletions and insertions (each costing 1) turning ``reference`` into ``hypothesis``; tokens
    compare equal as strings, an empty string being a token like any other
    (``rapidfuzz.distance.Levenshtein``, the distance ``editdistance.eval`` gives on lists)."""
    from rapidfuzz.distance import Levenshtein

    return int(Levenshtein.distance(list(reference), list(hypothesis)))


def edit_counts(reference: Sequence[str], hypothesis: Sequence[str]) -> tuple[int, int]:
    """``(edits, reference length)``: :func:`token_edit_distance` of two token lists and the
    number of reference tokens. An empty reference gives ``(len(hypothesis), 0)``."""
    ref, hyp = list(reference), list(hypothesis)
    if not ref:
        return len(hyp), 0
    return token_edit_distance(ref, hyp), len(ref)


def corpus_rate(edits: Sequence[int], lengths: Sequence[int]) -> Optional[float]:
    """``sum(edits) / sum(lengths)``; ``None`` when the references hold no token at all."""
    n = int(sum(lengths))
    return None if n == 0 else float(sum(edits)) / n


# --------------------------------------------------------------------------- BLEU


def bleu_stats(hypothesis: str, reference: str) -> list[float]:
    """sacrebleu's sufficient statistics of one (hypothesis, reference) pair with its default
    BLEU (13a): ``[sys_len, ref_len, correct_1..4, total_1..4]``; summed over rows they give the
    corpus score (:func:`bleu_from_stats`)."""
    from sacrebleu.metrics import BLEU

    s = BLEU().corpus_score([str(hypothesis)], [[str(reference)]])
    return [float(s.sys_len), float(s.ref_len), *map(float, s.counts), *map(float, s.totals)]


def bleu_from_stats(stats: Sequence[Sequence[float]]) -> Optional[float]:
    """Corpus BLEU (0-100) of summed :func:`bleu_stats` rows (sacrebleu's ``compute_bleu``, exp
    smoothing as its default); ``None`` without rows."""
    from sacrebleu.metrics import BLEU

    if not len(stats):
        return None
    tot = [sum(r[i] for r in stats) for i in range(10)]
    score = BLEU.compute_bleu(correct=[int(x) for x in tot[2:6]], total=[int(x) for x in tot[6:10]],
                              sys_len=int(tot[0]), ref_len=int(tot[1]), smooth_method="exp")
    return float(score.score)


# --------------------------------------------------------------------------- regression


_NUMBER = re.compile(r"[-+]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][-+]?\d+)?")


def first_number(text: str) -> Optional[float]:
    """The first number written in ``text`` (digits, optional sign, decimals, exponent), ``None``
    when it holds none or it is not finite."""
    m = _NUMBER.search(str(text or ""))
    if not m:
        return None
    x = float(m.group(0))
    return x if math.isfinite(x) else None


def pearson(x: Sequence[float], y: Sequence[float]) -> Optional[float]:
    """Pearson's r of two equal-length sequences (``scipy.stats.pearsonr``); ``None`` with fewer
    than 2 pairs or a constant side (r does not exist)."""
    import numpy as np

    a, b = np.asarray(x, dtype=np.float64), np.asarray(y, dtype=np.float64)
    if a.size < 2 or np.ptp(a) == 0 or np.ptp(b) == 0:
        return None
    from scipy.stats import pearsonr

    r = float(pearsonr(a, b).statistic)
    return r if math.isfinite(r) else None


# --------------------------------------------------------------------------- the judge


#: version of the project's judge prompt (recorded in summary.json with its sha256)
JUDGE_PROMPT_VERSION = "spearbench-dsuperb-judge/1"

JUDGE_PROMPT = """You are evaluating the answer of an audio-language model to one task.

Instruction given to the model:
{instruction}

Ground-truth answer:
{label}

Model's response:
{response}

{criterion}

First write a short justification (one or two sentences). Then end with one final line that is exactly "Result: YES" if the response is correct, or exactly "Result: NO" if it is not."""

SINGLE_CHOICE = ("The response is correct only if it commits to one and only one answer and that answer matches the "
                 "ground truth in meaning (wording, case and punctuation do not matter). A response that offers several "
                 "answers, refuses, or gives no answer is not correct.")
MULTI_CHOICE = ("The ground truth is a set of answers separated by commas. The response is correct only if it gives "
                "exactly this set: every answer of the set and no other (order, wording, case and punctuation do not "
                "matter).")


def judge_prompt_sha256() -> str:
    """sha256 of the prompt template and both criteria (what ``JUDGE_PROMPT_VERSION`` names)."""
    return hashlib.sha256("\x00".join((JUDGE_PROMPT, SINGLE_CHOICE, MULTI_CHOICE)).encode("utf-8")).hexdigest()


def judge_messages(instruction: str, labels: Sequence[str], response: str) -> list[dict[str, str]]:
    """The chat messages asking the judge about one row: one user message. One label -> the
    single-choice criterion; several labels (``label``, ``label2``...) -> the multi-choice
    criterion with the labels joined by ``", "``."""
    labels = [str(x) for x in labels]
    multi = len(labels) > 1
    text = JUDGE_PROMPT.format(instruction=str(instruction).strip(), label=", ".join(labels).strip(),
                               response=str(response).strip(), criterion=MULTI_CHOICE if multi else SINGLE_CHOICE)
    return [{"role": "user", "content": text}]


_VERDICT = re.compile(r"result:\s*(yes|no)")


def parse_verdict(reply: str) -> Optional[str]:
    """``"yes"``/``"no"``: the first ``result:\\s*(yes|no)`` match in the lower-cased reply;
    ``None`` when there is none (upstream counts such a reply 0; the project flags it)."""
    m = _VERDICT.search(str(reply or "").lower())
    return m.group(1) if m else None


def verdict_value(verdict: Optional[str]) -> int:
    """The row's value: 1 for ``yes``, 0 for ``no`` and for a missing verdict."""
    return 1 if verdict == "yes" else 0


def unreadable_note(upstream: str) -> str:
    """The ``<key>_note`` of a published key whose body is not public (:data:`UPSTREAM_UNREADABLE`),
    naming the ``speech_metrics`` function of that kind where there is one."""
    hint = UPSTREAM_LIBRARY_HINTS.get(upstream)
    return UPSTREAM_UNREADABLE.format(
        fn=upstream, hint=f"; the speech_metrics package the port imports has {hint}, but no public code shows "
                          f"upstream's {upstream} calling it (normalisation, per row or per corpus, score)" if hint else "")


def metric_plan(upstream: str) -> tuple[Optional[ProjectMetric], str]:
    """``(project definition or None, note of the published key)`` for upstream function ``upstream``."""
    if upstream == "llm_classification":
        note = UPSTREAM_CLASSIFICATION_NOTE
    elif upstream in UPSTREAM_ROW_RATES:
        note = upstream_row_rate_note(upstream)
    else:
        note = unreadable_note(upstream)
    return PROJECT_METRICS.get(upstream), note


# --------------------------------------------------------------------------- upstream's llm_classification


#: the upstream metric functions whose per-row definition is public and computed under their own name
#: (``llm_classification`` and :data:`UPSTREAM_ROW_RATES`)
UPSTREAM_READABLE = frozenset({"llm_classification", "word_error_rate", "phoneme_error_rate", "pos_estimation"})

#: upstream's judge prompt of ``llm_classification``, verbatim (Dynamic-SUPERB Phase-2 evaluation
#: code, ``INSTRUCTION_REFINE_COT_SINGLE_AND_MULTI_CHOICE``; its OpenAI port names the last field
#: ``{sllm_response}``, the driver ``{response}``: the same text). The number under the published
#: key depends on this text: it is recorded by sha256 in ``summary.json``.
UPSTREAM_CLASSIFICATION_PROMPT = """
You will be given a question, a corresponding correct answer(s), and a response from a model.
The model's response is a reply to the question. Your task is to judge if the "Model's Response" aligns with the "Ground Truth Answer" based on the "Question."
Please strictly follow the guidelines below:
- Briefly explain the reasons for your judgment.
- Answer with the format "Result: <YES or NO>" at the end.
- Output "YES" if the response aligns with the ground truth answer; 
output "NO" if the response does not match the ground truth answer, selects incorrect or irrelevant options, or provides more answers than required.
- The questions would be single-choice or multi-choice:
For single-choice questions, the model's response should contain one and only one answer. If the model's response selects more than one answer or does not clearly indicate a single answer, you should mark it as incorrect and output "NO." 
For multi-choice questions, the model's response must exactly match all applicable correct choices. If the model's response selects too many, too few, or any incorrect answers, you should mark it as incorrect and output "NO."
- Since the question is short answer, the model's response does not need to mention the content of the question. You only need to check if the model's response has the same meaning as the ground truth answer(s).

Input Format:
Question: {instruction}
Ground Truth Answer: {label}
Model's Response: {response}
""".strip()

#: upstream's decoding of the judge: OpenAI port ``temperature=0.0, max_tokens=512``; the open
#: driver greedy (``do_sample=False``) with ``max_new_tokens=512``
UPSTREAM_CLASSIFICATION_DECODING = {"temperature": 0.0, "max_tokens": 512}

UPSTREAM_CLASSIFICATION_NOTE = (
    "upstream's llm_classification per row (its public prompt INSTRUCTION_REFINE_COT_SINGLE_AND_MULTI_CHOICE with the "
    "row's label only, temperature 0, 512 tokens, result:\\s*(yes|no) on the lower-cased stripped reply, yes -> 1.0 "
    "else 0.0); task value = mean of the rows (assumption: the averaging over a task is not in the public code); "
    "the value depends on the judge model, recorded in summary.json")

_UPSTREAM_VERDICT = re.compile(r"result:\s*(yes|no)")


def upstream_classification_messages(instruction: Any, label: Any, response: Any) -> list[dict[str, str]]:
    """Upstream's judge request of one row: one user message, the prompt formatted with the
    row's ``instruction``, its ``label`` (the first label only: upstream's special case joining
    ``label2``... is keyed on a name no task file has, so it never applies) and the model's
    ``sllm_response``, each as given (``str.format``, nothing stripped).

    Source: Dynamic-SUPERB Phase-2 evaluation code (prompt ``INSTRUCTION_REFINE_COT_SINGLE_AND_MULTI_CHOICE``,
    ``create_classification_prompt`` of the OpenAI port, the open-model driver)."""
    text = UPSTREAM_CLASSIFICATION_PROMPT.format(instruction=instruction, label=label, response=response)
    return [{"role": "user", "content": text}]


def upstream_classification_verdict(reply: Optional[str]) -> Optional[str]:
    """``"yes"``/``"no"``/``None``: upstream's ``read_result``, the first
    ``result:\\s*(yes|no)`` match in ``reply.lower().strip()``."""
    m = _UPSTREAM_VERDICT.search(str(reply or "").lower().strip())
    return m.group(1) if m else None


def upstream_classification_value(verdict: Optional[str]) -> float:
    """Upstream's row score: 1.0 for ``yes``, 0.0 otherwise (``no``, no verdict, no reply)."""
    return 1.0 if verdict == "yes" else 0.0


def upstream_classification_prompt_sha256() -> str:
    """sha256 of :data:`UPSTREAM_CLASSIFICATION_PROMPT` (UTF-8)."""
    return hashlib.sha256(UPSTREAM_CLASSIFICATION_PROMPT.encode("utf-8")).hexdigest()



# --------------------------------------------------------------------------- upstream's error-rate rows


#: the upstream functions scored per row by an error rate whose body is public (the OpenAI port of
#: the Phase-2 evaluation): name -> whether its text normalisation lower-cases (``normalization``
#: of ``word_error_rate`` and ``phoneme_error_rate``) or only removes punctuation
#: (``preprocess_text`` of ``pos_estimation``)
UPSTREAM_ROW_RATES: dict[str, bool] = {"word_error_rate": True, "phoneme_error_rate": True, "pos_estimation": False}


def upstream_row_rate_note(fn: str) -> str:
    """The ``<fn>_note`` of a published key of :data:`UPSTREAM_ROW_RATES`."""
    lower = UPSTREAM_ROW_RATES[fn]
    lib = "per (= wer)" if fn == "phoneme_error_rate" else "wer"
    return (f"upstream's {fn} per row (the OpenAI port of the Phase-2 evaluation): response and label with ASCII "
            f"punctuation removed{' and lower-cased' if lower else ''}, then speech_metrics {lib}: upper case, split "
            "on single spaces, token edit distance / reference tokens; the row's value is max(0, 1 - that rate) "
            "(higher is better; a label that is not text gives none); task value = mean of the rows (assumption: "
            "the averaging over a task is not in the public code)")


def upstream_normalization(text: str, *, lower: bool = True) -> str:
    """The port's text normalisation: every ASCII punctuation character (``string.punctuation``)
    deleted (not replaced: ``don't`` -> ``dont``), then lower case when ``lower``
    (``normalization``; ``pos_estimation``'s ``preprocess_text`` keeps the case)."""
    import string

    out = text.translate(str.maketrans("", "", string.punctuation))
    return out.lower() if lower else out


def speech_metrics_tokens(text: str) -> list[str]:
    """The tokens ``speech_metrics.wer`` compares (PyPI speech-metrics 0.2.2, ``common.py``):
    ``text.upper().split(" ")``: single spaces separate tokens, so two spaces in a row, or a
    leading or trailing one, make an empty token, and a newline or tab does not separate."""
    return text.upper().split(" ")


def upstream_row_rate(fn: str, response: str, reference: Any) -> dict[str, Any]:
    """One row of upstream's ``fn`` (a key of :data:`UPSTREAM_ROW_RATES`) as the port computes it.

    Args:
        response: the model's text (``sllm_response``), as given.
        reference: the row's ``label`` cell, as held (text; anything else gives no value: the
            port's normalisation calls ``str.translate`` on it and stops).

    Returns:
        ``{fn: max(0, 1 - rate) or None, f"{fn}_rate", f"{fn}_edits", f"{fn}_ref_tokens"}``
        (``rate`` = edits / reference tokens, always >= 1 token: ``"".split(" ") == [""]``), or
        ``{fn: None, f"{fn}_error": why}``.

    Raises:
        KeyError: ``fn`` is not one of :data:`UPSTREAM_ROW_RATES`.

    Source: the OpenAI port's ``word_error_rate`` / ``phoneme_error_rate`` (``normalization``) and
    ``pos_estimation`` (``preprocess_text``), each ``wer([response], [reference])`` /
    ``per(...)`` of speech_metrics (``ter``: ``editdistance.eval`` summed over summed reference lengths).
    """
    lower = UPSTREAM_ROW_RATES[fn]
    if not isinstance(reference, str) or not isinstance(response, str):
        bad = reference if not isinstance(reference, str) else response
        return {fn: None, f"{fn}_error": f"{'label' if bad is reference else 'response'} is "
                                         f"{type(bad).__name__}, not text: upstream's {fn} normalises text"}
    ref = speech_metrics_tokens(upstream_normalization(reference, lower=lower))
    hyp = speech_metrics_tokens(upstream_normalization(response, lower=lower))
    edits = token_edit_distance(hyp, ref)
    rate = edits / len(ref)
    return {fn: max(0.0, 1.0 - rate), f"{fn}_rate": rate, f"{fn}_edits": edits, f"{fn}_ref_tokens": len(ref)}
