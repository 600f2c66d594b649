"""Throughput of the model-based dimensions' models, batched vs one at a time, with randomly
initialised models of the REAL architectures and sizes (nothing downloaded), on rows shaped like
SPEAR's test split. The same script runs on CPU (a few rows) and on a GPU (item 4 of issue 15:
``scripts/gpu_model_throughput.sh``).

Models (random weights; the architecture and size of the reference checkpoints):

- ``whisper-large-v3`` (1.55 B): called as SPEAR's ``bin/transcribe.py`` calls it: the feature
  extractor's single 30 s window (short-form), ``model.generate(input_features, task="transcribe")``,
  no language forced (the model detects it: one extra decoder pass), default token limit. Random
  weights never emit the end token on purpose, so every call decodes exactly ``--steps`` new
  tokens (min = max = steps; default 32, about the tokens of an 8.8 s answer).
- ``qwen3-asr-0.6b``: ``Qwen3ASRForConditionalGeneration`` (transformers) with the 0.6B sizes
  (audio encoder 18 layers x 896, projector to 1024; Qwen3-0.6B text model, 28 layers x 1024);
  the prompt is the chat template's length (16 text tokens) + the processor's audio-token count,
  left-padded in a batch; ``--steps`` new tokens, no language forced.
- ``mms-lid-126``: ``Wav2Vec2ForSequenceClassification`` of mms-1b's size (48 layers x 1280,
  126 labels) through the project's ``LanguageID.predict`` (length-sorted batches, attention
  masks); answers of 1 s or more, as the dimension.
- ``vox-emotion``: the Vox-Profile Whisper-large-v3-encoder emotion head the project reads
  (``spear_metrics/core/vox_whisper.py``: LoRA encoder, 15 s window) through ``VoxWhisper.predict``;
  per row the question turn and the answer (2 clips). The Voxlect dialect head has the same
  encoder and window: its cost per row is the same (question clip + answer).

Rows: answers (and input clips) with the full split's length distribution
(``bench_full_split.py``: answers 1-30 s, mean 8.79 s), cut from the real fixtures when
``tests/fixtures`` is there, otherwise noise of the same lengths (random weights: the content
does not change the cost). One decode per file (``Sample``), rows ordered longest answer first
as the runner orders them for model-based dimensions.

Reported per model: rows/s batched and one at a time (and their ratio, measured side by side in
one run), the batch size (given, or ``auto``: from the free GPU memory), the dtype, and with
``--check-dtype`` the largest output difference of the half-precision run against float32. With
``--project`` the time of a full test split (2,725 rows) on this device.

    .venv/bin/python scripts/bench_model_throughput.py --rows 3 --models emotion,lid      # CPU, a few rows
    python scripts/bench_model_throughput.py --device cuda --rows 256 --single-rows 32 --dtype auto --batch auto --check-dtype --project
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import sys
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "scripts"))
SR = 16_000
FULL_SPLIT_ROWS = 2725

# Whisper large-v3 token layout (tokenizer of openai/whisper-large-v3): 100 language tokens
WHISPER_V3 = dict(vocab_size=51866, num_mel_bins=128, d_model=1280, encoder_layers=32, decoder_layers=32,
                  encoder_attention_heads=20, decoder_attention_heads=20, encoder_ffn_dim=5120, decoder_ffn_dim=5120,
                  max_source_positions=1500, max_target_positions=448, decoder_start_token_id=50258,
                  bos_token_id=50257, eos_token_id=50257, pad_token_id=50257)
# Qwen3-ASR-0.6B sizes (audio encoder: 18 x 896, 14 heads, FFN 3584, output 1024; text: Qwen3-0.6B)
QWEN3_ASR_06B_AUDIO = dict(encoder_layers=18, d_model=896, encoder_attention_heads=14, encoder_ffn_dim=3584, output_dim=1024)
QWEN3_06B_TEXT = dict(hidden_size=1024, intermediate_size=3072, num_hidden_layers=28, num_attention_heads=16,
                      num_key_value_heads=8, head_dim=128, vocab_size=151936, tie_word_embeddings=True,
                      max_position_embeddings=32768)
# MMS-1B (facebook/mms-lid-126's backbone)
MMS_1B = dict(hidden_size=1280, num_hidden_layers=48, num_attention_heads=16, intermediate_size=5120,
              conv_dim=(512,) * 7, conv_bias=True, feat_extract_norm="layer", do_stable_layer_norm=True,
              num_conv_pos_embeddings=128, num_conv_pos_embedding_groups=16, classifier_proj_size=1024, num_labels=126)


def _scaled(cfg: dict, keys: tuple[str, ...], fraction: float) -> dict:
    out = dict(cfg)
    for k in keys:
        out[k] = max(1, round(cfg[k] * fraction))
    return out


# ------------------------------------------------------------------------------------ rows

def rows_like_the_split(n: int, seed: int = 0) -> list[dict]:
    """``n`` rows with the full split's durations: ``question`` (questioner's turn, 1-5 s),
    ``input`` (input clip mixed, 3-30 s) and ``answer`` (1-30 s) waves at 16 kHz, longest answer first."""
    import tempfile

    import bench_full_split as bfs

    real = bfs.REAL.is_dir()
    rows = []
    if real:
        from spear_datasets.schema import read_metadata
        from spear_metrics.core.scoring import prepare_rows

        root = Path(tempfile.mkdtemp(prefix="bench_models_"))
        n_imp = round(n * bfs.N_IMPROVISED / (bfs.N_IMPROVISED + bfs.N_NATURALISTIC))
        meta = bfs.build_split(root, pool=max(4, min(48, n)), seed=seed, n_improvised=n_imp, n_naturalistic=n - n_imp)
        for s in prepare_rows(read_metadata(meta), meta.parent).samples:
            clip = s.input_audio("keep")
            lo, hi = int(round(s.meta.context_end_time * SR)), int(round(s.meta.question_end_time * SR))
            rows.append({"input": s.input_audio("mix")[0], "question": clip[1, lo:hi].copy(), "answer": s.answer_audio()[0]})
            s.release()
    else:
        rng = np.random.default_rng(seed)
        for q, a in zip(bfs._lengths(rng, n, bfs.MEAN_INPUT_S, 3.0, 30.0), bfs._lengths(rng, n, bfs.MEAN_ANSWER_S, 1.0, 30.0)):
            x = (0.05 * rng.standard_normal(int(q * SR))).astype(np.float32)
            rows.append({"input": x, "question": x[-int(rng.uniform(1, 5) * SR):], "answer":
                         (0.05 * rng.standard_normal(int(a * SR))).astype(np.float32)})
    rows.sort(key=lambda r: -len(r["answer"]))
    return rows


# ---------------------------------------------------------------------------------- models

class Whisper:
    """Whisper large-v3, random weights, generate() as transcribe.py calls it."""

    name = "whisper-large-v3"
    clips = ("answer",)

    def __init__(self, device, dtype, steps: int, fraction: float):
        import torch
        from transformers import GenerationConfig, WhisperConfig, WhisperFeatureExtractor, WhisperForConditionalGeneration

        cfg = WhisperConfig(**_scaled(WHISPER_V3, ("encoder_layers", "decoder_layers"), fraction))
        torch.manual_seed(0)
        with torch.device(device):  # random init where the model runs (fast on a GPU)
            self.model = WhisperForConditionalGeneration(cfg).to(dtype).eval()
        langs = ["en", "zh", "de", "es", "ru", "ko", "fr", "ja", "pt", "tr"] + [f"x{i}" for i in range(90)]
        self.model.generation_config = GenerationConfig(
            decoder_start_token_id=50258, bos_token_id=50257, eos_token_id=50257, pad_token_id=50257, max_length=448,
            is_multilingual=True, lang_to_id={f"<|{c}|>": 50259 + i for i, c in enumerate(langs)},
            task_to_id={"translate": 50359, "transcribe": 50360}, no_timestamps_token_id=50364, prev_sot_token_id=50362,
            begin_suppress_tokens=[220, 50257], suppress_tokens=[], min_new_tokens=steps, max_new_tokens=steps)
        self.fe = WhisperFeatureExtractor(feature_size=128)
        self.device, self.dtype = device, dtype

    def run(self, waves: list[np.ndarray]) -> np.ndarray:
        import torch

        feats = self.fe(waves, sampling_rate=SR, return_tensors="pt").input_features.to(self.device, self.dtype)
        with torch.inference_mode():
            ids = self.model.generate(feats, task="transcribe")
        return ids.cpu().numpy()


class Qwen3ASR:
    """Qwen3-ASR-0.6B, random weights, generate() on chat-template-length prompts."""

    name = "qwen3-asr-0.6b"
    clips = ("answer",)
    prompt_tokens = 16

    def __init__(self, device, dtype, steps: int, fraction: float):
        import torch
        from transformers import Qwen3ASRConfig, Qwen3ASRForConditionalGeneration
        from transformers.models.qwen3_asr.feature_extraction_qwen3_asr import Qwen3ASRFeatureExtractor
        from transformers.models.qwen3_asr.processing_qwen3_asr import Qwen3ASRProcessor

        cfg = Qwen3ASRConfig(audio_config=dict(_scaled(QWEN3_ASR_06B_AUDIO, ("encoder_layers",), fraction), model_type="qwen3_asr_encoder"),
                             text_config=dict(_scaled(QWEN3_06B_TEXT, ("num_hidden_layers",), fraction), model_type="qwen3"))
        torch.manual_seed(0)
        with torch.device(device):
            self.model = Qwen3ASRForConditionalGeneration(cfg).to(dtype).eval()
        self.fe = Qwen3ASRFeatureExtractor()
        self.tokens = Qwen3ASRProcessor._get_audio_token_length
        self.cfg, self.steps, self.device, self.dtype = cfg, steps, device, dtype

    def run(self, waves: list[np.ndarray]) -> np.ndarray:
        import torch

        f = self.fe(waves, sampling_rate=SR, return_tensors="pt", padding=True, truncation=False, return_attention_mask=True)
        mask = f.pop("attention_mask")
        n_audio = [int(x) for x in self.tokens(None, mask.sum(-1), 50)]
        length = self.prompt_tokens + max(n_audio)
        ids = torch.full((len(waves), length), self.cfg.pad_token_id, dtype=torch.long)
        att = torch.zeros((len(waves), length), dtype=torch.long)
        for i, k in enumerate(n_audio):  # left padding, as a batched chat template is
            seq = [151644] * 8 + [self.cfg.audio_token_id] * k + [151645] * 8
            ids[i, length - len(seq):] = torch.tensor(seq)
            att[i, length - len(seq):] = 1
        with torch.inference_mode():
            out = self.model.generate(input_ids=ids.to(self.device), attention_mask=att.to(self.device),
                                      input_features=f["input_features"].to(self.device, self.dtype),
                                      input_features_mask=mask.to(self.device), max_new_tokens=self.steps,
                                      min_new_tokens=self.steps, do_sample=False)
        return out[:, length:].cpu().numpy()


class LID:
    """MMS-LID (mms-1b size), random weights, through the project's LanguageID.predict."""

    name = "mms-lid-126"
    clips = ("answer",)

    def __init__(self, device, dtype, steps: int, fraction: float):
        import torch
        from transformers import Wav2Vec2Config, Wav2Vec2FeatureExtractor, Wav2Vec2ForSequenceClassification

        from spear_metrics.language_dialect.definition import LanguageID

        cfg = Wav2Vec2Config(**_scaled(MMS_1B, ("num_hidden_layers",), fraction))
        torch.manual_seed(0)
        lid = LanguageID.__new__(LanguageID)  # the model is built here, not read from a folder
        lid.extractor = Wav2Vec2FeatureExtractor(feature_size=1, sampling_rate=SR, padding_value=0.0, do_normalize=True,
                                                 return_attention_mask=True)
        lid.device, lid.dtype, lid._torch, lid._second_bytes = device, dtype, torch, None
        with torch.device(device):
            lid.model = Wav2Vec2ForSequenceClassification(cfg).to(dtype).eval()
        lid.id2label = {i: f"l{i}" for i in range(cfg.num_labels)}
        self.lid = lid

    def run(self, waves: list[np.ndarray], batch="auto") -> np.ndarray:
        return np.array([p for _, p in self.lid.predict(waves, batch_size=batch)])


