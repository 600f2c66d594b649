"""The benchmark descriptor: what a benchmark folder tells the rest of SPEARBench about itself.

A benchmark (SPEAR, Full-Duplex-Bench, SpeechRole-Eval, Dynamic-SUPERB, a third party's) is one
folder whose ``__init__.py`` exports ``BENCHMARK = Benchmark(...)``, and one line of
:data:`spear_metrics.core.registry.BENCHMARKS` (or an entry point of group
``spearbench.benchmarks``). The column table (:mod:`spear_metrics.core.columns`), the results
checks (:mod:`spear_metrics.results.validate`), the command line, the Space, ``report`` and the
docs generator read these descriptors and never name a benchmark.

Every hook is a lazy ``"package.module:attribute"`` string (or ``"package.module"`` for a
module), imported only when it is used: listing the benchmarks imports nothing but this module,
and :mod:`spear_metrics.core` never imports a benchmark folder at module level.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass, field
from typing import Any, Callable


def resolve(target: str) -> Any:
    """The object a ``"package.module:attr"`` string names (the module itself when there is no
    ``:attr``; ``attr`` may be dotted).

    Raises:
        ImportError: the module cannot be imported (a missing optional package: its name).
        AttributeError: the module has no such attribute.
    """
    module, _, attr = target.partition(":")
    obj: Any = importlib.import_module(module)
    for part in filter(None, attr.split(".")):
        obj = getattr(obj, part)
    return obj


@dataclass(frozen=True)
class SpaceTab:
    """A benchmark's tab in the leaderboard Space (``space/app.py`` builds it; no gradio here).

    Attributes:
        intro: Markdown above the table (what the columns are).
        none_line: shown instead of the table while no results dataset of the benchmark is loaded.
        elem_id: the table's HTML id (the line's is ``<elem_id>_none``).
        table: ``"module:function"``; ``function(results, *control_values) -> pandas.DataFrame``:
            one row per loaded results dataset of the benchmark (``results``: every loaded
            :class:`spear_metrics.results.load.Results`; it keeps its own).
        controls: ``(label, choices, default)`` of each radio button whose value is passed to
            ``table`` (e.g. which dialogues).
        samples: ``"module:function"`` or ``None``; ``function(sources_state, *, load, audio_file)``
            builds more components under the table (e.g. a per-sample browser); ``load(sources)``
            returns the loaded :class:`spear_metrics.results.load.Results`, ``audio_file(cell)``
            the local file of an embedded audio cell (or ``None``).
    """

    intro: str
    none_line: str
    elem_id: str
    table: str
    controls: tuple[tuple[str, tuple[str, ...], str], ...] = ()
    samples: str | None = None


@dataclass(frozen=True)
class Benchmark:
    """One benchmark, as the rest of the toolkit sees it. Hooks are lazy ``"module:attr"``
    strings (see the module docstring); ``None`` where the benchmark has no such part.

    Attributes:
        name: the benchmark's name: its folder under ``spear_metrics/``, its evaluate module's
            name and the ``"benchmark"`` value of its ``summary.json`` (``"spear"`` for SPEAR,
            whose runs carry no such value).
        title: the human name, e.g. ``"Full-Duplex-Bench v1.0"``.
        version: the scoring code's version (what ``summary.json`` records).
        summary: one paragraph for the docs (generated reference page, CLI help).
        keys: ``"module:attr"`` of its declared summary keys, a tuple of
            :class:`~spear_metrics.core.dimension.MetricKey` (or a function returning one);
            ``None`` for SPEAR, whose keys are its dimensions' (:data:`~spear_metrics.core.registry.DIMENSIONS`).
        command: its ``spearbench`` command name (e.g. ``"mybench"``), ``None`` when it has none of its own.
        command_help: one-line help of that command.
        cli: module with ``add_arguments(parser)`` and ``run(args) -> int`` for ``command``.
        aliases: deprecated command names -> ``(module, replacement)``: still run, with one
            deprecation line on stderr naming ``replacement``.
        results: module whose ``validate_summary``, ``validate_rows``, ``check_summary_values``
            and ``card_text`` check and describe its results datasets (``push-results``, the
            Space), with the signatures of :mod:`spear_metrics.results.validate`.
        space_tab: ``"module:attr"`` of its :class:`SpaceTab` (the leaderboard Space builds one
            tab per registered benchmark that has one).
        evaluate_form: ``"module:function"``; ``function(module, options, one_line)``, called
            inside the open ``gr.Blocks`` of its metric Space, builds the input form and returns
            ``(inputs, fn)`` (:func:`spear_metrics.core.evaluate_glue.metric_space`); ``options``
            reads the options box (JSON text -> dict), ``one_line`` an exception's message.
        report: ``"module:function"``; ``function(run, out_dir) -> Path`` writes its own HTML
            report (``run``: :class:`spear_metrics.reports.runs.RunData`); ``None``:
            ``spearbench report`` refuses its runs in one line (exit 2).
        has_metric_module: whether ``spear_metrics/<name>/<name>.py`` is an evaluate module
            (published as a metric Space by ``spearbench publish``).
        docs: the Markdown page (under ``docs/``) that documents it.
    """

    name: str
    title: str
    version: str
    summary: str
    keys: str | None = None
    command: str | None = None
    command_help: str = ""
    cli: str | None = None
    aliases: dict[str, tuple[str, str]] = field(default_factory=dict)
    results: str | None = None
    space_tab: str | None = None
    evaluate_form: str | None = None
    report: str | None = None
    has_metric_module: bool = True
    docs: str = ""

    def metric_keys(self) -> tuple:
        """Its declared keys (``()`` when it declares none here, as SPEAR)."""
        if not self.keys:
            return ()
        keys = resolve(self.keys)
        return tuple(keys() if callable(keys) else keys)

    def results_module(self) -> Any:
        """The module of its results checks, or ``None``."""
        return resolve(self.results) if self.results else None

    def hook(self, name: str) -> Callable[..., Any] | None:
        """The object of hook ``name`` (``"space_tab"``, ``"evaluate_form"``, ``"report"``,
        ``"cli"``), or ``None`` when the benchmark has none."""
        target = getattr(self, name)
        return resolve(target) if target else None
