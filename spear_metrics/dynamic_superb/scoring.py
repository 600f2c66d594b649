"""``spearbench dsuperb score``: score prediction files in upstream's layout, task by task, on
the shared resumable runner.

Input ``PRED/<instance>.json``: ``{<id>: {"instruction", "label"[, "label2"...], "sllm_response",
...}}`` (what ``dsuperb infer`` writes, and what upstream's baselines and ``convert_format.py``
write; other fields are ignored). The instance's metric comes from the manifest
(:mod:`spear_metrics.dynamic_superb.tasks`). Rows ``dsuperb infer`` could not answer
(``PRED/.work/<instance>/failures.jsonl``) are failed rows.

Output ``RESULTS/``::

    summary.json      per task (``tasks``): upstream's metric, the published key (null + why), the
                      project key's value with ``<key>_ci95`` (percentile bootstrap over rows) and
                      ``<key>_n``, ``na_rate``, counts; per category and overall means of each
                      project key over tasks; the judge (model, settings, prompt version and sha256)
    per_sample.jsonl  one row per scored item: its id, instance, label(s), response, the judge's
                      reply and verdict (or the per-row counts of its metric), status, error
    tasks.csv         one line per task (what the console prints)
    submission.json   the scores in upstream's score-submission format (``[{"name", "scores":
                      [{"metric", "value", "version", "seen"}]}]``), project keys as metric names
    run_info.json     timings, rows scored now and resumed
    .work/            resume state (a kill -9 loses at most the batch in flight), owner, manifest, locks

``RESULTS/`` follows the project's output-folder rule (docs/safety.md): new, empty or this
command's (``PRED/`` itself, another command's folder or a folder of other files is refused); its
locks are held while it is scored (a second run on it is refused); every file is recorded as
written. The folder holds one run bound to its inputs and judge (``.work/run.json``): the same
run resumes; another is refused unless ``overwrite``, which first removes what the earlier run
recorded and is unchanged (a file someone else put there stays).

A judged row whose judge fails after its retries (HTTP errors, time-outs, a refusal without
content) is a failed row with the reason, never a 0; a reply without a verdict counts 0 (upstream's
rule) and is flagged (``judge_unparsed``), and counts in ``na_rate``.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional, Sequence

from spear_datasets.ownership import WORK_DIR, check_out_folder
from spear_metrics.core.records import SampleResult, claim_out, one_line, write_json_atomic, write_jsonl_atomic
from spear_metrics.core.secrets import mask_secrets
from spear_metrics.dynamic_superb.metrics import (
    JUDGE_PROMPT_VERSION,
    UPSTREAM_CLASSIFICATION_DECODING,
    upstream_classification_messages,
    upstream_classification_prompt_sha256,
    upstream_classification_value,
    upstream_classification_verdict,
    upstream_row_rate,
    METRICS_VERSION,
    NO_PROJECT_DEFINITION,
    PROJECT_METRICS,
    UPSTREAM_ROW_RATES,
    bleu_from_stats,
    bleu_stats,
    corpus_rate,
    edit_counts,
    first_number,
    judge_messages,
    judge_prompt_sha256,
    metric_plan,
    parse_verdict,
    pearson,
    tokens,
    verdict_value,
)
from spear_metrics.dynamic_superb.tasks import TaskSpec, label_columns

BENCHMARK = "dynamic_superb"
PROTOCOL = "Dynamic-SUPERB Phase-2"
WORK = WORK_DIR
#: the judge stage's record in the work folder (the judge's identity; absent: no judge yet)
JUDGE_STAGE = "judge.json"
#: the reason of a judged row scored without a judge (the judge stage judges these rows later)
NO_JUDGE = "no judge given (--judge-url/--judge-model or --judge-local)"


def _read_stage(path: Path) -> Optional[dict[str, Any]]:
    """The judge identity recorded in ``path`` (``None``: no judge yet, or unreadable)."""
    try:
        obj = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return obj if isinstance(obj, dict) else None
#: The owner name of a results folder (``RESULTS/.work/owner.json``).
COMMAND = "dsuperb score"
#: The files ``score`` writes into ``RESULTS/`` (besides ``.work/``): adopted from a folder an
#: earlier version scored without a manifest when the run is the same.
SCORE_OUTPUTS = ("summary.json", "per_sample.jsonl", "tasks.csv", "submission.json", "run_info.json")
#: judge settings of the paper (GPT-4o, temperature 0, 512 tokens) and of the evaluator's open
#: default (Llama-3.1-8B-Instruct, greedy, 512 new tokens)
JUDGE_MAX_TOKENS = 512
#: the judge prompts a judged row is asked with: ``upstream`` (the published key ``llm_classification``,
#: upstream's prompt) and ``project`` (the project key ``judge_accuracy``, the project's prompt)
JUDGE_PROMPTS = ("project", "upstream")


class DSuperbScoreError(RuntimeError):
    """The run cannot proceed as a whole (one line; the CLI exits 2)."""


@dataclass
class Item:
    """One prediction row to score.

    Attributes:
        row: the run's row id (0-based over every scored task, tasks in name order, rows in file order).
        instance, metric: its task and upstream metric function.
        file: its id (the prediction file's key).
        instruction, labels, response: the item (``labels``: ``label``, ``label2``...).
        error: why it cannot be scored (``None`` when it can).
    """

    row: int
    instance: str
    metric: str
    file: str
    instruction: str = ""
    labels: tuple[str, ...] = ()
    response: Optional[str] = None
    error: Optional[str] = None
    #: the ``label`` cell as upstream's ``str.format`` writes it into its judge prompt (``None``: as ``labels[0]``)
    upstream_label: Optional[str] = None
    #: whether the ``label`` cell is text (upstream's error-rate functions read text only)
    label_is_text: bool = True

    def base_values(self) -> dict[str, Any]:
        out: dict[str, Any] = {"instance": self.instance, "metric": self.metric, "file": self.file,
                               "instruction": self.instruction or None}
        for k, lab in zip(label_columns(max(1, len(self.labels))), self.labels or ("",)):
            out[k] = lab or None
        out["sllm_response"] = self.response
        return out

    def result(self) -> SampleResult:
        return SampleResult(row=self.row, audio_path=self.file, answer_audio_path=None, values=self.base_values())


# --------------------------------------------------------------------------- reading predictions


def _text(v: Any) -> Optional[str]:
    if v is None:
        return None
    if isinstance(v, (list, tuple)):
        return ", ".join(str(x).strip() for x in v if str(x).strip())
    if isinstance(v, float) and v.is_integer():
        return str(int(v))
    return str(v)


#: the largest prediction or submission file read (bytes; a task's answers are a few MB)
MAX_PREDICTION_BYTES = 256 * 2 ** 20


def read_predictions(path: str | os.PathLike, instance: str, metric: str, start: int) -> tuple[list[Item], str]:
    """The rows of one prediction file, checked: ``(items, sha256 of the file)``.

    A row that is not an object, or has no ``label``, no ``sllm_response`` or a non-text one, is
    an item with its ``error`` (a failed row). An empty ``sllm_response`` is an answer (an empty
    hypothesis, a judged empty reply).

    Raises:
        DSuperbScoreError: the file cannot be read, is over :data:`MAX_PREDICTION_BYTES`, or is not
            a JSON object.
    """
    from spear_datasets.files import parse_json, read_limited

    p = Path(path)
    try:
        data = read_limited(p, MAX_PREDICTION_BYTES)  # a pipe, a device or a huge file refused, never read whole
        obj = parse_json(data)
    except (OSError, ValueError) as e:
        raise DSuperbScoreError(f"{p}: not a readable JSON prediction file: {one_line(e)}") from None
    if not isinstance(obj, dict):
        raise DSuperbScoreError(f"{p}: a prediction file is a JSON object {{<id>: {{...}}}}, got {type(obj).__name__}")
    items = []
    for k, (key, entry) in enumerate(obj.items()):
        it = Item(row=start + k, instance=instance, metric=metric, file=str(key))
        if not isinstance(entry, dict):
            it.error = f"prediction {key!r} is not an object"
        else:
            labels = []
            for c in ["label"] + sorted((c for c in entry if c.startswith("label") and c[5:].isdigit()),
                                        key=lambda c: int(c[5:])):
                t = _text(entry.get(c))
                if t is not None and t.strip():
                    labels.append(t.strip())
            it.labels = tuple(labels)
            if entry.get("label") is not None:  # what upstream's prompt.format writes: the cell as it is (not stripped)
                it.upstream_label = "{}".format(entry["label"])
            # upstream's error-rate rows normalise the ``label`` cell itself (label1... are not read): a missing
            # or null label gives no value there, whatever the other label columns hold
            it.label_is_text = isinstance(entry.get("label"), str)
            it.instruction = _text(entry.get("instruction")) or ""
            resp = entry.get("sllm_response")
            if isinstance(resp, str):
                it.response = resp
            if not labels:
                it.error = f"prediction {key!r} has no label"
            elif "sllm_response" not in entry:
                it.error = f"prediction {key!r} has no sllm_response"
            elif not isinstance(resp, str):
                it.error = f"prediction {key!r}: sllm_response is {type(resp).__name__}, not text"
        items.append(it)
    return items, hashlib.sha256(data).hexdigest()


# --------------------------------------------------------------------------- per row


def score_item(item: Item, judge: Any = None, *, judge_prompts: Sequence[str] = JUDGE_PROMPTS) -> SampleResult:
    """One item's per-row values by its metric's project definition
    (:data:`spear_metrics.dynamic_superb.metrics.PROJECT_METRICS`).

    Values written (beside the item's own fields): judge, the project's prompt: ``judge_reply``,
    ``judge_verdict`` (``yes``/``no``/null), ``judge_unparsed``, ``judge_accuracy`` (1/0),
    ``judge_attempts``, ``judge_returned_model``, ``judge_system_fingerprint`` (what the service
    answered with), ``judge_cached`` (the reply came from the reply cache); upstream's prompt
    (published key, :func:`upstream_classification`): ``llm_classification_reply``,
    ``llm_classification_verdict``, ``llm_classification`` (1.0/0.0), ``llm_classification_attempts``
    (``judge_prompts`` says which of ``project``/``upstream`` are asked);
    error rates: ``<KEY>_edits``, ``<KEY>_ref_tokens``, ``<KEY>`` (the row's own rate, null for an
    empty reference); upstream's ``word_error_rate``, ``phoneme_error_rate``, ``pos_estimation``
    (published keys, :func:`spear_metrics.dynamic_superb.metrics.upstream_row_rate`): ``<fn>`` (the
    row's ``max(0, 1 - rate)``), ``<fn>_rate``, ``<fn>_edits``, ``<fn>_ref_tokens`` (or
    ``<fn>_error``); BLEU: ``BLEU_stats`` (sacrebleu's 10 sufficient statistics); Pearson:
    ``pearson_label``, ``pearson_prediction`` (null: no number in the response, N/A).

    Every metric but the judge's reads the first label (``label``) as the reference. A judge
    that gives no reply after its retries fails the row with the reason.

    Raises:
        spear_metrics.core.models.ModelUnavailableError: a local judge model that cannot be loaded
            (a whole-run problem).
    """
    from spear_metrics.core.judge import JudgeError

    res = item.result()
    if item.error:
        return res.fail(item.error)
    spec = PROJECT_METRICS.get(item.metric)
    v = res.values
    resp = item.response or ""
    if item.metric in UPSTREAM_ROW_RATES:  # the published key, by upstream's public per-row rule
        if item.label_is_text:
            ref = item.upstream_label if item.upstream_label is not None else item.labels[0]
            v.update(upstream_row_rate(item.metric, resp, ref))
        else:  # the port's normalisation calls str.translate on the label: no value
            v.update({item.metric: None, f"{item.metric}_error": f"label is not text: upstream's {item.metric} "
                                                                 "normalises text"})
    if spec is None:
        return res if item.metric in UPSTREAM_ROW_RATES else res.fail(NO_PROJECT_DEFINITION.format(fn=item.metric))
    if spec.kind == "judge":
        if judge is None:
            return res.fail(NO_JUDGE)
        if "project" in judge_prompts:
            try:
                ans = judge.ask(judge_messages(item.instruction, item.labels, resp), parse_verdict,
                                extra_body={"max_tokens": JUDGE_MAX_TOKENS})
            except JudgeError as e:
                v["judge_attempts"] = len(getattr(e, "attempts", []) or [])
                return res.fail(f"judge: {mask_secrets(one_line(e))}")
            v.update(judge_reply=ans.reply, judge_verdict=ans.value, judge_unparsed=ans.value is None,
                     judge_accuracy=verdict_value(ans.value), judge_attempts=len(ans.attempts))
            meta = getattr(ans, "meta", None)
            if meta is not None:  # what the service answered with (Judge.report sums them per run)
                v.update(judge_returned_model=meta.model, judge_system_fingerprint=meta.system_fingerprint,
                         judge_cached=meta.cached)
        if "upstream" in judge_prompts and upstream_decoding_ok(judge):
            try:
                v.update(upstream_classification(item, judge))
            except JudgeError as e:
                v["llm_classification_attempts"] = len(getattr(e, "attempts", []) or [])
                return res.fail(f"judge (upstream's prompt): {mask_secrets(one_line(e))}")
    elif spec.kind == "error_rate":
        edits, n = edit_counts(tokens(item.labels[0], spec.tokens), tokens(resp, spec.tokens))
        v.update({f"{spec.key}_edits": edits, f"{spec.key}_ref_tokens": n, spec.key: (edits / n) if n else None})
    elif spec.kind == "bleu":
        v["BLEU_stats"] = bleu_stats(resp, item.labels[0])
    elif spec.kind == "pearson":
        if not _is_number_text(item.labels[0]):
            return res.fail(f"label {item.labels[0]!r} is not a number")
        v.update(pearson_label=float(item.labels[0]), pearson_prediction=first_number(resp))
    return res


def upstream_decoding_ok(judge: Any) -> bool:
    """Whether ``judge`` decodes as upstream's ``llm_classification`` does (temperature 0 / greedy)."""
    t = getattr(judge, "temperature", None)
    return t is not None and float(t) == 0.0


def upstream_classification(item: Item, judge: Any) -> dict[str, Any]:
    """One row of upstream's ``llm_classification`` (Dynamic-SUPERB Phase-2 evaluation code, see
    :mod:`spear_metrics.dynamic_superb.metrics`): the row's instruction, ``label`` (first label
    only) and response in :data:`~spear_metrics.dynamic_superb.metrics.UPSTREAM_CLASSIFICATION_PROMPT`,
    one user message, ``max_tokens=512`` (the judge's temperature must be 0:
    :func:`upstream_decoding_ok`), verdict ``result:\\s*(yes|no)`` on the lower-cased stripped reply,
    1.0 for yes, else 0.0.

    Returns:
        ``{"llm_classification_reply", "llm_classification_verdict", "llm_classification",
        "llm_classification_attempts"}``, and from a remote judge ``llm_classification_returned_model``,
        ``llm_classification_system_fingerprint``, ``llm_classification_cached``.

    Raises:
        spear_metrics.core.judge.JudgeError: the judge gave no reply after its retries.
    """
    label = item.upstream_label if item.upstream_label is not None else item.labels[0]
    msgs = upstream_classification_messages(item.instruction, label, item.response or "")
    ans = judge.ask(msgs, upstream_classification_verdict,
                    extra_body={"max_tokens": UPSTREAM_CLASSIFICATION_DECODING["max_tokens"]})
    out = {"llm_classification_reply": ans.reply, "llm_classification_verdict": ans.value,
           "llm_classification": upstream_classification_value(ans.value),
           "llm_classification_attempts": len(ans.attempts)}
    meta = getattr(ans, "meta", None)
    if meta is not None:  # what the service answered with, as for the project's prompt
        out.update(llm_classification_returned_model=meta.model,
                   llm_classification_system_fingerprint=meta.system_fingerprint,
                   llm_classification_cached=meta.cached)
    return out


def _is_number_text(text: str) -> bool:
    try:
        return math.isfinite(float(str(text).strip()))
    except ValueError:
        return False


# --------------------------------------------------------------------------- per task


def aggregate_task(metric: str, rows: Sequence[dict[str, Any]], n_rows: int, *, n_resamples: int = 1000,
                   seed: int = 0) -> dict[str, Any]:
    """A task's summary from its per-sample rows (``per_sample.jsonl`` objects, ok and failed).

    Returns ``{"metric", <published key>: None, "<published key>_note", <project key>,
    "<key>_ci95", "<key>_n", "na_rate", "n_rows", "n_scored", "n_failed"}``: the project value
    (judge: mean of the 0/1 rows; error rates: sum of edits / sum of reference tokens; BLEU:
    corpus BLEU of the summed statistics; Pearson: r over rows with a number), its percentile
    bootstrap interval over rows (``spear_metrics.core.stats``; a corpus value is recomputed on
    each resample) and its number of rows; ``na_rate`` = rows without a value (failed rows, judge
    replies without a verdict, responses without a number) / ``n_rows``. A metric without a
    project definition gives ``value_note`` instead. The published key of ``llm_classification``
    and of :data:`~spear_metrics.dynamic_superb.metrics.UPSTREAM_ROW_RATES` is the mean of the
    rows' upstream values (``<fn>``, ``<fn>_ci95``, ``<fn>_n``); for a task without a project key
    (``pos_estimation``) ``na_rate`` counts the rows without that value.
    """
    import numpy as np

    from spear_metrics.core.stats import aggregate_intervals, bootstrap_ci

    ok = [r for r in rows if r.get("status") == "ok"]
    n_failed = len(rows) - len(ok)
    spec, note = metric_plan(metric)
    out: dict[str, Any] = {"metric": metric, metric: None, f"{metric}_note": note, "n_rows": int(n_rows),
                           "n_scored": len(ok), "n_failed": n_failed}
    n_na = n_failed + (n_rows - len(rows))
    if metric in UPSTREAM_ROW_RATES:  # the published key: upstream's row values, their mean (the one assumption)
        up = [float(r[metric]) for r in ok if r.get(metric) is not None]
        out.update({metric: float(np.mean(up)) if up else None, f"{metric}_n": len(up),
                    f"{metric}_ci95": bootstrap_ci(up, n_resamples=n_resamples, seed=seed) if up else None})
        if not up:
            out[f"{metric}_note"] = "no row gives a value; " + note
    if spec is None:
        out["value_note"] = NO_PROJECT_DEFINITION.format(fn=metric)
        out["na_rate"] = None
        if metric in UPSTREAM_ROW_RATES:  # rows without the published key's value
            out["value_note"] = (f"no project key: SPEARBench has no definition of its own for {metric}; the published "
                                 f"key {metric} is upstream's public per-row rule")
            out["na_rate"] = (n_na + sum(1 for r in ok if r.get(metric) is None)) / n_rows if n_rows else None
        return out
    key = spec.key
    value: Optional[float] = None
    ci = None
    n_used = 0
    if spec.kind == "judge":
        up = [float(r["llm_classification"]) for r in ok if r.get("llm_classification") is not None]
        out.update({metric: float(np.mean(up)) if up else None, f"{metric}_n": len(up),
                    f"{metric}_ci95": bootstrap_ci(up, n_resamples=n_resamples, seed=seed) if up else None})
        if not up:
            out[f"{metric}_note"] = ("no row was judged with upstream's prompt (no judge, a judge temperature other "
                                     "than upstream's 0, or --judge-prompts without upstream); " + note)
        vals = [r.get("judge_accuracy") for r in ok if r.get("judge_accuracy") is not None]
        n_na += sum(1 for r in ok if r.get("judge_unparsed"))
        n_used = len(vals)
        value = float(np.mean(vals)) if vals else None
        ci = bootstrap_ci(vals, n_resamples=n_resamples, seed=seed) if vals else None
    elif spec.kind == "error_rate":
        e = np.asarray([r.get(f"{key}_edits") or 0 for r in ok], dtype=np.float64)
        n = np.asarray([r.get(f"{key}_ref_tokens") or 0 for r in ok], dtype=np.float64)
        n_used = len(ok)
        value = corpus_rate(e, n)
        ci = aggregate_intervals(lambda idx: {key: corpus_rate(e[idx], n[idx])}, len(ok), [key],
                                 n_resamples=n_resamples, seed=seed)[key] if len(ok) else None
    elif spec.kind == "bleu":
        stats = np.asarray([r["BLEU_stats"] for r in ok], dtype=np.float64).reshape(len(ok), 10)
        n_used = len(ok)
        value = bleu_from_stats(stats)
        ci = aggregate_intervals(lambda idx: {key: bleu_from_stats(stats[idx])}, len(ok), [key],
                                 n_resamples=n_resamples, seed=seed)[key] if len(ok) else None
    elif spec.kind == "pearson":
        pairs = [(r["pearson_label"], r["pearson_prediction"]) for r in ok if r.get("pearson_prediction") is not None]
        n_na += len(ok) - len(pairs)
        n_used = len(pairs)
        lab = np.asarray([p[0] for p in pairs], dtype=np.float64)
        pred = np.asarray([p[1] for p in pairs], dtype=np.float64)
        value = pearson(lab, pred)
        ci = aggregate_intervals(lambda idx: {key: pearson(lab[idx], pred[idx])}, len(pairs), [key],
                                 n_resamples=n_resamples, seed=seed)[key] if len(pairs) else None
    out.update({key: value, f"{key}_ci95": ci, f"{key}_n": n_used,
                "na_rate": (n_na / n_rows) if n_rows else None})
    if value is None:
        out[f"{key}_note"] = "no row gives a value" if n_used == 0 else "the value does not exist on these rows"
    return out


def group_means(tasks: dict[str, dict[str, Any]], categories: dict[str, str]) -> tuple[dict[str, Any], dict[str, Any]]:
    """``(per category, overall)``: for each project key, the mean of the tasks' values (tasks
    without a value left out), how many tasks it averages and ``ci95``, its percentile bootstrap
    interval over the instances (tasks resampled; ``None`` below 2 tasks;
    :func:`spear_metrics.core.stats.bootstrap_ci`, seed 0). Keys are never mixed: a WER and an
    accuracy are not averaged together."""
    from spear_metrics.dynamic_superb.metrics import PROJECT_METRICS as PM

    keys = [s.key for s in PM.values()]
    by_cat: dict[str, dict[str, list[float]]] = {}
    overall: dict[str, list[float]] = {}
    for inst, t in sorted(tasks.items()):
        for k in keys:
            v = t.get(k)
            if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v):
                by_cat.setdefault(categories.get(inst, "task-specific"), {}).setdefault(k, []).append(float(v))
                overall.setdefault(k, []).append(float(v))

    def means(d: dict[str, list[float]]) -> dict[str, Any]:
        from spear_metrics.core.stats import bootstrap_ci

        return {k: {"mean": sum(vs) / len(vs), "n_tasks": len(vs), "ci95": bootstrap_ci(vs)} for k, vs in d.items()}

    return {c: means(d) for c, d in sorted(by_cat.items())}, means(overall)


# --------------------------------------------------------------------------- submission


def submission(tasks: dict[str, dict[str, Any]], revisions: dict[str, Optional[str]], seen: Sequence[str] = ()) -> list[dict[str, Any]]:
    """Upstream's score-submission list (``docs/score_submission.md`` of dynamic-superb):
    ``[{"name": <instance>, "scores": [{"metric", "value", "version", "seen"}]}]`` for every task
    with a project value. ``metric`` is the project key (e.g. ``judge_accuracy``, ``WER``: the
    project's definitions, never upstream's names), ``version`` the instance's Hub revision
    (``null`` when not pinned), ``seen`` whether the task is in ``seen``."""
    out = []
    seen_set = set(seen)
    for inst, t in sorted(tasks.items()):
        spec = PROJECT_METRICS.get(t.get("metric", ""))
        if spec is None or t.get(spec.key) is None:
            continue
        out.append({"name": inst, "scores": [{"metric": spec.key, "value": t[spec.key],
                                              "version": revisions.get(inst) or None, "seen": inst in seen_set}]})
    return out


def read_submission(path: str | os.PathLike) -> list[dict[str, Any]]:
    """A score-submission file in upstream's format, checked.

    Raises:
        DSuperbScoreError: not a list of ``{"name", "scores": [{"metric", "value", "version", "seen"}]}``.
    """
    from spear_datasets.files import read_json

    p = Path(path)
    try:
        obj = read_json(p, MAX_PREDICTION_BYTES)
    except (OSError, ValueError) as e:
        raise DSuperbScoreError(f"{p}: not readable JSON: {one_line(e)}") from None
    if not isinstance(obj, list):
        raise DSuperbScoreError(f"{p}: a submission is a JSON list of instances")
    for i, e in enumerate(obj):
        if not isinstance(e, dict) or not isinstance(e.get("name"), str) or not isinstance(e.get("scores"), list):
            raise DSuperbScoreError(f"{p}: entry {i} is not {{\"name\": str, \"scores\": [...]}}")
        for s in e["scores"]:
            if not isinstance(s, dict) or not isinstance(s.get("metric"), str) or "value" not in s \
                    or "version" not in s or not isinstance(s.get("seen"), bool):
                raise DSuperbScoreError(f"{p}: entry {e['name']}: a score needs metric (str), value, version and seen (bool)")
            if not (isinstance(s["value"], (int, float)) and not isinstance(s["value"], bool)):
                raise DSuperbScoreError(f"{p}: entry {e['name']}: value {s['value']!r} is not a number")
    return obj


# --------------------------------------------------------------------------- the run


def judge_info(judge: Any, *, concurrency: int) -> dict[str, Any]:
    """What summary.json records of the judge: model, kind, settings, prompt version and sha256
    (never a key)."""
    upstream = {"upstream_prompt": "INSTRUCTION_REFINE_COT_SINGLE_AND_MULTI_CHOICE",
                "upstream_prompt_sha256": upstream_classification_prompt_sha256()}
    if judge is None:
        return {"model": None, "prompt_version": JUDGE_PROMPT_VERSION, "prompt_sha256": judge_prompt_sha256(), **upstream}
    from spear_metrics.core.judge import LocalJudge

    info: dict[str, Any] = {"model": judge.model, "kind": "local" if isinstance(judge, LocalJudge) else "openai-compatible",
                            "temperature": getattr(judge, "temperature", None), "max_tokens": JUDGE_MAX_TOKENS,
                            "prompt_version": JUDGE_PROMPT_VERSION, "prompt_sha256": judge_prompt_sha256(),
                            **upstream, "upstream_decoding_ok": upstream_decoding_ok(judge),
                            "concurrency": int(concurrency)}
    if isinstance(judge, LocalJudge):
        info.update(decoding="greedy", max_new_tokens=judge.max_new_tokens)
    else:
        info.update(base_url=judge.base_url, seed=judge.seed, timeout_s=judge.timeout, max_retries=judge.max_retries)
    return info


def find_predictions(pred_dir: str | os.PathLike, tasks: Optional[Sequence[str]] = None) -> dict[str, Path]:
    """``{instance: PRED/<instance>.json}`` (every ``*.json`` of ``PRED/``, or those of ``tasks``).

    Raises:
        DSuperbScoreError: ``PRED/`` is not a folder, holds no prediction file, or lacks one of ``tasks``.
    """
    d = Path(pred_dir)
    if not d.is_dir():
        raise DSuperbScoreError(f"--pred {d} is not a folder")
    found = {p.stem: p for p in sorted(d.glob("*.json")) if p.is_file()}
    if tasks:
        missing = [t for t in tasks if t not in found]
        if missing:
            raise DSuperbScoreError(f"no prediction file {', '.join(f'{t}.json' for t in missing)} in {d}")
        found = {t: found[t] for t in tasks}
    if not found:
        raise DSuperbScoreError(f"no prediction file (<instance>.json) in {d}")
    return found


def score_predictions(pred_dir: str | os.PathLike, out_dir: str | os.PathLike, *, judge: Any = None,
                      manifest: Optional[str | os.PathLike] = None, tasks: Optional[Sequence[str]] = None,
                      judge_concurrency: int = 1, n_resamples: int = 1000, seed: int = 0,
                      seen: Sequence[str] = (), retry_failed: bool = False, overwrite: bool = False,
                      judge_prompts: Sequence[str] = JUDGE_PROMPTS,
                      progress: bool = True, state: Any = None, prices: Any = None) -> dict[str, Any]:
    """Score ``PRED/`` into ``RESULTS/`` (see the module docstring).

    Args:
        judge: a :class:`spear_metrics.core.judge.Judge` or :class:`~spear_metrics.core.judge.LocalJudge`
            (``None``: judged tasks are ``unsupported: no judge``... their rows fail with that reason).
        manifest: a CSV adding or overriding manifest rows (an instance's metric and revision).
        tasks: instances to score (default every ``*.json`` of ``PRED/``).
        judge_concurrency: judge calls at once (threads).
        n_resamples, seed: bootstrap of the ``*_ci95`` intervals.
        seen: instances the model was trained on (``seen`` of the submission file).
        prices: a :class:`spear_metrics.core.usage.PriceTable` for the cost of the judge calls.
        judge_prompts: which prompts judged rows are asked with (:data:`JUDGE_PROMPTS`: ``upstream``
            for the published key ``llm_classification``, ``project`` for ``judge_accuracy``).

    The judge is a stage of its own: a folder scored without a judge (its judged rows failed
    "no judge given") is resumed with one, and only those rows are judged; the judge of the
    folder is recorded in ``.work/judge.json``, and another judge is refused (``conflict``)
    unless ``overwrite``. Every judge result is logged as it finishes.

    Returns:
        the summary dict (also written).

    Raises:
        DSuperbScoreError: no predictions, a prediction file that is not a JSON object, other
            results in ``out_dir`` (without ``overwrite``), a row without a result.
        ManifestError: an unusable ``--manifest``.
        spear_metrics.core.models.ModelUnavailableError: a local judge that cannot be loaded.
        spear_datasets.ownership.OutFolderError: ``out_dir`` holds files this tool did not write,
            another command's output (``PRED/`` itself), or is being scored by another live
            process (one line; see :func:`spear_metrics.core.records.claim_out`).
    """
    from concurrent.futures import ThreadPoolExecutor

    from spear_metrics.core.runner import RunError, run_distributed_state, run_resumable
    from spear_metrics.dynamic_superb.infer import read_failures, read_instance_info
    from spear_metrics.dynamic_superb.tasks import load_manifest

    if judge_concurrency < 1:
        raise DSuperbScoreError(f"--judge-concurrency must be >= 1, got {judge_concurrency}")
    judge_prompts = _check_prompts(judge_prompts)
    out = Path(out_dir)
    check_out_folder(out)  # the rule first (cheap): a folder that cannot be used costs no reading
    specs = load_manifest(manifest)
    files = find_predictions(pred_dir, tasks)
    items: list[Item] = []
    failed: dict[int, SampleResult] = {}
    task_rows: dict[str, list[int]] = {}
    unknown: dict[str, tuple[str, int]] = {}
    fp_files: dict[str, str] = {}
    revisions: dict[str, Optional[str]] = {}
    rev_source: dict[str, str] = {}
    categories: dict[str, str] = {}
    n_rows_of: dict[str, int] = {}
    for inst, path in files.items():
        spec: Optional[TaskSpec] = specs.get(inst)
        info = read_instance_info(pred_dir, inst)
        if spec is None:  # its rows are read (and counted) all the same; none gets a value
            note = ("unsupported: instance not in the manifest, so its metric is unknown; give it with --manifest CSV "
                    "(columns instance,metric)")
            its, _ = read_predictions(path, inst, "", start=0)
            unknown[inst] = (note, len(its))
            continue
        categories[inst] = spec.category
        # the revision the answers were made from: what dsuperb infer loaded (None for local data);
        # for files it did not write, the manifest's pin (the caller vouches for it)
        if info:
            revisions[inst], rev_source[inst] = info.get("revision") or None, "infer"
        else:
            revisions[inst], rev_source[inst] = spec.revision or None, "manifest"
        metric = spec.metric
        its, sha = read_predictions(path, inst, metric, start=len(items) + len(failed))
        fails = read_failures(pred_dir, inst) or []
        start = len(items) + len(failed)
        for k, f in enumerate(fails):  # rows infer could not answer: failed rows of this run too
            its.append(Item(row=0, instance=inst, metric=metric, file=str(f["file"]),
                            error=f"infer failed: {f.get('error') or 'no answer'}"))
        for k, it in enumerate(its):
            it.row = start + k
        fp_files[inst] = hashlib.sha256((sha + json.dumps(fails, sort_keys=True)).encode()).hexdigest()
        n_rows_of[inst] = len(its)
        task_rows[inst] = [it.row for it in its]
        for it in its:
            if it.error or (metric not in PROJECT_METRICS and metric not in UPSTREAM_ROW_RATES):
                failed[it.row] = score_item(it, None)
            else:  # a judged row without a judge fails NO_JUDGE when scored, and is judged once one is given
                items.append(it)
    n_total = len(items) + len(failed)
    jinfo = judge_info(judge, concurrency=judge_concurrency)
    jinfo["prompts"] = list(judge_prompts)
    # what the judged values depend on (not where the server runs, nor its time limits): the judge
    # stage's identity, kept beside the run record (a judge may join a folder scored without one)
    judge_id = {k: v for k, v in jinfo.items() if k not in ("concurrency", "base_url", "timeout_s", "max_retries")}
    fingerprint = {"benchmark": BENCHMARK, "metrics_version": METRICS_VERSION, "predictions": fp_files,
                   "metrics": {i: specs[i].metric for i in fp_files}}

    def score_batch(batch: list[Item]) -> list[SampleResult]:
        judged = [it for it in batch if getattr(PROJECT_METRICS.get(it.metric), "kind", None) == "judge"]
        rest = [it for it in batch if getattr(PROJECT_METRICS.get(it.metric), "kind", None) != "judge"]
        res = {it.row: score_item(it) for it in rest}
        if judged:
            if judge_concurrency > 1 and len(judged) > 1:
                with ThreadPoolExecutor(min(judge_concurrency, len(judged)), thread_name_prefix="spear-judge") as pool:
                    for it, r in zip(judged, pool.map(lambda x: score_item(x, judge, judge_prompts=judge_prompts),
                                                      judged)):
                        res[it.row] = r
            else:
                for it in judged:
                    res[it.row] = score_item(it, judge, judge_prompts=judge_prompts)
        return [res[it.row] for it in batch]

    try:
        state = state if state is not None else run_distributed_state()
    except RunError as e:
        raise DSuperbScoreError(str(e)) from None
    conflict = DSuperbScoreError(f"{out} holds results of another run (other predictions, manifest rows or judge); "
                                 "use another --out folder or --overwrite")
    # RESULTS/: new, empty or this command's; --overwrite removes what earlier runs recorded, nothing else
    with claim_out(out, fingerprint, overwrite=overwrite, conflict=conflict, command=COMMAND, state=state,
                   activity="scored", adopt=SCORE_OUTPUTS):
        stage = out / WORK / JUDGE_STAGE
        before = _read_stage(stage)
        if judge is not None and before is not None and before != judge_id:
            raise conflict
        if judge is not None and before is None and state.is_main_process:
            write_json_atomic(stage, judge_id)  # before the first call: a killed stage resumes with this judge
        elif judge is None and before is not None:  # resumed without the judge: its rows keep their values
            jinfo = {**before, "note": "the judge of the judged rows (this run was given none)"}

        def trusted(rec: SampleResult) -> bool:  # the judge stage: rows left unjudged are judged now
            return judge is None or rec.ok or rec.error != NO_JUDGE

        t0 = time.perf_counter()
        try:
            # each result logged as it finishes (a kill loses only the calls in flight)
            outcome = run_resumable(
                items, score_batch, out / WORK, n_rows=n_total, failed=failed, retry_failed=retry_failed,
                batch_size=1, concurrency=judge_concurrency, progress_desc="dsuperb score" if progress else None,
                state=state, trusted=trusted)
        except RunError as e:
            raise DSuperbScoreError(str(e)) from None
        if outcome is None:
            return {}
        if hasattr(judge, "report"):
            jinfo = {**jinfo, "calls": judge.report(prices)}
        return _write_results(out, outcome, task_rows=task_rows, unknown=unknown, specs=specs, categories=categories,
                              revisions=revisions, rev_source=rev_source, n_rows_of=n_rows_of, jinfo=jinfo,
                              n_resamples=n_resamples, seed=seed, seen=seen, judge_concurrency=judge_concurrency,
                              elapsed_s=time.perf_counter() - t0)


def _write_results(out: Path, outcome: Any, *, task_rows: dict[str, list[int]], unknown: dict[str, tuple[str, int]],
                   specs: dict[str, TaskSpec], categories: dict[str, str], revisions: dict[str, Optional[str]],
                   rev_source: dict[str, str], n_rows_of: dict[str, int], jinfo: dict[str, Any], n_resamples: int,
                   seed: int, seen: Sequence[str], judge_concurrency: int, elapsed_s: float) -> dict[str, Any]:
    """The outputs of :func:`score_predictions` in its claimed folder (module docstring); returns the summary."""
    from spear_metrics.core.summary import spearbench_version

    rows = [r.to_json() for r in outcome.results]
    write_jsonl_atomic(out / "per_sample.jsonl", rows)
    by_task: dict[str, list[dict[str, Any]]] = {inst: [] for inst in task_rows}
    for r in rows:
        by_task.setdefault(r.get("instance"), []).append(r)
    summary_tasks: dict[str, dict[str, Any]] = {}
    for inst in sorted(task_rows):
        t = aggregate_task(specs[inst].metric, by_task.get(inst, []), n_rows_of[inst], n_resamples=n_resamples, seed=seed)
        t.update(category=categories[inst], hub_path=specs[inst].hub_path, revision=revisions.get(inst),
                 revision_source=rev_source.get(inst) if revisions.get(inst) else None)
        summary_tasks[inst] = t
    for inst, (note, n_unknown) in unknown.items():
        summary_tasks[inst] = {"metric": None, "value_note": note, "n_rows": n_unknown, "n_scored": 0, "n_failed": 0,
                               "na_rate": None, "category": None, "hub_path": None, "revision": None}
    cat_means, overall = group_means({k: v for k, v in summary_tasks.items() if k in categories}, categories)
    n_failed = sum(1 for r in rows if r.get("status") != "ok")
    summary: dict[str, Any] = {
        "benchmark": BENCHMARK, "protocol": PROTOCOL, "metrics_version": METRICS_VERSION,
        "n_samples": len(rows), "n_scored": len(rows) - n_failed, "n_failed": n_failed,
        "n_tasks": len(summary_tasks), "tasks": summary_tasks, "categories": cat_means, "overall": overall,
        "judge": {k: v for k, v in jinfo.items() if k != "calls"}, "judge_calls": jinfo.get("calls"),
        "judge_replies": judge_replies(rows), "bootstrap": {"n_resamples": int(n_resamples), "seed": int(seed), "method": "percentile",
                                      "confidence": 0.95, "unit": "rows of a task"},
        "na_rule": ("project rule (upstream's is not in public code): rows without a value (failed rows, judge replies "
                    "without a verdict, responses without a number) / rows of the task"),
        "spearbench_version": spearbench_version(),
    }
    write_json_atomic(out / "summary.json", summary)
    write_tasks_csv(out / "tasks.csv", summary_tasks)
    write_json_atomic_list(out / "submission.json", submission(summary_tasks, revisions, seen))
    write_json_atomic(out / "run_info.json", {"elapsed_s": elapsed_s, "n_new": len(outcome.new),
                                              "n_resumed": outcome.n_resumed, "judge_concurrency": judge_concurrency,
                                              "judge_usage": (jinfo.get("calls") or {}).get("usage")})
    return summary


def judge_replies(rows: Sequence[dict[str, Any]], prefix: str = "judge") -> dict[str, Any]:
    """What the judge service answered with over every judged row of the folder (this run's and
    the resumed ones; ``judge_calls`` covers this invocation's calls only): ``n_judged``,
    ``from_cache``, ``returned_models`` and ``system_fingerprints`` (value -> rows), for the
    project's prompt (``prefix="judge"``), and the same for upstream's prompt under
    ``llm_classification`` when a row was asked it (``prefix="llm_classification"``)."""
    out: dict[str, Any] = {"n_judged": 0, "from_cache": 0, "returned_models": {}, "system_fingerprints": {}}
    for r in rows:
        if r.get("status") != "ok" or f"{prefix}_reply" not in r:
            continue
        out["n_judged"] += 1
        out["from_cache"] += bool(r.get(f"{prefix}_cached"))
        for key, field in (("returned_models", f"{prefix}_returned_model"),
                           ("system_fingerprints", f"{prefix}_system_fingerprint")):
            v = r.get(field)
            if v:
                out[key][v] = out[key].get(v, 0) + 1
    if prefix == "judge" and any(r.get("status") == "ok" and "llm_classification_reply" in r for r in rows):
        out["llm_classification"] = judge_replies(rows, "llm_classification")
    return out


def _check_prompts(prompts: Sequence[str]) -> tuple[str, ...]:
    """``prompts`` checked against :data:`JUDGE_PROMPTS` (at least one).

    Raises:
        DSuperbScoreError: empty, or a name not in :data:`JUDGE_PROMPTS`."""
    out = tuple(dict.fromkeys(str(p).strip() for p in prompts if str(p).strip()))
    bad = [p for p in out if p not in JUDGE_PROMPTS]
    if not out or bad:
        raise DSuperbScoreError(f"--judge-prompts takes one or more of {', '.join(JUDGE_PROMPTS)}, got {list(prompts)}")
    return out


def write_json_atomic_list(path: Path, obj: list[Any]) -> Path:
    """A JSON list written atomically (``indent=4``, as upstream's submission example)."""
    from spear_datasets.files import atomic_path
    from spear_metrics.core.records import clean_value

    text = json.dumps(clean_value(obj), indent=4, ensure_ascii=False, allow_nan=False) + "\n"
    with atomic_path(path) as tmp:
        tmp.write_text(text, encoding="utf-8")
    return path


TASK_COLUMNS = ("instance", "category", "metric", "key", "value", "ci95_lo", "ci95_hi", "n", "na_rate", "n_rows",
                "n_failed", "note")


def task_line(inst: str, t: dict[str, Any]) -> dict[str, Any]:
    """One ``tasks.csv`` line of a task summary."""
    spec = PROJECT_METRICS.get(t.get("metric") or "")
    key = spec.key if spec else None
    ci = t.get(f"{key}_ci95") if key else None
    note = t.get("value_note") or (t.get(f"{key}_note") if key else None) or ""
    return {"instance": inst, "category": t.get("category"), "metric": t.get("metric"), "key": key,
            "value": t.get(key) if key else None, "ci95_lo": ci[0] if ci else None, "ci95_hi": ci[1] if ci else None,
            "n": t.get(f"{key}_n") if key else None, "na_rate": t.get("na_rate"), "n_rows": t.get("n_rows"),
            "n_failed": t.get("n_failed"), "note": note}


def write_tasks_csv(path: Path, tasks: dict[str, dict[str, Any]]) -> Path:
    """``tasks.csv``: :func:`task_line` per task (empty cell = no value)."""
    import csv
    import io

    from spear_datasets.files import atomic_path

    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=TASK_COLUMNS, lineterminator="\n")
    w.writeheader()
    for inst, t in sorted(tasks.items()):
        line = task_line(inst, t)
        w.writerow({k: ("" if v is None else (f"{v:.6g}" if isinstance(v, float) else v)) for k, v in line.items()})
    with atomic_path(path) as tmp:
        tmp.write_text(buf.getvalue(), encoding="utf-8")
    return path


def score_texts(predictions: Sequence[str], references: Sequence[str], instructions: Sequence[str], *,
                task: Optional[str] = None, metric: Optional[str] = None,
                extra_references: Optional[Sequence[Sequence[str]]] = None, judge: Any = None,
                judge_concurrency: int = 1, n_resamples: int = 1000, seed: int = 0,
                judge_prompts: Sequence[str] = JUDGE_PROMPTS) -> dict[str, Any]:
    """One task's rows scored in memory (the ``evaluate`` module): :func:`score_item` per row
    (judge calls on ``judge_concurrency`` threads), then :func:`aggregate_task`.

    Args:
        task: an instance of the manifest (its metric is used), or ``metric``: an upstream metric
            function name.
        extra_references: per row, further labels (``label2``...).

    Returns:
        the task summary plus ``per_sample`` (the rows' dicts).

    Raises:
        ValueError: lengths differ, neither or both of ``task``/``metric``, an unknown task.
    """
    from concurrent.futures import ThreadPoolExecutor

    from spear_metrics.dynamic_superb.tasks import load_manifest

    n = len(predictions)
    if len(references) != n or len(instructions) != n or (extra_references is not None and len(extra_references) != n):
        raise ValueError("predictions, references, instructions (and extra_references) need one entry per row")
    if (task is None) == (metric is None):
        raise ValueError("give task (an instance name) or metric (an upstream metric function), one of them")
    if task is not None:
        specs = load_manifest()
        if task not in specs:
            raise ValueError(f"unknown task {task!r}: not in the manifest (pass metric= instead)")
        metric = specs[task].metric
    items = []
    for i in range(n):
        labels = [str(references[i]).strip()] + [str(x).strip() for x in (extra_references[i] if extra_references else [])]
        labels = [x for x in labels if x]
        it = Item(row=i, instance=task or str(metric), metric=str(metric), file=str(i),
                  instruction=str(instructions[i] or ""), labels=tuple(labels),
                  response=None if predictions[i] is None else str(predictions[i]),
                  upstream_label=None if references[i] is None else "{}".format(references[i]),
                  label_is_text=references[i] is None or isinstance(references[i], str))
        if not labels:
            it.error = f"row {i} has no label"
        elif it.response is None:
            it.error = f"row {i} has no prediction"
        items.append(it)
    with ThreadPoolExecutor(max(1, min(int(judge_concurrency), n or 1)), thread_name_prefix="spear-judge") as pool:
        results = list(pool.map(lambda it: score_item(it, judge, judge_prompts=_check_prompts(judge_prompts)), items))
    rows = [r.to_json() for r in results]
    out = aggregate_task(str(metric), rows, n, n_resamples=n_resamples, seed=seed)
    out["per_sample"] = rows
    return out
