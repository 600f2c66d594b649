"""``spearbench demo --out DIR``: the main job end to end on a real two-person call.

1. Reads the real telephone call that ships inside the ``pyannote.audio`` wheel
   (``pyannote/audio/sample/``: mono 16 kHz wav, RTTM speaker turns, STM timed transcript;
   only the files are read, none of its models), or the files given with ``--call/--rttm/--stm``.
2. Splits the mono call into one channel per speaker with the RTTM turns and cuts SPEAR
   samples with the selection protocol (STM text, speakers mapped onto RTTM labels by overlap).
3. Answers them with four systems: the human answers; two reference systems whose behaviour is
   known by construction, both replaying the human answer: ``fixed-delay`` (onset ``--delay`` s
   after the question end) and ``barge-in`` (onset ``--lead`` s before the question end, so it
   overlaps question speech in every sample); and ``cascade``, a real system that makes its own
   speech (packaged Whisper base -> a rule-based reply -> espeak-ng), run through ``spearbench infer``.
4. Scores every system on every dimension that runs offline (``interruptions``,
   ``explainable_features``, ``speech_quality`` with its packaged models, ``distributional``
   with the packaged ASR), with 95 % intervals where they exist (intervals resample
   conversations and the packaged call is one: ``summary.json``'s ``bootstrap.note`` says so);
   the models are loaded once for all systems. The
   systems are then ranked by SPEARBench's own ``human_likeness_auroc`` against the human
   answers (0.5 = a classifier cannot tell them apart), with its interval, or the reason it has
   no value: the packaged call gives too few answers of one conversation for its rule
   (>= 10 answers a side, >= 2 conversations; SPEAR's baselines, which need a dev split, are not
   fitted here).
5. Writes each scored run as a results dataset (``DIR/datasets/<system>``, the human answers'
   one included, loadable by the Space), prints the leaderboard, writes ``DIR/leaderboard.csv``,
   and ends with the report of the cascade against the human answers and the two references
   (``DIR/results/cascade/report/index.html``, where ``push-results`` finds it), printing its path.

Nothing is downloaded. ``turn_taking``'s offline key needs human offsets of another split (not
in the call) and the other dimensions need Hub weights or a judge: they are not run here.
"""

from __future__ import annotations

import argparse
import csv
import sys
from dataclasses import replace
from pathlib import Path

from spear_metrics.commands import (
    add_run_options, command, next_steps, number, number_text, numbered_notes, read_run_info, shown_path, text_table,
    wrap,
)

DEFAULT_METRICS = "interruptions,explainable_features,speech_quality,distributional"
#: the overall score ranked at the end (``distributional``'s ``human_likeness_auroc``)
LIKENESS = "human_likeness_auroc"
CASCADE = "cascade"


def add_arguments(p: argparse.ArgumentParser) -> None:
    add_run_options(p, out="output folder", progress=False)
    p.add_argument("--metrics", default=DEFAULT_METRICS, help=f"dimensions to score (default {DEFAULT_METRICS})")
    p.add_argument("--delay", type=number(minimum=0), default=0.7, help="fixed-delay system: onset after question end (s)")
    p.add_argument("--lead", type=number(minimum=0), default=1.0, help="barge-in system: onset before question end (s)")
    p.add_argument("--call", help="a two-person call to cut samples from, as a mono audio file; needs --rttm and --stm "
                                  "of the same call (default: pyannote.audio's sample.wav with its RTTM and STM)")
    p.add_argument("--rttm", help="with --call: the call's RTTM speaker turns (who speaks when)")
    p.add_argument("--stm", help="with --call: the call's STM timed transcript (the question/answer texts)")


def packaged_sample() -> tuple[Path, Path, Path]:
    """Paths of ``sample.wav``, ``sample.rttm``, ``sample.stm`` inside the installed ``pyannote.audio``
    wheel (found through its file list; the package is not imported).

    Raises:
        FileNotFoundError: ``pyannote.audio`` is not installed (``pip install 'spearbench[demo]'``).
    """
    from importlib.metadata import PackageNotFoundError, distribution

    try:
        dist = distribution("pyannote.audio")
    except PackageNotFoundError:
        raise FileNotFoundError("the demo call ships in pyannote.audio: pip install 'spearbench[demo]' (or pass --call/--rttm/--stm)") from None
    paths = [Path(dist.locate_file(f"pyannote/audio/sample/sample.{ext}")) for ext in ("wav", "rttm", "stm")]
    for p in paths:
        if not p.is_file():
            raise FileNotFoundError(f"{p} is missing from the installed pyannote.audio")
    return paths[0], paths[1], paths[2]


