"""Agreement of two judges on the same items (``spearbench judge-agreement RUN_A RUN_B``).

Two results folders of the same items judged differently (two judges, or a judge and human labels
written in the same ``per_sample.jsonl`` format) are joined item by item on their identity, field
by field:

- categorical verdicts (Dynamic-SUPERB's ``judge_verdict`` YES/NO, behaviour tags, SPEAR's stance
  scores): percent agreement and Cohen's kappa (``sklearn.metrics.cohen_kappa_score``, unweighted:
  Cohen 1960, kappa = (p_o - p_e) / (1 - p_e) with p_e from the two judges' marginals);
- scores (SpeechRole's 1-10 ``<Aspect>_A``/``_B``, FDB's 0-5 ``relevance``): Spearman's rho
  (``scipy.stats.spearmanr``) and Pearson's r (``scipy.stats.pearsonr``), and the share of items
  scored exactly alike;

each with a percentile bootstrap 95 % interval over items
(:func:`spear_metrics.core.stats.aggregate_intervals`), and the items where the two differ.
Only items both runs judged (a non-null value on an ``ok`` row) are compared; the others are
counted.
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path
from typing import Any, Optional

from spear_datasets.files import read_limited

__all__ = ["AgreementError", "agreement", "categorical_stats", "judged_values", "score_stats"]

#: item identity columns, tried in this order (the first set a row has wins)
ID_COLUMNS = (("instance", "file"), ("mode", "role", "dialogue"), ("task", "id"), ("subset", "id"),
              ("conversation_id", "audio_path"))
#: the largest per_sample.jsonl read (bytes)
MAX_BYTES = 512 * 1024 * 1024


class AgreementError(ValueError):
    """Two runs that cannot be compared (one line)."""


def _is_score(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def _judged_fields(row: dict[str, Any]) -> dict[str, str]:
    """``{field: "categorical" | "score"}`` of the judge's outputs a row holds."""
    out: dict[str, str] = {}
    for k, v in row.items():
        if k == "judge_verdict":
            out[k] = "categorical"
        elif k == "relevance" or (k.endswith(("_A", "_B")) and k[:-2] and k[0].isupper()):
            out[k] = "score"
        elif k.startswith("stance_q") and k.endswith("_score"):
            out[k] = "categorical"
        elif k.startswith("judge_tag") or k == "behavior" or k == "behaviour":
            out[k] = "categorical"
    return out


def _label(v: Any) -> str:
    """A categorical value as one label: lower-cased text; a list of tags (FDB v1.5's ``behaviour``)
    as its sorted tags joined by ``+``."""
    if isinstance(v, (list, tuple)):
        return "+".join(sorted(str(x).strip().lower() for x in v))
    return str(v).strip().lower()


def _item_id(row: dict[str, Any], line: int) -> str:
    for cols in ID_COLUMNS:
        if all(row.get(c) is not None for c in cols):
            return "/".join(str(row[c]) for c in cols)
    return f"row {row.get('row', line)}"


def _is_label(v: Any) -> bool:
    """A usable categorical judgement: non-empty text, an int or a bool, or a non-empty list of
    non-empty tags (FDB v1.5's ``behaviour``); not NaN, inf, an empty text or list."""
    if isinstance(v, (list, tuple)):
        return bool(v) and all(isinstance(x, str) and x.strip() for x in v)
    if isinstance(v, str):
        return bool(v.strip())
    return isinstance(v, (int, bool)) or (isinstance(v, float) and math.isfinite(v))


def judged_values(folder: str | os.PathLike) -> tuple[dict[str, str], dict[str, dict[str, Any]]]:
    """``(kinds, values)`` of a results folder's ``per_sample.jsonl``: ``kinds`` = ``{field:
    "categorical" | "score"}``, ``values`` = ``{field: {item id: value}}`` of the ``ok`` rows whose
    value is not null (a categorical value as a string, lower-cased).

    Raises:
        AgreementError: no ``per_sample.jsonl``, a file too large or not JSON lines.
    """
    kinds, values, _, _ = _read_judged(folder)
    return kinds, values


