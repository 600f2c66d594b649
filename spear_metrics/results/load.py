"""Reading results datasets back (the Space, reports) and THE rule of what the Space may read.

:func:`load_results` loads a results dataset (a folder written by ``push-results --local-dir``
or a Hub dataset id) for a trusted caller. The Space reads only through :class:`SourcePolicy`:
the sources it was started with (by their public label) and Hub dataset ids, never a server
path typed into the page or its API, and its messages carry no server path.
"""

from __future__ import annotations

import json
import math
import os
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Sequence

if TYPE_CHECKING:  # imported where a table is built: every CLI start imports this package
    import pandas as pd

from spear_metrics.results.hub import is_repo_id, shorten
from spear_metrics.results.paths import public_text
from spear_metrics.results.validate import INFERENCE_MODES, PROTOCOL, ResultsError, is_number, validate_run

#: What a raw scored folder is told (it is not a results dataset).
RAW_FOLDER_HINT = ("a scored RESULTS folder, not a results dataset: write one with `spearbench push-results "
                   "RESULTS --local-dir DIR --model-name NAME --metadata METADATA.csv` and load DIR")


@dataclass
class Results:
    """One loaded results dataset.

    Attributes:
        source: its public label (a Hub id, or ``local:<folder name>`` for a folder).
        model: display name; ``inference_mode`` / ``open_weights`` as in the card (``None`` = not given).
        summary: the run's summary dict.
        samples: per-sample table (pandas; missing values are NaN/None, never 0), audio columns
            hold ``{"bytes", "path"}`` dicts or ``None``.
        report: the dataset's ``report/index.html`` (``spearbench report``), ``None`` without one.
    """

    source: str
    model: str
    inference_mode: str | None
    open_weights: bool | None
    summary: dict[str, Any]
    samples: pd.DataFrame
    split: str = "test"
    audio_columns: list[str] = field(default_factory=list)
    report: Path | None = None


def _card_info(folder: Path, where: str) -> dict[str, Any]:
    readme = folder / "README.md"
    if not readme.is_file():
        return {}
    from huggingface_hub import DatasetCard

    try:
        data = DatasetCard.load(readme).data.to_dict()
    except Exception as e:  # a broken YAML header
        raise ResultsError(f"{where}: README.md card cannot be parsed: {shorten(' '.join(str(e).split()), 200)}") from None
    info = data.get("spearbench") or {}
    return info if isinstance(info, dict) else {}


