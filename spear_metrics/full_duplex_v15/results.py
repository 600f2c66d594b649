"""Full-Duplex-Bench v1.5 runs as results datasets: what ``push-results`` checks and writes for a
``spearbench fdb score --version 1.5`` folder (``summary.json`` of all scored samples,
``per_sample.jsonl``), and the table of the leaderboard Space's v1.5 tab.

A run is recognised by ``summary.json`` ``"benchmark": "full_duplex_v15"`` (the registry's
:func:`~spear_metrics.core.registry.benchmark_of_summary`); :mod:`spear_metrics.results.validate`
hands it to the checks below (the descriptor's ``results``):

- the summary: counts, ``metrics == ["full_duplex_v15"]`` with a version this code reads, each
  declared key (:data:`~spear_metrics.full_duplex_v15.keys.KEYS`) present as a number or null,
  ``<key>_ci95`` an interval ``[lo, hi]`` or null, ``<key>_n`` a count;
- the rows (one per sample), read flat (:func:`table_rows`): ``row`` exactly ``0..n-1``, ``id``,
  ``subset``, ``status`` ``ok``/``failed``, the values numbers or null, the summary's counts;
- the summary recomputed from the ``ok`` rows (:func:`spear_metrics.full_duplex_v15.scoring.aggregate`,
  without resampling: the tag shares, the latency means, the 5 % trimmed means and their ``_n``;
  intervals and significance tests are not recomputed): an edited ``summary.json`` or row is refused.

The published table is flat (:func:`table_rows`): a sample's nested values (``general``: the
before/after features; ``transcripts``: the four word-timed transcripts) become columns
``<side>_<feature>`` and ``<name>_transcript`` (text) and ``<name>_words`` (JSON text of the
words with their times); ``behaviour`` is the judge's tags joined by ``,``. No torch, no model:
the light install reads these.
"""

from __future__ import annotations

import json
from typing import Any, Sequence

from spear_metrics.full_duplex_v15 import BENCHMARK, VERSION
from spear_metrics.results.validate import (
    ResultsError, check_benchmark_rows, check_key_values, check_recomputed, check_run_head, short_repr,
)

NAME = BENCHMARK.name
#: metric versions whose results this code reads
KNOWN_VERSIONS = frozenset({VERSION})
REQUIRED_SUMMARY_KEYS = ("n_samples", "n_scored", "n_failed", "metrics", "metric_versions", "benchmark")
#: the four transcripts of a sample (``transcripts`` of a per-sample record)
TRANSCRIPTS = ("input", "clean_input", "output", "clean_output")


def declared_keys() -> tuple[str, ...]:
    """Names of the declared keys that are not templates (``<side>_DNSMOS_<part>`` is one)."""
    from spear_metrics.full_duplex_v15.keys import KEYS

    return tuple(k.name for k in KEYS if "<" not in k.name)


def _mos_keys(summary: dict[str, Any]) -> tuple[str, ...]:
    """The project MOS keys a run scored (``pre_<key>`` in its summary that is no upstream feature)."""
    from spear_metrics.full_duplex_v15.features import FEATURE_KEYS

    out = []
    for k in summary:
        if k.startswith("pre_") and not k.endswith(("_n", "_ci95", "_note")):
            rest = k[len("pre_"):]
            if rest not in FEATURE_KEYS and rest != "cutoff_count":
                out.append(rest)
    return tuple(out)


def _value_keys(summary: dict[str, Any]) -> tuple[str, ...]:
    return (*declared_keys(), *(f"{s}_{m}" for m in _mos_keys(summary) for s in ("pre", "post", "clean")))


def flat_row(r: dict[str, Any]) -> dict[str, Any]:
    """One per-sample record as a row of the published table (see the module docstring); a row
    that is flat already is returned as it is. ``asr_source`` becomes JSON text."""
    if not any(isinstance(r.get(k), dict) for k in ("general", "transcripts", "asr_source")) \
            and not isinstance(r.get("behaviour"), list):
        return dict(r)
    out: dict[str, Any] = {}
    for k, v in r.items():
        if k == "general":
            for side, feats in (v or {}).items():
                if isinstance(feats, dict):
                    out.update({f"{side}_{f}": x for f, x in feats.items()})
                else:  # split_t, distractor_end, pre_dur_s, post_dur_s (s)
                    out[side] = feats
        elif k == "transcripts":
            for name, tr in (v or {}).items():
                out[f"{name}_transcript"] = (tr or {}).get("text")
                out[f"{name}_words"] = json.dumps((tr or {}).get("chunks") or [], ensure_ascii=False)
        elif k == "behaviour":
            out[k] = ",".join(v) if v else None
        elif k == "asr_source":
            out[k] = json.dumps(v, sort_keys=True) if v is not None else None
        else:
            out[k] = v
    return out


