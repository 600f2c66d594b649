"""Judge results on disk -> one row per dialogue -> the summary with intervals.

Reading (:func:`read_judge_results`): a results folder in SpeechRole-Eval's layout,
``<folder>/{single,multi}/<role>.json``, in either shape the repository has:

- **nested** (its released ``test_results/``, e.g. ``ali_cloud``): a list with one inner list per
  dialogue, each holding one object ``{"idx": 0, "<Aspect>_results": {"reason", "score": [a, b]}}``;
  ``idx`` is 0 in every inner list, so the dialogue is the position in the outer list;
- **flat** (what the judge script writes, ``json.dump(output_list, indent=4)``): a list of such
  objects with ``idx`` = the dialogue's index in the test data (dialogues the script skipped
  are absent, so positions are not indices).

``spearbench speechrole score`` writes the flat shape, a pair it could not score as ``"score":
null`` with ``"error"`` and ``"status"`` (``"unparsed"`` or ``"not_judged"``), the dialogues it
could not judge at all in ``failed_dialogues.jsonl``, and, with ``--swap-order``, the calls with
the reference first under ``swapped/<mode>/<role>.json`` (there ``score`` = ``[reference,
system]``: Model A is the reference).

Score A is always the tested system's, B the reference speech's (Model A and Model B of the
benchmark's order).

Aggregation (:func:`aggregate_rows`), per scope (each mode, and ``overall`` = all dialogues of
every mode) and per aspect (plus ``all_aspects``, every pair of the scope pooled), over the
dialogues whose pair was scored:

- ``<scope>_<aspect>_mean_A`` / ``_mean_B``: mean of the system's / the reference's scores (1-10);
- ``<scope>_<aspect>_ratio_100_sumA_over_sumB``: ``100 * sum(A) / sum(B)`` (a project key: it is
  *consistent with* the published headline scores above 100, but the aggregation behind those is
  not in public code, so it is never given under the benchmark's name: ``headline_note``);
- each with ``_ci95`` (seeded percentile bootstrap over dialogues, resampled within their role so
  every role keeps its number of dialogues, :func:`spear_metrics.core.stats.aggregate_intervals`
  with role strata, the aggregate recomputed on each resample) and ``_n`` (dialogues that
  entered it);
- ``<scope>_<aspect>_na_share``: pairs the judge replied to but that could not be parsed after
  the retries, over the pairs it replied to (the ``na`` share; pairs without any reply are
  counted apart, ``<scope>_n_pairs_not_judged``);
- with swapped calls: ``<scope>_<aspect>_position_bias_system`` = mean over dialogues of
  (system's score when first - its score when second), with its paired bootstrap ``_ci95``
  (:func:`spear_metrics.core.stats.paired_comparison`) and ``_n``; ``..._position_bias_reference``
  likewise for the reference (first = swapped order, second = benchmark order); for
  ``all_aspects`` the per-dialogue mean difference over its aspects, averaged over dialogues.

The paper's grouping of the eight aspects into three dimensions is not in public code either:
``dimensions_note`` says so and no grouped value is given.
"""

from __future__ import annotations

import math
import os
from pathlib import Path
from typing import Any, Iterable, Sequence

import numpy as np

from spear_datasets.files import read_json
from spear_metrics.speechrole.data import MAX_JSON_BYTES, MODES
from spear_metrics.speechrole.protocol import ASPECTS, check_score

ALL = "all_aspects"
OVERALL = "overall"
#: per-aspect statistics with intervals
STATS = ("mean_A", "mean_B", "ratio_100_sumA_over_sumB")
#: a pair's status in a dialogue row (``<aspect>_status``)
SCORED, UNPARSED, NOT_JUDGED = "scored", "unparsed", "not_judged"
SWAPPED_DIR = "swapped"
FAILED_FILE = "failed_dialogues.jsonl"
HEADLINE_NOTE = ("unsupported: the aggregation behind SpeechRole-Eval's published headline scores (above 100) is not "
                 "in public code; ratio_100_sumA_over_sumB (100 * sum of the system's scores / sum of the reference's, "
                 "per aspect) is consistent with them but unconfirmed, and is reported under that project name only")