class Emotion:
    """Vox-Profile Whisper-large-v3-encoder emotion head, random weights, through VoxWhisper.predict."""

    name = "vox-emotion"
    clips = ("question", "answer")

    def __init__(self, device, dtype, steps: int, fraction: float):
        import torch
        from transformers import WhisperFeatureExtractor

        from spear_metrics.core.vox_whisper import BACKBONES, EMOTION_DIM_HEADS, MAX_SECONDS, VoxWhisper, build_random

        cfg = dict(pretrain_model="whisper_large", hidden_dim=256, lora_rank=16, finetune_method="lora", use_conv_output=True,
                   whisper_config=_scaled(BACKBONES["whisper_large"], ("encoder_layers",), fraction))
        vw = VoxWhisper.__new__(VoxWhisper)  # the model is built here, not read from a folder
        vw.config, vw.model_id, vw._torch, vw._item_bytes = cfg, "random", torch, None
        vw.device, vw.dtype = device, dtype
        with torch.device(device):
            vw.net = build_random(cfg, EMOTION_DIM_HEADS).to(dtype).eval()
        vw.features = WhisperFeatureExtractor(feature_size=128, sampling_rate=SR, chunk_length=MAX_SECONDS)
        self.vw = vw

    def run(self, waves: list[np.ndarray], batch="auto") -> np.ndarray:
        return np.array([[float(r[h][0]) for h in ("arousal_layer", "valence_layer", "dominance_layer")]
                         for r in self.vw.predict(waves, batch_size=batch)])


