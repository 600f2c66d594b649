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


# --------------------------------------------------------------------------- Qwen-Omni
# Tiny random Qwen2.5-Omni / Qwen3-Omni checkpoints (thinker + talker + speech decoder), saved with
# their real processor (chat template, Qwen2 byte-level tokenizer, Whisper 128-mel features), for
# the ``qwen-omni`` adapter. The thinker's lm_head row of <|im_end|> is zeroed and the others
# scaled up, so that the text never ends before ``max_new_tokens`` (a random thinker that stops at
# once gives the talker no text and transformers' Qwen2.5-Omni generate fails on it).

#: ChatML with Qwen-Omni's audio placeholders (the part of the real chat templates an audio clip uses)
_QWEN_TEMPLATE = ("{% for m in messages %}<|im_start|>{{ m['role'] }}\n{% if m['content'] is string %}{{ m['content'] }}"
                  "{% else %}{% for c in m['content'] %}{% if c['type'] == 'audio' %}BOS_AUDIO_EOS"
                  "{% elif c['type'] == 'text' %}{{ c['text'] }}{% endif %}{% endfor %}{% endif %}<|im_end|>\n{% endfor %}"
                  "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")


def _qwen_tokenizer(names: dict[str, str]):
    """A byte-level Qwen2 tokenizer: the 256 byte symbols (no merges), the ChatML and multimodal
    special tokens (``names``: role -> token, e.g. ``audio_token`` -> ``<|AUDIO|>``) and the role
    words as single tokens. Returns ``(tokenizer, {token: id})``."""
    from tokenizers import AddedToken, pre_tokenizers
    from transformers import Qwen2Tokenizer

    vocab = {c: i for i, c in enumerate(sorted(pre_tokenizers.ByteLevel.alphabet()))}
    specials = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|tts_pad|>", "<|tts_bos|>", "<|tts_eos|>", *names.values()]
    for tok in specials:
        vocab.setdefault(tok, len(vocab))
    tokenizer = Qwen2Tokenizer(vocab=vocab, merges=[], extra_special_tokens=dict(names))
    tokenizer.add_tokens([AddedToken(t, special=True, normalized=False) for t in specials])
    tokenizer.add_tokens(["system", "user", "assistant"])
    return tokenizer, {t: tokenizer.convert_tokens_to_ids(t) for t in [*specials, "system", "user", "assistant"]}


def _never_end(thinker, end_id: int) -> None:
    import torch

    with torch.no_grad():
        thinker.lm_head.weight.mul_(50.0)
        thinker.lm_head.weight[end_id] = 0.0


def tiny_qwen25_omni(folder: Path) -> Path:
    """Qwen2_5OmniForConditionalGeneration (audio encoder 128 mels, 2-layer text model, 1-layer
    talker over the real 8448-code vocabulary, DiT + BigVGAN with the real 2 x 240 upsampling:
    480 samples per code at 24 kHz), ``spk_dict.pt`` with voices Ethan and Chelsie, and a
    Qwen2_5OmniProcessor."""
    import torch
    from transformers import (Qwen2_5OmniConfig, Qwen2_5OmniForConditionalGeneration, Qwen2_5OmniProcessor,
                              Qwen2VLImageProcessor, Qwen2VLVideoProcessor, WhisperFeatureExtractor)

    names = {"audio_token": "<|AUDIO|>", "audio_bos_token": "<|audio_bos|>", "audio_eos_token": "<|audio_eos|>",
             "image_token": "<|IMAGE|>", "video_token": "<|VIDEO|>", "vision_bos_token": "<|vision_bos|>",
             "vision_eos_token": "<|vision_eos|>"}
    tok, ids = _qwen_tokenizer(names)
    rope = {"rope_type": "default", "mrope_section": [4, 2, 2], "rope_theta": 1e6}
    mm = dict(audio_token_index=ids["<|AUDIO|>"], image_token_index=ids["<|IMAGE|>"], video_token_index=ids["<|VIDEO|>"],
              audio_start_token_id=ids["<|audio_bos|>"], audio_end_token_id=ids["<|audio_eos|>"],
              vision_start_token_id=ids["<|vision_bos|>"], vision_end_token_id=ids["<|vision_eos|>"])
    thinker = dict(
        audio_config=dict(d_model=16, encoder_layers=1, encoder_attention_heads=2, encoder_ffn_dim=32, num_mel_bins=128,
                          output_dim=32),
        vision_config=dict(depth=1, hidden_size=16, intermediate_size=32, num_heads=2, out_hidden_size=32,
                           fullatt_block_indexes=[0]),
        text_config=dict(vocab_size=len(tok), hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=2,
                         num_key_value_heads=1, rope_parameters=rope, max_position_embeddings=4096,
                         eos_token_id=ids["<|im_end|>"]),
        user_token_id=ids["user"], **mm)
    talker = dict(vocab_size=8448, embedding_size=32, hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                  num_attention_heads=2, num_key_value_heads=1, head_dim=16, rope_parameters=rope, max_position_embeddings=8192,
                  tts_text_start_token_id=ids["<|tts_bos|>"], tts_text_end_token_id=ids["<|tts_eos|>"],
                  tts_text_pad_token_id=ids["<|tts_pad|>"], **mm)
    token2wav = dict(
        dit_config=dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=2, head_dim=16, emb_dim=16, num_embeds=8448,
                        enc_emb_dim=16, enc_dim=16, enc_channels=[16, 16, 16, 16, 48], enc_attention_channels=8,
                        enc_se_channels=8, look_ahead_layers=[1], look_backward_layers=[0],
                        rope_parameters={"rope_type": "default", "rope_theta": 10000.0}),
        bigvgan_config=dict(upsample_initial_channel=64, resblock_kernel_sizes=[3], resblock_dilation_sizes=[[1, 3, 5]]))
    torch.manual_seed(0)
    model = Qwen2_5OmniForConditionalGeneration(
        Qwen2_5OmniConfig(thinker_config=thinker, talker_config=talker, token2wav_config=token2wav)).eval()
    _never_end(model.thinker, ids["<|im_end|>"])
    model.save_pretrained(folder)
    voice = {"cond": torch.randn(1, 16), "ref_mel": torch.randn(1, 30, 80), "bos_token": ids["<|tts_bos|>"]}
    torch.save({"Ethan": voice, "Chelsie": dict(voice, cond=torch.randn(1, 16))}, folder / "spk_dict.pt")
    template = _QWEN_TEMPLATE.replace("BOS_AUDIO_EOS", "<|audio_bos|><|AUDIO|><|audio_eos|>")
    Qwen2_5OmniProcessor(image_processor=Qwen2VLImageProcessor(), video_processor=Qwen2VLVideoProcessor(),
                         feature_extractor=WhisperFeatureExtractor(feature_size=128), tokenizer=tok,
                         chat_template=template).save_pretrained(folder)
    return folder