DIMENSIONS_NOTE = ("unsupported: the paper's grouping of the eight aspects into three dimensions is not in public "
                   "code; no grouped value is given")


class JudgeResultsError(ValueError):
    """A results folder that cannot be read at all (one line)."""


def _pair(v: Any) -> tuple[int, int] | None:
    """A ``score`` value as two integers on the judge's 1-10 scale, or ``None`` (see :func:`_pair_problem`)."""
    return None if _pair_problem(v) else (int(v[0]), int(v[1]))


def _pair_problem(v: Any) -> str | None:
    """Why a ``score`` value is not a pair of integers on the judge's 1-10 scale
    (:func:`spear_metrics.speechrole.protocol.check_score`), ``None`` when it is."""
    if not (isinstance(v, (list, tuple)) and len(v) == 2 and all(isinstance(x, int) and not isinstance(x, bool) for x in v)):
        return f"score is not two integers: {str(v)[:120]}"
    try:
        for x, side in zip(v, "AB"):
            check_score(x, f"score {side}")
    except ValueError as e:
        return str(e)
    return None


def _dialogue_objects(data: Any, name: str) -> tuple[list[tuple[int, dict[str, Any]]], str, list[str]]:
    """``([(dialogue, object)], shape, problems)`` of one role file's JSON."""
    if not isinstance(data, list):
        return [], "unknown", [f"{name}: not a JSON list"]
    if data and all(isinstance(x, list) for x in data):
        out, problems = [], []
        for i, inner in enumerate(data):
            objs = [o for o in inner if isinstance(o, dict)]
            if len(objs) != 1 or len(inner) != 1:
                problems.append(f"{name}: dialogue {i} is not a list of one object")
                continue
            out.append((i, objs[0]))
        return out, "nested", problems
    if all(isinstance(x, dict) for x in data):
        out, problems, seen = [], [], set()
        for pos, o in enumerate(data):
            idx = o.get("idx")
            i = idx if isinstance(idx, int) and not isinstance(idx, bool) and idx >= 0 else pos
            if i in seen:
                problems.append(f"{name}: dialogue {i} appears twice (kept the first)")
                continue
            seen.add(i)
            out.append((i, o))
        return out, "flat", problems
    return [], "unknown", [f"{name}: neither a list of dialogue objects nor a list of one-object lists"]


def _aspect_cells(obj: dict[str, Any], swapped: bool) -> dict[str, Any]:
    """Per-aspect cells of one dialogue object (system = A, reference = B whatever the order)."""
    out: dict[str, Any] = {}
    for a in ASPECTS:
        res = obj.get(f"{a}_results")
        pair = _pair(res.get("score")) if isinstance(res, dict) else None
        if pair is not None:
            status, err = SCORED, None
        elif res is None:
            status, err = NOT_JUDGED, "no result for this aspect"
        else:
            st = res.get("status") if isinstance(res, dict) else None
            status = st if st in (UNPARSED, NOT_JUDGED) else UNPARSED
            problem = _pair_problem(res.get("score")) if isinstance(res, dict) else f"not an object: {str(res)[:120]}"
            err = (res.get("error") if isinstance(res, dict) else None) or problem
        if swapped:  # Model A was the reference
            out[f"{a}_A_second"] = pair[1] if pair else None
            out[f"{a}_B_first"] = pair[0] if pair else None
            out[f"{a}_swapped_status"] = status
            out[f"{a}_swapped_error"] = err
        else:
            out[f"{a}_A"] = pair[0] if pair else None
            out[f"{a}_B"] = pair[1] if pair else None
            out[f"{a}_status"] = status
            out[f"{a}_error"] = err
    return out


def _read_mode_folder(folder: Path, mode: str, swapped: bool, rows: dict, info: dict) -> None:
    for f in sorted(folder.glob("*.json")):
        try:
            data = read_json(f, MAX_JSON_BYTES)  # bounded: a FIFO, a device or a huge file is a problem, not a hang
        except (OSError, ValueError) as e:  # ValueError: over the limit, bad JSON, an int of 5,000 digits, too deep
            info["problems"].append(f"{mode}/{f.name}: not JSON ({' '.join(str(e).split())[:120]})")
            continue
        where = f"{SWAPPED_DIR + '/' if swapped else ''}{mode}/{f.name}"
        objs, shape, problems = _dialogue_objects(data, where)
        info["problems"] += problems
        info["shapes"][shape] = info["shapes"].get(shape, 0) + 1
        for i, obj in objs:
            row = rows.setdefault((mode, f.stem, i), {"mode": mode, "role": f.stem, "dialogue": i})
            row.update(_aspect_cells(obj, swapped))


