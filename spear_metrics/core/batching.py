"""Device and batching helpers shared by the model-based dimensions.

- :func:`process_device`: the torch device of *this* process as ``accelerate`` assigns it
  (``cuda:<local_rank>`` under ``accelerate launch`` on GPUs, ``cpu`` with
  ``ACCELERATE_USE_CPU=true`` or without GPUs). Every model-based dimension moves its model and
  its input tensors there.
- :func:`duration_batches`: indices of waveforms grouped so that similar lengths share a
  batch (less padding) and a batch never exceeds a padded-audio budget.
"""

from __future__ import annotations

from typing import Sequence


def process_device():
    """``torch.device`` of this process (``accelerate.PartialState().device``)."""
    from accelerate import PartialState

    return PartialState().device


def duration_batches(lengths: Sequence[int], *, max_items: int = 8, max_padded_samples: int | None = None) -> list[list[int]]:
    """Group item indices into batches by length.

    Args:
        lengths: length of each item in samples (any unit, as long as it is consistent).
        max_items: at most this many items per batch (>= 1).
        max_padded_samples: at most ``len(batch) * max(length in batch)`` samples of padded
            audio per batch (``None``: no budget). An item longer than the budget is alone.

    Returns:
        Batches of indices into ``lengths``; longest items first; every index exactly once.
    """
    order = sorted(range(len(lengths)), key=lambda i: (-int(lengths[i]), i))
    batches: list[list[int]] = []
    cur: list[int] = []
    for i in order:
        longest = int(lengths[cur[0]]) if cur else int(lengths[i])
        too_many = len(cur) >= max(1, int(max_items))
        too_big = max_padded_samples is not None and cur and longest * (len(cur) + 1) > max_padded_samples
        if cur and (too_many or too_big):
            batches.append(cur)
            cur = []
        cur.append(i)
    if cur:
        batches.append(cur)
    return batches
