"""``spearbench speechrole {infer,score,summarize}``: SpeechRole-Eval (arXiv 2508.02013).

- ``infer --agent NAME --test-data DIR --mode single|multi --out model_output/<model>``: an adapter
  speaks each turn of each dialogue (system prompt + the dialogue so far, its own earlier turns
  included), written in the benchmark's model-output layout (:mod:`spear_metrics.speechrole.infer`).
- ``score --outputs model_output/<model> --test-data DIR --mode single|multi --judge-url URL
  --judge-model NAME --out RESULTS/``: the audio LLM judge compares the system's spoken answers
  (Model A) with the role's reference speech (Model B) on eight aspects
  (:mod:`spear_metrics.speechrole.judging`); ``--protocol v1|v2``, ``--swap-order`` (the project's
  position-bias check).
- ``summarize --results DIR --out RESULTS/``: the same summary from judge results on disk
  (the repository's released ``test_results/<model>`` in either shape, or a ``score`` folder).

Every run is resumable; bad dialogues are failed rows with their reason; the judge's key comes
from an environment variable only (``--judge-key-env``) and is never written; the judge options are
the shared ones (:mod:`spear_metrics.commands.judge_options`).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from spear_metrics.commands import (
    add_price_table_option, add_process_options, add_run_options, add_shard_option, command, next_steps, number, number_text, parse_options, price_table_of, print_failures, print_usage, run_exit_status, shown_path, wrap,
)
from spear_metrics.commands.judge_options import add_judge_options

PROG = "spearbench speechrole"


def _fail(sub: str, msg: str) -> int:
    print(f"{PROG} {sub}: {' '.join(str(msg).split())}", file=sys.stderr)
    return 2


def _modes(text: str) -> list[str]:
    from spear_metrics.speechrole.data import MODES

    modes = list(MODES) if text in ("all", "both") else [m.strip() for m in text.split(",") if m.strip()]
    bad = [m for m in modes if m not in MODES]
    if bad or not modes:
        raise argparse.ArgumentTypeError(f"mode must be single, multi, 'single,multi' or all; got {text!r}")
    return list(dict.fromkeys(modes))


def _temperature(text: str) -> float | str:
    if text.strip().lower() in ("none", ""):
        return "none"
    return number(minimum=0)(text)


def add_arguments(p: argparse.ArgumentParser) -> None:
    from spear_metrics.speechrole.data import DEFAULT_REFERENCE_KEY, HUB_DATASET, REFERENCE_KEYS
    from spear_metrics.speechrole.protocol import AUDIO_DATA_FORMS, PROTOCOLS

    sub = p.add_subparsers(dest="speechrole_command", required=True, metavar="SUBCOMMAND")

    s = sub.add_parser("score", help="judge a model-output folder against the reference speech",
                       description="Judge a system's spoken answers (Model A) against the role's reference speech "
                                   "(Model B) with an audio LLM over an OpenAI-compatible endpoint.")
    s.add_argument("--outputs", required=True, help="the system's folder model_output/<model> "
                                                     "(<mode>_result/json/<role>.json + audio)")
    s.add_argument("--test-data", required=True,
                   help=f"test data: a folder (holding test_data/ or {{single,multi}}_turn/) or a Hub dataset id, "
                        f"e.g. {HUB_DATASET} (HF_HUB_OFFLINE=1: the cache only)")
    s.add_argument("--mode", required=True, type=_modes, help="single, multi, or 'single,multi' / all")
    add_judge_options(s, required=True, timeout_s=300.0, retries=3, seed=None, concurrency=4,
                      model_help="judge model id (the benchmark's: gemini-2.5-pro); the key's variable: --judge-key-env "
                                 "(e.g. GEMINI_API_KEY; default OPENAI_API_KEY when set, else none)")
    s.add_argument("--protocol", choices=PROTOCOLS, default="v1",
                   help="v1: one call per aspect, '[Scores]: (a, b)' replies (yuhui1038/SpeechRole); v2: one call, "
                        "JSON for all aspects, temperature 0, audio cut to 60 s (its fork's script)")
    s.add_argument("--reference-key", default=DEFAULT_REFERENCE_KEY, choices=REFERENCE_KEYS,
                   help=f"reference speech set of each test turn (default {DEFAULT_REFERENCE_KEY}; falls back to "
                        "role_speech_path where the key is absent)")
    s.add_argument("--audio-data", choices=AUDIO_DATA_FORMS, default="data-uri",
                   help="input_audio data: data-uri (data:audio/wav;base64,..., as the judge scripts) or base64 (bare, "
                        "OpenAI's documented form)")
    s.add_argument("--swap-order", action="store_true",
                   help="also judge every call with the reference first; reports the position bias per aspect")
    s.add_argument("--roles", default=None, help="only these roles (comma-separated)")
    s.add_argument("--judge-backoff-s", type=number(minimum=0), default=2.0, metavar="S",
                   help="sleep before retry k is S*2^(k-1) seconds, or the server's Retry-After when longer (default 2)")
    s.add_argument("--judge-temperature", type=_temperature, default=None, metavar="T",
                   help="sampling temperature; default: the protocol's (v1: none sent, v2: 0); 'none' sends none")
    add_run_options(s, out="results folder (<mode>/<role>.json, summary.json...): new, empty or this command's; "
                           "a rerun resumes",
                    retry_failed="ask again the calls that failed in an earlier run",
                    overwrite="judge other settings or inputs of a mode into this command's --out: the files its "
                              "earlier run of that mode wrote (recorded, unchanged) are replaced, nothing else "
                              "(docs/safety.md)",
                    bootstrap="the 95%% intervals (over dialogues)")

    m = sub.add_parser("summarize", help="summary of judge results on disk (released or scored)",
                       description="Aggregate SpeechRole-Eval judge results: a released test_results/<model> folder "
                                   "(nested or flat shape) or a 'speechrole score' folder.")
    m.add_argument("--results", required=True, help="folder holding single/ and/or multi/ <role>.json judge results")
    add_run_options(m, out="folder for summary.json and per_sample.jsonl: new, empty or this command's", progress=False,
                    bootstrap="the 95%% intervals (over dialogues)")

    i = sub.add_parser("infer", help="run an adapter over the dialogues into a model-output folder",
                       description="An adapter speaks each turn given the system prompt and the dialogue so far "
                                   "(its own earlier turns included); written as model_output/<model>.")
    from spear_metrics.agents.registry import agent_help

    i.add_argument("--agent", required=True, help=agent_help())
    i.add_argument("--agent-option", "-a", action="append", default=[], metavar="KEY=VALUE",
                   help="adapter constructor option (repeatable)")
    i.add_argument("--test-data", required=True, help="test data folder or Hub dataset id (as score)")
    i.add_argument("--mode", required=True, type=_modes, help="single, multi, or 'single,multi' / all")
    i.add_argument("--roles", default=None, help="only these roles (comma-separated)")
    i.add_argument("--reference-key", default=DEFAULT_REFERENCE_KEY, choices=REFERENCE_KEYS,
                   help="the reference speech an oracle adapter (human: replays the reference) answers with")
    i.add_argument("--row-timeout-s", type=number(above=0), default=300.0, metavar="S",
                   help="a turn's time limit in seconds (default 300; a paced adapter's input duration is added)")
    i.add_argument("--concurrency", type=number(integer=True, minimum=1, maximum=256), default=1, metavar="N",
                   help="dialogues in flight at once (network adapters; default 1)")
    add_process_options(i)
    add_shard_option(i, units="dialogues", merge="writes <mode>_result/ (and runs any dialogue no shard finished)")
    i.add_argument("--chunk-ms", type=number(above=0), default=40.0, help="input chunk length of paced adapters (ms)")
    i.add_argument("--seed", type=number(integer=True), default=0)
    add_price_table_option(i, where="<mode>_result/run_info.json")
    add_run_options(i, out="the model folder model_output/<model>: new, empty or this command's; a rerun resumes",
                    retry_failed="run again the dialogues that failed earlier",
                    overwrite="another agent, options or dialogues for a mode in this command's --out: the files its "
                              "earlier run of that mode wrote (recorded, unchanged) are replaced, nothing else "
                              "(docs/safety.md)")


def run(args: argparse.Namespace) -> int:
    sub = args.speechrole_command
    if sub == "score":
        return _run_score(args)
    if sub == "summarize":
        return _run_summarize(args)
    return _run_infer(args)


def _test_data_root(source: str, modes: list[str], roles: list[str] | None, reference_key: str,
                    user_speech: bool) -> Path:
    from spear_metrics.results.hub import is_repo_id
    from spear_metrics.speechrole.data import fetch_test_data

    p = Path(source)
    if p.exists() or not is_repo_id(source):
        return p
    return fetch_test_data(source, modes, roles=roles, reference_key=reference_key, user_speech=user_speech)


def _roles(text: str | None) -> list[str] | None:
    if not text:
        return None
    return list(dict.fromkeys(r.strip() for r in text.split(",") if r.strip())) or None


def _run_score(args: argparse.Namespace) -> int:
    from spear_metrics.speechrole.aggregate import JudgeResultsError
    from spear_metrics.speechrole.data import (
        SpeechRoleDataError,
        read_model_outputs,
        read_test_data,
        unknown_roles,
        validate_dialogues,
    )
    from spear_datasets.files import OutputError
    from spear_datasets.ownership import open_folder
    from spear_metrics.speechrole.judging import COMMAND, JudgeRunError, JudgeSettings, judge_mode, summarize_folder
    from spear_metrics.speechrole.protocol import JUDGE_TEMPERATURE

    from spear_metrics.commands.judge_options import judge_config_from_args, warn_line
    from spear_metrics.core.judge import judge_calls_line, make_judge
    from spear_metrics.core.usage import PriceTableError

    t = args.judge_temperature
    temperature = JUDGE_TEMPERATURE[args.protocol] if t is None else (None if t == "none" else t)
    roles = _roles(args.roles)
    out = Path(args.out)
    try:
        root = _test_data_root(args.test_data, args.mode, roles, args.reference_key, False)
        config = judge_config_from_args(args, temperature=temperature, backoff_s=args.judge_backoff_s)
        prices = config.prices()
        judge = make_judge(config, warn=warn_line)
    except (SpeechRoleDataError, ValueError, PriceTableError) as e:
        return _fail("score", str(e))
    settings = JudgeSettings(judge=judge, protocol=args.protocol, reference_key=args.reference_key,
                             audio_data=args.audio_data, swap_order=args.swap_order,
                             concurrency=args.judge_concurrency, retry_failed=args.retry_failed,
                             overwrite=args.overwrite, n_resamples=args.bootstrap, seed=args.seed,
                             progress=not args.no_progress)
    unknown: dict[str, list[str]] = {}
    try:
        # --out: new, empty or this command's (docs/safety.md); its lock held across the modes and the summary
        with judge, open_folder(out, command=COMMAND, activity="scored"):
            for mode in args.mode:
                dialogues = read_test_data(root, mode, roles=roles)
                outputs = read_model_outputs(args.outputs, mode)
                cases = validate_dialogues(dialogues, outputs, reference_key=args.reference_key)
                unknown[mode] = unknown_roles(outputs, dialogues)
                inputs = {"test_data": str(Path(root).resolve()), "outputs": str(Path(args.outputs).resolve()),
                          "roles": roles}
                res = judge_mode(cases, mode, out, settings, inputs=inputs, unknown=unknown[mode])
                n_bad = sum(not c.ok for c in cases)
                print(f"{mode}: {len(cases)} dialogues ({n_bad} failed before judging), {len(res.units)} judge calls "
                      f"({res.n_resumed} resumed, {res.n_new} made now, "
                      f"{sum(not r.ok for r in res.results)} without a score)")
                if unknown[mode]:
                    print(f"  {mode}: output role(s) not in the test data, not judged: {', '.join(unknown[mode])}",
                          file=sys.stderr)
                print_failures([(c.dialogue.key, c.error) for c in cases if not c.ok], str(out / "failed_dialogues.jsonl"),
                               what="dialogue")
            summary, rows = summarize_folder(out, n_resamples=args.bootstrap, seed=args.seed,
                                             provenance=settings.provenance(),
                                             extra={"outputs": Path(args.outputs).name, "unknown_roles": unknown,
                                                    "judge_calls": judge.report(prices)})
    except (SpeechRoleDataError, JudgeRunError, JudgeResultsError, OutputError) as e:
        return _fail("score", str(e))
    print_summary(summary)
    print(judge_calls_line(summary["judge_calls"]))
    print(f"wrote {shown_path(out, 'summary.json')}, per_sample.jsonl and the judge results (<mode>/<role>.json, "
          "replies.jsonl)")
    next_steps(("the same tables again from these judge results, without a judge call",
                command("spearbench", "speechrole", "summarize", "--results", shown_path(out), "--out",
                        shown_path(Path(shown_path(out)).parent, f"{Path(shown_path(out)).name}_summary"))))
    return 0


def _run_summarize(args: argparse.Namespace) -> int:
    import json

    from spear_datasets.files import OutputError
    from spear_metrics.speechrole.aggregate import JudgeResultsError
    from spear_metrics.speechrole.judging import summarize_folder

    src = Path(args.results)
    prov: dict[str, Any] = {}
    own = src / "summary.json"
    if own.is_file():  # a 'score' folder: keep its record of the judging
        try:
            old = json.loads(own.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            old = {}
        if isinstance(old, dict) and old.get("benchmark") == "speechrole":
            prov = {k: old[k] for k in ("protocol", "prompt_version", "protocol_source", "judge_model",
                                        "judge_endpoint", "judge_temperature", "judge_seed", "judge_max_retries",
                                        "reference_key", "audio_data", "swap_order") if k in old}
    if not prov:
        prov = {"judge_note": "the judge, protocol and reference set are not recorded in these result files"}
    try:
        summary, _ = summarize_folder(args.out, n_resamples=args.bootstrap, seed=args.seed, provenance=prov,
                                      results_dir=src, extra={"results_source": src.name},
                                      command="speechrole summarize")
    except (JudgeResultsError, OutputError) as e:
        return _fail("summarize", str(e))
    for p in summary.get("read_problems", [])[:5]:
        print(f"  problem: {p}", file=sys.stderr)
    print_summary(summary)
    print(f"wrote {shown_path(args.out, 'summary.json')} and per_sample.jsonl")
    next_steps(("judge another system's answers the same way",
                command("spearbench", "speechrole", "score", "--outputs", "model_output/OTHER", "--test-data", "DIR",
                        "--mode", "all", "--judge-url", "URL", "--judge-model", "gemini-2.5-pro", "--out",
                        "RESULTS/OTHER")))
    return 0


def _f(v: Any) -> str:
    """A value of the per-aspect table: 2 decimals (:func:`spear_metrics.commands.number_text`), a
    whole-number mean read back from JSON (``3``) included."""
    return number_text(float(v) if isinstance(v, int) and not isinstance(v, bool) else v, 2)


def print_summary(summary: dict[str, Any]) -> None:
    """The per-aspect table of each scope on stdout: mean A, mean B, the ratio with its interval,
    the na share (and the position bias when judged both ways)."""
    from spear_metrics.speechrole.aggregate import ALL, OVERALL
    from spear_metrics.speechrole.protocol import ASPECTS

    print("A = the system's answers, B = the reference role speech (the judge's Model A and Model B)")
    for scope in [*summary.get("modes", []), OVERALL]:
        if f"{scope}_n_dialogues" not in summary:
            continue
        print(f"{scope}: {summary[f'{scope}_n_dialogues']} dialogues, {summary[f'{scope}_n_dialogues_scored']} scored; "
              f"pairs {summary[f'{scope}_n_pairs_scored']} scored, {summary[f'{scope}_n_pairs_unparsed']} na, "
              f"{summary[f'{scope}_n_pairs_not_judged']} not judged")
        bias = f"{scope}_{ALL}_position_bias_system" in summary
        print(f"  {'aspect':<25} {'mean_A':>6} {'mean_B':>6} {'100*sumA/sumB [95% CI]':>26} {'na':>5}"
              + ("  bias_sys" if bias else ""))
        for a in [*ASPECTS, ALL]:
            k = f"{scope}_{a}"
            ci = summary.get(f"{k}_ratio_100_sumA_over_sumB_ci95")
            ratio = _f(summary.get(f"{k}_ratio_100_sumA_over_sumB")) + (f" [{ci[0]:.1f}, {ci[1]:.1f}]" if ci else "")
            na = summary.get(f"{k}_na_share")
            line = (f"  {a:<25} {_f(summary.get(f'{k}_mean_A')):>6} {_f(summary.get(f'{k}_mean_B')):>6} {ratio:>26} "
                    f"{'-' if na is None else f'{na:.2f}':>5}")
            if bias:
                line += f"  {_f(summary.get(f'{k}_position_bias_system')):>8}"
            print(line)


def _run_infer(args: argparse.Namespace) -> int:
    from spear_metrics.agents.registry import UnknownAgentError
    from spear_metrics.core.options import OptionError
    from spear_metrics.speechrole.data import SpeechRoleDataError
    from spear_datasets.files import OutputError
    from spear_metrics.agents.processes import parse_provider_limits
    from spear_metrics.speechrole.infer import InferRunError, run_speechrole_inference

    roles = _roles(args.roles)
    try:
        prices = price_table_of(args)  # refused before any call (a PriceTableError is a ValueError)
        root = _test_data_root(args.test_data, args.mode, roles, args.reference_key, True)
        n_answered = n_failed = 0
        for mode in args.mode:
            info = run_speechrole_inference(args.agent, root, mode, args.out, agent_options=parse_options(args.agent_option),
                                            roles=roles, concurrency=args.concurrency, chunk_ms=args.chunk_ms,
                                            seed=args.seed, row_timeout_s=args.row_timeout_s,
                                            retry_failed=args.retry_failed, overwrite=args.overwrite,
                                            reference_key=args.reference_key, progress=not args.no_progress,
                                            processes=args.processes,
                                            provider_limits=parse_provider_limits(args.provider_limit),
                                            prices=prices, shard=args.shard)
            if "shard" in info:
                print(f"{mode}: shard {info['shard']}: {info['n_dialogues']} dialogues, {info['n_answered']} answered "
                      f"({info['n_turns']} turns), {info['n_failed']} failed; {info['dialogues_left']} dialogue(s) of "
                      "the mode have no record yet")
                n_answered, n_failed = n_answered + info["n_answered"], n_failed + info["n_failed"]
                continue
            print(f"{mode}: {info['n_dialogues']} dialogues, {info['n_answered']} answered ({info['n_turns']} turns), "
                  f"{info['n_failed']} failed -> {shown_path(args.out, f'{mode}_result', 'json')}/")
            print_usage(info.get("usage"), prefix=f"{mode}: ")
            print_failures(info["failures"], f"{shown_path(args.out, f'{mode}_result', 'failures.jsonl')} "
                           "(rerun with --retry-failed)", what="dialogue")
            n_answered, n_failed = n_answered + info["n_answered"], n_failed + info["n_failed"]
    except (SpeechRoleDataError, InferRunError, UnknownAgentError, OptionError, OutputError, ValueError, TypeError) as e:
        return _fail("infer", str(e))
    if args.shard is not None:
        print(wrap("when every shard has ended: the same command without --shard writes <mode>_result/ (and runs any "
                   "dialogue no shard finished)"))
        return run_exit_status(n_answered, n_failed) if n_answered + n_failed else 0
    modes = "all" if set(args.mode) >= {"single", "multi"} else ",".join(args.mode)
    next_steps(("judge these answers against the reference role speech (the benchmark's judge: gemini-2.5-pro)",
                command("spearbench", "speechrole", "score", "--outputs", shown_path(args.out), "--test-data",
                        shown_path(args.test_data), "--mode", modes, "--judge-url", "URL", "--judge-model",
                        "gemini-2.5-pro", "--out", shown_path("RESULTS", Path(shown_path(args.out)).name))))
    
    return run_exit_status(n_answered, n_failed)