def read_judge_results(folder: str | os.PathLike) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """Read every judge result under ``folder`` into dialogue rows (module docstring).

    Returns:
        ``(rows, info)``: rows sorted by mode (single, multi), role, dialogue, numbered ``row``
        0..n-1, each with ``status`` (``"ok"`` when at least one pair of the benchmark order was
        scored) and ``error``; ``info`` = ``{"shapes": {"nested"|"flat"|...: files},
        "problems": [one line each], "modes": [...], "swapped": bool}``.

    Raises:
        JudgeResultsError: ``folder`` has no ``single/`` nor ``multi/`` folder of role files.
    """
    root = Path(folder)
    modes = [m for m in MODES if (root / m).is_dir()]
    if not modes:
        raise JudgeResultsError(f"{root}: no single/ or multi/ folder of judge results (<mode>/<role>.json)")
    rows: dict[tuple[str, str, int], dict[str, Any]] = {}
    info: dict[str, Any] = {"shapes": {}, "problems": [], "modes": modes, "swapped": False}
    for m in modes:
        _read_mode_folder(root / m, m, False, rows, info)
    swapped_rows: dict[tuple[str, str, int], dict[str, Any]] = {}
    for m in modes:
        if (root / SWAPPED_DIR / m).is_dir():
            info["swapped"] = True
            _read_mode_folder(root / SWAPPED_DIR / m, m, True, swapped_rows, info)
    for k, r in swapped_rows.items():
        if k in rows:
            rows[k].update({c: v for c, v in r.items() if c not in ("mode", "role", "dialogue")})
        else:
            info["problems"].append(f"{SWAPPED_DIR}/{k[0]}/{k[1]}.json: dialogue {k[2]} has no benchmark-order result")
    failed_path = root / FAILED_FILE
    if failed_path.is_file():
        from spear_metrics.core.records import read_jsonl

        for obj in read_jsonl(failed_path):
            m, role, d = obj.get("mode"), obj.get("role"), obj.get("dialogue")
            if m not in MODES or not isinstance(role, str):
                continue
            key = (m, role, d if isinstance(d, int) else -1)
            if key not in rows:
                rows[key] = {"mode": m, "role": role, "dialogue": d if isinstance(d, int) else None,
                             "status": "failed", "error": str(obj.get("error") or "failed")}
    out = []
    order = {m: i for i, m in enumerate(MODES)}
    for k in sorted(rows, key=lambda k: (order[k[0]], k[1], k[2])):
        r = rows[k]
        for a in ASPECTS:
            r.setdefault(f"{a}_A", None)
            r.setdefault(f"{a}_B", None)
            r.setdefault(f"{a}_status", NOT_JUDGED if r.get("status") != "failed" else None)
            r.setdefault(f"{a}_error", None)
            if info["swapped"]:
                for c, v in ((f"{a}_A_second", None), (f"{a}_B_first", None), (f"{a}_swapped_status", NOT_JUDGED),
                             (f"{a}_swapped_error", None)):
                    r.setdefault(c, v if r.get("status") != "failed" else None)
        if r.get("status") != "failed":
            scored = [a for a in ASPECTS if r.get(f"{a}_status") == SCORED]
            if scored:
                r["status"], r["error"] = "ok", None
            else:
                first = next((r.get(f"{a}_error") for a in ASPECTS if r.get(f"{a}_error")), "no aspect scored")
                r["status"], r["error"] = "failed", f"no aspect scored: {first}"
        out.append(r)
    for i, r in enumerate(out):
        r["row"] = i
    return [_ordered(r) for r in out], info


def _ordered(r: dict[str, Any]) -> dict[str, Any]:
    """A row with its identity first, then status, then the aspects' cells in aspect order."""
    head = {k: r.get(k) for k in ("row", "mode", "role", "dialogue", "status", "error")}
    rest = {k: v for k, v in r.items() if k not in head}
    return {**head, **rest}


