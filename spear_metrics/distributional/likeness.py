"""``human_likeness_auroc``: the project's one-number answer to "can a classifier tell this
model's answers from the human answers?" (a key of SPEARBench's own, not SPEAR's).

A classifier two-sample test (Lopez-Paz & Oquab 2017): the per-answer values of every scored
dimension (and the distributional features) of the model's answers (label 0) and of the human
answers to the same questions (label 1) are pooled; a regularised logistic regression
(``sklearn`` ``Pipeline``: median imputation with missing-value indicators, standard scaling,
``LogisticRegression(C=1.0)``) is cross-validated with ``StratifiedGroupKFold`` grouped by
conversation, so no conversation is on both sides of a split; the AUROC of P(human) on each
held-out fold, averaged over the folds (weighted by their answers), is the value. 0.5: the
classifier cannot tell the model from the humans; 1.0: it always can (below 0.5 means chance
plus noise: held-out folds cannot be systematically wrong).

- **Interval**: percentile bootstrap (:func:`spear_metrics.core.stats.aggregate_intervals`) over
  questions (a question's model and human answers move together; an answer without its pair is
  a unit of its own), the whole cross-validation refitted on each resample, so the interval
  covers the classifier's refitting as well as the sampling of the answers (at most
  :data:`MAX_REFIT_RESAMPLES` resamples: each one refits every fold).
- **Contributions**: permutation importance on the held-out folds: each feature's values are
  shuffled within each held-out fold (5 repeats, seeded) and the drop in the AUROC is the
  feature's contribution.
- **Rule for too few rows** (:func:`too_few`): at least :data:`MIN_PER_SIDE` answers on each
  side and :data:`MIN_CONVERSATIONS` conversations; folds = min(5, conversations). Otherwise the
  value is ``None`` with a note saying what is missing.
"""

from __future__ import annotations

import fnmatch
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Sequence

import numpy as np

#: the least answers on each side for a value (each held-out fold then holds a few of each)
MIN_PER_SIDE = 10
#: the least conversations (grouped folds need two groups at least)
MIN_CONVERSATIONS = 2
MAX_FOLDS = 5
PERMUTATION_REPEATS = 5
#: the interval refits the whole cross-validation on each resample: at most this many resamples
MAX_REFIT_RESAMPLES = 200
#: per-answer values that are never features: bookkeeping, evidence of how a value was found
#: (reports' ``NOT_COMPARED``), values derived from a fitted baseline (functions of the
#: features, and fitted on the answers being told apart), and this key's own outputs
EXCLUDED_PATTERNS = ("*__naturalness_score", "average_naturalness_score", "corr_cluster_*", "general_explainable_feature_*")
RULE = (f"needs >= {MIN_PER_SIDE} answers on each side and >= {MIN_CONVERSATIONS} conversations "
        f"(cross-validation grouped by conversation, min({MAX_FOLDS}, conversations) folds)")


@dataclass
class Likeness:
    """The outcome of :func:`human_likeness`.

    Attributes:
        auroc: out-of-fold AUROC (``None`` when there are too few rows or no feature; see ``note``).
        ci95: its bootstrap interval (``None`` without resamples).
        n_model, n_human: answers on each side; n_units: bootstrap units (questions).
        n_conversations, n_folds: the grouping.
        features: the features used (sorted); dropped: feature -> why it was left out.
        contributions: feature -> drop in AUROC when it is permuted (largest first).
        note: why ``auroc`` is ``None``, or what the grouping fell back to.
    """

    auroc: float | None = None
    ci95: list[float] | None = None
    n_model: int = 0
    n_human: int = 0
    n_units: int = 0
    n_conversations: int = 0
    n_folds: int = 0
    n_resamples: int = 0
    features: list[str] = field(default_factory=list)
    dropped: dict[str, str] = field(default_factory=dict)
    contributions: dict[str, float] = field(default_factory=dict)
    note: str | None = None

    def summary(self, prefix: str = "human_likeness") -> dict[str, Any]:
        """The summary keys: ``<prefix>_auroc`` (+ ``_ci95``, ``_n``), and its provenance."""
        return {
            f"{prefix}_auroc": self.auroc, f"{prefix}_auroc_ci95": self.ci95,
            f"{prefix}_auroc_n": self.n_model + self.n_human,
            f"{prefix}_n_model": self.n_model, f"{prefix}_n_human": self.n_human,
            f"{prefix}_n_conversations": self.n_conversations, f"{prefix}_n_folds": self.n_folds,
            f"{prefix}_resamples": self.n_resamples,
            f"{prefix}_features": list(self.features),
            f"{prefix}_dropped": dict(self.dropped),
            f"{prefix}_contributions": dict(self.contributions),
            f"{prefix}_rule": RULE,
            **({f"{prefix}_note": self.note} if self.note else {}),
        }


