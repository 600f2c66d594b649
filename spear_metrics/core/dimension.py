"""What every SPEAR dimension implements, and the sample it scores.

A dimension (one folder under ``spear_metrics/``) declares its summary keys with unit and
direction of "better" (torchmetrics' ``higher_is_better``, extended: in SPEAR many columns are
"closer to human is better"), scores batches of samples, and aggregates per-sample values into
the summary keys of the published leaderboard (``spear_benchmark.csv``).
"""

from __future__ import annotations

import os
import re
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, ClassVar, Literal, Sequence

import numpy as np

from spear_datasets.audio import TARGET_SR, convert, decode
from spear_datasets.schema import SpearRow
from spear_metrics.core.options import Option, OptionError, options_in_effect, validate_options

__all__ = ["Dimension", "MetricKey", "Option", "OptionError", "Sample", "keyed_resampler", "mean_or_none", "mean_resampler",
           "percent_or_none", "percent_resampler"]

Better = Literal["higher", "lower", "closer_to_human", "task_dependent"]


@dataclass(frozen=True)
class MetricKey:
    """One summary key: the one description of a column, from which the leaderboard, the Space,
    the results datasets, the metric cards and the README tables are derived
    (:mod:`spear_metrics.core.columns`).

    Attributes:
        name: the key as written in ``summary.json`` (a published key exactly as in the upstream
            CSV). A ``<placeholder>`` part makes it a template for a family of keys, e.g.
            ``WER_%_<asr>`` (one key per ASR backend; see :meth:`matches`).
        unit: ``"ms"``, ``"s"``, ``"%"``, ``"MOS 1-5"``... (the value's unit, as displayed).
        better: direction of "better": ``"higher"``, ``"lower"``, ``"closer_to_human"`` (the
            published human row is the target) or ``"task_dependent"`` (FDB ``tor``).
        description: what the value is, in one paragraph, with the source of the definition
            (the metric card's "definition" column).
        group: the leaderboard group label (the dimension as shown, e.g. ``"Interruptions"``).
        published: ``True`` for a column of the published SPEAR leaderboard
            (``spear_benchmark.csv``): it means exactly what upstream computes. ``False``: a
            project key (an improvement or an extra, under a name of its own).
        order: position of a published key among the published table's columns (1 = first,
            as in ``spear_benchmark.csv``); ``None`` for project keys, which follow the published
            keys of their group in declaration order.
    """

    name: str
    unit: str
    better: Better
    description: str
    group: str = ""
    published: bool = False
    order: int | None = None

    @property
    def is_template(self) -> bool:
        """``True`` when the name has a ``<placeholder>`` part (a family of keys)."""
        return "<" in self.name

    def matches(self, key: str) -> bool:
        """Whether summary key ``key`` is this key (or, for a template, one of its family:
        ``WER_%_<asr>`` matches ``WER_%_embedded``; a placeholder stands for one or more of
        ``[A-Za-z0-9._-]``)."""
        if not self.is_template:
            return key == self.name
        parts = re.split(r"<[^<>]+>", self.name)
        return re.fullmatch(r"[A-Za-z0-9._-]+".join(map(re.escape, parts)), key) is not None


