"""``spearbench``: the command line.

Each subcommand lives in its own module with two functions, ``add_arguments(parser)`` and
``run(args) -> int``: the generic commands under :mod:`spear_metrics.commands` (the list below
is explicit), and each registered benchmark's own command group
(:attr:`spear_metrics.core.benchmark.Benchmark.command`, :func:`commands`). A benchmark's
deprecated command names (``aliases``) still run, after one deprecation line on stderr, and so
does an older form of a command whose module has ``legacy_argv(argv) -> argv | None``; a command
module with ``route_argv(argv) -> (who, run) | None`` takes over the arguments it recognises (a
benchmark version with parsers of its own, e.g. ``fdb score --version 2``).

Exit status of :func:`main` (one line on stderr for every status but 0):

- ``0``: done; ``2``: a whole-run problem the command diagnosed (bad options or inputs, an
  output folder that cannot be written, a model that cannot be had), or argparse's usage error;
- ``130``: interrupted (Ctrl-C / SIGINT): ``interrupted; rerun the same command to resume``;
  every command's work is resumable, so the rerun picks up where this one stopped;
- ``1``: an unexpected error (a bug, not a diagnosed refusal): its type and message on one line;
- ``141``: the reader of standard output went away (``spearbench infer --list-agents | head``):
  nothing is said, as for any program a closed pipe stops (128 + SIGPIPE).

With ``SPEARBENCH_DEBUG=1`` in the environment the traceback is printed before that line.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys

#: generic subcommand -> (module, one-line help); each benchmark's own come from the registry (:func:`commands`)
COMMANDS: dict[str, tuple[str, str]] = {
    "score": ("spear_metrics.commands.score", "score a model's answer folder (metadata CSV) on SPEAR dimensions"),
    "build-dataset": ("spear_metrics.commands.build_dataset", "turn a SPEAR data folder into a Hub-layout dataset"),
    "data": ("spear_metrics.commands.data",
             "get SPEAR's inputs: download/install SPEAR's dev/test package or cut them from Seamless Interaction, checked"),
    "demo": ("spear_metrics.commands.demo", "build SPEAR samples from a real call, score references, print the leaderboard"),
    "infer": ("spear_metrics.commands.infer", "run a speech agent over a SPEAR split into a scoreable answer folder"),
    "push-results": ("spear_metrics.commands.push_results", "publish a scored run as a Hub results dataset"),
    "publish": ("spear_metrics.commands.publish", "publish the dataset, the metric Spaces and the leaderboard Space"),
    "judge-agreement": ("spear_metrics.commands.judge_agreement",
                        "agreement of two judges on the same items: percent agreement, Cohen's kappa, Spearman, Pearson"),
    "compare": ("spear_metrics.commands.compare", "paired comparison of two scored runs on the same inputs (A - B)"),
    "report": ("spear_metrics.commands.report", "a self-contained HTML report of a scored run against the human answers"),
    "fit-baseline": ("spear_metrics.commands.fit_baseline",
                     "fit SPEAR's distributional baselines on a model's and the humans' dev runs (JSON for score -o baseline=)"),
}


def commands() -> dict[str, tuple[str, str]]:
    """Every subcommand -> (module, one-line help): :data:`COMMANDS`, then each registered
    benchmark's command and its deprecated names (:func:`spear_metrics.core.registry.benchmarks`)."""
    from spear_metrics.core.registry import benchmarks

    out = dict(COMMANDS)
    for b in benchmarks():
        if b.command and b.cli:
            out[b.command] = (b.cli, b.command_help or b.title)
        for old, (module, new) in b.aliases.items():
            out[old] = (module, f"deprecated: use {new}")
    return out


def deprecated_names() -> dict[str, str]:
    """Deprecated command name -> the command that replaces it (every benchmark's ``aliases``)."""
    from spear_metrics.core.registry import benchmarks

    return {old: new for b in benchmarks() for old, (_, new) in b.aliases.items()}


def build_parser(available: dict[str, object]) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="spearbench", description="SPEARBench: score spoken dialogue models on real conversations.")
    from spear_metrics.core.summary import spearbench_version

    parser.add_argument("--version", action="version", version=f"spearbench {spearbench_version()}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    helps = commands()
    for name, mod in available.items():
        p = sub.add_parser(name, help=helps[name][1], description=helps[name][1])
        mod.add_arguments(p)
    return parser


#: environment variable that makes an interrupt or unexpected error print its traceback
DEBUG_ENV = "SPEARBENCH_DEBUG"
#: exit status of an interrupted command (128 + SIGINT, the shell's convention)
EXIT_INTERRUPTED = 130
#: exit status of an unexpected error (Python's own status for an uncaught exception)
EXIT_UNEXPECTED = 1
#: exit status when the reader of stdout went away (128 + SIGPIPE, what a shell reports for a piped tool)
EXIT_BROKEN_PIPE = 141


def _stdout_gone() -> bool:
    """Whether standard output is a pipe whose reader has gone (``| head`` after its lines): the
    kernel reports an error condition on a pipe without readers (``poll``: ``POLLERR``). Then
    stdout is pointed at the null device, so that the interpreter's own flush at exit says
    nothing either."""
    import select

    try:
        fd = sys.__stdout__.fileno()
        poller = select.poll()
        poller.register(fd, select.POLLOUT)
        if not any(ev & select.POLLERR for _, ev in poller.poll(0)):
            return False
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, fd)
        os.close(devnull)
    except (OSError, ValueError, AttributeError):  # no real stdout descriptor (an embedding, a test's capture)
        return False
    return True


