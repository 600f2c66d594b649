"""``spearbench data``: get SPEAR's inputs into the upstream layout, checked (docs/data.md).

    spearbench data download --url URL [--sha256 HEX] --out FILE       resumable, checksummed HTTP download
    spearbench data install PACKAGE --root ROOT                         SPEAR's dev/test package -> ROOT/data/...
    spearbench data seamless --seamless DIR --root ROOT [--package P]   cut the clips from Seamless Interaction
        [--retry-failed]                                                (resumable: one conversation a unit)
    spearbench data check ROOT [--split test]                           schema and count check

``ROOT`` then holds ``data/seamless_2t_2s_questions/inputs/<split>/<subset>/metadata.csv``: what
``spearbench build-dataset --source ROOT`` and ``spearbench infer --metadata`` read.
"""

from __future__ import annotations

import argparse
import sys

from spear_metrics.commands import add_deadline_option, add_run_options, command, next_steps, number, print_failures, shown_path


def add_arguments(p: argparse.ArgumentParser) -> None:
    sub = p.add_subparsers(dest="data_command", required=True, metavar="{download,install,seamless,check}")
    d = sub.add_parser("download", help="download a file over HTTP (resumable, sha256-checked)")
    d.add_argument("--url", required=True, help="the file's URL (e.g. the package link of the SPEAR website)")
    d.add_argument("--out", required=True, help="the file to write (a broken transfer resumes from OUT.part)")
    d.add_argument("--sha256", default=None, help="expected sha256 of the file (refused when it differs)")
    d.add_argument("--timeout-s", type=number(above=0), default=60.0, help="one read's time limit, s")
    d.add_argument("--retries", type=number(integer=True, minimum=0), default=5, help="attempts after a failed one")
    add_deadline_option(d, "the whole download, every attempt included")
    for name, help_ in (("install", "place SPEAR's dev/test package (archive or folder) in the upstream layout"),
                        ("check", "check the upstream layout: SPEAR's columns, clips present, rows per subset")):
        q = sub.add_parser(name, help=help_)
        if name == "install":
            q.add_argument("package", help="the package: .zip / .tar(.gz) or an unpacked folder holding dev/ and test/")
            q.add_argument("--root", required=True, help="where data/seamless_2t_2s_questions/inputs/ goes")
        else:
            q.add_argument("root", help="the folder holding data/seamless_2t_2s_questions/inputs/")
        q.add_argument("--split", action="append", default=None, help="split(s) to check (default: test)")
        q.add_argument("--no-count-check", action="store_true",
                       help="accept rows per subset that differ from SPEAR's published sizes (the data is then "
                            "custom data, never labelled as SPEAR's split)")
    s = sub.add_parser("seamless", help="cut SPEAR's clips from a local copy of Seamless Interaction")
    s.add_argument("--seamless", required=True, help="Seamless Interaction folder holding <subset>/<split>/...")
    s.add_argument("--root", required=True, help="where data/seamless_2t_2s_questions/inputs/ goes")
    s.add_argument("--split", default="test", choices=("test", "dev"))
    s.add_argument("--package", default=None,
                   help="SPEAR's installed package root (data install): keep only the clips its lists name")
    s.add_argument("--from-hub", metavar="REPO_ID", default=None,
                   help="first download <subset>/<split>/ of this Hub dataset (e.g. facebook/seamless-interaction) "
                        "into --seamless (HF_TOKEN from the environment)")
    add_deadline_option(s, "the --from-hub download")
    s.add_argument("--no-count-check", action="store_true", help="as for install")
    add_run_options(s, retry_failed="cut again the conversations that failed in an earlier run (a rerun skips the "
                                    "finished ones and, without this, the failed ones)")


def _err(msg: str) -> int:
    print(f"spearbench data: {msg}", file=sys.stderr)
    return 2


def run(args: argparse.Namespace) -> int:
    from spear_datasets.identity import DataCheckError
    from spear_datasets.sources.download import DownloadError

    try:
        return {"download": _download, "install": _install, "check": _check, "seamless": _seamless}[
            args.data_command](args)
    except (DataCheckError, DownloadError) as e:
        return _err(str(e))
    except ValueError as e:  # an undecodable WAV (AudioError), an unreadable transcript or CSV: one line, not a crash
        return _err(" ".join(str(e).split()) or type(e).__name__)