@dataclass
class Sample:
    """One valid metadata row with resolved paths, handed to :meth:`Dimension.score_batch`.

    Decoded audio is memoised on the sample so the dimensions of one run share it.
    """

    row: int
    meta: SpearRow
    audio_path: Path
    answer_audio_path: Path
    _cache: dict[str, Any] = field(default_factory=dict, repr=False)
    _locks: dict[str, threading.Lock] = field(default_factory=dict, repr=False)
    _guard: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def cached(self, key: str, fn):
        """Memoise ``fn()`` under ``key`` for the life of this sample (e.g. VAD segments).

        Thread-safe: dimensions scored side by side compute each key once.
        """
        with self._guard:
            if key in self._cache:
                return self._cache[key]
            lock = self._locks.setdefault(key, threading.Lock())
        with lock:
            if key not in self._cache:
                self._cache[key] = fn()
        return self._cache[key]

    def decoded(self, which: Literal["input", "answer"]) -> tuple[np.ndarray, int]:
        """The file as decoded once for every dimension of the run: ``(wav, sr)``, ``wav`` float32
        ``(channels, samples)`` at the file's own rate (:func:`spear_datasets.audio.decode`).

        Every view below is derived from it, so a file is read and decoded once per run whatever
        channels and rates the dimensions ask for (the runner may decode it ahead, in a thread).

        Raises:
            AudioError: the file cannot be decoded (not memoised: asking again raises again).
        """
        if which not in ("input", "answer"):
            raise ValueError(f"which must be 'input' or 'answer', got {which!r}")
        path = self.audio_path if which == "input" else self.answer_audio_path
        return self.cached(f"decoded:{which}", lambda: decode(path))

    def _view(self, which: Literal["input", "answer"], channels: str | int) -> np.ndarray:
        wav, sr = self.decoded(which)
        path = self.audio_path if which == "input" else self.answer_audio_path
        return convert(wav, sr, sr=TARGET_SR, channels=channels, resampler="torchaudio", path=path)

    def input_audio(self, channels: str | int = "keep") -> np.ndarray:
        """Input clip at 16 kHz, ``(2, n)`` with ``"keep"`` or ``(1, n)`` with ``"mix"``.

        Resampled (if the file is not 16 kHz) as SPEAR reads audio: channels mixed first, then
        ``torchaudio.functional.resample`` (upstream ``load_audio_mono``, ``bin/base_metrics.py``).
        """
        return self.cached(f"input:{channels}", lambda: self._view("input", channels))

    def answer_audio(self) -> np.ndarray:
        """Answer at 16 kHz, channels averaged then resampled as upstream ``load_answer`` does
        (``torchaudio.functional.resample``): shape ``(1, n)``."""
        return self.cached("answer:mix", lambda: self._view("answer", "mix"))

    def prefetch(self) -> None:
        """Decode both files now (what the runner's read-ahead thread calls for the next batch).
        A file that cannot be decoded is left for the dimension that asks for it to fail its row."""
        for which in ("input", "answer"):
            try:
                self.decoded(which)
            except Exception:
                pass

    def release(self) -> None:
        """Drop decoded audio (called once every dimension has scored the sample)."""
        self._cache.clear()


