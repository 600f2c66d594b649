"""Reading results datasets back (the Space, reports) and THE rule of what the Space may read.

:func:`load_results` loads a results dataset (a folder written by ``push-results --local-dir``
or a Hub dataset id) for a trusted caller. The Space reads only through :class:`SourcePolicy`:
the sources it was started with (by their public label) and Hub dataset ids, never a server
path typed into the page or its API, and its messages carry no server path.
"""

from __future__ import annotations

import math
import os
import re
import tempfile
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Sequence, TypeVar

if TYPE_CHECKING:  # imported where a table is built: every CLI start imports this package
    import pandas as pd

from spear_metrics.results.hub import is_repo_id, shorten
from spear_metrics.results.paths import public_text
from spear_metrics.results.validate import INFERENCE_MODES, PROTOCOL, ResultsError, is_number, validate_run

T = TypeVar("T")

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
    #: the real folder every file of the dataset must resolve inside (:func:`contained_file`)
    root: Path | None = None

    def read_report(self) -> bytes | None:
        """The report page's bytes, read only when its real path is still a regular file inside
        :attr:`root` (checked now, when it is served: a link swapped in since loading is refused)
        and holds at most :data:`MAX_REPORT_BYTES`; ``None`` otherwise."""
        if self.report is None:
            return None
        real = contained_file(self.report, self.root) if self.root is not None else self.report
        if real is None:
            return None
        from spear_datasets.files import read_limited

        try:
            return read_limited(real, MAX_REPORT_BYTES)  # a page past the limit is not served
        except (OSError, ValueError):
            return None


def contained_file(path: str | os.PathLike, root: str | os.PathLike) -> Path | None:
    """THE path rule of what the Space reads from disk: ``path`` resolved (every link followed,
    :func:`os.path.realpath`) when the result is a regular file inside ``root`` resolved the
    same way; ``None`` for anything else (a link leading out, a missing file, a folder)."""
    real = Path(os.path.realpath(path))
    base = os.path.realpath(root)
    if not (str(real) == base or str(real).startswith(base.rstrip(os.sep) + os.sep)):
        return None
    return real if real.is_file() else None


def _inside(path: str | os.PathLike, root: str | os.PathLike) -> bool:
    real, base = os.path.realpath(path), os.path.realpath(root)
    return real == base or real.startswith(base.rstrip(os.sep) + os.sep)


def _outside_links(folder: Path, root: str | os.PathLike) -> list[str]:
    """Links under ``folder`` (its work folder aside; links are listed, never followed) whose
    real path leaves ``root``, and ``folder`` itself when it does."""
    if not _inside(folder, root):
        return ["."]
    bad = []
    for top, dirs, files in os.walk(folder, followlinks=False):
        rel_top = Path(top).relative_to(folder)
        if rel_top.parts[:1] == (".work",):
            dirs[:] = []
            continue
        for name in [*dirs, *files]:
            p = Path(top) / name
            if p.is_symlink() and not _inside(p, root):
                bad.append((rel_top / name).as_posix())
    return sorted(bad)


#: the largest results card (``README.md``) and report page read (bytes): a Hub dataset is anyone's
MAX_CARD_BYTES = 4 * 2 ** 20
MAX_REPORT_BYTES = 64 * 2 ** 20


def _card_info(folder: Path, where: str) -> dict[str, Any]:
    """The ``spearbench:`` block of the results card (``README.md``; ``{}`` without one).

    Raises:
        ResultsError: a card over :data:`MAX_CARD_BYTES` or whose YAML header cannot be parsed."""
    readme = folder / "README.md"
    if not readme.is_file():
        return {}
    if readme.stat().st_size > MAX_CARD_BYTES:  # a regular file (is_file): its size is what a read gets
        raise ResultsError(f"{where}: README.md card is over the {MAX_CARD_BYTES}-byte limit: not read")
    from huggingface_hub import DatasetCard

    try:
        data = DatasetCard.load(readme).data.to_dict()
    except Exception as e:  # a broken YAML header
        raise ResultsError(f"{where}: README.md card cannot be parsed: {shorten(' '.join(str(e).split()), 200)}") from None
    info = data.get("spearbench") or {}
    return info if isinstance(info, dict) else {}