def build_demo_data(call: Path, rttm: Path, stm: Path, data_dir: Path) -> Path:
    """Cut SPEAR samples from a mono call into ``data_dir`` and return its ``metadata.csv``."""
    from spear_datasets.audio import TARGET_SR, load_audio
    from spear_datasets.protocol import Turn, build_split
    from spear_datasets.sources.turns import map_speakers, read_rttm, read_stm, split_by_speaker

    segments = read_rttm(rttm)
    turns = read_stm(stm)
    mapping = map_speakers(turns, segments)
    turns = [Turn(mapping[t.speaker], t.start, t.end, t.text) for t in turns]
    mono = load_audio(call, sr=TARGET_SR, channels="mix")[0]
    channels = split_by_speaker(mono, segments, TARGET_SR)
    return build_split([(call.stem, turns, channels)], data_dir)


def write_system_metadata(human_csv: Path, name: str, answer_start_time: float) -> Path:
    """A system that replays the human answers with onset ``answer_start_time`` (s from question end)."""
    from spear_datasets.schema import parse_row, read_metadata, write_metadata

    rows = [replace(parse_row(r), answer_start_time=answer_start_time) for r in read_metadata(human_csv)]
    return write_metadata(human_csv.with_name(f"{name}.csv"), rows)


def write_leaderboard(path: Path, summaries: dict[str, dict], ties: dict[str, dict] | None = None) -> list[str]:
    """``model`` + the benchmark keys present in any summary (published column order) + counts;
    with ``ties`` (:func:`spear_metrics.reports.runs.leaderboard_ties`), after the counts, for each
    key with a tie group ``<key>_tie`` (``best``, ``tied`` = not distinguishable from the best,
    ``not ranked: <rule> onset`` on a key computed from the onset of a system whose onset is
    placed, or empty; ``best among <rule>`` when several measured onset rules are ranked apart)
    and ``<key>_rank_ci95`` (``lo-hi``). Returns the value columns (without
    the tie columns)."""
    from spear_metrics.core.summary import BENCHMARK_KEYS

    from spear_datasets.files import atomic_path

    keys = [k for k in BENCHMARK_KEYS if any(k in s for s in summaries.values())]
    extra = [k for k in ("WER_norm_%", "CER_norm_%", "latency_ms_speech", "DNSMOS_OVRL", "DistillMOS",
                         "no_speech_answers_%", "n_samples", "n_scored", "n_failed")
             if any(k in s for s in summaries.values())]
    if any(LIKENESS in s for s in summaries.values()):
        extra.insert(0, LIKENESS)
    cols = ["model", *keys, *extra]
    tied = [k for k in cols[1:] if k in (ties or {})]

    def tie(k: str, model: str) -> list[str]:
        unranked = ties[k].get("unranked") or {}
        if model in unranked:  # an onset-derived key: a placed (or unshared) onset is not ranked
            return [f"not ranked: {unranked[model]} onset", ""]
        s = ties[k]["systems"].get(model) or {}
        ci = s.get("rank_ci95")
        mark = "best" if s.get("best") else "tied" if s.get("tied") else ""
        if mark and s.get("onset_group"):  # several measured onset rules, each ranked apart
            mark += f" among {s['onset_group']}"
        return [mark, "" if ci is None else f"{ci[0]}-{ci[1]}"]

    with atomic_path(path) as tmp, open(tmp, "w", newline="", encoding="utf-8") as f:
        w = csv.writer(f)
        w.writerow(cols + [c for k in tied for c in (f"{k}_tie", f"{k}_rank_ci95")])
        for model, s in summaries.items():
            w.writerow([model] + [_fmt(s.get(k)) for k in cols[1:]] + [c for k in tied for c in tie(k, model)])
    return cols


