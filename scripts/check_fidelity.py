"""Each published SPEAR key as the project computes it, next to a plain re-statement of SPEAR's rule.

    .venv/bin/python scripts/check_fidelity.py --build DIR          # rows cut from tests/fixtures
    .venv/bin/python scripts/check_fidelity.py --metadata DIR/metadata.csv [--no-asr]

The project side is ``spearbench score`` (``run_score``) with ``interruptions``,
``explainable_features`` and ``speech_quality`` (embedded Whisper base, no MOS). The reference
side is ``scripts/spear_reference.py`` (no project code). WER/CER compare SPEAR's text rule on the
SAME hypotheses (the project's ASR text of each row), per ASR. Interruption values are compared
on rows with an ``answer_start_time`` (the project writes null for an empty one: a documented
divergence, the published "-"). Prints one line per key: project aggregate, reference aggregate,
the largest per-row difference and the rows compared. Exit 1 when a difference exceeds 1e-6.
"""

from __future__ import annotations

import argparse
import csv
import json
import sys
import tempfile
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import spear_reference as ref  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
REAL = REPO / "tests" / "fixtures" / "real"
HEADER = ["audio_path", "answer_audio_path", "context_end_time", "question_end_time", "answer_duration", "speakers",
          "conversation_id", "transcript_question", "transcript_answer", "answer_start_time"]


def build(root: Path) -> Path:
    """SPEAR rows cut from the real fixtures: a handover, barge-ins (one leaving < 250 ms of speech
    after the skip point), lead silence, 48 kHz and 44.1 kHz stereo answers, a silent answer, an
    empty answer_start_time with an upper-case AMI supervision, in two subset folders."""
    import soundfile as sf

    root.mkdir(parents=True, exist_ok=True)
    dlg = REAL / "DERIVED__pyannote-audio__seriously_29-60s_stereo_L-FEE016_R-MEO015.wav"
    x, sr = sf.read(dlg, dtype="float32")  # (n, 2), 16 kHz
    turns = json.loads(dlg.with_suffix(".json").read_text())["turns"]
    q_text = "P0001: " + turns[0]["text"]
    a_text = "P0002: " + turns[-2]["text"]
    q = x[: int(15.48 * sr)]
    meo = x[int(15.46 * sr):, 1]
    (root / "answers").mkdir(exist_ok=True)
    sf.write(root / "answers/meo.wav", meo, sr, subtype="PCM_16")
    sf.write(root / "answers/meo_lead0.7.wav", np.concatenate([np.zeros(int(0.7 * sr), np.float32), meo]), sr, subtype="PCM_16")
    sf.write(root / "answers/silent.wav", np.zeros(2 * sr, np.float32), sr, subtype="PCM_16")
    p225, sr48 = sf.read(REAL / "speechbrain__p225_002.wav", dtype="float32")
    sf.write(root / "answers/p225_48k_stereo.wav", np.stack([p225, p225], 1), sr48, subtype="PCM_16")
    ama = json.loads((REAL / "lhotse__ES2011a.Headset-0-40s-46s.json").read_text())["supervisions"]
    rows = [
        ("improvised", "answers/meo.wav", -0.02, a_text),                  # human handover
        ("improvised", "answers/meo.wav", -1.0, a_text),                   # barge-in, speech at the cut
        ("improvised", "answers/meo.wav", -5.4, a_text),                   # < 250 ms of speech left after the cut
        ("naturalistic", "answers/meo_lead0.7.wav", 0.3, a_text),          # lead silence + gap
        ("naturalistic", "answers/p225_48k_stereo.wav", 0.0, "P0002: " + (REAL / "speechbrain__p225_002.txt").read_text().strip()),
        ("naturalistic", str(REAL / "faster-whisper__jfk.flac"), -0.3, "P0002: " + (REAL / "faster-whisper__jfk.txt").read_text().strip()),
        ("naturalistic", "answers/silent.wav", 0.2, "P0002: Yes."),        # silent answer
        ("naturalistic", str(REAL / "lhotse__ES2011a.Headset-0-40s-46s.wav"), None, "P0002: " + " ".join(s["text"] for s in ama)),
        ("improvised", str(REAL / "speechbrain__p226_002.wav"), -2.0, "P0002: " + (REAL / "speechbrain__p226_002.txt").read_text().strip()),
    ]
    out = []
    for i, (subset, ans, ast, text) in enumerate(rows):
        qp = f"test/{subset}/V00_S0001_I0000000{i}_P0001_P0002_{i}.wav"
        (root / qp).parent.mkdir(parents=True, exist_ok=True)
        sf.write(root / qp, q, sr, subtype="PCM_16")
        out.append({"audio_path": qp, "answer_audio_path": ans, "context_end_time": 8.74, "question_end_time": 15.48,
                    "answer_duration": "", "speakers": "P0001|P0002", "conversation_id": f"V00_S0001_I0000000{i}",
                    "transcript_question": q_text, "transcript_answer": text,
                    "answer_start_time": "" if ast is None else ast})
    meta = root / "metadata.csv"
    with open(meta, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=HEADER)
        w.writeheader()
        w.writerows(out)
    return meta