def table_rows(rows: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """The published per-sample table: :func:`flat_row` of each row."""
    return [flat_row(r) for r in rows]


def _values(r: dict[str, Any], summary: dict[str, Any]) -> dict[str, Any]:
    """A flat row back in the shape :func:`~spear_metrics.full_duplex_v15.scoring.aggregate` reads."""
    from spear_metrics.full_duplex_v15.features import FEATURE_KEYS, SIDES

    feats = (*FEATURE_KEYS, "cutoff_count", *_mos_keys(summary))
    tags = r.get("behaviour")
    return {"id": r.get("id"), "behaviour": [t for t in tags.split(",") if t] if isinstance(tags, str) else None,
            "stop_latency_s": r.get("stop_latency_s"), "response_latency_s": r.get("response_latency_s"),
            "general": {s: {k: r.get(f"{s}_{k}") for k in feats} for s in SIDES}}


def validate_summary(summary: Any, *, where: str = "results") -> None:
    """Check a v1.5 run's ``summary.json`` alone (:func:`~spear_metrics.results.validate.check_run_head`,
    then its declared keys and their values).

    Raises:
        ResultsError: one line naming the first problem.
    """
    check_run_head(summary, name=NAME, title=BENCHMARK.title, required=REQUIRED_SUMMARY_KEYS,
                   known_versions=KNOWN_VERSIONS, where=where)
    keys = _value_keys(summary)
    for k in declared_keys():
        if k not in summary:
            raise ResultsError(f"{where}: summary.json is missing column {k!r}")
    check_key_values(summary, keys, where=where)


def validate_rows(summary: dict[str, Any], rows: Sequence[dict[str, Any]], *, where: str = "results") -> None:
    """Check the per-sample rows (nested as ``per_sample.jsonl`` holds them, or flat as the
    published table) against themselves and the summary's counts.

    Raises:
        ResultsError: a missing column, a bad or repeated ``row`` id, an unknown status, a
            non-number under a key, counts that do not match.
    """
    def tags(r: dict[str, Any], rid: int) -> None:
        if r.get("behaviour") is not None and not isinstance(r["behaviour"], str):
            raise ResultsError(f"{where}: row {rid} value 'behaviour' is not a list of tags: {short_repr(r['behaviour'])}")

    check_benchmark_rows(summary, table_rows(rows), _value_keys(summary), where=where, row_check=tags)


def check_summary_values(summary: dict[str, Any], rows: Sequence[dict[str, Any]], *, where: str = "results",
                         use_options: bool = False) -> None:
    """Recompute each key and its ``<key>_n`` from the ``ok`` rows
    (:func:`spear_metrics.full_duplex_v15.scoring.aggregate`, no resampling) and compare (rel 1e-6).

    Raises:
        ResultsError: a value that differs from its recomputation.
    """
    from spear_metrics.full_duplex_v15.scoring import aggregate

    validate_summary(summary, where=where)
    validate_rows(summary, rows, where=where)
    ok = [_values(r, summary) for r in sorted(table_rows(rows), key=lambda r: r["row"]) if r["status"] == "ok"]
    got = aggregate(ok, n_resamples=0, mos_keys=_mos_keys(summary))
    check_recomputed(summary, got, _value_keys(summary), where=where)


def card_text(summary: dict[str, Any], *, model_name: str, split: str, n_rows: int, **_: Any) -> str:
    """The dataset card of a v1.5 results dataset: the ``spearbench:`` block (benchmark, model,
    versions, counts, the judge and the ASR) and the headline keys with their intervals."""
    from spear_metrics.core.summary import interval_text
    from spear_metrics.full_duplex_v15.scoring import HEADLINE
    from spear_metrics.results.write import results_card

    models = summary.get("models") or {}
    info = {
        "benchmark": NAME,
        "protocol": summary.get("protocol"),
        "subsets": summary.get("subsets"),
        "model_name": model_name,
        "metric_versions": dict(summary.get("metric_versions") or {}),
        "spearbench_version": summary.get("spearbench_version"),
        "n_samples": summary.get("n_samples"),
        "n_scored": summary.get("n_scored"),
        "n_failed": summary.get("n_failed"),
        "judge": models.get("behaviour"),
        "asr": models.get("asr"),
    }
    lines = [f"| `{k}` | {interval_text(summary.get(k), summary.get(f'{k}_ci95'), digits=4)} | "
             f"{summary.get(f'{k}_n', '-')} |" for k in HEADLINE]
    body = "\n".join([
        f"# Full-Duplex-Bench v1.5 results: {model_name}",
        "",
        f"**{model_name}** scored on Full-Duplex-Bench v1.5 (overlap handling) by `spearbench fdb score --version 1.5` "
        f"(spearbench {summary.get('spearbench_version')}).",
        "",
        f"- samples: {summary.get('n_samples')} (scored {summary.get('n_scored')}, failed {summary.get('n_failed')}); "
        f"per-sample table: `data/{split}-*.parquet` ({n_rows} rows; null = no value)",
        "- values with their 95 % bootstrap interval over samples [lo, hi]; `n` = samples with a value; "
        "UTMOSv2 keys are null (`unsupported`, see `utmosv2_note` in `summary.json`)",
        "",
        "| key | value [95 % interval] | n |",
        "|---|---|---|",
        *lines,
        "",
        "Load with `datasets.load_dataset(<this repo or folder>)`.",
        "",
    ])
    return results_card(info, pretty_name=f"SPEARBench Full-Duplex-Bench v1.5 results: {model_name}",
                        tags=["spearbench", "full-duplex-bench", "evaluation-results"], split=split, body=body)


def audio_files(rows: Sequence[dict[str, Any]], *, answers: bool, inputs: bool) -> dict[str, list[Any]]:
    """What ``push-results --with-audio`` (``answers``: ``output_audio``, ``clean_output_audio``)
    and ``--with-inputs`` (``input_audio``, ``clean_input_audio``) embed for each flat row:
    ``(sample folder, file name)`` (the sample folder is the one of the row's ``audio_path``; the
    file is read inside it only), ``None`` for a row without one."""
    from pathlib import Path

    names = {**({"input_audio": "input.wav", "clean_input_audio": "clean_input.wav"} if inputs else {}),
             **({"output_audio": "output.wav", "clean_output_audio": "clean_output.wav"} if answers else {})}
    dirs = [Path(r["audio_path"]).parent if r.get("audio_path") else None for r in rows]
    return {col: [(d, name) if d is not None else None for d in dirs] for col, name in names.items()}


def tie_spec():
    """The tie groups of the v1.5 table (:class:`spear_metrics.reports.runs.TieSpec`): rows paired
    by ``<subset>/<id>``, samples resampled one by one, each key's declared direction
    (:data:`~spear_metrics.full_duplex_v15.keys.KEYS`). Of the headline keys only the latencies
    (means over samples, lower is better) get a tie group: the tag shares and the features are
    ``task_dependent`` (no better direction), and the features are trimmed means, not means."""
    from spear_metrics.full_duplex_v15.keys import KEYS
    from spear_metrics.reports.runs import TieSpec

    better = {k.name: k.better for k in KEYS}
    return TieSpec(row_id=lambda r: f"{r.get('subset')}/{r.get('id')}", better=better.get, unit="sample",
                   columns=("id", "subset", "status"))


#: the v1.5 keys whose value is a mean of per-sample values (the others are shares of tags or trimmed means)
MEAN_KEYS = ("stop_latency_s", "response_latency_s")


def leaderboard_frame(results: Sequence[Any]):
    """The Space's Full-Duplex-Bench v1.5 table: one row per loaded v1.5 results dataset, columns
    ``model``, ``samples``, then each headline key with its interval (``-`` = missing), ``source``.
    With two datasets or more, the latencies (:data:`MEAN_KEYS`) carry their tie mark and rank
    interval (★ best, ≈ tied with the best over the samples every dataset scored,
    :func:`spear_metrics.reports.runs.results_tie_cells` with :func:`tie_spec`); a tag share from
    fewer than 10 judged samples carries its few-events mark."""
    import pandas as pd

    from spear_metrics.core.summary import interval_text
    from spear_metrics.full_duplex_v15.scoring import HEADLINE
    from spear_metrics.reports.runs import marked, results_tie_cells

    mine = [r for r in results if r.summary.get("benchmark") == NAME]
    marks = results_tie_cells(mine, MEAN_KEYS, spec=tie_spec())
    data = []
    for r in mine:
        s = r.summary
        data.append([r.model, s.get("n_samples", "-"),
                     *[marked(interval_text(s.get(k), s.get(f"{k}_ci95"), digits=3), marks.get(r.source, {}).get(k, ""),
                              s, k) for k in HEADLINE], r.source])
    return pd.DataFrame(data, columns=["model", "samples", *HEADLINE, "source"])