#: where the demo's samples go in the upstream SPEAR layout ``build-dataset`` takes
#: (``SRC/inputs/<split>/<subset>/metadata.csv``): a telephone call is spontaneous talk, so
#: the ``naturalistic`` subset of the ``test`` split
SPEAR_LAYOUT = ("inputs", "test", "naturalistic")


def write_spear_layout(human_csv: Path, root: Path) -> Path:
    """The demo's samples (``human_csv``, its ``audios/`` and ``answers/`` beside it) as a SPEAR
    data folder ``root`` that ``spearbench build-dataset --source root`` takes
    (``root/inputs/test/naturalistic/metadata.csv`` + its clips, hard-linked where the file
    system allows, else copied); returns ``root``."""
    import os
    import shutil

    from spear_datasets.files import active_folder, atomic_path, make_dirs, record_write

    folder = root.joinpath(*SPEAR_LAYOUT)
    make_dirs(folder)
    for sub in ("audios", "answers"):
        src = human_csv.parent / sub
        if not src.is_dir():
            continue
        make_dirs(folder / sub)
        for f in sorted(src.iterdir()):
            dst = folder / sub / f.name
            record_write(dst)  # recorded first; a file there this tool did not write stops the demo (docs/safety.md)
            if dst.exists() or dst.is_symlink():
                dst.unlink()  # the demo's own earlier copy (record_write refused anything else)
            try:
                os.link(f, dst)
            except OSError:
                shutil.copyfile(f, dst)
            owner = active_folder(dst)
            if owner is not None:
                owner.written(dst)
    with atomic_path(folder / "metadata.csv") as tmp:
        shutil.copyfile(human_csv, tmp)  # paths are relative to the CSV's folder
    return root


def _fmt(v) -> str:
    """A leaderboard cell: 3 decimals, empty when missing (:func:`spear_metrics.commands.number_text`)."""
    return number_text(v, 3, missing="")


def _dimensions(metrics: str) -> tuple[list, list[str]]:
    """The dimensions of ``metrics`` built once for every system; one that cannot be built
    here (a missing package) is left out with a note."""
    from spear_metrics.core.registry import load_dimension, parse_metrics

    dims, notes = [], []
    for name in parse_metrics(metrics):
        try:
            dims.append(load_dimension(name))
        except (ImportError, ValueError) as e:
            notes.append(f"{name} left out: {e}")
    return dims, notes


def _cascade(human: Path, out: Path, resumed: list[str]) -> tuple[Path | None, str | None]:
    """Run the built-in cascade agent over the samples (``spearbench infer``); its metadata CSV,
    or ``None`` and why it could not run. A resumed run is said in ``resumed``."""
    from spear_metrics.agents.harness import InferError, run_inference

    try:
        info = run_inference(CASCADE, str(human), out, progress=False, overwrite=True)
    except (InferError, ValueError, ImportError, OSError) as e:
        return None, f"cascade left out: {e}"
    if info is not None and info.get("rows_resumed"):
        resumed.append(f"cascade answers {info['rows_resumed']} of {info['n_inputs']}")
    if info is not None and info["n_answered"] == 0:
        return None, f"cascade left out: no input answered (see {shown_path(out, 'failures.jsonl')})"
    return out / "metadata.csv", None


def run(args: argparse.Namespace) -> int:
    import time

    t0 = time.perf_counter()
    out = Path(args.out)
    given = {"--call": args.call, "--rttm": args.rttm, "--stm": args.stm}
    if any(given.values()) and not all(given.values()):
        missing = ", ".join(k for k, v in given.items() if not v)
        print(f"spearbench demo: --call, --rttm and --stm go together (a mono call, its speaker turns and its "
              f"timed transcript); missing {missing}", file=sys.stderr)
        return 2
    try:
        call, rttm, stm = (Path(args.call), Path(args.rttm), Path(args.stm)) if args.call else packaged_sample()
        for flag, p in zip(given, (call, rttm, stm)):
            if not p.is_file():
                raise FileNotFoundError(f"{flag} {p}: no such file")
    except FileNotFoundError as e:
        print(f"spearbench demo: {e}", file=sys.stderr)
        return 2
    from spear_datasets.ownership import open_folder

    # --out: new, empty or a demo folder this tool wrote (the runs inside keep their own records)
    with open_folder(out, command="demo") as folder:
        folder.remove_recorded(under="data")  # the samples an earlier demo cut here (its files only)
        return _run_demo(args, out, call, rttm, stm, t0)


