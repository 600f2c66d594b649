"""THE judge options of every judging command (``dsuperb score``, ``speechrole score``, ``fdb``'s
relevance judge): one helper adds them, one reads them.

``--judge-url``, ``--judge-model``, ``--judge-key-env``, ``--judge-timeout-s``, ``--judge-retries``,
``--judge-seed``, ``--judge-concurrency``, ``--judge-cache readwrite|read|off``,
``--judge-require-pinned``, ``--price-table FILE`` (see :class:`spear_metrics.core.judge.JudgeConfig`).
Keys come from the environment only: ``--judge-key-env`` names the variable.

Older spellings still work for one release, hidden from ``--help``, with a one-line deprecation
warning: ``--judge-api-key-env`` (-> ``--judge-key-env``), ``--judge-max-retries``
(-> ``--judge-retries``), ``--judge-timeout`` (-> ``--judge-timeout-s``).
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from spear_metrics.commands import add_price_table_option, number
from spear_metrics.core.judge import JudgeConfig
from spear_metrics.core.judge_cache import CACHE_ENV, CACHE_MODES

#: old spelling -> (new spelling, dest)
DEPRECATED = {"--judge-api-key-env": ("--judge-key-env", "judge_key_env"),
              "--judge-max-retries": ("--judge-retries", "judge_retries"),
              "--judge-timeout": ("--judge-timeout-s", "judge_timeout_s")}


class _Deprecated(argparse.Action):
    """Stores into the new option's ``dest`` and says once, on stderr, which spelling replaces it."""

    def __init__(self, option_strings, dest, new: str = "", **kw):
        super().__init__(option_strings, dest, **kw)
        self.new = new

    def __call__(self, parser, namespace, values, option_string=None):
        print(f"warning: {option_string} is deprecated and goes in the next release; use {self.new}", file=sys.stderr)
        setattr(namespace, self.dest, values)


def add_judge_options(p: argparse.ArgumentParser, *, required: bool = False, **defaults: Any) -> None:
    """Add the judge options to ``p``.

    Args:
        required: ``--judge-url`` and ``--judge-model`` must be given.
        defaults: the command's own defaults by :class:`~spear_metrics.core.judge.JudgeConfig`
            field (e.g. ``timeout_s=300.0``, ``seed=0``, ``model_help="..."``).
    """
    d = {f: getattr(JudgeConfig, f) for f in ("timeout_s", "retries", "seed", "concurrency", "cache")}
    d.update({k: v for k, v in defaults.items() if k in d})
    g = p.add_argument_group("judge")
    g.add_argument("--judge-url", required=required, default=None,
                   help="OpenAI-compatible API root of the judge, e.g. http://127.0.0.1:8000/v1")
    g.add_argument("--judge-model", required=required, default=None,
                   help=defaults.get("model_help") or "judge model id (a dated snapshot reproduces best)")
    g.add_argument("--judge-key-env", default=None, metavar="VAR",
                   help="environment variable holding the judge's key (default: OPENAI_API_KEY when set, else none; "
                        "'none': send none); never a key itself")
    g.add_argument("--judge-timeout-s", type=number(above=0), default=d["timeout_s"], metavar="S",
                   help=f"total time limit of one judge request, s (connect + whole reply; default {d['timeout_s']:g})")
    g.add_argument("--judge-retries", type=number(integer=True, minimum=0, maximum=100), default=d["retries"],
                   metavar="N", help=f"retries of a judge request (HTTP 429/5xx, time-outs, malformed replies; "
                                     f"default {d['retries']})")
    g.add_argument("--judge-seed", type=number(integer=True), default=d["seed"],
                   help=f"seed sent with each judge request (default: {'none' if d['seed'] is None else d['seed']})")
    g.add_argument("--judge-concurrency", type=number(integer=True, minimum=1, maximum=256), default=d["concurrency"],
                   metavar="N", help=f"judge calls in flight at once (default {d['concurrency']})")
    g.add_argument("--judge-cache", choices=CACHE_MODES, default=d["cache"],
                   help=f"reply cache shared by every run on this machine (${CACHE_ENV} moves it; default "
                        f"{d['cache']})")
    g.add_argument("--judge-require-pinned", action="store_true",
                   help="refuse a judge model id that is a moving alias (no dated snapshot, -latest, -preview)")
    add_price_table_option(g, what="the judge's tokens", where="the summary")
    for old, (new, dest) in DEPRECATED.items():
        g.add_argument(old, dest=dest, action=_Deprecated, new=new, help=argparse.SUPPRESS,
                       type=next(a.type for a in g._group_actions if a.dest == dest))


def judge_config_from_args(args: argparse.Namespace, **overrides: Any) -> JudgeConfig:
    """The :class:`~spear_metrics.core.judge.JudgeConfig` of parsed options (``overrides``: the
    command's own fields, e.g. ``temperature``, ``backoff_s``)."""
    cfg = JudgeConfig(url=args.judge_url, model=args.judge_model, key_env=args.judge_key_env,
                      timeout_s=float(args.judge_timeout_s), retries=int(args.judge_retries),
                      seed=None if args.judge_seed is None else int(args.judge_seed),
                      concurrency=int(args.judge_concurrency), cache=args.judge_cache,
                      require_pinned=bool(args.judge_require_pinned), price_table=args.price_table)
    for k, v in overrides.items():
        setattr(cfg, k, v)
    return cfg


def warn_line(text: str) -> None:
    """A one-line warning on stderr (secrets masked)."""
    from spear_metrics.core.secrets import mask_secrets

    print(mask_secrets(" ".join(str(text).split())), file=sys.stderr)