def _read_judged(folder: str | os.PathLike) -> tuple[dict[str, str], dict[str, dict[str, Any]], dict[str, int],
                                                    dict[str, int]]:
    """:func:`judged_values`, ``{field: ok rows whose value is no judgement (NaN, inf, empty
    text...)}`` and ``{field: ok rows repeating an item already read}`` (the first row of an item
    is the one compared, as in ``compare``)."""
    p = Path(folder)
    f = p / "per_sample.jsonl" if p.is_dir() else p
    try:
        lines = read_limited(f, MAX_BYTES).decode("utf-8").splitlines()  # a device or a pipe refused, never read whole
    except (OSError, ValueError) as e:
        raise AgreementError(f"{f}: cannot be read ({' '.join(str(e).split())[:200]}); give a results folder "
                             "holding per_sample.jsonl") from None
    kinds: dict[str, str] = {}
    values: dict[str, dict[str, Any]] = {}
    unusable: dict[str, int] = {}
    repeated: dict[str, int] = {}
    for k, line in enumerate(lines):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except (ValueError, RecursionError):  # RecursionError: nested too deeply for the parser
            raise AgreementError(f"{f}: line {k + 1} is not JSON") from None
        if not isinstance(row, dict) or row.get("status", "ok") != "ok":
            continue
        iid = _item_id(row, k)
        for field, kind in _judged_fields(row).items():
            v = row.get(field)
            if v is None:
                continue
            if not (_is_score(v) if kind == "score" else _is_label(v)):  # NaN, inf, "", a list...: no judgement
                unusable[field] = unusable.get(field, 0) + 1
                continue
            kinds[field] = kind
            if iid in values.setdefault(field, {}):
                repeated[field] = repeated.get(field, 0) + 1
                continue
            values[field][iid] = _label(v) if kind == "categorical" else float(v)
    return kinds, values, unusable, repeated


def categorical_stats(a: list[Any], b: list[Any], *, n_resamples: int = 1000, seed: int = 0) -> dict[str, Any]:
    """Percent agreement and Cohen's kappa of paired labels ``a``, ``b`` (same length), each with
    a bootstrap interval over items. Kappa is ``None`` where it does not exist (both judges gave
    one and the same label to every item: p_e = 1), with ``cohen_kappa_note`` saying so."""
    import numpy as np
    from sklearn.metrics import cohen_kappa_score

    from spear_metrics.core.stats import aggregate_intervals

    A, B = np.asarray(a, dtype=object), np.asarray(b, dtype=object)

    def stats(idx):
        x, y = A[idx], B[idx]
        agree = float(np.mean(x == y)) * 100.0 if len(x) else None
        kappa = None
        if len(set(x.tolist()) | set(y.tolist())) > 1:
            with np.errstate(all="ignore"):
                k = float(cohen_kappa_score(x.tolist(), y.tolist()))
            kappa = k if math.isfinite(k) else None
        return {"agreement_%": agree, "cohen_kappa": kappa}

    point = stats(np.arange(len(A)))
    ci = aggregate_intervals(stats, len(A), list(point), n_resamples=n_resamples, seed=seed)
    out = {k: v for key, val in point.items() for k, v in ((key, val), (f"{key}_ci95", ci[key]))}
    labels = sorted({str(v) for v in (*a, *b)})
    if point["cohen_kappa"] is None and len(labels) == 1:
        out["cohen_kappa_note"] = (f"both judges gave every item the one label {labels[0]!r}: chance agreement is 1, "
                                   "so kappa does not exist")
    return out


