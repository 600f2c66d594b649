"""Device and batching helpers shared by the model-based dimensions.

- :func:`process_device`: the torch device of *this* process as ``accelerate`` assigns it
  (``cuda:<local_rank>`` under ``accelerate launch`` on GPUs, ``cpu`` with
  ``ACCELERATE_USE_CPU=true`` or without GPUs). Every model-based dimension moves its model and
  its input tensors there; :func:`device_or_default` the same, unless a device was asked for.
- :func:`duration_batches`: indices of waveforms grouped so that similar lengths share a
  batch (less padding) and a batch never exceeds a padded-audio budget.
- :func:`one_torch_thread`: torch's intra-op threads set to one for a block, then restored.
"""

from __future__ import annotations

import contextlib
import sys
from typing import Any, Callable, Iterator, Sequence


@contextlib.contextmanager
def one_torch_thread() -> Iterator[None]:
    """Run the block with torch on one intra-op thread (``torch.set_num_threads(1)``), restoring
    the count afterwards, also when the block raises. With OpenMP the count is kept per OS
    thread once a thread has run a torch op: it reaches the calling thread and threads started
    inside the block (the runner's sample pools are), not long-lived threads that already ran
    torch ops. Does nothing when torch has not been imported (it is not imported for this)."""
    torch = sys.modules.get("torch")
    if torch is None:
        yield
        return
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(threads)


def distributed_state():
    """``accelerate.PartialState`` of this process, honouring ``ACCELERATE_USE_CPU``.

    ``PartialState()`` alone ignores ``ACCELERATE_USE_CPU`` (accelerate 1.x reads it only in
    ``AcceleratorState``): under ``ACCELERATE_USE_CPU=true accelerate launch --multi_gpu
    --num_processes 2`` on a machine without GPUs, each process would believe it is alone
    (``DistributedType.NO``) and score every row. Here ``cpu=True`` is passed when the flag is
    set, or when several processes were launched (``WORLD_SIZE`` > 1) and no CUDA device
    exists, so the ranks join one gloo group.

    A launch that asked for several processes but started one (plain ``accelerate launch
    --num_processes 2`` on a CPU-only machine runs its simple launcher: ``MASTER_ADDR`` set, no
    ``WORLD_SIZE``; or ``ACCELERATE_NUM_PROCESSES`` > 1) gets one warning line on stderr
    (:func:`single_process_launch`): the run goes on, on one process.

    Raises:
        RuntimeError: several processes were launched but accelerate still sees one.
    """
    import os

    from accelerate import PartialState
    from accelerate.utils import parse_flag_from_env

    world = int(os.environ.get("WORLD_SIZE", "1") or 1)
    cpu = parse_flag_from_env("ACCELERATE_USE_CPU")
    if not cpu and world > 1:
        import torch

        cpu = not torch.cuda.is_available()
    state = PartialState(cpu=cpu)
    if world > 1 and state.num_processes != world:
        raise RuntimeError(f"{world} processes were launched but accelerate sees {state.num_processes}; "
                           "on CPU launch with ACCELERATE_USE_CPU=true accelerate launch --multi_gpu --num_processes N")
    global _WARNED
    if state.num_processes == 1 and not _WARNED and single_process_launch(os.environ):
        _WARNED = True
        import sys

        print("spearbench: warning: accelerate launch asked for several processes but this run has 1 (on a machine "
              "without GPUs: ACCELERATE_USE_CPU=true accelerate launch --multi_gpu --num_processes N --num_machines 1 "
              "--mixed_precision no --dynamo_backend no ...); going on with 1 process", file=sys.stderr)
    return state


_WARNED = False


def single_process_launch(env) -> bool:
    """``True`` when the environment says ``accelerate launch`` was asked for several processes
    but started a single one: its simple launcher (``MASTER_ADDR`` and ``ACCELERATE_MIXED_PRECISION``
    set, which it does only for ``--num_processes`` > 1, and no ``WORLD_SIZE``), or
    ``ACCELERATE_NUM_PROCESSES`` > 1 without ``WORLD_SIZE`` > 1."""
    if int(env.get("WORLD_SIZE", "1") or 1) > 1:
        return False
    try:
        asked = int(env.get("ACCELERATE_NUM_PROCESSES", "1") or 1)
    except ValueError:
        asked = 1
    simple = bool(env.get("MASTER_ADDR")) and "ACCELERATE_MIXED_PRECISION" in env and "WORLD_SIZE" not in env
    return asked > 1 or simple


def exit_distributed(rc: int) -> None:
    """End a process of an ``accelerate launch`` run cleanly (a no-op in a plain process).

    On success the ranks meet at a barrier (the main process has written the results by then),
    the gloo/NCCL group is torn down, and the process leaves with ``os._exit(rc)`` after
    flushing its output: letting the interpreter run the C++ static destructors of
    ``torch.distributed`` aborted finished processes now and then ("terminate called without an
    active exception", exit -6), which ``accelerate launch`` reports as a failed run.
    """
    import os
    import sys

    dist = sys.modules.get("torch.distributed")
    if dist is None or not dist.is_available() or not dist.is_initialized():
        return
    try:
        if rc == 0:
            dist.barrier()
        dist.destroy_process_group()
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(rc)


