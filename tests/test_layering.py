"""The layers point down, read from the source (AST: every import, function-level ones included):

- ``spear_metrics.core`` imports nothing of ``spear_metrics`` above it (no benchmark folder, no
  dimension, no adapter, no command: a benchmark reaches the core through the registry's lazy
  ``"module:attr"`` strings);
- ``spear_datasets`` imports nothing of ``spear_metrics``;
- no import circles between modules of either package.
"""

from __future__ import annotations

import ast
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PACKAGES = ("spear_metrics", "spear_datasets")


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(REPO).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _modules() -> dict[str, Path]:
    """Every module of the two packages (the Space folder is ``spear_metrics.space``)."""
    out: dict[str, Path] = {}
    for pkg in PACKAGES:
        for path in sorted((REPO / pkg).rglob("*.py")):
            out[_module_name(path)] = path
    return out


def _resolve(target: str, modules: dict[str, Path]) -> str | None:
    """The module of ours that ``target`` (``a.b.c`` or ``a.b.name``) names, or ``None``."""
    while target:
        if target in modules:
            return target
        target = target.rpartition(".")[0]
    return None


def import_graph() -> dict[str, set[str]]:
    """module -> the modules of ours it imports anywhere in its file (``from x import y`` where
    ``x.y`` is a module counts as importing ``x.y``; a package's ``__init__`` imported on the way
    is not an edge of its own)."""
    import gc

    modules = _modules()
    graph: dict[str, set[str]] = {}
    # no garbage collection while parsing: a finalizer left by an earlier test (an asyncio task whose
    # exception was never retrieved) that runs inside ast.parse makes CPython 3.11.7 raise
    # "SystemError: AST constructor recursion depth mismatch"
    gc.collect()
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        return _import_graph(modules, graph)
    finally:
        if was_enabled:
            gc.enable()


def _import_graph(modules: dict[str, Path], graph: dict[str, set[str]]) -> dict[str, set[str]]:
    for name, path in modules.items():
        is_pkg = path.name == "__init__.py"
        deps: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
            targets: list[str] = []
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                if node.level:  # relative: from the module's package
                    base = name.split(".") if is_pkg else name.split(".")[:-1]
                    base = base[: len(base) - (node.level - 1)]
                    mod = ".".join(base + ([node.module] if node.module else []))
                else:
                    mod = node.module or ""
                targets = [f"{mod}.{a.name}" if f"{mod}.{a.name}" in modules else mod for a in node.names]
            for t in targets:
                dep = _resolve(t, modules)
                if dep is not None and dep != name:
                    deps.add(dep)
        graph[name] = deps
    return graph


def test_core_imports_nothing_above_it():
    bad = sorted(f"{m} imports {d}" for m, deps in import_graph().items() if m.startswith("spear_metrics.core")
                 for d in deps if d.startswith("spear_metrics") and not d.startswith("spear_metrics.core")
                 and d != "spear_metrics")
    assert bad == [], "\n".join(bad)


def test_spear_datasets_imports_nothing_of_spear_metrics():
    bad = sorted(f"{m} imports {d}" for m, deps in import_graph().items() if m.startswith("spear_datasets")
                 for d in deps if d.startswith("spear_metrics"))
    assert bad == [], "\n".join(bad)


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []
    counter = [0]

    def visit(v: str) -> None:
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    import sys

    sys.setrecursionlimit(max(sys.getrecursionlimit(), 10_000))
    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def test_no_import_circles():
    cycles = _cycles(import_graph())
    assert cycles == [], "\n".join(" <-> ".join(c) for c in cycles)


def test_the_graph_is_read():
    """The test reads what it claims to: known edges are found (a function-level one included)."""
    g = import_graph()
    assert "spear_metrics.core.dimension" in g["spear_metrics.core.registry"]
    assert "spear_metrics.core.registry" in g["spear_metrics.core.columns"]  # imported inside functions
    assert "spear_metrics.agents.rows" in g["spear_metrics.agents.harness"]


#: private names still imported across modules, each with why it is left (a new one fails the test)
PRIVATE_IMPORTS_LEFT = {
    # the output-folder registry shared by the two halves of the files.py split
    ("spear_datasets.ownership", "spear_datasets.files", "_ACTIVE"),
    ("spear_datasets.ownership", "spear_datasets.files", "_ACTIVE_LOCK"),
    ("spear_datasets.ownership", "spear_datasets.files", "_rel"),
    # the adapter registry's runtime table, read by the session worker processes
    ("spear_metrics.agents.processes", "spear_metrics.agents.registry", "_RUNTIME"),
    # the page's HTML escape, used by every page builder (a rename touches ~120 lines)
    ("spear_metrics.full_duplex_v15.report", "spear_metrics.reports.html", "_e"),
    ("spear_metrics.reports.distributional", "spear_metrics.reports.page", "_e"),
    ("spear_metrics.reports.html", "spear_metrics.reports.page", "_e"),
    # FDB v1.5's report recomputes per-subset numbers with its results module's row readers
    ("spear_metrics.full_duplex_v15.report", "spear_metrics.full_duplex_v15.results", "_mos_keys"),
    ("spear_metrics.full_duplex_v15.report", "spear_metrics.full_duplex_v15.results", "_values"),
}


def private_imports() -> set[tuple[str, str, str]]:
    """``(module, imported module, name)`` of every ``from <our module> import _name`` (a private
    name: one underscore, not a dunder) in a module other than the one defining it."""
    modules = _modules()
    out = set()
    for name, path in modules.items():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
            if isinstance(node, ast.ImportFrom) and not node.level and (node.module or "").startswith(PACKAGES):
                out |= {(name, node.module, a.name) for a in node.names
                        if a.name.startswith("_") and not a.name.startswith("__") and node.module != name}
    return out


def test_private_helpers_are_not_imported_across_modules():
    """A helper another module needs is public (a name without a leading underscore, with its
    docstring): private names stay inside their module."""
    new = sorted(private_imports() - PRIVATE_IMPORTS_LEFT)
    assert new == [], "\n".join(f"{m} imports {n} from {src}" for m, src, n in new)
    # the walk finds what is there: the names left are seen (a function-level import among them)
    assert ("spear_metrics.full_duplex_v15.report", "spear_metrics.full_duplex_v15.results", "_values") in private_imports()