def too_few(n_model: int, n_human: int, n_conversations: int) -> str | None:
    """Why no AUROC can be given (``None``: enough). The rule: :data:`RULE`."""
    missing = []
    if n_model < MIN_PER_SIDE or n_human < MIN_PER_SIDE:
        missing.append(f"{n_model} model and {n_human} human answers")
    if n_conversations < MIN_CONVERSATIONS:
        missing.append(f"{n_conversations} conversation{'s' if n_conversations != 1 else ''}")
    return f"not computed: {' and '.join(missing)}; {RULE}" if missing else None


def excluded(key: str) -> bool:
    """Whether a per-answer key is never a feature (:data:`EXCLUDED_PATTERNS`, the reports' ``NOT_COMPARED``)."""
    from spear_metrics.reports.runs import NOT_COMPARED

    return key in NOT_COMPARED or any(fnmatch.fnmatchcase(key, p) for p in EXCLUDED_PATTERNS)


def select_features(model_rows: Sequence[Mapping[str, Any]], human_rows: Sequence[Mapping[str, Any]], *,
                    pairs: Sequence[tuple[int, int]] = (), patterns: Sequence[str] | None = None) -> tuple[list[str], dict[str, str]]:
    """The features: per-answer numeric values (numbers or booleans, :func:`spear_metrics.core.stats.numeric_keys`)
    present on both sides, minus :func:`excluded` keys, those not matching ``patterns`` (``fnmatch``;
    ``None`` = all), those with no value on one side, those equal on both sides of every
    question pair (they describe the question, not the answer, e.g. the question's speech end)
    and non-boolean values that are one number per side (:func:`_side_marker`: an id or a
    setting of the run).

    Returns:
        ``(features sorted, dropped: feature -> reason)``.
    """
    from spear_metrics.core.stats import numeric_keys

    keys_m, keys_h = set(numeric_keys(model_rows)), set(numeric_keys(human_rows))
    dropped: dict[str, str] = {}
    out = []
    for k in sorted(keys_m | keys_h):
        if excluded(k):
            continue
        if patterns is not None and not any(fnmatch.fnmatchcase(k, p) for p in patterns):
            continue
        if k not in keys_m or k not in keys_h:
            dropped[k] = "values on one side only"
            continue
        if pairs and all(_same(model_rows[i].get(k), human_rows[j].get(k)) for i, j in pairs):
            dropped[k] = "equal for the model and the human answer of every question"
            continue
        if _side_marker(model_rows, human_rows, k):
            dropped[k] = "one number on every model answer and another on every human answer (a mark of the run, not of the answers)"
            continue
        out.append(k)
    return out, dropped


def _side_marker(model_rows: Sequence[Mapping[str, Any]], human_rows: Sequence[Mapping[str, Any]], key: str) -> bool:
    """Whether a non-boolean value is one number on every model answer that has it and another on
    every human answer (at least 2 answers a side): an identifier or a setting of the run (a
    sample rate, a version, an option), which would tell the sides apart without saying anything
    of the answers. Booleans are kept: an answer property can be constant on a side."""
    from spear_metrics.core.stats import as_number

    def values(rows):
        raw = [r.get(key) for r in rows if r.get(key) is not None]
        if any(isinstance(v, (bool, np.bool_)) for v in raw):
            return None
        xs = [x for v in raw if (x := as_number(v)) is not None]
        return set(xs) if len(xs) >= 2 else None

    vm, vh = values(model_rows), values(human_rows)
    return vm is not None and vh is not None and len(vm) == 1 and len(vh) == 1 and vm != vh


def _same(a: Any, b: Any) -> bool:
    if a is None or b is None:
        return a is None and b is None
    return float(a) == float(b)


def _matrix(rows: Sequence[Mapping[str, Any]], features: Sequence[str]) -> np.ndarray:
    from spear_metrics.core.stats import as_number

    return np.array([[np.nan if (x := as_number(r.get(f))) is None else x for f in features] for r in rows],
                    dtype=np.float64).reshape(len(rows), len(features))


def _pipeline(seed: int):
    from sklearn.impute import SimpleImputer
    from sklearn.linear_model import LogisticRegression
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    return make_pipeline(SimpleImputer(strategy="median", add_indicator=True, keep_empty_features=True),
                         StandardScaler(), LogisticRegression(C=1.0, max_iter=2000, random_state=seed))