# ----------------------------------------------------------------------------- aggregation


def _scores(rows: Sequence[dict[str, Any]], suffix: str) -> np.ndarray:
    """``(n_rows, 8)`` float array of one score column per aspect (NaN = no score)."""
    out = np.full((len(rows), len(ASPECTS)), np.nan)
    for i, r in enumerate(rows):
        for j, a in enumerate(ASPECTS):
            v = r.get(f"{a}{suffix}")
            if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v):
                out[i, j] = float(v)
    return out


def _stats(A: np.ndarray, B: np.ndarray, prefix: str) -> dict[str, Any]:
    """Means, ratio and counts per aspect and pooled, over the rows of ``A``/``B`` (pairs where
    both scores exist)."""
    out: dict[str, Any] = {}
    ok = np.isfinite(A) & np.isfinite(B)
    for j, a in enumerate([*ASPECTS, ALL]):
        a_col, b_col, m = (A, B, ok) if a == ALL else (A[:, j], B[:, j], ok[:, j])
        n_pairs = int(m.sum())
        a_sum = float(a_col[m].sum()) if n_pairs else 0.0
        b_sum = float(b_col[m].sum()) if n_pairs else 0.0
        out[f"{prefix}_{a}_mean_A"] = a_sum / n_pairs if n_pairs else None
        out[f"{prefix}_{a}_mean_B"] = b_sum / n_pairs if n_pairs else None
        out[f"{prefix}_{a}_ratio_100_sumA_over_sumB"] = 100.0 * a_sum / b_sum if n_pairs and b_sum > 0 else None
    return out


def stat_keys(scope: str) -> list[str]:
    """The keys with intervals of one scope, aspect by aspect then ``all_aspects``."""
    return [f"{scope}_{a}_{s}" for a in [*ASPECTS, ALL] for s in STATS]


def aggregate_rows(rows: Sequence[dict[str, Any]], *, n_resamples: int = 1000, seed: int = 0,
                   confidence: float | None = None) -> dict[str, Any]:
    """The summary values of dialogue rows (:func:`read_judge_results`), as the module says.

    Returns:
        ``{key: value}`` for every scope present: the statistics, their ``_ci95``/``_n``, the
        ``na`` shares, the pair counts, the position biases when swapped cells are present, and
        ``headline_note`` / ``dimensions_note``.
    """
    from spear_metrics.core.stats import CONFIDENCE, Clusters, aggregate_intervals, bootstrap_ci, paired_comparison

    conf = CONFIDENCE if confidence is None else confidence
    out: dict[str, Any] = {}
    modes = [m for m in MODES if any(r.get("mode") == m for r in rows)]
    scopes = [*modes, OVERALL] if modes else []
    swapped = any(f"{ASPECTS[0]}_A_second" in r for r in rows)
    for scope in scopes:
        sel = [r for r in rows if scope == OVERALL or r.get("mode") == scope]
        ok = [r for r in sel if r.get("status") == "ok"]
        A, B = _scores(ok, "_A"), _scores(ok, "_B")
        point = _stats(A, B, scope)
        both = np.isfinite(A) & np.isfinite(B)
        # dialogues resampled within their role (each role keeps its number of dialogues)
        by_role = Clusters([None] * len(ok), [r.get("role") for r in ok])
        cis = aggregate_intervals(lambda idx: _stats(A[idx], B[idx], scope), len(ok), stat_keys(scope),
                                  n_resamples=n_resamples, seed=seed, confidence=conf, clusters=by_role)
        for j, a in enumerate([*ASPECTS, ALL]):
            n = int(both[:, j].sum()) if a != ALL else int(both.any(axis=1).sum())
            for s in STATS:
                k = f"{scope}_{a}_{s}"
                out[k] = point[k]
                out[f"{k}_ci95"] = cis[k] if n >= 2 else None
                out[f"{k}_n"] = n
        for a in [*ASPECTS, ALL]:
            aspects = ASPECTS if a == ALL else (a,)
            st = [r.get(f"{x}_status") for r in sel for x in aspects]
            replied = sum(s in (SCORED, UNPARSED) for s in st)
            out[f"{scope}_{a}_na_share"] = (sum(s == UNPARSED for s in st) / replied) if replied else None
        st_all = [r.get(f"{x}_status") for r in sel for x in ASPECTS]
        out[f"{scope}_n_dialogues"] = len(sel)
        out[f"{scope}_n_dialogues_scored"] = len(ok)
        out[f"{scope}_n_pairs_scored"] = sum(s == SCORED for s in st_all)
        out[f"{scope}_n_pairs_unparsed"] = sum(s == UNPARSED for s in st_all)
        out[f"{scope}_n_pairs_not_judged"] = sum(s == NOT_JUDGED for s in st_all)
        if swapped:
            A2, B1 = _scores(ok, "_A_second"), _scores(ok, "_B_first")
            for who, first, second in (("system", A, A2), ("reference", B1, B)):
                for j, a in enumerate(ASPECTS):
                    c = paired_comparison(list(_nan_none(first[:, j])), list(_nan_none(second[:, j])),
                                          n_resamples=n_resamples, seed=seed, confidence=conf)
                    k = f"{scope}_{a}_position_bias_{who}"
                    out[k], out[f"{k}_ci95"], out[f"{k}_n"] = c["diff"], c["diff_ci95"], c["n"]
                d = first - second  # NaN where either score is missing
                vals = [float(row[np.isfinite(row)].mean()) for row in d if np.isfinite(row).any()]
                k = f"{scope}_{ALL}_position_bias_{who}"
                out[k] = float(np.mean(vals)) if vals else None
                out[f"{k}_ci95"] = bootstrap_ci(vals, n_resamples=n_resamples, seed=seed, confidence=conf)
                out[f"{k}_n"] = len(vals)
    out["headline_note"] = HEADLINE_NOTE
    out["dimensions_note"] = DIMENSIONS_NOTE
    return out


