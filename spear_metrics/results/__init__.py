"""Results datasets: one model's scored run (``RESULTS/``) published as a Hugging Face dataset,
checked, and read back by the Space.

Layout of a results dataset (the Hub repository, or the folder written with ``--local-dir``)::

    README.md                         dataset card; YAML: configs (parquet split), ``spearbench:``
                                      block (model name, inference mode, open weights, protocol,
                                      split, metric versions, the models that scored it, the
                                      options it was scored with, counts)
    summary.json                      the run's ``summary.json`` (local paths made public)
    data/<split>-00000-of-00001.parquet
                                      one row per metadata row: ``row``, ``audio_path``,
                                      ``answer_audio_path`` (relative, never a local absolute
                                      path), the per-sample values of ``per_sample.jsonl``
                                      (null stays null; notes are text), ``status``, ``error``;
                                      with ``--metadata``: the SPEAR metadata columns and ``subset``;
                                      with ``--with-audio``: ``answer_audio`` (``datasets.Audio``,
                                      bytes embedded); with ``--with-inputs``: ``input_audio``;
                                      audio only in rows scored ``ok`` whose file decodes as
                                      audio (paths resolved as ``score`` does), null elsewhere.

The package is split by job:

- :mod:`.validate` — what a run must satisfy (columns, kinds, rows ``0..n-1``, counts, the
  summary recomputed from its rows) and :class:`ResultsError`;
- :mod:`.write` — the dataset folder and its card; :mod:`.paths` — public paths;
- :mod:`.push` and :mod:`.hub` — uploads (the token rule);
- :mod:`.load` — reading datasets back, and :class:`SourcePolicy`, what the Space may read.

Columns (group, unit, direction, published or project key) come from
:mod:`spear_metrics.core.columns`. Nothing here imports torch or a model library: the light
install (``pip install spearbench``) reads, checks, writes and shows results.
"""

from spear_metrics.results.load import (
    RAW_FOLDER_HINT,
    Results,
    SourcePolicy,
    expand_results_folders,
    leaderboard_row,
    load_hub_results,
    load_results,
    load_results_folder,
)
from spear_metrics.results.paths import public_path, public_text, public_value
from spear_metrics.results.push import push_results
from spear_metrics.results.validate import (
    BASE_SAMPLE_COLUMNS,
    INFERENCE_MODES,
    METADATA_COLUMNS,
    PROTOCOL,
    REQUIRED_SUMMARY_KEYS,
    SPLITS,
    TEXT_SAMPLE_COLUMNS,
    ResultsError,
    check_summary_values,
    read_run,
    validate_rows,
    validate_run,
    validate_summary,
)
from spear_metrics.results.write import subset_of, write_results_dataset

__all__ = [
    "BASE_SAMPLE_COLUMNS", "INFERENCE_MODES", "METADATA_COLUMNS", "PROTOCOL", "RAW_FOLDER_HINT",
    "REQUIRED_SUMMARY_KEYS", "SPLITS", "TEXT_SAMPLE_COLUMNS", "Results", "ResultsError", "SourcePolicy",
    "check_summary_values", "expand_results_folders", "leaderboard_row", "load_hub_results", "load_results", "load_results_folder",
    "public_path", "public_text", "public_value", "push_results", "read_run", "subset_of", "validate_rows",
    "validate_run", "validate_summary", "write_results_dataset",
]