def looks_like_results_dataset(folder: str | os.PathLike) -> bool:
    """``folder`` holds ``summary.json`` and ``data/*.parquet`` (what ``push-results`` writes);
    no content is read."""
    f = Path(folder)
    return (f / "summary.json").is_file() and (f / "data").is_dir() and any((f / "data").glob("*.parquet"))


def expand_results_folders(sources: Sequence[str]) -> tuple[list[str], list[str]]:
    """``sources`` (results datasets given at start: folders or Hub ids) with every *parent*
    folder replaced by the results datasets directly inside it, and one message per replaced
    folder saying so and what to pass instead.

    A parent folder is a local folder that is neither a results dataset
    (:func:`looks_like_results_dataset`) nor a scored ``RESULTS/`` folder (``per_sample.jsonl``)
    and whose sub-folders include results datasets, e.g. ``DEMO_OUT/datasets`` (one per system);
    its sub-folders are taken in name order. Anything else is returned unchanged (it is loaded,
    or refused with its reason, as before); a scored ``RESULTS/`` folder and a path that does not
    exist (read as a Hub id when it has that form) also get a message, so that the console says
    at start what the page would say only when opened.
    """
    out: list[str] = []
    messages: list[str] = []
    for src in sources:
        p = Path(str(src)).expanduser()
        if p.is_dir() and not looks_like_results_dataset(p) and not (p / "per_sample.jsonl").is_file():
            # links are listed, never walked into (the Space's path rule)
            inside = sorted(c for c in p.iterdir() if c.is_dir() and not c.is_symlink() and looks_like_results_dataset(c))
            if inside:
                names = " ".join(str(c) for c in inside)
                messages.append(f"--results {src} is a folder of {len(inside)} results datasets, not one: loading each "
                                f"of them ({', '.join(c.name for c in inside)}); to choose, pass them one by one: "
                                f"--results {names}")
                out += [str(c) for c in inside]
                continue
            raw = sorted(c.name for c in p.iterdir() if c.is_dir() and (c / "per_sample.jsonl").is_file())
            if raw:
                messages.append(f"--results {src} holds scored RESULTS folders ({', '.join(raw)}), not results datasets: "
                                "write one per run with `spearbench push-results RESULTS --local-dir DIR` (the demo "
                                "writes them to DEMO_OUT/datasets) and pass those")
        elif (p / "per_sample.jsonl").is_file() and not looks_like_results_dataset(p):  # a scored RESULTS folder
            messages.append(f"--results {src} is a scored RESULTS folder, not a results dataset: write one with "
                            f"`spearbench push-results {src} --local-dir DIR --model-name NAME` and pass DIR")
        elif not p.exists():
            messages.append(f"--results {src} is not a folder here: reading it as the Hub dataset {src}"
                            if is_repo_id(str(src)) else f"--results {src}: no such folder")
        out.append(str(src))
    return out, messages


def load_results_folder(folder: str | os.PathLike, *, where: str, root: str | os.PathLike | None = None) -> Results:
    """Load the results dataset in ``folder``; ``where`` names it in messages and in
    :attr:`Results.source` (never the folder's path unless the caller passes it).

    ``root``: the folder every file read must resolve inside (default ``folder`` itself); a
    file whose real path leaves it (a link to ``/etc/passwd``...) makes the dataset refused, and
    the report is checked again when it is served (:meth:`Results.read_report`).

    Checks: the card's inference mode, and every check of
    :func:`~spear_metrics.results.validate.validate_run` (the summary against its rows, without
    options).

    Raises:
        ResultsError: not a results dataset (a raw scored folder is told how to make one), a
            file leading outside ``root``, or its content fails a check.
    """
    folder = Path(folder)
    if not folder.is_dir():
        raise ResultsError(f"{where}: not a folder")
    root = Path(os.path.realpath(root if root is not None else folder))
    outside = _outside_links(folder, root)
    if outside:
        raise ResultsError(f"{where}: {outside[0]} leads outside the dataset's folder (a link): not read")
    if (folder / "per_sample.jsonl").is_file():
        raise ResultsError(f"{where}: {RAW_FOLDER_HINT}")
    parquets = sorted((folder / "data").glob("*.parquet")) if (folder / "data").is_dir() else []
    if not (folder / "summary.json").is_file() or not parquets:
        raise ResultsError(f"{where}: not a results dataset (needs summary.json and data/*.parquet, "
                           "as `spearbench push-results` writes)")
    from spear_metrics.results.validate import read_summary_file

    summary = read_summary_file(folder / "summary.json", where=where)  # bounded: a Hub dataset is anyone's
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
    report = contained_file(folder / "report" / "index.html", root)
    import pandas as pd

    return Results(where, str(info.get("model_name") or folder.name), mode, ow if isinstance(ow, bool) else None,
                   summary, pd.DataFrame(rows), split=split, audio_columns=audio_cols, report=report, root=root)