MODELS = {"whisper": Whisper, "qwen": Qwen3ASR, "lid": LID, "emotion": Emotion}


# ------------------------------------------------------------------------------- measuring

def _sync(device) -> None:
    import torch

    if str(device).startswith("cuda"):
        torch.cuda.synchronize()


def _waves(model, rows: list[dict]) -> list[np.ndarray]:
    waves = [r[c] for r in rows for c in model.clips]
    if isinstance(model, LID):
        waves = [w for w in waves if len(w) >= SR]  # the dimension runs LID on answers of 1 s or more
    return waves


def _batched(model, waves: list[np.ndarray], batch, device) -> tuple[np.ndarray, int]:
    """All waves in batches (the model's own batching for LID/emotion; chunks of the
    longest-first order for the ASR models); returns outputs and the batch size used."""
    from spear_metrics.core.batching import batch_size_for, peak_bytes_per_item

    if isinstance(model, Emotion):  # every clip padded to 15 s: a fixed batch size
        bs = model.vw.batch_size(batch)
        return model.run(waves, batch=bs), bs
    if isinstance(model, LID):  # auto: padded seconds per batch from the free memory on CUDA, 8 clips on CPU
        return model.run(waves, batch=batch), batch
    longest = max(waves, key=len)
    bs = batch_size_for(batch, device, lambda: peak_bytes_per_item(lambda k: model.run([longest] * k), device, 2),
                        default=len(waves))
    outs = []
    for k in range(0, len(waves), bs):
        outs.append(model.run(waves[k : k + bs]))
    width = max(o.shape[1] for o in outs) if outs[0].ndim == 2 else None
    if width:
        outs = [np.pad(o, ((0, 0), (0, width - o.shape[1])), constant_values=-1) for o in outs]
    return np.concatenate(outs), bs