def _run_demo(args: argparse.Namespace, out: Path, call: Path, rttm: Path, stm: Path, t0: float) -> int:
    """:func:`run` once ``--out`` is open (writes recorded)."""
    import time

    from spear_metrics.core.models import ModelUnavailableError
    from spear_metrics.core.runner import RunError
    from spear_metrics.core.scoring import run_score
    from spear_metrics.results import ResultsError, write_results_dataset

    from spear_datasets.audio import AudioError
    from spear_datasets.sources.turns import TurnFileError

    try:
        human = build_demo_data(call, rttm, stm, out / "data")
    except (AudioError, TurnFileError, ValueError, UnicodeDecodeError) as e:
        print(f"spearbench demo: cannot cut samples from {call.name}: {' '.join(str(e).split())}", file=sys.stderr)
        return 2
    from spear_datasets.schema import MetadataError, read_metadata

    try:
        read_metadata(human)
    except MetadataError:
        print(f"spearbench demo: the selection protocol found no question/answer exchange in {call.name} "
              "(a question is a turn ending with '?' answered by the other speaker for >= 1 s)", file=sys.stderr)
        return 2
    systems = {
        "human": human,
        f"fixed-delay-{args.delay:g}s": write_system_metadata(human, "fixed-delay", args.delay),
        f"barge-in-{args.lead:g}s": write_system_metadata(human, "barge-in", -args.lead),
    }
    # the onset rule of each system (spear_metrics.core.onset): the references are placed by construction
    # (a fixed delay, a fixed lead); the cascade's is what its infer run recorded
    onsets = {"human": "reference", f"fixed-delay-{args.delay:g}s": "fixed_delay", f"barge-in-{args.lead:g}s": "fixed_delay"}
    notes: list[str] = []
    resumed: list[str] = []
    cascade_csv, why = _cascade(human, out / "cascade", resumed)
    if cascade_csv is not None:
        systems[CASCADE] = cascade_csv
    else:
        notes.append(why)
    dims, dim_notes = _dimensions(args.metrics)
    notes += dim_notes
    summaries = {}
    for name, meta in systems.items():
        while True:
            metrics = ",".join(d.name for d in dims)
            try:
                summaries[name] = run_score(meta, metrics, out / "results" / name, progress=False, overwrite=True,
                                            dimensions=_against_human(dims, out / "results" / "human", name),
                                            onset_kind=onsets.get(name))  # recorded: the Space and compare see it
                done = read_run_info(out / "results" / name).get("rows_resumed", 0)
                if done:
                    resumed.append(f"{name} scores {done} of {summaries[name]['n_samples']}")
                break
            except ModelUnavailableError as e:  # a packaged model that cannot be had: the others still run
                heavy = [d for d in dims if d.model_based]
                if not heavy or len(heavy) == len(dims):
                    print(f"spearbench demo: {e}", file=sys.stderr)
                    return 2
                notes.append(f"{', '.join(d.name for d in heavy)} left out: {e}")
                dims = [d for d in dims if not d.model_based]
            except RunError as e:
                print(f"spearbench demo: {name}: {e}", file=sys.stderr)
                return 2
    report = _report(out, systems)
    from datasets.utils.logging import disable_progress_bar

    disable_progress_bar()  # one parquet file per system: no bars in the demo's output
    for name, meta in systems.items():
        try:
            write_results_dataset(out / "results" / name, out / "datasets" / name, model_name=name,
                                  inference_mode=None if name == "human" else
                                  ("Half-duplex" if name == CASCADE else "Full-duplex"),
                                  open_weights=None if name == "human" else True, metadata=meta, with_audio=True,
                                  with_inputs=(name == "human"))
        except ResultsError as e:
            notes.append(f"results dataset of {name} not written: {e}")
    onsets.update({n: s["onset_kind"] for n, s in summaries.items()
                   if n not in onsets and s.get("onset_kind") not in (None, "unstated")})
    ties = _ties(out, [n for n in systems if n != "human"], summaries, onsets)
    cols = write_leaderboard(out / "leaderboard.csv", summaries, ties)
    spear_data = write_spear_layout(human, out / "spear_data")
    n = summaries["human"]["n_samples"]
    print(f"SPEAR demo: {n} samples cut from {call.name} ({len(systems)} systems: {', '.join(systems)})\n")
    shown = dict(summaries)  # the human answers are what the others are told apart from
    if shown["human"].get(LIKENESS) is None:
        shown["human"] = {**shown["human"], "human_likeness_note": "the human answers are the reference it is measured against"}
    print(leaderboard_text(cols, shown, ties))
    _print_ranking(summaries)
    for note in notes:
        print(wrap(f"note: {note}"))
    if resumed:
        print(wrap(f"resumed: rows already done by an earlier demo in {shown_path(out)}: {'; '.join(resumed)} "
                   "(delete the folder to start again)"))
    print()
    print(wrap(f"wrote {shown_path(out, 'leaderboard.csv')}; samples in {shown_path(out, 'data')} (and in the SPEAR "
               f"layout in {shown_path(spear_data)}), per-system results in {shown_path(out, 'results')}, "
               f"results datasets in {shown_path(out, 'datasets')}"))
    print(f"demo took {time.perf_counter() - t0:.0f} s")
    print(f"report: {shown_path(report)}")
    datasets = [shown_path(out, "datasets", name) for name in systems if (out / "datasets" / name).is_dir()]
    next_steps(("open the report in a browser", shown_path(report)),
               ("browse the systems in the leaderboard Space (then open http://127.0.0.1:7860)",
                command("python", "-m", "spear_metrics.space", "--results", *datasets)),
               ("compare two systems sample by sample",
                command("spearbench", "compare", shown_path(out, "results", subject_of(systems)), shown_path(out, "results", "human"))),
               ("make a Hub-layout dataset of the demo's samples (the layout of spearbench/seamless_2t_2s_questions)",
                command("spearbench", "build-dataset", "--source", shown_path(spear_data), "--out",
                        shown_path(out, "hub_dataset"), "--source-name", "pyannote.audio sample call (origin of the "
                        "recording not stated)", "--source-url", "https://github.com/pyannote/pyannote-audio")),
               ("run your own agent on the same samples: first save the README's EchoAgent example as my_agents.py "
                "(or give a built-in name from `spearbench infer --list-agents`)",
                command("spearbench", "infer", "--agent", "my_agents.py:EchoAgent", "--data", shown_path(human), "--out",
                        shown_path(out, "my_agent"))))
    return 0


