"""Coverage of the 95 % intervals and false-positive rate of ``compare`` on simulated SPEAR-shaped
splits: the row bootstrap against the conversation bootstrap (``--bootstrap-unit``).

Shape: ``--rows`` rows (default 2,725, the pooled SPEAR test split) spread over conversations
the way the data spreads them: 5,419 segments over 2,007 conversations = 2.70 rows per
conversation on average; each conversation holds ``1 + Poisson(1.70)`` rows (mean 2.70), drawn
once per simulated split until the rows are used up. Every row's value is

    y = mu + sqrt(share) * u_conversation + sqrt(1 - share) * e_row,   u, e ~ N(0, 1)

so ``share`` (``--share``, one or more, comma-separated) is the stated share of the variance
that lies between conversations (the intra-class correlation). The data's own share is not
measured here (the repository holds no scored split); ``0`` is the control where rows are
independent and both bootstraps must hold.

Keys, each through the project's own functions (:mod:`spear_metrics.core.stats`):

- a mean key: ``y`` itself (true mean 0), interval :func:`bootstrap_ci` without and with
  ``clusters`` (conversation ids);
- a percentage key: ``100 * (y > z_0.8)`` (true value 20 %, the conversation share applying to
  the latent ``y``), same two intervals;
- ``compare``: two systems with no true difference, answered on the same rows, each with its
  own conversation effect and row noise (so their difference has the same share between
  conversations), :func:`paired_comparison` without and with clusters; a false positive is a
  bootstrap p-value below 0.05.

Coverage = share of splits whose interval holds the true value; the Monte-Carlo standard error
of a coverage near 95 % over S splits is sqrt(0.95 * 0.05 / S) (1.0 point at S = 500, 0.7 at
1,000). Every figure is statistical and seeded (``--seed``): the same on any machine with the
same numpy/scipy; only the time taken depends on the machine.

    .venv/bin/python scripts/bench_interval_coverage.py [--splits 500] [--resamples 1000] \
        [--share 0,0.3] [--rows 2725] [--seed 0] [--only row|conversation]
"""

from __future__ import annotations

import argparse
import math
import time

import numpy as np

#: SPEAR's segments and conversations (the data's own counts)
SEGMENTS, CONVERSATIONS = 5419, 2007


def conversation_sizes(rng: np.random.Generator, rows: int) -> np.ndarray:
    """Rows per conversation, ``1 + Poisson(SEGMENTS / CONVERSATIONS - 1)`` each, summing to ``rows``."""
    lam = SEGMENTS / CONVERSATIONS - 1.0
    sizes = 1 + rng.poisson(lam, size=int(rows / (1 + lam) * 1.5) + 10)
    ends = np.cumsum(sizes)
    k = int(np.searchsorted(ends, rows))  # conversation k is where the rows run out
    sizes = sizes[: k + 1].copy()
    sizes[-1] -= int(ends[k] - rows)
    return sizes[sizes > 0]