def project(meta: Path, out: Path, asr: bool) -> tuple[dict, list[dict]]:
    from spear_metrics.core.scoring import run_score

    metrics = "interruptions,explainable_features" + (",speech_quality" if asr else "")
    run_score(meta, metrics, out, options={"mos": ""} if asr else {}, progress=False, overwrite=True)
    summary = json.loads((out / "summary.json").read_text())
    rows = [json.loads(line) for line in (out / "per_sample.jsonl").read_text().splitlines()]
    return summary, sorted(rows, key=lambda r: r["row"])


def reference(meta: Path, per_row: list[dict], asr_labels: list[str]) -> tuple[dict, list[dict]]:
    with open(meta, newline="") as f:
        raw = list(csv.DictReader(f))
    vals, feats, spk, tables = [], [], [], []
    for r, mine in zip(raw, per_row):
        if mine["status"] != "ok":
            vals.append({})
            continue
        qp, ap = ref.resolve(meta.parent, r["audio_path"]), ref.resolve(meta.parent, r["answer_audio_path"])
        v = {"latency_ms": ref.latency_ms(qp, ap, float(r["question_end_time"]), r["answer_start_time"])}
        if r["answer_start_time"].strip():
            v.update(ref.interruption(qp, ap, float(r["context_end_time"]), float(r["question_end_time"]), r["answer_start_time"]))
        f0 = ref.f0_features(ap)
        v["explainable_duration_s"], v["explainable_voiced_ratio"] = f0.get("total_duration_s"), f0.get("voiced_ratio")
        feats.append(f0)
        spk.append(ref.answered_speaker(r["transcript_question"]))
        tables.append(ref.subset_table(r["audio_path"]))
        for label in asr_labels:
            wc = ref.wer_cer(r["transcript_answer"], mine.get(f"asr_text_{label}"))
            v[f"WER_%_{label}"] = None if wc is None else 100 * wc[0]
            v[f"CER_%_{label}"] = None if wc is None else 100 * wc[1]
        vals.append(v)

    def mean(key):
        xs = [v[key] for v in vals if v.get(key) is not None]
        return float(np.mean(xs)) if xs else None

    agg = {k: mean(k) for k in ("latency_ms", "interrupted_time_ms", "explainable_duration_s", "explainable_voiced_ratio")}
    flags = [v["interruption"] for v in vals if "interruption" in v]
    agg["interruptions_%"] = 100.0 * sum(flags) / len(flags) if flags else None
    agg["explainable_normalized_f0_std_avg"] = ref.normalized_f0_std_avg(feats, spk, tables)
    for label in asr_labels:
        agg[f"WER_%_{label}"], agg[f"CER_%_{label}"] = mean(f"WER_%_{label}"), mean(f"CER_%_{label}")
    return agg, vals


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--build", type=Path, help="write rows cut from tests/fixtures under this folder, then check them")
    ap.add_argument("--metadata", type=Path)
    ap.add_argument("--no-asr", action="store_true", help="skip speech_quality (the embedded ASR is the slow part)")
    a = ap.parse_args()
    meta = build(a.build) if a.build else a.metadata
    if meta is None:
        ap.error("give --build DIR or --metadata CSV")
    with tempfile.TemporaryDirectory() as d:
        summary, mine = project(meta, Path(d) / "out", not a.no_asr)
    labels = summary.get("asr_models", [])
    theirs, per = reference(meta, mine, labels)
    keys = ["latency_ms", "interrupted_time_ms", "interruptions_%", "explainable_duration_s", "explainable_voiced_ratio",
            "explainable_normalized_f0_std_avg", *[f"{b}_{x}" for x in labels for b in ("WER_%", "CER_%")]]
    per_row_key = {"interruptions_%": "interruption"}
    print(f"{len(mine)} rows ({sum(r['status'] == 'ok' for r in mine)} scored) from {meta}")
    print(f"{'key':<34}{'project':>12}{'SPEAR rule':>12}{'max |row diff|':>16}{'rows':>6}")
    worst = 0.0
    for k in keys:
        rk = per_row_key.get(k, k)
        diffs = [abs(float(m[rk]) - float(v[rk])) for m, v in zip(mine, per)
                 if m.get(rk) is not None and v.get(rk) is not None]
        both_null = sum(1 for m, v in zip(mine, per) if m["status"] == "ok" and m.get(rk) is None and v.get(rk) is None)
        agg_diff = abs(summary[k] - theirs[k]) if summary.get(k) is not None and theirs.get(k) is not None else 0.0
        d = max(diffs + [agg_diff], default=0.0)
        worst = max(worst, d)
        fmt = lambda x: "null" if x is None else f"{x:.4f}"  # noqa: E731
        if k == "explainable_normalized_f0_std_avg":  # a statistic of the whole set: no per-row value
            print(f"{k:<34}{fmt(summary.get(k)):>12}{fmt(theirs.get(k)):>12}{'(whole set)':>16}{'-':>6}")
            continue
        print(f"{k:<34}{fmt(summary.get(k)):>12}{fmt(theirs.get(k)):>12}{max(diffs, default=0.0):>16.3g}{len(diffs):>6}"
              + (f"  (+{both_null} null on both sides)" if both_null else ""))
    print(f"largest difference: {worst:.3g}")
    return 0 if worst <= 1e-6 else 1


if __name__ == "__main__":
    raise SystemExit(main())