def subject_of(systems: dict[str, Path]) -> str:
    """The system the demo reports on: the cascade, else the first reference."""
    names = [n for n in systems if n != "human"]
    return CASCADE if CASCADE in systems else names[0]


def _ties(out: Path, names: list[str], summaries: dict[str, dict], onsets: dict[str, str]) -> dict[str, dict]:
    """Tie groups and rank intervals of the systems ``names`` (the human answers are the
    reference, not a contestant: "closer to human" keys are judged against its values) on every
    key of the leaderboard (:func:`spear_metrics.reports.runs.leaderboard_ties`), from their
    ``per_sample.jsonl``; ``onsets``: each system's onset rule (a placed onset is not ranked on
    the keys computed from it, ``latency_ms``...)."""
    from spear_metrics.core.summary import BENCHMARK_KEYS
    from spear_metrics.reports.runs import leaderboard_ties, scored_rows

    rows = {n: scored_rows(out / "results" / n) for n in names if (out / "results" / n / "per_sample.jsonl").is_file()}
    keys = [k for k in BENCHMARK_KEYS if any(k in summaries.get(n, {}) for n in rows)]
    return leaderboard_ties(rows, keys, human=summaries.get("human"), onset_kinds=onsets) if len(rows) >= 2 else {}


def leaderboard_text(cols: list[str], summaries: dict[str, dict], ties: dict[str, dict] | None = None) -> str:
    """The demo's leaderboard for the console: one line per key, one column per system (fits
    120 columns; more systems wrap into blocks, :func:`spear_metrics.commands.text_table`).
    With ``ties`` (:func:`spear_metrics.reports.runs.leaderboard_ties`), each value of a key with
    a tie group carries its mark and rank interval (:func:`spear_metrics.reports.runs.tie_cell`:
    ★ best, ≈ tied with the best; ``[rule]``: the onset rule of a system not ranked on a key
    computed from its onset) and the rules are stated once under the table."""
    from spear_metrics.commands import null_reason, numbered_notes
    from spear_metrics.core.summary import few_events
    from spear_metrics.reports.runs import onset_tie_note, tie_cell

    head = ["key", *summaries]
    nulls = [(c, name) for c in cols[1:] for name, s in summaries.items() if s.get(c) is None]
    refs, lines = numbered_notes([null_reason(summaries[name], c) for c, name in nulls])
    ref = dict(zip(nulls, refs))
    rows = []
    for c in cols[1:]:
        mine = [ref[(c, name)] for name in summaries if (c, name) in ref]
        # no system has a value, for one reason: the reason beside the key, once
        one = mine[0] if len(mine) == len(summaries) and len(set(mine)) == 1 else None
        cells = []
        for name, s in summaries.items():
            if (c, name) not in ref:
                mark = " ".join(m for m in (tie_cell(ties or {}, c, name), few_events(s, c)) if m)
                cells.append(f"{_fmt(s.get(c))} {mark}" if mark else _fmt(s.get(c)))
            else:
                cells.append("-" if one else f"- {ref[(c, name)]}")
        rows.append([f"{c} {one}" if one else c] + cells)
    if ties:
        lines.append(next(iter(ties.values()))["rule"])
        lines += [n for n in (onset_tie_note(ties),) if n]
    return text_table(head, rows) + "".join(f"\n{wrap(line)}" for line in lines)