def load_results_folder(folder: str | os.PathLike, *, where: str) -> Results:
    """Load the results dataset in ``folder``; ``where`` names it in messages and in
    :attr:`Results.source` (never the folder's path unless the caller passes it).

    Checks: the card's inference mode, and every check of
    :func:`~spear_metrics.results.validate.validate_run` (the summary against its rows, without
    options).

    Raises:
        ResultsError: not a results dataset (a raw scored folder is told how to make one), or
            its content fails a check.
    """
    folder = Path(folder)
    if not folder.is_dir():
        raise ResultsError(f"{where}: not a folder")
    if (folder / "per_sample.jsonl").is_file():
        raise ResultsError(f"{where}: {RAW_FOLDER_HINT}")
    parquets = sorted((folder / "data").glob("*.parquet")) if (folder / "data").is_dir() else []
    if not (folder / "summary.json").is_file() or not parquets:
        raise ResultsError(f"{where}: not a results dataset (needs summary.json and data/*.parquet, "
                           "as `spearbench push-results` writes)")
    try:
        summary = json.loads((folder / "summary.json").read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ResultsError(f"{where}: summary.json is not valid JSON: {' '.join(str(e).split())}") from None
    info = _card_info(folder, where)
    from datasets import Audio, load_dataset

    try:
        # a private cache per load: datasets' cache key of a local folder ignores its absolute path,
        # so another folder of the same name (or one rewritten in place) would load stale rows
        with tempfile.TemporaryDirectory(prefix="spearbench-load-") as cache:
            dd = load_dataset(str(folder), cache_dir=cache, keep_in_memory=True)
    except Exception as e:
        raise ResultsError(f"{where}: cannot load the parquet data: "
                           f"{shorten(public_text(' '.join(str(e).split()), [folder]) or '', 200)}") from None
    split = info.get("split") or next(iter(dd))
    ds = dd[split] if split in dd else dd[next(iter(dd))]
    audio_cols = [c for c, f in ds.features.items() if isinstance(f, Audio)]
    for c in audio_cols:
        ds = ds.cast_column(c, Audio(decode=False))
    rows = ds.to_list()
    validate_run(summary, [{k: v for k, v in r.items() if k not in audio_cols} for r in rows], where=where)
    mode = info.get("inference_mode")
    if mode is not None and mode not in INFERENCE_MODES + ("Human",):
        raise ResultsError(f"{where}: card inference_mode {mode!r} is not one of {', '.join(INFERENCE_MODES)}")
    ow = info.get("open_weights")
    rows.sort(key=lambda r: r["row"])
    report = folder / "report" / "index.html"
    import pandas as pd

    return Results(where, str(info.get("model_name") or folder.name), mode, ow if isinstance(ow, bool) else None,
                   summary, pd.DataFrame(rows), split=split, audio_columns=audio_cols,
                   report=report if report.is_file() else None)


def load_hub_results(repo_id: str) -> Results:
    """Fetch the Hub results dataset ``repo_id`` (``huggingface_hub.snapshot_download``: honours
    ``HF_HUB_OFFLINE`` and the cache; only the card, ``summary.json``, the parquet files and the
    report's page and PNGs) and load it.

    Raises:
        ResultsError: not a repository id, cannot be fetched (the message names the error type
            only: its text may hold cache paths), or :func:`load_results_folder` refuses it.
    """
    if not is_repo_id(repo_id):
        raise ResultsError(f"{shorten(repo_id, 80)}: not a Hub dataset id OWNER/NAME")
    try:
        from huggingface_hub import snapshot_download

        folder = snapshot_download(repo_id, repo_type="dataset",
                                   allow_patterns=["README.md", "summary.json", "data/*.parquet",
                                                   "report/index.html", "report/*.png"])
    except Exception as e:
        raise ResultsError(f"{repo_id}: cannot fetch the Hub dataset ({type(e).__name__})") from None
    return load_results_folder(folder, where=repo_id)


def load_results(source: str | os.PathLike) -> Results:
    """Load a results dataset from a local folder (when ``source`` exists here) or a Hub id, for
    a trusted caller (a local script; the Space uses :class:`SourcePolicy`).

    Raises:
        ResultsError: not found, not a results dataset, or its content fails a check.
    """
    src = str(source).strip()
    folder = Path(src).expanduser()
    if folder.exists():
        return load_results_folder(folder, where=src)
    if not is_repo_id(src):
        raise ResultsError(f"{src}: no such folder, and not a Hub dataset id OWNER/NAME")
    return load_hub_results(src)


class SourcePolicy:
    """THE place that decides what the Space may read.

    - Sources given at start (``SPEARBENCH_RESULTS``, ``--results``): local folders (read as
      results datasets) and Hub ids. Each has a public label: the Hub id, or
      ``local:<folder name>`` (``-2``, ``-3``... when names repeat); the page and the API show
      and take labels, never the folder's path.
    - A name typed in the page or passed to the API: the label of a start source, or a Hub
      dataset id (fetched from the Hub, never looked up on the server's disk). Anything else is
      refused with the same message whether or not such a path exists on the server.
    - Messages name the label or the typed name, never a server path (a last pass removes any
      absolute path: :func:`~spear_metrics.results.paths.public_text`).

    Loaded results are cached by label for the life of the process.
    """

    def __init__(self, start: Sequence[str] = ()):
        self._local: dict[str, Path] = {}
        self._start_labels: list[str] = []
        self._start_errors: dict[str, str] = {}
        self._cache: dict[str, Results] = {}
        for entry in start:
            entry = str(entry).strip()
            if not entry:
                continue
            path = Path(entry).expanduser()
            if path.exists() or not is_repo_id(entry):
                label = self._new_label(path.name or "folder")
                self._local[label] = path
            else:
                label = entry
            if label not in self._start_labels:
                self._start_labels.append(label)

    def _new_label(self, name: str) -> str:
        base = f"local:{name}"
        label, n = base, 1
        while label in self._local:
            n += 1
            label = f"{base}-{n}"
        return label

    @property
    def start_labels(self) -> list[str]:
        """Labels of the start sources, in start order."""
        return list(self._start_labels)

    def resolve(self, name: str) -> str:
        """The label ``name`` stands for: a start label, or a Hub id.

        Raises:
            ResultsError: anything else (one line, the same whether or not a server path exists).
        """
        name = str(name or "").strip()
        if name in self._start_labels or name in self._local:
            return name
        if is_repo_id(name):
            return name
        return self._refuse(name)

    @staticmethod
    def _refuse(name: str) -> str:
        shown = public_text(shorten(name, 80)) or ""  # a typed absolute path is echoed in its public form
        raise ResultsError(f"{shown!r}: not a source this Space was started with, nor a Hub dataset id "
                           "OWNER/NAME (server folders are read only when given at start)")

    def load(self, name: str) -> Results:
        """Load (cached) the source ``name`` stands for (:meth:`resolve`).

        Raises:
            ResultsError: refused or invalid, with a message free of server paths.
        """
        label = self.resolve(name)
        if label in self._cache:
            return self._cache[label]
        try:
            if label in self._local:
                res = load_results_folder(self._local[label], where=label)
            else:
                res = load_hub_results(label)
        except ResultsError as e:
            raise ResultsError(self.public(str(e))) from None
        except Exception as e:  # never let one source break the page
            raise ResultsError(self.public(f"{label}: {type(e).__name__}: {' '.join(str(e).split())}")) from None
        self._cache[label] = res
        return res

    def public(self, message: str) -> str:
        """``message`` without server paths (start folders by label, any other absolute path by
        its public form), whitespace collapsed, cut at a word boundary."""
        from spear_metrics.core.secrets import mask_secrets

        text = mask_secrets(" ".join(message.split()))
        for label, path in sorted(self._local.items(), key=lambda kv: -len(str(kv[1]))):
            text = text.replace(f"local:{path}", label).replace(str(path), label)
        return shorten(public_text(text) or "", 400)

    def load_many(self, names: Sequence[str]) -> tuple[list[Results], list[str]]:
        """Load each source; returns the loaded ones and one message per refused one
        (``"rejected NAME: reason"``, NAME = the label or typed name)."""
        ok, errors = [], []
        for n in names:
            try:
                ok.append(self.load(n))
            except ResultsError as e:
                errors.append(f"rejected {e}")
        return ok, errors


def leaderboard_row(res: Results) -> dict[str, Any]:
    """One leaderboard row of a loaded results source: the published CSV's columns
    (``protocol, model, inference_mode, open_weights`` then every published SPEAR key;
    ``None`` = missing), and for each key its ``<key>_ci95`` (``[lo, hi]`` or ``None``) and
    ``<key>_n`` (units that entered it, ``None`` when the summary has no count)."""
    from spear_metrics.core.columns import leaderboard_columns

    row: dict[str, Any] = {
        "protocol": PROTOCOL,
        "model": res.model,
        "inference_mode": res.inference_mode,
        "open_weights": res.open_weights,
    }
    for c in leaderboard_columns():
        v = res.summary.get(c.name)
        row[c.name] = float(v) if is_number(v) and math.isfinite(float(v)) else None
        ci, n = res.summary.get(f"{c.name}_ci95"), res.summary.get(f"{c.name}_n")
        row[f"{c.name}_ci95"] = [float(x) for x in ci] if isinstance(ci, list) and len(ci) == 2 and all(
            is_number(x) for x in ci) else None
        row[f"{c.name}_n"] = n if is_number(n) else None
    return row