def human_likeness(
    model_rows: Sequence[Mapping[str, Any]],
    human_rows: Sequence[Mapping[str, Any]],
    *,
    model_groups: Sequence[str],
    human_groups: Sequence[str],
    model_units: Sequence[Any] | None = None,
    human_units: Sequence[Any] | None = None,
    features: Sequence[str] | None = None,
    patterns: Sequence[str] | None = None,
    n_resamples: int = 1000,
    seed: int = 0,
) -> Likeness:
    """The classifier two-sample test of the module docstring.

    Args:
        model_rows, human_rows: per-answer values (``per_sample.jsonl`` objects) of the two sides.
        model_groups, human_groups: the conversation of each answer (the folds' groups).
        model_units, human_units: the question of each answer (the bootstrap's units; equal ids
            on both sides are one unit and their values are compared by the feature filter);
            ``None``: every answer its own unit.
        features: the feature keys to use (default: :func:`select_features` with ``patterns``).
        n_resamples, seed: bootstrap resamples (0: no interval) and the seed of the folds,
            the permutations and the bootstrap.

    Returns:
        :class:`Likeness` (``auroc`` ``None`` with a ``note`` when :func:`too_few` says so or no
        feature is left).
    """
    from spear_metrics.core.stats import aggregate_intervals

    n_m, n_h = len(model_rows), len(human_rows)
    m_units = list(model_units) if model_units is not None else [("m", i) for i in range(n_m)]
    h_units = list(human_units) if human_units is not None else [("h", i) for i in range(n_h)]
    h_index = {}
    for j, u in enumerate(h_units):
        h_index.setdefault(u, j)
    pairs = [(i, h_index[u]) for i, u in enumerate(m_units) if u in h_index]
    groups = [str(g) for g in (*model_groups, *human_groups)]
    n_conv = len(set(groups))
    out = Likeness(n_model=n_m, n_human=n_h, n_conversations=n_conv)
    if features is None:
        feats, out.dropped = select_features(model_rows, human_rows, pairs=pairs, patterns=patterns)
    else:
        feats = sorted(features)
    out.features = feats
    why = too_few(n_m, n_h, n_conv)
    if why is None and not feats:
        why = "not computed: no per-answer value exists on both sides (and differs between them)"
    if why:
        out.note = why
        return out

    x = np.vstack([_matrix(model_rows, feats), _matrix(human_rows, feats)])
    y = np.concatenate([np.zeros(n_m, dtype=int), np.ones(n_h, dtype=int)])
    g = np.array(groups, dtype=object)
    out.n_folds = min(MAX_FOLDS, n_conv)
    fitted = cross_validated(x, y, g, seed=seed)
    if fitted is None:
        out.note = "not computed: no fold holds both model and human answers on both sides of its split"
        return out
    out.auroc, models, folds = fitted
    out.contributions = permutation_contributions(x, y, models, folds, feats, out.auroc, seed=seed)

    # interval: the whole cross-validation redone on resampled questions (a question's two answers
    # together; the folds still group by conversation)
    unit_of = _units(m_units, h_units)
    out.n_units = n_units = int(unit_of.max()) + 1
    members = [np.flatnonzero(unit_of == k) for k in range(n_units)]
    out.n_resamples = min(int(n_resamples), MAX_REFIT_RESAMPLES)

    def statistic(idx: np.ndarray) -> dict[str, float | None]:
        rows = np.concatenate([members[k] for k in idx])
        res = cross_validated(x[rows], y[rows], g[rows], seed=seed, models=False)
        return {"auroc": None if res is None else res[0]}

    if out.n_resamples >= 1:
        out.ci95 = aggregate_intervals(statistic, n_units, ["auroc"], n_resamples=out.n_resamples, seed=seed)["auroc"]
    return out


def cross_validated(x: np.ndarray, y: np.ndarray, groups: np.ndarray, *, seed: int, models: bool = True):
    """The grouped cross-validation: ``StratifiedGroupKFold(min(5, groups), shuffle, seed)``; each
    held-out fold's AUROC of P(human) from the pipeline fitted on the other folds; their mean
    weighted by the held-out answers (folds with one class held out, or trained on one class, are
    left out). A mean of per-fold AUROCs, not the AUROC of the pooled out-of-fold predictions:
    pooling ranks answers scored by different fits, whose offsets follow each training set's
    class balance and bias a null comparison below 0.5.

    Args:
        x: ``(answers, features)`` float64, NaN = missing; y: ``(answers,)`` 1 = human, 0 = model;
        groups: ``(answers,)`` conversation ids.

    Returns:
        ``(auroc, fitted pipelines, [(train, test) index arrays])`` (``models=False``: no pipelines),
        or ``None`` when fewer than 2 groups or no usable fold.
    """
    import warnings

    from sklearn.model_selection import StratifiedGroupKFold

    from spear_metrics.distributional.baseline import auroc

    n_groups = len(set(groups.tolist()))
    if n_groups < 2 or len(np.unique(y)) < 2:
        return None
    cv = StratifiedGroupKFold(n_splits=min(MAX_FOLDS, n_groups), shuffle=True, random_state=seed)
    scores, weights, fits, folds = [], [], [], []
    with warnings.catch_warnings(), _one_blas_thread():
        warnings.simplefilter("ignore")  # too few members of a class for the folds, all-missing columns, convergence
        for tr, te in cv.split(x, y, groups):
            if len(np.unique(y[tr])) < 2 or len(np.unique(y[te])) < 2:
                continue
            clf = _pipeline(seed).fit(x[tr], y[tr])
            a = auroc(y[te], clf.predict_proba(x[te])[:, 1])
            scores.append(a)
            weights.append(len(te))
            if models:
                fits.append(clf)
                folds.append((tr, te))
    if not scores:
        return None
    return float(np.average(scores, weights=weights)), fits, folds