def simulate(share: float, *, splits: int, resamples: int, rows: int, seed: int,
             units: tuple[str, ...] = ("row", "conv")) -> dict[str, float]:
    from scipy.stats import norm

    from spear_metrics.core.stats import bootstrap_ci, paired_comparison

    rng = np.random.default_rng(seed)
    z80 = float(norm.ppf(0.8))
    hits = {k: 0 for k in ("mean_row", "mean_conv", "pct_row", "pct_conv")}
    widths = {k: 0.0 for k in hits}
    fp = {"row": 0, "conv": 0}
    tested = {"row": 0, "conv": 0}
    n_conv = []
    a, b = math.sqrt(share), math.sqrt(1.0 - share)
    for s in range(splits):
        sizes = conversation_sizes(rng, rows)
        n_conv.append(sizes.size)
        labels = np.repeat(np.arange(sizes.size), sizes)
        y = a * rng.standard_normal(sizes.size)[labels] + b * rng.standard_normal(rows)
        pct = 100.0 * (y > z80)
        for key, x, truth in (("mean", y, 0.0), ("pct", pct, 20.0)):
            for unit, cl in (("row", None), ("conv", labels)):
                if unit not in units:
                    continue
                ci = bootstrap_ci(x, n_resamples=resamples, seed=seed + s, clusters=cl)
                hits[f"{key}_{unit}"] += int(ci is not None and ci[0] <= truth <= ci[1])
                widths[f"{key}_{unit}"] += (ci[1] - ci[0]) if ci is not None else float("nan")
        sys_a = a * rng.standard_normal(sizes.size)[labels] + b * rng.standard_normal(rows)
        sys_b = a * rng.standard_normal(sizes.size)[labels] + b * rng.standard_normal(rows)
        for unit, cl in (("row", None), ("conv", labels)):
            if unit not in units:
                continue
            c = paired_comparison(sys_a, sys_b, n_resamples=resamples, seed=seed + s, clusters=cl)
            if c["p_value"] is not None:
                tested[unit] += 1
                fp[unit] += int(c["p_value"] < 0.05)
    out = {f"coverage_{k}": hits[k] / splits if k.split("_")[1] in units else float("nan") for k in hits}
    out.update({f"width_{k}": widths[k] / splits if k.split("_")[1] in units else float("nan") for k in widths})
    out.update({f"false_positive_{u}": fp[u] / tested[u] if tested[u] else float("nan") for u in fp})
    out["conversations_mean"] = float(np.mean(n_conv))
    return out


def _pct(x: float) -> str:
    return "-" if math.isnan(x) else f"{100 * x:.1f} %"


def _ratio(a: float, b: float) -> str:
    return "-" if math.isnan(a) or math.isnan(b) else f"{a / b:.2f}"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--splits", type=int, default=500, help="simulated splits per share (>= 500 for the claim)")
    ap.add_argument("--resamples", type=int, default=1000, help="bootstrap resamples per interval")
    ap.add_argument("--share", default="0,0.3", help="between-conversation variance shares, comma-separated")
    ap.add_argument("--rows", type=int, default=2725)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--only", choices=("row", "conversation"), default=None,
                    help="run one bootstrap unit only (the conversation one is the cheaper)")
    args = ap.parse_args()
    units = ("row", "conv") if args.only is None else (("row",) if args.only == "row" else ("conv",))
    shares = [float(x) for x in args.share.split(",") if x.strip()]
    se = math.sqrt(0.95 * 0.05 / args.splits)
    print(f"{args.splits} simulated splits of {args.rows} rows per share, {args.resamples} resamples per interval, "
          f"seed {args.seed}; Monte-Carlo SE of a 95 % coverage: {100 * se:.1f} points")
    head = ("| share between conversations | conversations (mean) | key | coverage, row bootstrap | "
            "coverage, conversation bootstrap | width ratio conv/row |")
    lines = [head, "|---|---|---|---|---|---|"]
    fps = ["| share between conversations | false positives of compare, rows | false positives of compare, conversations |",
           "|---|---|---|"]
    for share in shares:
        t0 = time.perf_counter()
        r = simulate(share, splits=args.splits, resamples=args.resamples, rows=args.rows, seed=args.seed, units=units)
        for key, name in (("mean", "mean"), ("pct", "percentage (20 %)")):
            lines.append(f"| {share:g} | {r['conversations_mean']:.0f} | {name} | {_pct(r[f'coverage_{key}_row'])} | "
                         f"{_pct(r[f'coverage_{key}_conv'])} | {_ratio(r[f'width_{key}_conv'], r[f'width_{key}_row'])} |")
        fps.append(f"| {share:g} | {_pct(r['false_positive_row'])} | {_pct(r['false_positive_conv'])} |")
        print(f"share {share:g}: {time.perf_counter() - t0:.0f} s", flush=True)
    print("\n".join(lines))
    print()
    print("\n".join(fps))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
