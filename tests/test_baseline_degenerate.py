"""fit-baseline on degenerate dev features: a feature constant within each side (it crashed with
an IndexError inside sklearn's LDA), one whose within-side spread is rounding noise (it wrote a
coefficient of -9e31), and a fit on 2 + 2 answers (done without a word)."""

from __future__ import annotations

import json

import numpy as np

from spear_metrics.distributional.baseline import fit_feature


def test_constant_and_near_constant_features_are_skipped_with_a_reason():
    h, m = np.array([1.0, 1.0, 1.0]), np.array([2.0, 2.0, 2.0])
    assert fit_feature(h, m) == "constant_within_each_side"
    assert fit_feature(np.array([1.0, 1.0, 1.0 + 1e-12]), m) == "constant_within_each_side"
    # a real spread on each side still fits: the discriminant's sign says "low values are human"
    fit = fit_feature(np.array([1.0, 1.2, 0.9]), np.array([2.0, 2.1, 1.7]))
    assert isinstance(fit, dict) and fit["coef"] < 0 and abs(fit["coef"]) < 1e3


def _run(d, f0s, ttrs):
    d.mkdir()
    rows = [{"row": i, "audio_path": f"c{i}.wav", "answer_audio_path": f"a{i}.wav", "f0_mean_p10_p90": f0,
             "lexical_ttr": ttr, "status": "ok", "error": None} for i, (f0, ttr) in enumerate(zip(f0s, ttrs))]
    (d / "per_sample.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (d / "summary.json").write_text(json.dumps({"metrics": ["distributional"], "n_samples": len(rows),
                                                "n_scored": len(rows)}))


def test_fit_baseline_skips_a_constant_feature_and_warns_on_two_answers_a_side(tmp_path, capsys):
    """lexical_ttr is 0.5 for every human answer and 0.9 for every model answer (constant within
    each side): skipped with its reason, the run goes on; f0 is fitted. 2 + 2 answers: a warning."""
    from spear_metrics.cli import main

    _run(tmp_path / "human", [110.0, 130.0], [0.5, 0.5])
    _run(tmp_path / "model", [180.0, 200.0], [0.9, 0.9])
    rc = main(["fit-baseline", "--model-run", str(tmp_path / "model"), "--human-run", str(tmp_path / "human")])
    err = capsys.readouterr().err
    assert rc == 0, err
    assert "warning" in err and "2 human and 2 model dev answers" in err
    base = json.loads((tmp_path / "model" / "distributional_baseline.json").read_text())
    (table,) = base["tables"].values()
    assert table["skipped"]["lexical_ttr"] == "constant_within_each_side"
    assert "f0_mean_p10_p90" in table["features"]
