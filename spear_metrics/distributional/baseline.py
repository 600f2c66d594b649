"""SPEAR's distributional baselines: fitted on a dev split, applied to a test split.

Source: upstream ``thomasthebaud/SPEAR-benchmark-code`` ``bin/distrib_baselines/`` (run by
``42_use_features_for_baseline.sh``):

- **Stage 1** (``compute_features_scores.py``): per split/subset table and per feature, a 1-D
  linear discriminant (``sklearn`` ``LinearDiscriminantAnalysis()``, defaults) fitted on the dev
  answers, human answer = 1, model answer = 0. On the test answers of the model:
  ``<feature>__naturalness_score`` = P(human | value) and ``average_naturalness_score`` = their
  mean over the features the answer has (``skipna``); per feature, the accuracy (``predict``)
  and AUROC (``roc_auc_score`` of P(human)) on the human and model test answers. A feature is
  skipped when either dev side has fewer than 2 values or all dev values are equal.
- **Stage 2** (``analyse_correlations.py``, threshold 0.8): the features with at least 5 values
  and 2 distinct values on each side are z-scored with the pooled dev mean and std (ddof 1), then
  clustered by average linkage on ``1 - |Spearman rho|`` of the pooled dev answers (pairwise
  complete, at least 3 pairs, missing = 0) cut at ``1 - 0.8``; each cluster is summarised by its
  first principal component on the dev answers (missing z-scores = 0, sign so that the loadings
  sum to >= 0) as ``corr_cluster_NNN_rho0p8``, and the clusters by one more component,
  ``general_explainable_feature_rho0p8``.

Deviation (said in the metric card and in the summary): upstream's stage 2 also asks the *test*
answers for 5 values and 2 distinct ones before a feature enters; the baseline here is fitted
before any test answer is seen, so the check is made on the dev answers only and, at scoring
time, a feature whose test answers fail it is named in ``distributional_note``.

The fitted baseline is a small JSON file (:data:`FORMAT`, :data:`FORMAT_VERSION`): the same dev
answers give the same bytes. ``sklearn``, ``scipy`` and ``pandas`` are imported by the functions
that need them, not by this module.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np

from spear_metrics.distributional.features import FEATURE_KEYS

FORMAT = "spearbench/distributional-baseline"
FORMAT_VERSION = 1
#: upstream's labels (``LABEL_ORIGINAL``, ``LABEL_MODEL``)
LABEL_HUMAN, LABEL_MODEL = 1, 0
#: ``config.sh`` ``ignored_explainable_features`` of the upstream run with the five evaluated systems
DEFAULT_IGNORED = ("f0_n_voiced_frames", "f0_total_duration_s", "f0_mean_raw")
#: stage 2: ``42_use_features_for_baseline.sh --thresholds 0.8`` and ``--min-valid`` default 5
THRESHOLD = 0.8
MIN_VALID = 5
#: Stage 1: a feature whose pooled within-side standard deviation is at most this fraction of its
#: largest absolute dev value is skipped (``constant_within_each_side``): its discriminant would
#: divide by rounding noise (float64 resolution is 2.2e-16; 1e-9 leaves a wide margin).
WITHIN_SPREAD_RTOL = 1e-9
#: the table of rows whose input path names no SPEAR subset folder
ALL_TABLE = "all"


class BaselineError(ValueError):
    """A baseline that cannot be fitted, read or used (one-line message)."""


def suffix(threshold: float) -> str:
    """``threshold_suffix``: ``0.8`` -> ``"0p8"``."""
    return str(threshold).replace(".", "p")


def general_key(threshold: float = THRESHOLD) -> str:
    """The per-answer key of the stage-2 general feature, ``general_explainable_feature_rho0p8``."""
    return f"general_explainable_feature_rho{suffix(threshold)}"


def table_of(audio_path: str | None) -> str:
    """The split/subset table a row belongs to: ``improvised``/``naturalistic`` when its input
    path names the subset folder (:func:`spear_datasets.schema.subset_of`), else :data:`ALL_TABLE`."""
    from spear_datasets.schema import subset_of

    return subset_of(audio_path) or ALL_TABLE


def finite(v: Any) -> float | None:
    """A per-answer value as a finite float: :func:`spear_metrics.core.stats.as_number`, except
    that booleans are ``None`` here (they are not upstream features)."""
    from spear_metrics.core.stats import as_number

    return None if isinstance(v, (bool, np.bool_)) else as_number(v)


def column(rows: Sequence[Mapping[str, Any]], key: str) -> np.ndarray:
    """``rows[i][key]`` as float64 ``(n,)`` with NaN where there is no finite value."""
    return np.array([np.nan if (x := finite(r.get(key))) is None else x for r in rows], dtype=np.float64)


def expit(z: np.ndarray) -> np.ndarray:
    """The logistic function as ``LinearDiscriminantAnalysis.predict_proba`` applies it (``scipy.special.expit``)."""
    from scipy.special import expit as _expit

    return _expit(z)


# ------------------------------------------------------------------------------------ stage 1


def fit_feature(x_human: np.ndarray, x_model: np.ndarray) -> dict[str, Any] | str:
    """``train_feature_lda`` for one feature: the fitted discriminant, or why it is skipped.

    Args:
        x_human, x_model: the dev values (NaN = missing), shapes ``(n_h,)``, ``(n_m,)``.

    Returns:
        ``{"coef", "intercept", "dev_original_mean", "dev_model_mean", "n_original_dev",
        "n_model_dev"}``: P(human | x) = ``expit(coef * x + intercept)`` (exactly what
        ``predict_proba(x)[:, 1]`` computes: the binary decision function ``x @ coef_.T +
        intercept_`` through ``expit``); or the skip reason: ``"insufficient_nonconstant_dev_values"``
        (upstream's), or, where upstream's sklearn call would crash or return a meaningless
        coefficient (project reasons): ``"constant_within_each_side"`` (the pooled within-side
        standard deviation is at most :data:`WITHIN_SPREAD_RTOL` times the largest |value|: zero
        makes ``LinearDiscriminantAnalysis`` raise IndexError, rounding noise gives coefficients of
        1e31), ``"discriminant_failed: <error>"``, ``"discriminant_not_finite"``.
    """
    from sklearn.discriminant_analysis import LinearDiscriminantAnalysis

    h, m = x_human[np.isfinite(x_human)], x_model[np.isfinite(x_model)]
    if len(h) < 2 or len(m) < 2:
        return "insufficient_nonconstant_dev_values"
    x = np.concatenate([h, m]).reshape(-1, 1)
    y = np.concatenate([np.full(len(h), LABEL_HUMAN), np.full(len(m), LABEL_MODEL)])
    if np.nanstd(x) == 0:
        return "insufficient_nonconstant_dev_values"
    # within-side spread: LDA divides by it. Zero (each side constant) crashes sklearn (IndexError on
    # an empty coef_); a spread that is rounding noise beside the values gives coefficients of 1e31
    within = np.sqrt((((h - h.mean()) ** 2).sum() + ((m - m.mean()) ** 2).sum()) / max(1, len(h) + len(m) - 2))
    if not within > WITHIN_SPREAD_RTOL * float(np.abs(x).max()):
        return "constant_within_each_side"
    import warnings

    try:
        with warnings.catch_warnings():  # its explained_variance_ratio_ (unused) divides 0 by 0 for some inputs
            warnings.simplefilter("ignore", RuntimeWarning)
            lda = LinearDiscriminantAnalysis().fit(x, y)
        coef, intercept = float(lda.coef_[0][0]), float(lda.intercept_[0])
    except (IndexError, ValueError, np.linalg.LinAlgError) as e:
        return f"discriminant_failed: {type(e).__name__}"
    if list(lda.classes_) != [LABEL_MODEL, LABEL_HUMAN]:  # cannot happen with both labels present
        raise BaselineError(f"unexpected discriminant classes {list(lda.classes_)}")
    if not (math.isfinite(coef) and math.isfinite(intercept)):
        return "discriminant_not_finite"
    return {"coef": coef, "intercept": intercept,
            "dev_original_mean": float(np.nanmean(h)), "dev_model_mean": float(np.nanmean(m)),
            "n_original_dev": int(len(h)), "n_model_dev": int(len(m))}


def p_human(fit: Mapping[str, Any], x: np.ndarray) -> np.ndarray:
    """P(human | x) of a fitted feature (:func:`fit_feature`), NaN where ``x`` is NaN."""
    x = np.asarray(x, dtype=np.float64)
    out = np.full(x.shape, np.nan)
    ok = np.isfinite(x)
    out[ok] = expit(x[ok] * float(fit["coef"]) + float(fit["intercept"]))
    return out


def predict_human(fit: Mapping[str, Any], x: np.ndarray) -> np.ndarray:
    """``LinearDiscriminantAnalysis.predict``: 1 (human) where the decision function is > 0."""
    return (np.asarray(x, dtype=np.float64) * float(fit["coef"]) + float(fit["intercept"]) > 0).astype(int)


# ------------------------------------------------------------------------------------ stage 2


def _usable(values: np.ndarray, min_valid: int) -> bool:
    v = values[np.isfinite(values)]
    return len(v) >= min_valid and len(np.unique(v)) >= 2


def usable_features(frames: Sequence[Mapping[str, np.ndarray]], features: Sequence[str], min_valid: int = MIN_VALID) -> list[str]:
    """``numeric_feature_columns(..., min_valid)`` of stage 2: the features (sorted by name) with at
    least ``min_valid`` finite values and 2 distinct ones in every frame."""
    return [f for f in sorted(features) if all(_usable(fr[f], min_valid) for fr in frames)]


def fit_clusters(human: Mapping[str, np.ndarray], model: Mapping[str, np.ndarray], features: Sequence[str], *,
                 threshold: float = THRESHOLD, min_valid: int = MIN_VALID) -> dict[str, Any] | None:
    """Stage 2 on the dev answers (``analyze_subset`` of ``analyse_correlations.py``).

    Args:
        human, model: feature name -> dev values (NaN = missing) of each side.
        features: the candidate features (the stage-1 candidates).

    Returns:
        ``{"threshold_abs_rho", "features", "means", "stds", "clusters": [{"name", "features",
        "component", "explained_variance_ratio", "dev_min_abs_spearman", "dev_mean_abs_spearman"}],
        "general": {"name", "component", "clusters", "explained_variance_ratio"}}``, or ``None``
        when no feature is usable (upstream raises for such a subset).
    """
    import pandas as pd
    from scipy.cluster.hierarchy import fcluster, linkage
    from scipy.spatial.distance import squareform

    feats = usable_features([human, model], features, min_valid)
    if not feats:
        return None
    dev = pd.DataFrame({f: np.concatenate([human[f], model[f]]) for f in feats})
    means = dev.mean(axis=0, skipna=True)
    stds = dev.std(axis=0, skipna=True).replace(0, np.nan)
    feats = [f for f in feats if not pd.isna(stds[f])]
    if not feats:
        return None
    norm = (dev[feats] - means[feats]) / stds[feats]
    corr = abs_spearman(norm)
    sfx = suffix(threshold)
    if len(feats) == 1:
        groups = [feats]
    else:
        dist = 1.0 - corr.to_numpy(dtype=float)
        np.fill_diagonal(dist, 0.0)
        labels = fcluster(linkage(squareform(dist, checks=False), method="average"), t=1.0 - threshold, criterion="distance")
        groups = [sorted(f for f, lab in zip(feats, labels) if lab == c) for c in sorted(set(labels))]
        groups = sorted(groups, key=lambda g: (len(g) == 1, g[0]))
    clusters, dev_values = [], {}
    for i, group in enumerate(groups, start=1):
        name = f"corr_cluster_{i:03d}_rho{sfx}"
        component, explained = first_component(norm[group])
        dev_values[name] = norm[group].fillna(0.0).to_numpy(dtype=float) @ component
        pair = pairwise_abs(corr, group)
        clusters.append({"name": name, "features": group, "component": component.tolist(),
                         "explained_variance_ratio": explained,
                         "dev_min_abs_spearman": float(np.nanmin(pair)) if len(pair) else None,
                         "dev_mean_abs_spearman": float(np.nanmean(pair)) if len(pair) else None})
    general, explained = first_component(pd.DataFrame(dev_values))
    return {"threshold_abs_rho": threshold, "min_valid": min_valid, "features": feats,
            "means": {f: float(means[f]) for f in feats}, "stds": {f: float(stds[f]) for f in feats},
            "clusters": clusters,
            "general": {"name": general_key(threshold), "clusters": [c["name"] for c in clusters],
                        "component": general.tolist(), "explained_variance_ratio": explained}}


def abs_spearman(frame) -> Any:
    """``spearman_abs_corr``: |Spearman rho| between the columns of a ``pandas.DataFrame``
    (pairwise complete observations, at least 3), missing = 0, clipped to [0, 1], diagonal 1."""
    import pandas as pd

    corr = frame.corr(method="spearman", min_periods=3).abs()
    corr = corr.reindex(index=frame.columns, columns=frame.columns).fillna(0.0).clip(0.0, 1.0)
    values = corr.to_numpy(dtype=float, copy=True)
    np.fill_diagonal(values, 1.0)
    return pd.DataFrame(values, index=corr.index, columns=corr.columns)


def pairwise_abs(corr, features: Sequence[str]) -> np.ndarray:
    """The |rho| of every pair within ``features`` (``pairwise_abs_values``)."""
    return np.asarray([float(corr.loc[a, b]) for i, a in enumerate(features) for b in features[i + 1:]], dtype=float)


def first_component(frame) -> tuple[np.ndarray, float]:
    """``fit_cluster_component`` / ``fit_general_component``: the first principal component
    (``sklearn.decomposition.PCA(n_components=1)``) of the columns, missing values = 0, its sign
    chosen so the loadings sum to >= 0, with its explained variance ratio; one column: ``[1.0]``, 1.0."""
    if frame.shape[1] == 1:
        return np.array([1.0]), 1.0
    from sklearn.decomposition import PCA

    pca = PCA(n_components=1).fit(frame.fillna(0.0).to_numpy(dtype=float))
    component = pca.components_[0]
    if np.nansum(component) < 0:
        component = -component
    return np.asarray(component, dtype=float), float(pca.explained_variance_ratio_[0])


def cluster_values(stage2: Mapping[str, Any], values: Mapping[str, Any]) -> dict[str, float]:
    """The stage-2 values of one answer: each ``corr_cluster_NNN_rho0p8`` (its z-scored features,
    missing = 0, times the cluster's component) and ``general_explainable_feature_rho0p8``."""
    out = {}
    for c in stage2["clusters"]:
        z = []
        for f in c["features"]:
            x = finite(values.get(f))
            z.append(0.0 if x is None else (x - stage2["means"][f]) / stage2["stds"][f])
        out[c["name"]] = float(np.asarray(z, dtype=float) @ np.asarray(c["component"], dtype=float))
    g = stage2["general"]
    out[g["name"]] = float(np.asarray([out[n] for n in g["clusters"]], dtype=float) @ np.asarray(g["component"], dtype=float))
    return out


# ------------------------------------------------------------------------------------ fitting


def fit_baseline(human_rows: Sequence[Mapping[str, Any]], model_rows: Sequence[Mapping[str, Any]], *,
                 ignore: Sequence[str] = DEFAULT_IGNORED, threshold: float = THRESHOLD, min_valid: int = MIN_VALID,
                 provenance: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """Fit both stages on the dev answers, per split/subset table.

    Args:
        human_rows, model_rows: the ``ok`` per-answer rows of the human answers' and the model's
            dev runs (``per_sample.jsonl`` objects holding the distributional features and
            ``audio_path``, whose subset folder names the table: :func:`table_of`).
        ignore: features left out (upstream ``--ignore-features``; default its config's list).
        provenance: what the baseline was fitted on (written as ``fitted_on``).

    Returns:
        The baseline as a JSON-ready dict (:data:`FORMAT`).

    Raises:
        BaselineError: no table holds answers of both sides, no feature of any table could be
            fitted (too few dev answers), or an ignored name is no feature.
    """
    unknown = sorted(set(ignore) - set(FEATURE_KEYS))
    if unknown:
        raise BaselineError(f"cannot ignore {', '.join(unknown)}: not a distributional feature "
                            f"(features: {', '.join(FEATURE_KEYS)})")
    features = [f for f in FEATURE_KEYS if f not in set(ignore)]
    by_table: dict[str, tuple[list, list]] = {}
    for side, rows in ((0, human_rows), (1, model_rows)):
        for r in rows:
            by_table.setdefault(table_of(r.get("audio_path")), ([], []))[side].append(r)
    tables: dict[str, Any] = {}
    for t in sorted(by_table):
        h_rows, m_rows = by_table[t]
        if not h_rows or not m_rows:
            continue
        h = {f: column(h_rows, f) for f in features}
        m = {f: column(m_rows, f) for f in features}
        fitted, skipped = {}, {}
        for f in sorted(features):  # upstream: sorted(common columns)
            res = fit_feature(h[f], m[f])
            if isinstance(res, str):
                skipped[f] = res
            else:
                fitted[f] = res
        tables[t] = {"n_human_dev": len(h_rows), "n_model_dev": len(m_rows), "features": fitted, "skipped": skipped,
                     "stage2": fit_clusters(h, m, features, threshold=threshold, min_valid=min_valid)}
    if tables and not any(t["features"] for t in tables.values()):
        sizes = "; ".join(f"{t}: {v['n_human_dev']} human and {v['n_model_dev']} model" for t, v in tables.items())
        raise BaselineError(f"no feature could be fitted: each needs at least 2 dev values on each side, not all equal "
                            f"(dev answers per table: {sizes})")
    if not tables:
        raise BaselineError("no split/subset table holds both human and model dev answers (tables: human "
                            f"{sorted({table_of(r.get('audio_path')) for r in human_rows}) or 'none'}, model "
                            f"{sorted({table_of(r.get('audio_path')) for r in model_rows}) or 'none'})")
    return {"format": FORMAT, "format_version": FORMAT_VERSION,
            "definition": "SPEAR-benchmark-code bin/distrib_baselines: compute_features_scores.py (stage 1), "
                          "analyse_correlations.py (stage 2)",
            "labels": {"human": LABEL_HUMAN, "model": LABEL_MODEL},
            "ignored_features": sorted(set(ignore)), "threshold_abs_rho": threshold, "min_valid": min_valid,
            "fitted_on": dict(provenance or {}), "tables": tables}


def dumps(baseline: Mapping[str, Any]) -> str:
    """The baseline's JSON text (deterministic: insertion order, ``repr`` floats, no NaN)."""
    return json.dumps(baseline, indent=1, ensure_ascii=False, allow_nan=False) + "\n"


def write_baseline(path: str | os.PathLike, baseline: Mapping[str, Any]) -> Path:
    """Write the baseline atomically.

    Raises:
        OutputError: the file cannot be written.
    """
    from spear_datasets.files import atomic_path

    p = Path(path)
    with atomic_path(p) as tmp:
        tmp.write_text(dumps(baseline), encoding="utf-8")
    return p


def read_baseline(path: str | os.PathLike) -> tuple[dict[str, Any], str]:
    """A fitted baseline and the sha256 of its bytes.

    Raises:
        BaselineError: missing, not JSON, another format or version, or a table without its parts.
    """
    p = Path(path)
    try:
        raw = p.read_bytes()
    except OSError as e:
        raise BaselineError(f"baseline {p}: cannot be read ({e.strerror or e})") from None
    from spear_datasets.files import parse_json

    try:
        obj = parse_json(raw)
    except ValueError as e:
        raise BaselineError(f"baseline {p}: not JSON ({str(e)[:120]})") from None
    if not isinstance(obj, dict) or obj.get("format") != FORMAT:
        raise BaselineError(f"baseline {p}: not a {FORMAT} file (made by `spearbench fit-baseline`)")
    if obj.get("format_version") != FORMAT_VERSION:
        raise BaselineError(f"baseline {p}: format version {obj.get('format_version')!r}; this code reads {FORMAT_VERSION}")
    tables = obj.get("tables")
    if not isinstance(tables, dict) or not tables:
        raise BaselineError(f"baseline {p}: no fitted table")
    for name, t in tables.items():
        feats = t.get("features") if isinstance(t, dict) else None
        if not isinstance(feats, dict) or any(not isinstance(v, dict) or finite(v.get("coef")) is None
                                              or finite(v.get("intercept")) is None for v in feats.values()):
            raise BaselineError(f"baseline {p}: table {name!r} has no valid fitted features")
    return obj, hashlib.sha256(raw).hexdigest()


def baseline_table(baseline: Mapping[str, Any], audio_path: str | None) -> str | None:
    """The fitted table a test row uses: its subset's when fitted, else :data:`ALL_TABLE` when
    fitted, else ``None``."""
    t = table_of(audio_path)
    tables = baseline["tables"]
    return t if t in tables else (ALL_TABLE if ALL_TABLE in tables else None)


def score_answer(baseline: Mapping[str, Any], table: str, values: Mapping[str, Any]) -> dict[str, Any]:
    """Per-answer outputs of a test answer (``score_model_utterances`` and the stage-2 values).

    Returns:
        ``<feature>__naturalness_score`` for every fitted feature (``None`` when the answer has no
        value), ``average_naturalness_score`` (mean of those that exist, ``None`` when none) and,
        when stage 2 was fitted, the cluster values and ``general_explainable_feature_rho0p8``.
    """
    t = baseline["tables"][table]
    out: dict[str, Any] = {}
    scores = []
    for f, fit in t["features"].items():
        x = finite(values.get(f))
        p = None if x is None else float(p_human(fit, np.array([x]))[0])
        out[f"{f}__naturalness_score"] = p
        if p is not None:
            scores.append(p)
    out["average_naturalness_score"] = float(np.mean(scores)) if scores else None
    if t.get("stage2"):
        out.update(cluster_values(t["stage2"], values))
    return out


# ------------------------------------------------------------------------------------ evaluation


def auroc(y: np.ndarray, score: np.ndarray) -> float | None:
    """Area under the ROC curve of ``score`` for label 1 against label 0 (the Mann-Whitney form:
    ties count one half, as ``sklearn.metrics.roc_auc_score``); ``None`` with one class only."""
    from scipy.stats import rankdata

    y = np.asarray(y)
    pos = y == 1
    n1, n0 = int(pos.sum()), int((~pos).sum())
    if n1 == 0 or n0 == 0:
        return None
    r = rankdata(score)
    return float((r[pos].sum() - n1 * (n1 + 1) / 2.0) / (n1 * n0))


def evaluate_feature(fit: Mapping[str, Any], x_human: np.ndarray, x_model: np.ndarray) -> dict[str, Any]:
    """``evaluate_feature`` on the test answers: ``accuracy`` (``predict``), ``auroc``
    (``roc_auc_score`` of P(human)), ``n_original_test``, ``n_model_test`` (answers with a value).
    Accuracy and AUROC are ``None`` unless both sides have a value."""
    from sklearn.metrics import accuracy_score, roc_auc_score

    h, m = x_human[np.isfinite(x_human)], x_model[np.isfinite(x_model)]
    out: dict[str, Any] = {"accuracy": None, "auroc": None, "n_original_test": int(len(h)), "n_model_test": int(len(m))}
    if not len(h) or not len(m):
        return out
    x = np.concatenate([h, m])
    y = np.concatenate([np.full(len(h), LABEL_HUMAN), np.full(len(m), LABEL_MODEL)])
    out["accuracy"] = float(accuracy_score(y, predict_human(fit, x)))
    out["auroc"] = float(roc_auc_score(y, p_human(fit, x)))
    return out