def _debug() -> bool:
    return os.environ.get(DEBUG_ENV, "").strip().lower() not in ("", "0", "false", "no")


def _one_line(e: BaseException) -> str:
    return " ".join(str(e).split())


def main(argv: list[str] | None = None) -> int:
    """Run one subcommand; everything it prints (messages, progress bars, warnings, logs) has its
    secrets masked (:func:`spear_metrics.core.secrets.masked_output`)."""
    from spear_metrics.core.secrets import masked_output

    with masked_output():
        return _main(argv)


def _main(argv: list[str] | None) -> int:
    """Run one ``spearbench`` command; returns its exit status (see the module docstring).

    The ONE top-level handler: ``KeyboardInterrupt`` -> 130 with one line, an ``OSError``
    (an unwritable output, :class:`spear_datasets.files.OutputError`) -> 2 with its message, any
    other exception -> 1 with its type and message; tracebacks only with ``SPEARBENCH_DEBUG=1``.
    ``SystemExit`` (argparse's usage errors, ``--help``) passes through.
    """
    argv = sys.argv[1:] if argv is None else argv
    who = "spearbench"
    try:
        available = {}
        for name, (module, _) in commands().items():
            try:
                available[name] = importlib.import_module(module)
            except ModuleNotFoundError as e:
                if e.name != module:  # the command exists but a dependency is missing: say so when it is asked for
                    if argv and argv[0] == name:
                        print(f"spearbench {name}: needs the Python package {e.name!r}", file=sys.stderr)
                        return 2
        for mod in dict.fromkeys(available.values()):  # a benchmark whose own parsers take over another command's
            # arguments (e.g. a version of it): its cli module's route_argv(argv) -> (who, run) | None
            route = getattr(mod, "route_argv", None)
            routed = route(list(argv)) if route is not None else None
            if routed is not None:
                who = routed[0]
                return int(routed[1]() or 0)
        legacy = getattr(available.get(argv[0]), "legacy_argv", None) if argv else None
        if legacy is not None and (new_argv := legacy(list(argv))) is not None:  # an older form of the command
            print(f"spearbench {argv[0]}: deprecated form, use: spearbench {' '.join(new_argv[:2])} ... (the old form "
                  "goes in a later release)", file=sys.stderr)
            argv = new_argv
        args = build_parser(available).parse_args(argv)
        who = f"spearbench {args.command}"
        if args.command in (old := deprecated_names()):
            print(f"spearbench {args.command}: deprecated, use {old[args.command]} (the old name goes in a later "
                  "release)", file=sys.stderr)
        rc = int(available[args.command].run(args) or 0)
    except KeyboardInterrupt:
        if _debug():
            import traceback

            traceback.print_exc()
        print(f"{who}: interrupted; rerun the same command to resume", file=sys.stderr)
        rc = EXIT_INTERRUPTED
    except BrokenPipeError as e:
        if _stdout_gone():  # the reader of our output left (`| head`): not a problem of the run
            rc = EXIT_BROKEN_PIPE
        else:  # a socket's or a child's pipe, not stdout: as any OSError
            print(f"{who}: {_one_line(e) or type(e).__name__}", file=sys.stderr)
            rc = 2
    except OSError as e:  # e.g. an output folder that cannot be written (read-only, full, a file in the way):
        # spear_datasets.files.OutputError, whose message names the path; never a traceback
        if _debug():
            import traceback

            traceback.print_exc()
        print(f"{who}: {_one_line(e) or type(e).__name__}", file=sys.stderr)
        rc = 2
    except Exception as e:  # a bug: one line, the traceback behind SPEARBENCH_DEBUG=1
        if _debug():
            import traceback

            traceback.print_exc()
        hint = "" if _debug() else f" ({DEBUG_ENV}=1 prints the traceback)"
        print(f"{who}: unexpected error: {type(e).__name__}: {_one_line(e)}{hint}", file=sys.stderr)
        rc = EXIT_UNEXPECTED
    from spear_metrics.core.batching import exit_distributed

    exit_distributed(rc)  # under accelerate launch: barrier, teardown, os._exit(rc)
    return rc


if __name__ == "__main__":
    sys.exit(main())
