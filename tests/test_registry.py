"""The benchmark registry: every built-in benchmark's descriptor loads, the column table, the
results checks, the CLI and the Space read it, and a run-time registration is seen everywhere."""

from __future__ import annotations

import pytest

from spear_metrics.core.benchmark import Benchmark
from spear_metrics.core.registry import (
    BENCHMARKS, UnknownBenchmarkError, benchmark, benchmark_names, benchmark_of_summary, benchmarks,
)


def test_builtin_benchmarks_load_and_declare_their_parts():
    assert benchmark_names()[:5] == ["spear", "full_duplex", "full_duplex_v2", "speechrole", "dynamic_superb"]
    for b in benchmarks():
        assert isinstance(b, Benchmark) and b.title and b.summary
        if b.name != "spear":
            assert b.metric_keys(), b.name  # every key table comes from the descriptor
            assert b.command and b.hook("cli") is not None
    assert benchmark("full_duplex").version == "1.0.0"


def test_summary_dispatch():
    assert benchmark_of_summary({"metrics": ["interruptions"]}).name == "spear"
    assert benchmark_of_summary({"benchmark": "speechrole"}).name == "speechrole"
    assert benchmark_of_summary({"metrics": ["full_duplex"]}).name == "full_duplex"  # FDB names itself as its metric
    with pytest.raises(UnknownBenchmarkError, match="unknown benchmark 'nope'"):
        benchmark_of_summary({"benchmark": "nope"})


def test_cli_lists_each_benchmark_command_and_old_names():
    from spear_metrics.cli import commands, deprecated_names

    cmds = commands()
    for b in benchmarks():
        if b.command:
            assert cmds[b.command][0] == b.cli
    assert deprecated_names()["fdb-infer"] == "spearbench fdb infer"


def test_registry_lines_point_at_folders():
    for name, target in BENCHMARKS.items():
        module = target.split(":")[0]
        assert module in (f"spear_metrics.{name}",), (name, target)


def test_old_fdb_command_forms_still_run_with_one_deprecation_line(tmp_path, capsys):
    from spear_metrics.cli import main

    empty = tmp_path / "empty"
    empty.mkdir()
    # the same refusal under both forms; the old one adds one deprecation line first
    assert main(["fdb", "score", "--task", "backchannel", "--root", str(empty), "--out", str(tmp_path / "o")]) == 2
    new_err = capsys.readouterr().err.splitlines()
    assert main(["fdb", "--task", "backchannel", "--root", str(empty), "--out", str(tmp_path / "o")]) == 2
    old_err = capsys.readouterr().err.splitlines()
    assert old_err[0].startswith("spearbench fdb: deprecated form, use: spearbench fdb score") and old_err[1:] == new_err
    assert main(["fdb", "infer", "--agent", "no-such-agent", "--root", str(empty), "--no-progress"]) == 2
    new_err = capsys.readouterr().err.splitlines()
    assert main(["fdb-infer", "--agent", "no-such-agent", "--root", str(empty), "--no-progress"]) == 2
    old_err = capsys.readouterr().err.splitlines()
    assert old_err[0].startswith("spearbench fdb-infer: deprecated, use spearbench fdb infer") and old_err[1:] == new_err


def test_find_column_sees_every_registered_benchmarks_keys():
    """Every key a registered benchmark declares (those that have a metric module and those that
    have none, as v1.5) is a column of that benchmark; the SPEAR leaderboard stays SPEAR's."""
    from spear_metrics.core.columns import benchmark_columns, find_column, leaderboard_columns

    names = {c.dimension for c in benchmark_columns()}
    assert {"full_duplex", "speechrole", "dynamic_superb", "full_duplex_v15"} <= names and "spear" not in names
    v15 = benchmark("full_duplex_v15")
    assert not v15.has_metric_module
    for k in v15.metric_keys():
        name = k.name.replace("<part>", "OVRL")
        c = find_column(name)
        assert c is not None and c.dimension == "full_duplex_v15", name
        assert find_column(name, ("full_duplex_v15",)) is c
    assert find_column("C_RESPOND", ("interruptions",)) is None  # restricted to other metrics: not found
    assert not {c.dimension for c in leaderboard_columns()} & names  # no benchmark key on SPEAR's leaderboard
