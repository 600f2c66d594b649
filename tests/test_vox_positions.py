"""The Voxlect dialect head uses the position table its checkpoint stores, as the wrapper's own
``forward`` does (it installs its ``embed_positions`` parameter, saved beside the encoder, as the
encoder's table before every call), not Whisper's sinusoids computed anew.

The checkpoint is a tiny random head of the real layout whose stored ``embed_positions`` differs
from the sinusoids (a table initialised otherwise, as a checkpoint may hold), on real speech.
"""

from __future__ import annotations

import numpy as np
import pytest

from conftest import STEREO_DIALOGUE


def test_dialect_head_uses_the_checkpoints_stored_position_table(real_dir, tmp_path):
    import torch
    from safetensors.torch import load_file, save_file
    from transformers.models.whisper.modeling_whisper import sinusoids

    from spear_datasets.audio import load_audio
    from spear_metrics.core.vox_whisper import DIALECT_HEADS, MAX_POSITIONS, VoxWhisper, build_random, save_vox_whisper
    from spear_metrics.language_dialect.definition import LanguageDialect

    from model_fixtures import TINY_WHISPER

    config = {"pretrain_model": "whisper_large", "whisper_config": TINY_WHISPER, "output_class_num": 16,
              "hidden_dim": 8, "lora_rank": 2}
    folder = save_vox_whisper(build_random(config, DIALECT_HEADS), config, tmp_path / "dialect")
    state = load_file(str(folder / "model.safetensors"))
    d = state["backbone_model.encoder.embed_positions.weight"].shape[1]
    torch.manual_seed(1)
    stored = sinusoids(MAX_POSITIONS, d) + 0.5 * torch.randn(MAX_POSITIONS, d)
    state["embed_positions"] = stored  # the wrapper's own parameter, as PyTorchModelHubMixin saves it
    save_file(state, str(folder / "model.safetensors"))

    vox = VoxWhisper(str(folder), DIALECT_HEADS, device=torch.device("cpu"))
    table = vox.net.backbone_model.encoder.embed_positions.weight.detach()
    assert torch.equal(table, stored) and "embed_positions" in vox.positions_source
    # the dimension's own loader takes the same table
    dim = LanguageDialect(dialect_model=str(folder))
    assert torch.equal(dim._dialect_model().net.backbone_model.encoder.embed_positions.weight.detach(), stored)
    # the table matters: the sinusoids give other logits on the same real speech
    wave = load_audio(STEREO_DIALOGUE, channels="mix")[0][: 16000 * 4]
    ours = vox.predict([wave])[0]["out_layer"]
    sin = VoxWhisper(str(folder), DIALECT_HEADS, device=torch.device("cpu"), positions="sinusoids")
    assert torch.equal(sin.net.backbone_model.encoder.embed_positions.weight.detach(), sinusoids(MAX_POSITIONS, d))
    assert np.abs(ours - sin.predict([wave])[0]["out_layer"]).max() > 1e-3
    # emotions (SPEAR's forward_fast calls the encoder directly): the encoder's stored table
    enc = VoxWhisper(str(folder), DIALECT_HEADS, device=torch.device("cpu"), positions="checkpoint")
    assert torch.equal(enc.net.backbone_model.encoder.embed_positions.weight.detach(),
                       state["backbone_model.encoder.embed_positions.weight"])
    with pytest.raises(ValueError, match="positions"):
        VoxWhisper(str(folder), DIALECT_HEADS, device=torch.device("cpu"), positions="learned")
