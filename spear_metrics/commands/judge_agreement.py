"""``spearbench judge-agreement RUN_A RUN_B``: how far two judges agree on the same items
(:mod:`spear_metrics.core.agreement`): percent agreement and Cohen's kappa for verdicts, Spearman
and Pearson for scores, with bootstrap intervals, and the items where they disagree."""

from __future__ import annotations

import argparse
import sys

from spear_metrics.commands import add_bootstrap_arguments, shown_path


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("run_a", metavar="RUN_A", help="a results folder (per_sample.jsonl) judged by one judge")
    p.add_argument("run_b", metavar="RUN_B", help="the same items judged by another judge (or human labels)")
    p.add_argument("--field", action="append", default=None,
                   help="compare only this judged field (repeatable; default: every field both runs hold)")
    p.add_argument("--out", default=None, metavar="FILE", help="write the statistics and disagreements as JSON")
    p.add_argument("--show", type=int, default=10, metavar="N", help="disagreeing items printed per field (default 10)")
    add_bootstrap_arguments(p, "the agreement statistics (over items)")


def run(args: argparse.Namespace) -> int:
    from spear_metrics.core.agreement import AgreementError, agreement
    from spear_metrics.core.summary import interval_text
    from spear_metrics.core.records import write_json_atomic

    try:
        res = agreement(args.run_a, args.run_b, fields=args.field, n_resamples=int(args.bootstrap), seed=int(args.seed))
    except AgreementError as e:
        print(f"spearbench judge-agreement: {' '.join(str(e).split())}", file=sys.stderr)
        return 2
    for f, st in res["fields"].items():
        unusable = (f"; no judgement (NaN, inf, empty) in {st['n_unusable_a']} row(s) of A, {st['n_unusable_b']} of B"
                    if st["n_unusable_a"] or st["n_unusable_b"] else "")
        repeated = (f"; {st['n_repeated_a']} row(s) of A, {st['n_repeated_b']} of B repeat an item (its first row "
                    "compared)" if st["n_repeated_a"] or st["n_repeated_b"] else "")
        print(f"{f} ({st['kind']}): {st['n_items']} items judged by both "
              f"({st['n_only_a']} only in A, {st['n_only_b']} only in B{unusable}{repeated})")
        keys = ("agreement_%", "cohen_kappa") if st["kind"] == "categorical" else \
            ("spearman", "pearson", "exact_agreement_%")
        for k in keys:
            why = f" ({st[k + '_note']})" if st[k] is None and st.get(k + "_note") else ""
            print(f"  {k:<18} {interval_text(st[k], st.get(k + '_ci95'))}{why}")
        dis = st["disagreements"]
        print(f"  {len(dis)} item(s) disagree" + (":" if dis and args.show > 0 else ""))
        for d in dis[: max(0, args.show)]:
            print(f"    {d['item']}: A {d['a']!r}, B {d['b']!r}")
    if args.out:
        try:
            write_json_atomic(args.out, res)
        except OSError as e:
            print(f"spearbench judge-agreement: --out {args.out}: {' '.join(str(e).split())}", file=sys.stderr)
            return 2
        print(f"wrote {shown_path(args.out)}")
    return 0
