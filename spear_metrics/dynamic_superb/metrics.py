"""Dynamic-SUPERB Phase-2 metrics: which metric each task uses upstream, and the project's
definitions of the values SPEARBench computes. Pure functions (no model, no network).

**Where the definitions come from.** Upstream's evaluator maps each task instance to a metric
function in ``dynamic_superb/evaluation/task_metrics.py`` (``taskname_to_metrics``) of
``cyhuang-tw/speechlm_eval``: that mapping is read and shipped in ``manifest.csv``. The bodies of
those functions (``from metrics import *``: their text normalisation, corpus- or sentence-level
averaging, number parsing, N/A handling) and the judge prompt of ``llm_classification`` are not
in the public code that could be read for this module. So:

- every **published key** (named exactly as the upstream function, e.g. ``word_error_rate``) is
  ``null`` with ``<key>_note = "unsupported: <reason>"`` (:data:`UPSTREAM_UNREADABLE`);
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

#: why no published key can be computed faithfully (the same for every upstream function)
UPSTREAM_UNREADABLE = ("unsupported: the body of upstream's {fn} (speechlm_eval dynamic_superb/metrics, imported by "
                       "evaluation/task_metrics.py) is not in the public code read for this project, so its exact "
                       "definition (text normalisation, averaging, parsing, judge prompt) is unknown")
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
              "corpus word error rate (upstream function word_error_rate): sum of word edits (jiwer) over the sum of "
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


def edit_counts(reference: Sequence[str], hypothesis: Sequence[str]) -> tuple[int, int]:
    """``(edits, reference length)``: the minimum number of substitutions, deletions and
    insertions turning ``reference`` into ``hypothesis`` (token lists), by ``jiwer`` (tokens are
    joined by spaces and split back; none holds a space). An empty reference gives
    ``(len(hypothesis), 0)``."""
    import jiwer

    ref, hyp = list(reference), list(hypothesis)
    if not ref:
        return len(hyp), 0
    out = jiwer.process_words(" ".join(ref), " ".join(hyp))
    return int(out.substitutions + out.deletions + out.insertions), len(ref)


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


def metric_plan(upstream: str) -> tuple[Optional[ProjectMetric], str]:
    """``(project definition or None, note of the published key)`` for upstream function ``upstream``."""
    note = UPSTREAM_UNREADABLE.format(fn=upstream)
    return PROJECT_METRICS.get(upstream), note