def tiny_qwen3_omni(folder: Path) -> Path:
    """Qwen3OmniMoeForConditionalGeneration (MoE thinker and talker of 4 experts, 4 code groups,
    code2wav with the real 8 x 5 x 4 x 3 x 2 x 2 = 1920 upsampling: 80 ms per code at 24 kHz) and a
    Qwen3OmniMoeProcessor."""
    import torch
    from transformers import (Qwen2VLImageProcessor, Qwen2VLVideoProcessor, Qwen3OmniMoeConfig,
                              Qwen3OmniMoeForConditionalGeneration, Qwen3OmniMoeProcessor, WhisperFeatureExtractor)

    names = {"audio_token": "<|audio_pad|>", "audio_bos_token": "<|audio_start|>", "audio_eos_token": "<|audio_end|>",
             "image_token": "<|image_pad|>", "video_token": "<|video_pad|>", "vision_bos_token": "<|vision_start|>",
             "vision_eos_token": "<|vision_end|>"}
    tok, ids = _qwen_tokenizer(names)
    rope = {"rope_type": "default", "mrope_section": [4, 2, 2], "rope_theta": 1e6, "interleaved": True,
            "mrope_interleaved": True}
    moe = dict(hidden_size=32, intermediate_size=64, num_attention_heads=2, num_key_value_heads=1, head_dim=16,
               rope_parameters=rope, max_position_embeddings=4096, moe_intermediate_size=16, num_experts=4,
               num_experts_per_tok=2)
    mm = dict(audio_token_id=ids["<|audio_pad|>"], image_token_id=ids["<|image_pad|>"], video_token_id=ids["<|video_pad|>"],
              audio_start_token_id=ids["<|audio_start|>"], vision_start_token_id=ids["<|vision_start|>"])
    thinker = dict(
        audio_config=dict(d_model=16, encoder_layers=1, encoder_attention_heads=2, encoder_ffn_dim=32, num_mel_bins=128,
                          output_dim=32, downsample_hidden_size=8),
        vision_config=dict(depth=1, hidden_size=16, intermediate_size=32, num_heads=2, out_hidden_size=32,
                           deepstack_visual_indexes=[0], num_position_embeddings=16),
        text_config=dict(vocab_size=len(tok), num_hidden_layers=2, eos_token_id=ids["<|im_end|>"], **moe),
        user_token_id=ids["user"], **mm)
    talker = dict(
        text_config=dict(vocab_size=3072, num_hidden_layers=1, shared_expert_intermediate_size=16, **moe),
        code_predictor_config=dict(vocab_size=2048, hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                                   num_attention_heads=2, num_key_value_heads=1, head_dim=16, num_code_groups=4),
        num_code_groups=4, thinker_hidden_size=32, accept_hidden_layer=1, spatial_merge_size=2,
        codec_eos_token_id=2150, codec_pad_id=2148, codec_bos_id=2149, codec_nothink_id=2155, codec_think_bos_id=2156,
        codec_think_eos_id=2157, speaker_id={"ethan": 2301, "chelsie": 2302, "aiden": 2303}, **mm)
    code2wav = dict(codebook_size=2048, hidden_size=32, num_attention_heads=2, num_key_value_heads=2, intermediate_size=64,
                    num_hidden_layers=1, num_quantizers=4, decoder_dim=32, sliding_window=8)
    torch.manual_seed(0)
    model = Qwen3OmniMoeForConditionalGeneration(Qwen3OmniMoeConfig(
        thinker_config=thinker, talker_config=talker, code2wav_config=code2wav,
        im_start_token_id=ids["<|im_start|>"], im_end_token_id=ids["<|im_end|>"], tts_pad_token_id=ids["<|tts_pad|>"],
        tts_bos_token_id=ids["<|tts_bos|>"], tts_eos_token_id=ids["<|tts_eos|>"], system_token_id=ids["system"],
        user_token_id=ids["user"], assistant_token_id=ids["assistant"])).eval()
    _never_end(model.thinker, ids["<|im_end|>"])
    model.save_pretrained(folder)
    template = _QWEN_TEMPLATE.replace("BOS_AUDIO_EOS", "<|audio_start|><|audio_pad|><|audio_end|>")
    Qwen3OmniMoeProcessor(image_processor=Qwen2VLImageProcessor(), video_processor=Qwen2VLVideoProcessor(),
                          feature_extractor=WhisperFeatureExtractor(feature_size=128), tokenizer=tok,
                          chat_template=template).save_pretrained(folder)
    return folder


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