class Dimension:
    """Base class of a SPEAR dimension.

    Subclasses set ``name``, ``version``, ``keys`` (summary keys), ``option_schema`` (every
    option they read, as :class:`~spear_metrics.core.options.Option`) and implement
    :meth:`score_sample` (or :meth:`score_batch` for batched models) and :meth:`aggregate`.
    Options come in as keyword arguments (CLI ``--option key=value``, evaluate compute kwargs);
    ``__init__`` converts them to their declared types and refuses unknown keys and bad values
    (:class:`OptionError`, one line naming the valid keys). ``self.options`` holds the options
    given (converted); :meth:`options_in_effect` adds the defaults (what ``summary.json``
    records under ``options``).
    """

    name: ClassVar[str]
    version: ClassVar[str] = "1"
    keys: ClassVar[tuple[MetricKey, ...]] = ()
    #: earlier versions whose published results read the same as this one (accepted by
    #: ``push-results`` and the Space besides ``version``)
    compatible_versions: ClassVar[tuple[str, ...]] = ()
    #: the dimension uses neural models and benefits from accelerate sharding / batching
    model_based: ClassVar[bool] = False
    #: aggregate outputs that are settings of the run, not measurements (no interval, no ``_n``)
    setting_keys: ClassVar[frozenset[str]] = frozenset()
    #: ``score_sample`` releases the GIL for most of its work (e.g. ONNX Runtime) and is
    #: thread-safe: the default ``score_batch`` then scores the samples of a batch in threads
    threaded_samples: ClassVar[bool] = False
    #: every option the dimension reads (name, type, default, doc, choices/range)
    option_schema: ClassVar[tuple[Option, ...]] = ()

    def __init__(self, **options: Any):
        """Raises :class:`OptionError` for an unknown key or a value of the wrong type/range."""
        self.options = validate_options(self.option_schema, options, owner=self.name)

    def options_in_effect(self) -> dict[str, Any]:
        """Every declared option with the value in effect (given, else default); secrets masked."""
        return options_in_effect(self.option_schema, self.options)

    def score_sample(self, sample: Sample) -> dict[str, Any]:
        """Per-sample values of one sample. Raise to mark the row failed (message = reason)."""
        raise NotImplementedError

    def score_batch(self, samples: Sequence[Sample]) -> list[dict[str, Any] | BaseException]:
        """Per-sample values for a batch; an exception in the list fails that sample only."""

        def one(s: Sample) -> dict[str, Any] | BaseException:
            try:
                return self.score_sample(s)
            except Exception as e:  # one bad row never stops the others
                return e

        if self.threaded_samples and len(samples) > 1:
            from concurrent.futures import ThreadPoolExecutor

            with ThreadPoolExecutor(min(len(samples), cpu_share())) as pool:
                return list(pool.map(one, samples))
        return [one(s) for s in samples]

    def aggregate(self, rows: Sequence[SpearRow], values: Sequence[dict[str, Any]]) -> dict[str, Any]:
        """Summary values from the per-sample values of the scored (``ok``) rows, in row order.
        A dimension that overrides :meth:`resampled_aggregate` keeps it in step with this."""
        raise NotImplementedError

    def resampled_aggregate(self, rows: Sequence[SpearRow],
                            values: Sequence[dict[str, Any]]) -> Callable[[np.ndarray], dict[str, Any]]:
        """:meth:`aggregate` as a function of one bootstrap resample, what :meth:`summarize`
        calls on every resample for the ``<key>_ci95`` intervals.

        Returns ``f(idx)``: ``idx`` is an int array of positions into ``rows``/``values``, shape
        ``(n,)`` with ``n = len(values)``, with repeats (rows drawn with replacement, in draw
        order); ``f(idx)`` returns exactly ``self.aggregate([rows[i] for i in idx],
        [values[i] for i in idx])`` (the same keys, in the same order, the same numbers).

        Default: that recompute, so every dimension works as is. Why a dimension overrides it:
        the bootstrap calls ``f`` ``n_resamples`` times (1000 by default) and a Python
        :meth:`aggregate` over lists of dicts reads every per-row value again each time (on the
        2,725 rows of the test split, seconds to tens of seconds per dimension). An override
        reads each per-row input ONCE, when it is called, into numpy arrays (a value array and a
        mask where the value is ``None``), and ``f`` then works on ``array[idx]``. It must give
        the same numbers as :meth:`aggregate`, bit for bit where it can (:func:`mean_resampler`
        and :func:`percent_resampler` are), else say how close in its docstring; the
        intervals then stay what the recompute gives (``tests/test_resampled_aggregates.py``).
        """

        def recompute(idx: np.ndarray) -> dict[str, Any]:
            return self.aggregate([rows[i] for i in idx], [values[i] for i in idx])

        return recompute

    def aggregate_counts(self, rows: Sequence[SpearRow], values: Sequence[dict[str, Any]], keys: Sequence[str]) -> dict[str, int]:
        """How many units entered each aggregate key (written as ``<key>_n``).

        Default: for each key, the scored rows whose per-sample value of the same name exists.
        A dimension whose key averages another per-sample value, a subset of rows, or units other
        than rows (pairs, (row, ASR) values) overrides this for those keys.
        """
        return {k: sum(1 for v in values if v.get(k) is not None) for k in keys}

    def summarize(self, rows: Sequence[SpearRow], values: Sequence[dict[str, Any]], *,
                  n_resamples: int = 0, seed: int = 0, bootstrap_unit: str = "conversation") -> dict[str, Any]:
        """:meth:`aggregate` plus, for every aggregate key whose value is a float (or ``None``),
        ``<key>_ci95`` and ``<key>_n`` right after it. Integers (counts such as ``stance_n_pairs``)
        and :attr:`setting_keys` are provenance, not measurements: they get neither.

        ``<key>_ci95``: percentile bootstrap 95 % interval (:func:`spear_metrics.core.stats.aggregate_intervals`):
        ``bootstrap_unit`` ``"conversation"`` (the default) resamples conversations
        (:func:`spear_metrics.core.stats.conversation_of`: ``conversation_id``, else the id in
        the clip name; a row without one is its own conversation) and every scored row of a drawn
        conversation comes along; ``"row"`` resamples the scored rows one by one. :meth:`aggregate`
        is recomputed on each resample (through :meth:`resampled_aggregate`, per-row inputs read
        once), so every per-row value of a row (its (row, ASR) values, its (row, question) pairs)
        moves with its row and whole-set statistics are recomputed from fixed per-row inputs.
        ``None`` with ``n_resamples`` = 0, fewer than 2 rows, ``<key>_n`` < 2, or (conversations)
        the key's per-row values in fewer than 2 conversations.
        ``<key>_n``: :meth:`aggregate_counts`.
        """
        from spear_metrics.core.stats import MIN_CLUSTERS, Clusters, aggregate_intervals, as_number, conversation_of

        agg = self.aggregate(rows, values)
        keys = [k for k, v in agg.items() if k not in self.setting_keys
                and (v is None or (isinstance(v, float) and as_number(v) is not None))]
        counts = self.aggregate_counts(rows, values, keys)
        live = [k for k in keys if agg[k] is not None and counts.get(k, 0) >= 2]
        clusters = None
        if bootstrap_unit == "conversation" and len(values) >= 2:
            labels = [conversation_of(r) for r in rows]
            clusters = Clusters(labels)
            # a key whose per-row values all sit in one conversation has no conversation interval
            live = [k for k in live if not any(k in v for v in values)
                    or len({labels[i] or ("row", i) for i, v in enumerate(values) if v.get(k) is not None}) >= MIN_CLUSTERS]

        cis = {}
        if live and n_resamples >= 1 and len(values) >= 2:
            cis = aggregate_intervals(self.resampled_aggregate(rows, values), len(values), live,
                                      n_resamples=n_resamples, seed=seed, clusters=clusters)
        out: dict[str, Any] = {}
        for k, v in agg.items():
            out[k] = v
            if k in keys:
                out[f"{k}_ci95"] = cis.get(k)
                out[f"{k}_n"] = int(counts.get(k, 0))
        return out

    def models(self) -> dict[str, str]:
        """Which model (id and version) produced which keys, for the summary's provenance."""
        return {}

    def judge_calls(self) -> dict[str, Any] | None:
        """What this process's judge calls received (:meth:`spear_metrics.core.judge.Judge.report`:
        answers from the cache, returned model ids, usage), written to ``summary.json``
        ``judge_calls``; ``None`` (the default): the dimension asks no judge."""
        return None


