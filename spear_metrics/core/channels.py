"""Which channel of a SPEAR input clip holds the questioner.

The input clip is stereo, channel 0 = first participant of ``speakers`` (``P1|P2``), channel 1 =
the second (``SPEAR_PROTOCOL.md`` section 1); the questioner is the last speaker tag of
``transcript_question``. When the metadata does not say (no speakers, no tags, or a tag that
is not one of the speakers), the channel with more energy during the question
(``[context_end_time, question_end_time]``) is taken.
"""

from __future__ import annotations

import numpy as np

from spear_datasets.schema import SpearRow


def questioner_channel(meta: SpearRow, clip: np.ndarray, sr: int = 16000) -> int:
    """Channel index (0 or 1) of the questioner in ``clip`` ``(2, n)`` at ``sr`` Hz; ``0`` for a
    mono clip."""
    if clip.ndim != 2 or clip.shape[0] < 2:
        return 0
    spk = [s.strip() for s in (meta.speakers or "").split("|") if s.strip()]
    q = meta.questioner
    if q and q in spk[:2]:
        return spk.index(q)
    lo, hi = int(meta.context_end_time * sr), max(int(meta.question_end_time * sr), int(meta.context_end_time * sr) + 1)
    seg = clip[:2, lo:hi]
    if seg.shape[1] == 0:
        seg = clip[:2]
    energy = (seg.astype(np.float64) ** 2).sum(axis=1)
    return int(np.argmax(energy))