def _against_human(dims: list, human_run: Path, name: str) -> list:
    """The dimensions a system is scored with: for every system but the human answers (scored
    first), ``distributional`` gets ``human_run`` (its ``human_likeness_auroc``), sharing the
    first instance's loaded ASR."""
    if name == "human":
        return dims
    from spear_metrics.core.registry import load_dimension

    out = []
    for d in dims:
        if d.name == "distributional":
            twin = load_dimension("distributional", **{**d.options, "human_run": str(human_run)})
            twin._asr = d._asr  # the ASR model loaded for the human answers
            d = twin
        out.append(d)
    return out


def _print_ranking(summaries: dict[str, dict]) -> None:
    """The systems ranked by ``human_likeness_auroc`` (lowest, most human-like, first; no value
    last, with the reason). Nothing when no system has one: the leaderboard above already says why."""
    from spear_metrics.core.summary import interval_text

    ranked = [(n, s) for n, s in summaries.items() if n != "human" and LIKENESS in s]
    if not any(s.get(LIKENESS) is not None for _, s in ranked):
        return
    ranked.sort(key=lambda kv: (kv[1].get(LIKENESS) is None, kv[1].get(LIKENESS) or 0.0, kv[0]))
    print(f"\n{LIKENESS} (SPEARBench's own score: 0.5 = a classifier cannot tell the system from the human answers)")
    width = max(len(n) for n, _ in ranked)
    missing = [n for n, s in ranked if s.get(LIKENESS) is None]
    refs, lines = numbered_notes([ranked_s.get("human_likeness_note") or "no value"
                                  for n, ranked_s in ranked if n in missing], prefix="reason")
    ref = dict(zip(missing, refs))  # a reason shared by several systems is printed once, below
    for n, s in ranked:
        v, ci = s.get(LIKENESS), s.get(f"{LIKENESS}_ci95")
        shown = interval_text(v, ci)
        why = f"  {ref[n]}" if n in ref else ""
        print(f"  {n:<{width}}  {shown}  n={s.get(f'{LIKENESS}_n', 0)}{why}")
    for line in lines:
        print(wrap(line))


def _report(out: Path, systems: dict[str, Path]) -> Path:
    """The report of the system that makes its own speech (else the first reference) against the
    human answers, with the other systems beside it."""
    from spear_metrics.reports.html import build_report
    from spear_metrics.reports.runs import load_run

    names = [n for n in systems if n != "human"]
    subject = subject_of(systems)
    runs = {n: load_run(out / "results" / n, name=n) for n in systems}
    # inside the run's folder, where push-results picks it up (results dataset ``report/``)
    return build_report(runs[subject], out / "results" / subject / "report", human=runs["human"],
                        against=[runs[n] for n in names if n != subject])
