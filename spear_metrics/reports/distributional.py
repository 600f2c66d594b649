"""The report's section on the ``distributional`` dimension: SPEAR's distributional baselines
and SPEARBench's own ``human_likeness_auroc`` (:func:`distributional_section`, one
self-contained function; it is the report's section after the seven SPEAR dimensions in
:data:`spear_metrics.reports.html.SECTIONS`, which writes its heading)."""

from __future__ import annotations

from typing import Any, Sequence

from spear_metrics.reports.runs import RunData

DIM = "distributional"
#: contributions and per-feature rows shown (the rest are in summary.json)
TOP = 15


def distributional_section(page, run: RunData, labelled: Sequence[tuple[str, RunData]],
                           human: RunData | None = None) -> None:
    """Add the section to ``page`` (a :class:`spear_metrics.reports.page.Page`).

    Shows, for every run of the report: ``human_likeness_auroc`` with its interval, folds and
    conversations (or why it is null) and ``average_naturalness_score``, as a table and a bar
    plot with the intervals; for the reported ``run``: the features that contribute most to
    telling it from the human answers, each fitted feature's mean P(human), accuracy and AUROC
    per table, the stage-2 clusters with upstream's test-side check, the baseline's provenance
    and where the text and word times came from.

    Args:
        page: the report page being written.
        run: the run reported.
        labelled: ``(label, run)`` of every run in the report (``run`` first).
        human: the human answers' run among them (the reference, which has no score of its own).
    """
    from spear_metrics.reports import plots
    from spear_metrics.reports.page import Notes, _e, fmt, value_cell

    scored = [(label, r) for label, r in labelled if DIM in (r.summary.get("metrics") or [])]
    if not scored:
        page.add(f'<p class="why">Not scored in any run of this report (run <code>spearbench score --metrics {DIM}</code>; '
                 "<code>-o human_run=</code> for the overall score, <code>spearbench fit-baseline</code> then "
                 "<code>-o baseline=</code> for SPEAR's baselines).</p>")
        return
    page.add('<p class="small"><code>human_likeness_auroc</code> is SPEARBench\'s own score (not SPEAR\'s): the held-out '
             "AUROC of a logistic regression telling the run's answers from the human answers to the same questions over "
             "every per-answer value both runs share, cross-validated by conversation. 0.5 = a listener-free classifier "
             "cannot tell them apart; 1 = it always can. The other keys are SPEAR's distributional baselines, named as "
             "upstream names them.</p>")
    keys = ("human_likeness_auroc", "average_naturalness_score")
    rows = []
    notes = Notes()  # each reason once, below the table (the reason of a missing AUROC is its note)
    for label, r in labelled:
        s = r.summary
        if r is human and s.get(keys[0]) is None:
            auroc, folds = '<span class="n">the reference (human answers)</span>', "-"
        else:
            auroc = value_cell(r, keys[0], DIM, notes)
            caveat = s.get("human_likeness_note")
            if s.get(keys[0]) is not None and caveat:  # a value with a caveat: the caveat as a note too
                if caveat not in notes.texts:
                    notes.texts.append(caveat)
                auroc += f' <span class="why" title="{_e(caveat)}">(note {notes.texts.index(caveat) + 1})</span>'
            folds = _e(f"{s.get('human_likeness_n_folds', '-')} / {s.get('human_likeness_n_conversations', '-')}")
        rows.append([_e(label), auroc, folds, value_cell(r, keys[1], DIM, notes)])
    page.table(["run", "human_likeness_auroc [95 % CI]", "folds / conversations", "average_naturalness_score"], rows)
    page.add(notes.html())
    if any(isinstance(r.summary.get(k), float) for _, r in scored for k in keys):
        page.figure(f"{DIM}__values.png", "human_likeness_auroc (0.5 = indistinguishable) and average_naturalness_score, "
                    "95 % intervals", plots.bars_with_intervals("Distributional", list(keys),
                                                               [(label, r.summary) for label, r in scored]))
    s = run.summary
    contrib = s.get("human_likeness_contributions") or {}
    if contrib:
        page.add(f"<h3>What tells {_e(run.name)} from the human answers</h3>")
        page.add('<p class="small">Drop in held-out AUROC when the value is shuffled within each held-out fold '
                 f"(permutation importance); {len(s.get('human_likeness_features') or [])} features used.</p>")
        page.table(["per-answer value", "AUROC drop"],
                   [[f"<code>{_e(k)}</code>", fmt(v)] for k, v in list(contrib.items())[:TOP]])
    feats = _feature_rows(s)
    if feats:
        page.add("<h3>Per-feature baselines (stage 1)</h3>")
        tables = sorted({t for _, per in feats for t in per})
        head = ["feature", "mean P(human)"] + [f"{w} ({_e(t)})" for t in tables for w in ("accuracy", "AUROC")]
        body = []
        for f, per in feats[:TOP * 3]:
            cells = [f"<code>{_e(f)}</code>", value_cell(run, f"{f}__naturalness_score", DIM)]
            for t in tables:
                cells += [value_cell(run, f"{f}__accuracy__{t}", DIM), value_cell(run, f"{f}__auroc__{t}", DIM)]
            body.append(cells)
        page.table(head, body, "values")
    clusters = s.get("distributional_clusters") or {}
    for t, cl in clusters.items():
        page.add(f"<h3>Correlation clusters (stage 2, table {_e(t)})</h3>")
        page.table(["cluster", "features", "explained variance", "min |ρ| dev", "min |ρ| test", "validates in test"],
                   [[f"<code>{_e(c.get('name'))}</code>", _e(", ".join(c.get("features") or [])),
                     fmt(c.get("explained_variance_ratio")), fmt(c.get("dev_min_abs_spearman")),
                     fmt(c.get("test_min_abs_spearman")), _e(c.get("validates_in_test"))] for c in cl])
    said = set(notes.texts)
    notes = [s.get(k) for k in ("distributional_note", "average_naturalness_score_note", "human_likeness_note")
             if s.get(k) and s.get(k) not in said]
    base = s.get("distributional_baseline")
    if isinstance(base, dict):
        notes.append(f"baseline {base.get('file')} (sha256 {str(base.get('sha256'))[:16]}), tables "
                     f"{', '.join(base.get('tables') or [])}, ignored features {', '.join(base.get('ignored_features') or [])}")
    sources = _counts(run.ok_rows, "distrib_text_source"), _counts(run.ok_rows, "temporal_alignment_source")
    if any(sources):
        notes.append("text of the lexical features: " + (", ".join(f"{k} ({n})" for k, n in sources[0].items()) or "-")
                     + "; word times: " + (", ".join(f"{k} ({n})" for k, n in sources[1].items()) or "-"))
    for n in notes:
        page.add(f'<p class="small">{_e(n)}</p>')


def _feature_rows(summary: dict[str, Any]) -> list[tuple[str, set[str]]]:
    """``(feature, tables with an AUROC)`` of the summary's per-feature keys, highest AUROC first."""
    per: dict[str, dict[str, float]] = {}
    for k, v in summary.items():
        if "__auroc__" in k and not k.endswith(("_ci95", "_n")) and not k.startswith("general_"):
            f, t = k.split("__auroc__", 1)
            per.setdefault(f, {})[t] = v if isinstance(v, (int, float)) else float("nan")
    order = sorted(per, key=lambda f: (-max((x for x in per[f].values() if x == x), default=-1.0), f))
    return [(f, set(per[f])) for f in order]


def _counts(rows: Sequence[dict[str, Any]], key: str) -> dict[str, int]:
    out: dict[str, int] = {}
    for r in rows:
        v = r.get(key)
        if isinstance(v, str) and v:
            out[v] = out.get(v, 0) + 1
    return out