#: Total time (s) a fetch of a Hub results dataset may take (``huggingface_hub`` timeouts are per
#: read: a server trickling bytes would hold the caller forever).
HUB_DEADLINE_S = 120.0


def within_deadline(fetch: Callable[[], T], deadline_s: float, what: str) -> T:
    """``fetch()`` in a worker thread, waited for at most ``deadline_s`` s in all (a total deadline,
    whatever the per-read timeouts below it); the thread is left to end on its own after it.

    Raises:
        ResultsError: ``<what> took longer than N s``, or ``<what> (<error type>)`` (the
            type only: the error's text may hold cache paths).
    """
    import concurrent.futures

    pool = concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="spearbench-hub")
    future = pool.submit(fetch)
    pool.shutdown(wait=False)
    try:
        return future.result(timeout=deadline_s)
    except concurrent.futures.TimeoutError:
        raise ResultsError(f"{what} took longer than {deadline_s:g} s (total deadline)") from None
    except Exception as e:
        raise ResultsError(f"{what} ({type(e).__name__})") from None


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
    from huggingface_hub import snapshot_download

    folder = within_deadline(lambda: snapshot_download(repo_id, repo_type="dataset",
                                                       allow_patterns=["README.md", "summary.json", "data/*.parquet",
                                                                       "report/index.html", "report/*.png"]),
                             HUB_DEADLINE_S, f"{repo_id}: cannot fetch the Hub dataset")
    # a cache snapshot's files are links into the repository's blobs/: that repository folder is the root
    return load_results_folder(folder, where=repo_id, root=Path(folder).parent.parent)


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


#: The words of every refusal of a typed source (:meth:`SourcePolicy.resolve`).
REFUSAL = ("not a source this Space was started with, nor a Hub dataset id OWNER/NAME (server folders are read "
           "only when given at start)")
#: A typed name shown back in a refusal: a plain word (no separator, no leading dot or tilde).
_PLAIN_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.:@+-]{0,63}")


#: Hub results datasets a Space keeps loaded besides its start sources (least recently used evicted).
MAX_CACHED_HUB = 16
#: Sources not yet loaded that one page action or API call may fetch.
MAX_NEW_PER_CALL = 4