def _download(args: argparse.Namespace) -> int:
    from spear_datasets.sources.download import http_download

    digest = http_download(args.url, args.out, sha256=args.sha256, retries=int(args.retries),
                           timeout_s=float(args.timeout_s), deadline_s=float(args.deadline_s))
    print(f"wrote {shown_path(args.out)} (sha256 {digest})")
    next_steps(("place it in the upstream layout", command("spearbench", "data", "install", args.out, "--root", "ROOT")))
    return 0


def _report(root: str, splits: list[str], counts: bool) -> int:
    from spear_datasets.identity import SPEAR_SPLIT_SIZES, DataCheckError
    from spear_datasets.sources.package import check_layout

    try:
        got = check_layout(root, splits=splits, counts=counts)
    except DataCheckError as e:
        if not counts:
            raise
        try:  # the files are in place and only the counts differ: say how to use them as they are
            check_layout(root, splits=splits, counts=False)
        except DataCheckError:
            raise e from None
        split_args = [a for s in splits for a in ("--split", s)] if list(splits) != ["test"] else []
        raise DataCheckError(f"{e}; to use these rows as custom data: "
                             f"{command('spearbench', 'data', 'check', root, *split_args, '--no-count-check')}") from None
    for split, per in got.items():
        for subset, n in per.items():
            print(f"{split:<5} {subset:<13} {n} rows (SPEAR: {SPEAR_SPLIT_SIZES[split][subset]})")
    print("the counts match SPEAR's published split" if counts else
          "counts not checked: runs on this data are labelled custom data")
    next_steps(("build the Hub-layout dataset", command("spearbench", "build-dataset", "--source", root, "--out", "HUB_DIR")))
    return 0


def _check(args: argparse.Namespace) -> int:
    return _report(args.root, args.split or ["test"], not args.no_count_check)


def _install(args: argparse.Namespace) -> int:
    from spear_datasets.sources.package import install_package

    target = install_package(args.package, args.root)
    print(f"installed {shown_path(args.package)} -> {shown_path(str(target))}")
    return _report(args.root, args.split or ["test"], not args.no_count_check)


def _seamless(args: argparse.Namespace) -> int:
    from spear_datasets.schema import MetadataError
    from spear_datasets.sources.package import inputs_dir
    from spear_datasets.sources.seamless import build_from_seamless, package_members

    subsets = ("improvised", "naturalistic")
    from spear_datasets.ownership import is_recognised

    for s in subsets:  # a layout another source put there (data install: SPEAR's package) is not cut over
        dest = inputs_dir(args.root) / args.split / s
        if (dest / "metadata.csv").is_file() and not is_recognised(dest):
            return _err(f"--root {shown_path(args.root)}: {shown_path(str(dest))} already holds inputs that data seamless "
                        "did not cut (SPEAR's package from data install, or copied there): give another --root; the "
                        "two sources are kept apart")
    if args.from_hub:
        from spear_datasets.sources.download import hub_download

        hub_download(args.from_hub, args.seamless, patterns=[f"{s}/{args.split}/*" for s in subsets],
                     deadline_s=float(args.deadline_s))
    members = None
    if args.package:
        try:
            members = {s: package_members(inputs_dir(args.package) / args.split / s / "metadata.csv") for s in subsets}
        except MetadataError as e:
            return _err(f"--package: {e}")
    from spear_datasets.files import OutputError
    from spear_datasets.sources.seamless import FAILURES_FILE

    try:
        got = build_from_seamless(args.seamless, args.root, split=args.split, subsets=subsets, members=members,
                                  retry_failed=args.retry_failed, progress=not args.no_progress)
    except OutputError as e:  # a folder that cannot be written or is not this command's: a rerun resumes
        return _err(" ".join(str(e).split()))
    for subset, st in got.items():
        resumed = f", {st['n_resumed']} done before" if st["n_resumed"] else ""
        print(f"{subset}: {st['rows']} rows from {st['n_conversations']} conversations ({st['n_cut']} cut this run"
              f"{resumed}), {st['n_failed']} failed -> {shown_path(st['where'])}")
        print_failures(st["failures"], f"{shown_path(st['where'], '.work', FAILURES_FILE)} (rerun with --retry-failed "
                       "to try them again)", what="conversation")
    return _report(args.root, [args.split], not args.no_count_check)