def score_stats(a: list[float], b: list[float], *, n_resamples: int = 1000, seed: int = 0) -> dict[str, Any]:
    """Spearman's rho, Pearson's r and the exact-agreement share of paired scores, each with a
    bootstrap interval over items. A correlation of a constant side (or of fewer than 2 items) is
    ``None``, with ``<key>_note`` saying why."""
    import numpy as np
    from scipy.stats import pearsonr, spearmanr

    from spear_metrics.core.stats import aggregate_intervals

    A, B = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)

    def stats(idx):
        x, y = A[idx], B[idx]
        out: dict[str, Optional[float]] = {"exact_agreement_%": float(np.mean(x == y)) * 100.0 if len(x) else None,
                                           "spearman": None, "pearson": None}
        if len(x) >= 2 and np.ptp(x) > 0 and np.ptp(y) > 0:
            out["spearman"] = float(spearmanr(x, y).statistic)
            out["pearson"] = float(pearsonr(x, y).statistic)
        return out

    point = stats(np.arange(len(A)))
    ci = aggregate_intervals(stats, len(A), list(point), n_resamples=n_resamples, seed=seed)
    out = {k: v for key, val in point.items() for k, v in ((key, val), (f"{key}_ci95", ci[key]))}
    why = ("fewer than 2 items" if len(A) < 2 else
           "one judge gave every item the same score" if np.ptp(A) == 0 or np.ptp(B) == 0 else None)
    for key in ("spearman", "pearson"):
        if point[key] is None and why:
            out[f"{key}_note"] = f"{why}: a correlation does not exist"
    return out


def agreement(run_a: str | os.PathLike, run_b: str | os.PathLike, *, fields: Optional[list[str]] = None,
              n_resamples: int = 1000, seed: int = 0) -> dict[str, Any]:
    """The agreement of two runs (module docstring), field by field.

    Returns:
        ``{"run_a", "run_b", "fields": {field: {"kind", "n_items", "n_only_a", "n_only_b",
        "n_unusable_a", "n_unusable_b" (ok rows whose value is no judgement: NaN, inf, empty text),
        "n_repeated_a", "n_repeated_b" (ok rows of an item already read in that run: left out, the
        first kept),
        <statistics with _ci95>, "disagreements": [{"item", "a", "b"}]}}}``.

    Raises:
        AgreementError: a run that cannot be read, no judged field in common, a field asked for
            that one run lacks, no item judged in both runs.
    """
    ka, va, ua, ra = _read_judged(run_a)
    kb, vb, ub, rb = _read_judged(run_b)
    common = [f for f in ka if f in kb and ka[f] == kb[f]]
    if fields:
        missing = [f for f in fields if f not in common]
        if missing:
            raise AgreementError(f"field(s) {', '.join(missing)} not judged in both runs (in both: "
                                 f"{', '.join(common) or 'none'})")
        common = list(fields)
    if not common:
        raise AgreementError(f"no judged field in common (A: {', '.join(ka) or 'none'}; B: {', '.join(kb) or 'none'})")
    out: dict[str, Any] = {"run_a": str(run_a), "run_b": str(run_b), "bootstrap": {
        "n_resamples": int(n_resamples), "seed": int(seed), "method": "percentile", "confidence": 0.95,
        "unit": "items"}, "fields": {}}
    if not any(set(va[f]) & set(vb[f]) for f in common):
        raise AgreementError(f"no item judged in both runs ({', '.join(common)}: "
                             f"{sum(len(va[f]) for f in common)} item value(s) in A, "
                             f"{sum(len(vb[f]) for f in common)} in B, none on the same item)")
    for f in common:
        ids = sorted(set(va[f]) & set(vb[f]))
        a = [va[f][i] for i in ids]
        b = [vb[f][i] for i in ids]
        kind = ka[f]
        st = (categorical_stats if kind == "categorical" else score_stats)(a, b, n_resamples=n_resamples, seed=seed)
        out["fields"][f] = {"kind": kind, "n_items": len(ids), "n_only_a": len(set(va[f]) - set(vb[f])),
                            "n_only_b": len(set(vb[f]) - set(va[f])),
                            "n_unusable_a": ua.get(f, 0), "n_unusable_b": ub.get(f, 0),
                            "n_repeated_a": ra.get(f, 0), "n_repeated_b": rb.get(f, 0), **st,
                            "disagreements": [{"item": i, "a": x, "b": y} for i, x, y in zip(ids, a, b) if x != y]}
    return out