def _nan_none(x: np.ndarray) -> Iterable[float | None]:
    return (float(v) if np.isfinite(v) else None for v in x)


def aggregate_files(files: Sequence[str | os.PathLike], modes: Sequence[str], orders: Sequence[str] | None = None, *,
                    n_resamples: int = 1000, seed: int = 0) -> dict[str, Any]:
    """The summary of judge result files given one by one (the ``speechrole`` evaluate module):
    ``files[i]`` is one role's ``<role>.json`` (either shape; the role is its file name) judged in
    mode ``modes[i]``, in the benchmark's order or, with ``orders[i] == "swapped"``, with the
    reference first.

    Returns:
        :func:`aggregate_rows`' values plus ``n_samples``/``n_scored``/``n_failed`` (dialogues),
        ``modes``, ``read_problems`` and ``per_sample`` (the dialogue rows).

    Raises:
        ValueError: lists of other lengths, an unknown mode or order, a role given twice for
            one mode and order.
        JudgeResultsError: no file.
    """
    import shutil
    import tempfile

    orders = list(orders) if orders is not None else ["benchmark"] * len(files)
    if not (len(files) == len(modes) == len(orders)):
        raise ValueError(f"{len(files)} result files, {len(modes)} modes and {len(orders)} orders: give one each")
    with tempfile.TemporaryDirectory(prefix="spearbench-speechrole-") as tmp:
        for f, m, o in zip(files, modes, orders):
            if m not in MODES or o not in ("benchmark", "swapped"):
                raise ValueError(f"mode must be one of {', '.join(MODES)} and order benchmark or swapped; got {m!r}, {o!r}")
            dest = Path(tmp) / (SWAPPED_DIR if o == "swapped" else "") / m / Path(f).name
            if dest.exists():
                raise ValueError(f"role {Path(f).stem!r} given twice for mode {m} ({o} order)")
            dest.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(f, dest)
        rows, info = read_judge_results(tmp)
    out = aggregate_rows(rows, n_resamples=n_resamples, seed=seed)
    n_ok = sum(r["status"] == "ok" for r in rows)
    out.update(n_samples=len(rows), n_scored=n_ok, n_failed=len(rows) - n_ok, modes=info["modes"],
               read_problems=info["problems"], per_sample=rows)
    return out