def permutation_contributions(x: np.ndarray, y: np.ndarray, models: Sequence[Any], folds: Sequence[tuple[np.ndarray, np.ndarray]],
                              features: Sequence[str], base: float, *, seed: int) -> dict[str, float]:
    """Each feature's drop in the fold-weighted AUROC when its values are shuffled within every
    held-out fold (the fitted pipelines kept), mean of :data:`PERMUTATION_REPEATS` shuffles;
    largest first."""
    import warnings

    from spear_metrics.distributional.baseline import auroc

    rng = np.random.default_rng(seed)
    out = {}
    with warnings.catch_warnings(), _one_blas_thread():
        warnings.simplefilter("ignore")
        for j, f in enumerate(features):
            drops = []
            for _ in range(PERMUTATION_REPEATS):
                scores, weights = [], []
                for clf, (_, te) in zip(models, folds):
                    xt = x[te].copy()
                    xt[:, j] = xt[rng.permutation(len(te)), j]
                    scores.append(auroc(y[te], clf.predict_proba(xt)[:, 1]))
                    weights.append(len(te))
                drops.append(base - float(np.average(scores, weights=weights)))
            out[f] = float(np.mean(drops))
    return dict(sorted(out.items(), key=lambda kv: (-kv[1], kv[0])))


def _one_blas_thread():
    """BLAS/OpenMP on one thread while the small logistic regressions fit (``threadpoolctl``,
    which scikit-learn brings): their matrices are tiny, and a pool of threads per call made each
    fit about 20x slower on a loaded 2-core machine (0.20 s against 0.009 s, measured)."""
    from threadpoolctl import threadpool_limits

    return threadpool_limits(1)


def _units(model_units: Sequence[Any], human_units: Sequence[Any]) -> np.ndarray:
    """One int code per answer (model answers first): answers with the same question id share a code."""
    codes: dict[Any, int] = {}
    return np.array([codes.setdefault(u, len(codes)) for u in (*model_units, *human_units)], dtype=np.intp)


def run_rows_likeness(
    model_rows: Sequence[Mapping[str, Any]],
    human_rows: Sequence[Mapping[str, Any]],
    *,
    question: Callable[[Mapping[str, Any]], str],
    conversation: Callable[[Mapping[str, Any]], str | None],
    patterns: Sequence[str] | None = None,
    n_resamples: int = 1000,
    seed: int = 0,
) -> Likeness:
    """:func:`human_likeness` of two scored runs' ``ok`` rows, restricted to the questions both
    answered (an answer to the same question by each side).

    Args:
        question: row -> question id (e.g. :func:`spear_metrics.reports.runs.input_id`).
        conversation: row -> conversation id; ``None``/empty falls back to the question id (each
            question its own group, said in ``note``).
    """
    m_by_q: dict[str, Mapping[str, Any]] = {}
    for r in model_rows:
        m_by_q.setdefault(question(r), r)
    h_by_q: dict[str, Mapping[str, Any]] = {}
    for r in human_rows:
        h_by_q.setdefault(question(r), r)
    common = [q for q in m_by_q if q in h_by_q]
    m = [m_by_q[q] for q in common]
    h = [h_by_q[q] for q in common]
    fallback = 0
    groups = []
    for q in common:
        c = conversation(m_by_q[q]) or conversation(h_by_q[q])
        if not c:
            fallback += 1
            c = f"question:{q}"
        groups.append(str(c))
    res = human_likeness(m, h, model_groups=groups, human_groups=groups, model_units=common, human_units=common,
                         patterns=patterns, n_resamples=n_resamples, seed=seed)
    if fallback and res.note is None:
        res.note = (f"{fallback} of {len(common)} questions have no conversation_id: each is its own group "
                    "(answers of one conversation may fall on both sides of a split)")
    return res