def _one_by_one(model, waves: list[np.ndarray]) -> np.ndarray:
    outs = [model.run([w], batch=1) if isinstance(model, (LID, Emotion)) else model.run([w]) for w in waves]
    return outs


def measure(name: str, rows: list[dict], a: argparse.Namespace) -> dict:
    import torch

    from spear_metrics.core.batching import model_dtype

    device = torch.device(a.device)
    dtype = model_dtype(a.dtype, device)
    t = time.perf_counter()
    model = MODELS[name](device, dtype, a.steps, a.layers)
    build_s = time.perf_counter() - t
    n_params = sum(p.numel() for p in (getattr(model, "model", None) or getattr(getattr(model, "lid", None), "model", None)
                                       or model.vw.net).parameters())
    waves = _waves(model, rows)
    model.run(waves[:1]) if not isinstance(model, (LID, Emotion)) else model.run(waves[:1], batch=1)  # warm-up
    _sync(device)
    batch = a.batch if a.batch == "auto" else int(a.batch)
    t = time.perf_counter()
    out_b, bs = _batched(model, waves, batch, device)
    _sync(device)
    t_b = time.perf_counter() - t
    res = {"model": MODELS[name].name, "params_m": round(n_params / 1e6), "layers_fraction": a.layers, "dtype": str(dtype).split(".")[-1],
           "device": str(device), "rows": len(rows), "clips": len(waves), "clips_per_row": list(model.clips),
           "audio_s": round(sum(len(w) for w in waves) / SR, 1), "batch_size": bs, "build_s": round(build_s, 1),
           "batched_s": round(t_b, 2), "batched_rows_per_s": round(len(rows) / t_b, 3)}
    if not a.no_single:
        k = min(len(rows), a.single_rows or len(rows))
        sub = rows[:: max(1, len(rows) // k)][:k]  # evenly spaced over the length order
        sub_waves = _waves(model, sub)
        t = time.perf_counter()
        out_1 = _one_by_one(model, sub_waves)
        _sync(device)
        t_1 = time.perf_counter() - t
        rate_1 = len(sub) / t_1
        res.update(one_at_a_time_rows=len(sub), one_at_a_time_s=round(t_1, 2), one_at_a_time_rows_per_s=round(rate_1, 3),
                   batched_vs_one_at_a_time=round((len(rows) / t_b) / rate_1, 2))
        if isinstance(model, (LID, Emotion)) and len(sub) == len(rows):
            res["batched_equals_one_at_a_time_max_abs_diff"] = float(np.max(np.abs(out_b - np.concatenate(out_1))))
    if a.check_dtype and dtype != torch.float32:
        ref = MODELS[name](device, torch.float32, a.steps, a.layers)
        if isinstance(model, (LID, Emotion)):
            res["max_abs_diff_vs_float32"] = float(np.max(np.abs(out_b - ref.run(waves, batch=batch))))
        else:
            ref_out, _ = _batched(ref, waves, batch, device)
            w = min(ref_out.shape[1], out_b.shape[1])
            res["same_tokens_as_float32_%"] = round(100.0 * float(np.mean(ref_out[:, :w] == out_b[:, :w])), 1)
        del ref
    if a.project:
        res["projected_full_split_s"] = round(FULL_SPLIT_ROWS / (len(rows) / t_b), 1)
    del model
    gc.collect()
    if str(device).startswith("cuda"):
        torch.cuda.empty_cache()
    return res


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--device", default=None, help="cpu or cuda (default: cuda when available)")
    ap.add_argument("--rows", type=int, default=3)
    ap.add_argument("--models", default="whisper,qwen,lid,emotion")
    ap.add_argument("--dtype", default="float32", help="float32 | float16 | bfloat16 | auto (bf16/fp16 on CUDA)")
    ap.add_argument("--batch", default="auto", help="clips per forward pass, or auto (free GPU memory; all rows on CPU)")
    ap.add_argument("--steps", type=int, default=32, help="decoder steps of the ASR models (random weights: fixed)")
    ap.add_argument("--layers", type=float, default=1.0, help="fraction of the real layer counts (1.0 = the real models)")
    ap.add_argument("--no-single", action="store_true", help="skip the one-at-a-time pass")
    ap.add_argument("--single-rows", type=int, default=0, help="rows of the one-at-a-time pass (0: all; evenly spaced)")
    ap.add_argument("--check-dtype", action="store_true", help="compare a half-precision run with float32")
    ap.add_argument("--project", action="store_true", help=f"project the time of {FULL_SPLIT_ROWS} rows")
    ap.add_argument("--threads", type=int, default=0, help="torch CPU threads (0: all cores)")
    ap.add_argument("--json", default=None)
    a = ap.parse_args()
    import torch

    a.device = a.device or ("cuda" if torch.cuda.is_available() else "cpu")
    torch.set_num_threads(a.threads or len(os.sched_getaffinity(0)))
    load = Path("/proc/loadavg").read_text().split()[:3] if Path("/proc/loadavg").exists() else None
    rows = rows_like_the_split(a.rows)
    print(f"{len(rows)} rows, answers {np.mean([len(r['answer']) for r in rows]) / SR:.2f} s on average; device {a.device}, "
          f"torch threads {torch.get_num_threads()}, load {load}", flush=True)
    if a.device.startswith("cuda"):
        print(torch.cuda.get_device_name(0), f"{torch.cuda.mem_get_info()[0] / 2**30:.1f} GiB free", flush=True)
    results = []
    for name in a.models.split(","):
        r = measure(name.strip(), rows, a)
        results.append(r)
        print(json.dumps(r), flush=True)
    print(f"\n| model | params (M) | dtype | batch | rows | batched rows/s | one-at-a-time rows/s | ratio |")
    print("|---|---|---|---|---|---|---|---|")
    for r in results:
        print(f"| {r['model']} | {r['params_m']} | {r['dtype']} | {r['batch_size']} | {r['rows']} | {r['batched_rows_per_s']} | "
              f"{r.get('one_at_a_time_rows_per_s', '-')} | {r.get('batched_vs_one_at_a_time', '-')} |")
    if a.project:
        total = sum(r["projected_full_split_s"] for r in results)
        emo = next((r["projected_full_split_s"] for r in results if r["model"] == "vox-emotion"), 0.0)
        print(f"\nprojected full test split ({FULL_SPLIT_ROWS} rows) on this device: {total:.0f} s for these models"
              + (f", + {emo:.0f} s for the Voxlect dialect head (same encoder and window as the emotion head)" if emo else ""))
    if a.json:
        Path(a.json).write_text(json.dumps({"load": load, "results": results}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
