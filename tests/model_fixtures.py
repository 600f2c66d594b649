"""Tiny randomly initialised models of the real architectures (built from the packages' own
config classes and saved with ``save_pretrained``/the checkpoint layout the loaders read), and
a 5-row SPEAR folder cut from the real stereo AMI dialogue fixture."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from helpers import CONTEXT_END, QUESTION_END, SR, dialogue, row, write_rows
from spear_datasets.audio import write_wav

TINY_WHISPER = dict(d_model=16, encoder_layers=2, encoder_attention_heads=2, encoder_ffn_dim=32, num_mel_bins=128)


def tiny_lid(folder: Path, *, english_bias: float = 6.0) -> Path:
    """Wav2Vec2ForSequenceClassification (mms-lid layout: layer-norm conv stem, stable layer
    norm) with 3 labels; the classifier bias favours ``eng`` so the dialect path runs."""
    import torch
    from transformers import Wav2Vec2Config, Wav2Vec2FeatureExtractor, Wav2Vec2ForSequenceClassification

    torch.manual_seed(0)
    cfg = Wav2Vec2Config(hidden_size=16, num_hidden_layers=1, num_attention_heads=2, intermediate_size=32,
                         conv_dim=(8,) * 7, feat_extract_norm="layer", do_stable_layer_norm=True,
                         num_conv_pos_embeddings=16, num_conv_pos_embedding_groups=2, classifier_proj_size=8,
                         num_labels=3, id2label={0: "eng", 1: "fra", 2: "deu"}, label2id={"eng": 0, "fra": 1, "deu": 2})
    model = Wav2Vec2ForSequenceClassification(cfg).eval()
    with torch.no_grad():
        model.classifier.bias[0] += english_bias
    model.save_pretrained(folder)
    Wav2Vec2FeatureExtractor(feature_size=1, sampling_rate=16000, padding_value=0.0, do_normalize=True,
                             return_attention_mask=True).save_pretrained(folder)
    return folder


def tiny_vox(folder: Path, heads, *, n_classes: int = 16, seed: int = 0) -> Path:
    """A Vox-Profile/Voxlect Whisper head with a tiny Whisper encoder config."""
    from spear_metrics.core.vox_whisper import build_random, save_vox_whisper

    cfg = dict(pretrain_model="whisper_large", whisper_config=TINY_WHISPER, hidden_dim=8, lora_rank=2,
               finetune_method="lora", output_class_num=n_classes, use_conv_output=True)
    return save_vox_whisper(build_random(cfg, heads, seed=seed), cfg, folder)


def tiny_models(root: Path) -> dict[str, str]:
    """All tiny models as ``--option`` values."""
    from spear_metrics.core.vox_whisper import DIALECT_HEADS, EMOTION_DIM_HEADS
    from spear_metrics.turn_taking.vap import save_tiny_vap

    return {
        "lid_model": str(tiny_lid(root / "lid")),
        "dialect_model": str(tiny_vox(root / "dialect", DIALECT_HEADS)),
        "emotion_model": str(tiny_vox(root / "emotion", EMOTION_DIM_HEADS, seed=1)),
        "vap_model": str(save_tiny_vap(root / "vap")),
    }


def five_rows(stereo_path: Path, out: Path) -> Path:
    """5 rows (odd, uneven split on 2 ranks): answers of 0.6 s (too short for LID), 2, 4, 6,
    9 s of MEO015's real turn, start times 0.2, -0.5, None, 0.0, 1.0 s, question turns starting
    at 8.74, 6, 10, 12, 4 s; distinct input clip files."""
    x = dialogue(stereo_path)
    q = x[:, : int(QUESTION_END * SR)]
    rows = []
    plan = [(0.6, 0.2, 8.74), (2.0, -0.5, 6.0), (4.0, None, 10.0), (6.0, 0.0, 12.0), (9.0, 1.0, 4.0)]
    for k, (dur, ast, ctx) in enumerate(plan):
        write_wav(out / f"q{k}.wav", q)
        a0 = int(15.46 * SR)
        write_wav(out / f"a{k}.wav", x[1, a0: a0 + int(dur * SR)])
        rows.append(row(f"q{k}.wav", f"a{k}.wav", ast, context_end_time=ctx))
    return write_rows(out / "metadata.csv", rows)


__all__ = ["tiny_models", "five_rows", "tiny_lid", "tiny_vox", "CONTEXT_END", "QUESTION_END", "np"]