def cpu_share() -> int:
    """CPU cores this process may use for its own threads: the cores it may run on
    (``os.sched_getaffinity``) divided by the processes ``accelerate launch`` started on this
    machine (``LOCAL_WORLD_SIZE``), at least 1. Two processes on 2 cores get one thread each
    instead of oversubscribing the cores with two each."""
    try:
        cores = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cores = os.cpu_count() or 1
    try:
        local = max(1, int(os.environ.get("LOCAL_WORLD_SIZE", "1") or 1))
    except ValueError:
        local = 1
    return max(1, cores // local)


def mean_or_none(values: Sequence[Any]) -> float | None:
    """Mean of the non-``None`` values (``None`` when there are none)."""
    xs = [float(v) for v in values if v is not None]
    return float(np.mean(xs)) if xs else None


def percent_or_none(flags: Sequence[Any]) -> float | None:
    """100 x share of truthy values among the non-``None`` ones (``None`` when there are none)."""
    xs = [bool(v) for v in flags if v is not None]
    return 100.0 * sum(xs) / len(xs) if xs else None


def mean_resampler(values: Sequence[Any]) -> Callable[[np.ndarray], float | None]:
    """:func:`mean_or_none` of a bootstrap resample, the per-row values read once.

    Args:
        values: one value per row (``None`` = missing), or one equal-length sequence of values
            per row (e.g. a row's (row, ASR) values), pooled row by row as
            ``[v for i in idx for v in values[i]]``.

    Returns:
        ``f(idx)`` (``idx``: int positions, with repeats) == ``mean_or_none`` of the resample's
        values, bit for bit: ``x[idx][has[idx]]`` holds the same values in the same order as the
        list :func:`mean_or_none` builds, and ``ndarray.mean`` is the ``np.mean`` it calls (the
        same pairwise sum over a contiguous float64 array, divided by the count).
    """
    per_row = [list(v) if isinstance(v, (list, tuple)) else [v] for v in values]
    shape = (len(per_row), len(per_row[0]) if per_row else 1)
    has = np.array([[v is not None for v in r] for r in per_row], dtype=bool).reshape(shape)
    x = np.array([[0.0 if v is None else float(v) for v in r] for r in per_row], dtype=np.float64).reshape(shape)

    def mean(idx: np.ndarray) -> float | None:
        sel = x[idx][has[idx]]
        return float(sel.mean()) if sel.size else None

    return mean


def percent_resampler(flags: Sequence[Any]) -> Callable[[np.ndarray], float | None]:
    """:func:`percent_or_none` of a bootstrap resample, the per-row flags read once: ``f(idx)``
    == ``percent_or_none([flags[i] for i in idx])`` bit for bit (the same Python ints ``k``
    and ``n`` in ``100.0 * k / n``)."""
    has = np.array([v is not None for v in flags], dtype=bool)
    yes = np.array([v is not None and bool(v) for v in flags], dtype=bool)

    def percent(idx: np.ndarray) -> float | None:
        n = int(np.count_nonzero(has[idx]))
        return 100.0 * int(np.count_nonzero(yes[idx])) / n if n else None

    return percent


def keyed_resampler(fns: dict[str, Callable[[np.ndarray], Any]]) -> Callable[[np.ndarray], dict[str, Any]]:
    """``f(idx) -> {key: fns[key](idx)}``, keys in the order given, from one function of the
    resample per key (:func:`mean_resampler`, :func:`percent_resampler`...): the form of what
    :meth:`Dimension.resampled_aggregate` returns."""

    def aggregate(idx: np.ndarray) -> dict[str, Any]:
        return {k: f(idx) for k, f in fns.items()}

    return aggregate
