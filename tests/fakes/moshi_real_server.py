"""Kyutai's real ``moshi.server`` (PyPI ``moshi``) serving a tiny randomly initialised model, run as a
subprocess by ``tests/test_real_counterparts.py``.

``python moshi_real_server.py WORKDIR PORT`` builds, with the moshi package's own loaders
(``moshi.models.loaders.get_moshi_lm`` / ``get_mimi`` with ``filename=None``: random weights), a
tiny LM and a tiny Mimi, saves them as safetensors with their configs and a tiny sentencepiece
tokenizer under ``WORKDIR``, then runs ``moshi.server``'s own ``main()`` on ``127.0.0.1:PORT``
(``--device cpu --static none``). Everything the server does on the wire is Kyutai's code:
the handshake, Ogg-Opus both ways, one LM step per 80 ms input frame, ``LMGen``'s delay.

Patches, in this process only:

- ``torch.cuda.synchronize`` is a no-op (the server's warm-up calls it; there is no GPU);
- the scripted reply (``MOSHI_SCRIPT_ONSET_FRAME=J``): the LM's text token and Mimi's decoded
  frame are replaced after the real computation: output frame ``j`` (the ``j``-th frame the
  server sends, counted from 0 in each session) is digital silence for ``j < J`` and a 440 Hz tone
  at -12 dBFS RMS for ``J <= j < J + MOSHI_SCRIPT_LEN`` (default 12 frames); the text token is
  the padding id except for ``MOSHI_SCRIPT_EARLY_WORD`` at frame 2 (a word of the inner monologue
  long before the answer) and the answer's words at frames ``J, J+1, ...``;
- a slowed server (``MOSHI_SLOW_FRAME_S=s``): every LM step takes at least ``s`` seconds (the
  server's event loop is held, as by heavier compute).
"""

from __future__ import annotations

import io
import json
import os
import sys
import time
from pathlib import Path

SAMPLE_RATE = 24_000
FRAME = 1_920
EARLY_WORD = "question"
ANSWER_WORDS = ("hello", "world")


def build(workdir: Path) -> list[str]:
    """Write the tiny model files under ``workdir``; returns moshi.server's arguments for them."""
    import sentencepiece as spm
    import torch
    from moshi.models import loaders
    from safetensors.torch import save_file

    workdir.mkdir(parents=True, exist_ok=True)
    corpus = ["hello world this is a question and an answer"] * 50
    model = io.BytesIO()
    spm.SentencePieceTrainer.train(sentence_iterator=iter(corpus), model_writer=model, vocab_size=12,
                                   model_type="word", minloglevel=2)
    (workdir / "tokenizer.model").write_bytes(model.getvalue())
    mimi_config = {"sample_rate": SAMPLE_RATE, "channels": 1, "frame_rate": 12.5,
                   "seanet": dict(loaders._seanet_kwargs, dimension=32, n_filters=4),
                   "quantizer": dict(loaders._quantizer_kwargs, dimension=16, n_q=16, bins=64,
                                     input_dimension=32, output_dimension=32),
                   "transformer": dict(loaders._transformer_kwargs, d_model=32, num_heads=2, num_layers=1,
                                       dim_feedforward=64, input_dimension=32, output_dimensions=[32])}
    (workdir / "mimi.json").write_text(json.dumps(mimi_config))
    lm_config = dict(loaders._lm_kwargs, dim=32, text_card=32, n_q=16, dep_q=8, card=64, num_heads=2,
                     num_layers=1, hidden_scale=2, depformer_dim=32, depformer_dim_feedforward=64,
                     depformer_num_heads=2, depformer_num_layers=1, context=300)
    torch.manual_seed(0)
    lm = loaders.get_moshi_lm(None, lm_kwargs=lm_config, device="cpu", dtype=torch.float32)
    save_file({k: v.contiguous() for k, v in lm.state_dict().items()}, str(workdir / "lm.safetensors"))
    mimi = loaders.get_mimi(None, mimi_config, device="cpu", num_codebooks=8)
    save_file({k: v.contiguous() for k, v in mimi.state_dict().items()}, str(workdir / "mimi.safetensors"))
    config = dict(lm_config, mimi_config_name=f"file://{workdir / 'mimi.json'}", model_type="moshi")
    (workdir / "config.json").write_text(json.dumps(config))
    return ["--config-path", str(workdir / "config.json"), "--moshi-weight", str(workdir / "lm.safetensors"),
            "--mimi-weight", str(workdir / "mimi.safetensors"), "--tokenizer", str(workdir / "tokenizer.model"),
            "--device", "cpu", "--static", "none", "--hf-repo", "local/none"]


def patch(tokenizer_path: Path) -> None:
    """The in-process patches (module docstring)."""
    import numpy as np
    import sentencepiece as spm
    import torch
    from moshi.models.compression import MimiModel
    from moshi.models.lm import LMGen

    torch.cuda.synchronize = lambda *a, **k: None
    onset = os.environ.get("MOSHI_SCRIPT_ONSET_FRAME")
    length = int(os.environ.get("MOSHI_SCRIPT_LEN", "12"))
    slow_s = float(os.environ.get("MOSHI_SLOW_FRAME_S", "0") or 0)
    sp = spm.SentencePieceProcessor(model_file=str(tokenizer_path))
    early_id = sp.piece_to_id("▁" + EARLY_WORD)
    answer_ids = [sp.piece_to_id("▁" + w) for w in ANSWER_WORDS]
    state = {"j": -1}
    t = np.arange(FRAME) / SAMPLE_RATE
    step0, reset0, decode0 = LMGen.step, LMGen.reset_streaming, MimiModel.decode

    def step(self, *args, **kwargs):
        began = time.perf_counter()
        out = step0(self, *args, **kwargs)
        if out is not None:
            state["j"] += 1
            if onset is not None:
                j, first = state["j"], int(onset)
                token = 3  # Moshi's text padding id (the server sends nothing for it)
                if j == 2:
                    token = early_id
                elif first <= j < first + len(answer_ids):
                    token = answer_ids[j - first]
                out = out.clone()
                out[:, 0] = token
        if slow_s > 0:
            time.sleep(max(0.0, slow_s - (time.perf_counter() - began)))
        return out

    def reset_streaming(self, *args, **kwargs):
        state["j"] = -1
        return reset0(self, *args, **kwargs)

    def decode(self, codes):
        pcm = decode0(self, codes)
        if onset is None:
            return pcm
        j, first = state["j"], int(onset)
        if first <= j < first + length:
            tone = 0.25 * np.sqrt(2) * np.sin(2 * np.pi * 440.0 * (t + j * FRAME / SAMPLE_RATE))
            return torch.from_numpy(tone.astype(np.float32))[None, None]
        return torch.zeros(1, 1, FRAME)

    LMGen.step, LMGen.reset_streaming, MimiModel.decode = step, reset_streaming, decode


def main() -> None:
    workdir, port = Path(sys.argv[1]), int(sys.argv[2])
    args = build(workdir)
    patch(workdir / "tokenizer.model")
    sys.argv = ["moshi.server", "--host", "127.0.0.1", "--port", str(port), *args]
    import moshi.server  # noqa: F401  (the module runs its main() on import)


if __name__ == "__main__":
    main()