def process_device():
    """``torch.device`` of this process (``distributed_state().device``: ``cuda:<local rank>``
    on GPUs, ``cpu`` otherwise)."""
    return distributed_state().device


def device_or_default(device: str | None) -> str:
    """The device a model backend runs on, as text: ``device`` when one is given (``"cuda:1"``,
    ``"cpu"``), else this process's (:func:`process_device`: ``cuda:<local rank>`` under
    ``accelerate`` on GPUs, ``cpu`` without GPUs or with ``ACCELERATE_USE_CPU=true``).

    Raises:
        RuntimeError: as :func:`distributed_state` (several processes launched, one seen)."""
    return str(device) if device else str(process_device())


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


#: ``model_dtype`` option values -> torch dtype names
DTYPES = {"float32": "float32", "fp32": "float32", "float16": "float16", "fp16": "float16", "half": "float16",
          "bfloat16": "bfloat16", "bf16": "bfloat16"}


def model_dtype(option: str | None, device) -> Any:
    """The torch dtype a model runs in: ``option`` ``None``/``"float32"`` (default: the reference
    precision), ``"float16"``, ``"bfloat16"``, or ``"auto"`` (bfloat16 on a CUDA device that
    supports it, else float16 on CUDA; float32 on CPU).

    Raises:
        ValueError: an unknown name.
    """
    import torch

    name = str(option or "float32").lower()
    if name == "auto":
        dev = torch.device(device)
        if dev.type != "cuda":
            return torch.float32
        return torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16
    if name not in DTYPES:
        raise ValueError(f"model_dtype must be one of {', '.join(sorted(set(DTYPES)))} or auto, got {option!r}")
    return getattr(torch, DTYPES[name])


def check_model_options(options: dict) -> None:
    """Validate the ``model_batch_size`` (positive int or ``"auto"``) and ``model_dtype``
    options of a model-based dimension before any row is scored.

    Raises:
        ValueError: a value the models cannot use (the dimension turns it into an ``OptionError``).
    """
    bs = options.get("model_batch_size")
    if bs is not None and str(bs).strip().lower() != "auto":
        try:
            ok = int(bs) >= 1
        except (TypeError, ValueError):
            ok = False
        if not ok:
            raise ValueError(f"model_batch_size must be a positive integer or 'auto', got {bs!r}")
    dt = options.get("model_dtype")
    if dt is not None and str(dt).lower() != "auto" and str(dt).lower() not in DTYPES:
        raise ValueError(f"model_dtype must be one of {', '.join(sorted(set(DTYPES)))} or auto, got {dt!r}")


def free_memory_bytes(device) -> int | None:
    """Free bytes on a CUDA ``device`` (``torch.cuda.mem_get_info``: what every process on the
    GPU leaves free); ``None`` for a CPU device."""
    import torch

    dev = torch.device(device)
    if dev.type != "cuda":
        return None
    free, _total = torch.cuda.mem_get_info(dev)
    return int(free)


def batch_size_for(
    option: int | str | None,
    device,
    bytes_per_item: Callable[[], float],
    *,
    default: int = 8,
    cap: int = 256,
    headroom: float = 0.8,
    free_bytes: Callable[[Any], int | None] = free_memory_bytes,
) -> int:
    """Items per forward pass of a model.

    Args:
        option: a positive int (or its string): used as given. ``"auto"`` (or ``None``): on a
            CUDA device, ``headroom`` x free memory / ``bytes_per_item()`` (at least 1, at most
            ``cap``); on a CPU device ``default`` (the cores, not the memory, limit a CPU batch).
        bytes_per_item: memory one more item costs (bytes); called only when needed (it may run a
            probe batch, e.g. :func:`peak_bytes_per_item`).

    Raises:
        ValueError: an option that is neither a positive int nor ``"auto"``.
    """
    if option is not None and str(option).strip().lower() != "auto":
        try:
            n = int(option)
        except (TypeError, ValueError):
            raise ValueError(f"batch size must be a positive integer or 'auto', got {option!r}") from None
        if n < 1:
            raise ValueError(f"batch size must be a positive integer or 'auto', got {option!r}")
        return n
    free = free_bytes(device)
    if free is None:
        return default
    per = max(1.0, float(bytes_per_item()))
    return int(max(1, min(cap, (headroom * free) // per)))


def peak_bytes_per_item(run: Callable[[int], Any], device, n: int = 2) -> float:
    """Memory one item of a batch costs on a CUDA ``device``: peak allocated memory while
    ``run(n)`` runs a probe batch of ``n`` items, above what was allocated before, divided by
    ``n`` (the model's own weights, already resident, are not counted). ``0.0`` on CPU."""
    import torch

    dev = torch.device(device)
    if dev.type != "cuda":
        return 0.0
    torch.cuda.synchronize(dev)
    before = torch.cuda.memory_allocated(dev)
    torch.cuda.reset_peak_memory_stats(dev)
    run(n)
    torch.cuda.synchronize(dev)
    return max(0.0, (torch.cuda.max_memory_allocated(dev) - before) / max(1, n))