class SourcePolicy:
    """THE place that decides what the Space may read.

    - Sources given at start (``SPEARBENCH_RESULTS``, ``--results``): local folders (read as
      results datasets) and Hub ids. Each has a public label: the Hub id, or
      ``local:<folder name>`` (``-2``, ``-3``... when names repeat); the page and the API show
      and take labels, never the folder's path.
    - A name typed in the page or passed to the API: the label of a start source, or a Hub
      dataset id (fetched from the Hub, never looked up on the server's disk). Anything else is
      refused with the same words for every path (:data:`REFUSAL`; nothing of the path is
      echoed), whether or not it exists, under a start folder or not.
    - Every file read from disk resolves (links followed) inside its source's folder
      (:func:`contained_file`); the report is checked again when served.
    - Messages name the label or the typed name, never a server path (a last pass removes any
      absolute path: :func:`~spear_metrics.results.paths.public_text`).

    Loaded results are cached by label: start sources for the life of the process, Hub ids typed
    in the page or the API in a least-recently-used cache of :data:`MAX_CACHED_HUB` entries. One
    call (:meth:`load_many`) fetches at most :data:`MAX_NEW_PER_CALL` sources not already loaded;
    the rest are refused with a reason, so one unauthenticated request cannot make the server
    fetch and keep any number of Hub datasets.
    """

    def __init__(self, start: Sequence[str] = ()):
        self._local: dict[str, Path] = {}
        self._start_labels: list[str] = []
        self._start_errors: dict[str, str] = {}
        self._cache: dict[str, Results] = {}
        self._lock = threading.Lock()  # the Space serves requests from several threads
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
        # nothing of a path is echoed: the words are the same for every refused path, whether it
        # exists, lies under a start folder or not (only a plain word is named back)
        shown = repr(name) if _PLAIN_NAME.fullmatch(name) else "a path"
        raise ResultsError(f"{shown}: {REFUSAL}")

    def load(self, name: str) -> Results:
        """Load (cached) the source ``name`` stands for (:meth:`resolve`).

        Raises:
            ResultsError: refused or invalid, with a message free of server paths.
        """
        label = self.resolve(name)
        with self._lock:
            if label in self._cache:
                self._cache[label] = res = self._cache.pop(label)  # most recently used last
                return res
        try:
            if label in self._local:
                res = load_results_folder(self._local[label], where=label)
            else:
                res = load_hub_results(label)
        except ResultsError as e:
            raise ResultsError(self.public(str(e))) from None
        except Exception as e:  # never let one source break the page
            raise ResultsError(self.public(f"{label}: {type(e).__name__}: {' '.join(str(e).split())}")) from None
        with self._lock:
            self._cache[label] = res
            hub = [k for k in self._cache if k not in self._start_labels]
            for k in hub[: max(0, len(hub) - MAX_CACHED_HUB)]:  # least recently used first
                del self._cache[k]
        return res

    def public(self, message: str) -> str:
        """``message`` without server paths (start folders by label, any other absolute path by
        its public form), whitespace collapsed, cut at a word boundary."""
        from spear_metrics.core.secrets import mask_secrets

        text = mask_secrets(" ".join(message.split()))
        for label, path in sorted(self._local.items(), key=lambda kv: -len(str(kv[1]))):
            # the whole path only (not a prefix of a longer name: /data/res2 is not local:res + "2")
            whole = re.compile(r"(?<![\w./~-])(?:local:)?" + re.escape(str(path)) + r"(?![\w.~-])")
            text = whole.sub(lambda m: label, text)
        return shorten(public_text(text) or "", 400)

    def load_many(self, names: Sequence[str]) -> tuple[list[Results], list[str]]:
        """Load each source; returns the loaded ones and one message per refused one
        (``"rejected NAME: reason"``, NAME = the label or typed name). Sources beyond the
        :data:`MAX_NEW_PER_CALL` th one not yet loaded are refused unfetched."""
        ok, errors, new = [], [], 0
        for n in names:
            try:
                label = self.resolve(n)
                if label not in self._cache and label not in self._start_labels:
                    new += 1
                    if new > MAX_NEW_PER_CALL:
                        raise ResultsError(f"{label}: not fetched: at most {MAX_NEW_PER_CALL} new Hub datasets "
                                           "per request (ask again for the rest)")
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
        "onset_kind": res.summary.get("onset_kind") or "unstated",
    }
    for c in leaderboard_columns():
        v = res.summary.get(c.name)
        row[c.name] = float(v) if is_number(v) and math.isfinite(float(v)) else None
        ci, n = res.summary.get(f"{c.name}_ci95"), res.summary.get(f"{c.name}_n")
        row[f"{c.name}_ci95"] = [float(x) for x in ci] if isinstance(ci, list) and len(ci) == 2 and all(
            is_number(x) for x in ci) else None
        row[f"{c.name}_n"] = n if is_number(n) else None
    return row
