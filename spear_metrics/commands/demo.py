"""``spearbench demo --out DIR``: the main job end to end on a real two-person call.

1. Reads the real telephone call that ships inside the ``pyannote.audio`` wheel
   (``pyannote/audio/sample/``: mono 16 kHz wav, RTTM speaker turns, STM timed transcript;
   only the files are read, none of its models), or the files given with ``--call/--rttm/--stm``.
2. Splits the mono call into one channel per speaker with the RTTM turns and cuts SPEAR
   samples with the selection protocol (STM text, speakers mapped onto RTTM labels by overlap).
3. Scores the human answers and two reference systems whose behaviour is known by
   construction, both replaying the human answer: ``fixed-delay`` (onset ``--delay`` s after the
   question end) and ``barge-in`` (onset ``--lead`` s before the question end, so it overlaps
   question speech in every sample).
4. Prints the leaderboard and writes ``DIR/leaderboard.csv`` (``model`` + benchmark keys).
Nothing is downloaded.
"""

from __future__ import annotations

import argparse
import csv
import sys
from dataclasses import replace
from pathlib import Path

from spear_metrics.commands import number

DEFAULT_METRICS = "interruptions,explainable_features"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--out", required=True, help="output folder")
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


def write_leaderboard(path: Path, summaries: dict[str, dict]) -> list[str]:
    """``model`` + the benchmark keys present in any summary (published column order) + counts."""
    from spear_metrics.core.summary import BENCHMARK_KEYS

    keys = [k for k in BENCHMARK_KEYS if any(k in s for s in summaries.values())]
    extra = [k for k in ("DNSMOS_OVRL", "DistillMOS", "no_speech_answers_%", "n_samples", "n_scored", "n_failed")
             if any(k in s for s in summaries.values())]
    cols = ["model", *keys, *extra]
    with open(path, "w", newline="", encoding="utf-8") as f:
        w = csv.writer(f)
        w.writerow(cols)
        for model, s in summaries.items():
            w.writerow([model] + [_fmt(s.get(k)) for k in cols[1:]])
    return cols


def _fmt(v) -> str:
    if v is None:
        return ""
    return f"{v:.3f}" if isinstance(v, float) else str(v)


def run(args: argparse.Namespace) -> int:
    from spear_metrics.core.runner import run_score

    from spear_datasets.audio import AudioError
    from spear_datasets.sources.turns import TurnFileError

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
    summaries = {}
    for name, meta in systems.items():
        summaries[name] = run_score(meta, args.metrics, out / "results" / name, progress=False, overwrite=True)
    cols = write_leaderboard(out / "leaderboard.csv", summaries)
    n = summaries["human"]["n_samples"]
    print(f"SPEAR demo: {n} samples cut from {call.name} ({len(systems)} systems)\n")
    table = [cols] + [[model] + [_fmt(s.get(c)) or "-" for c in cols[1:]] for model, s in summaries.items()]
    widths = [max(len(r[i]) for r in table) for i in range(len(cols))]
    for r in table:
        print("  ".join(c.rjust(w) if i else c.ljust(w) for i, (c, w) in enumerate(zip(r, widths))))
    print(f"\nwrote {out / 'leaderboard.csv'}; samples in {out / 'data'}, per-system results in {out / 'results'}")
    return 0
