"""THE model-loading function: a Hub id, the local Hugging Face cache, or a local path.

Every model-based scorer resolves its weights through :func:`resolve_model` and loads them
with the model package's own ``from_pretrained``-style call on the returned folder, so
``HF_HUB_OFFLINE=1``, ``HF_HOME``/``HF_HUB_CACHE`` and local paths behave the same for all.
"""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path


class ModelUnavailableError(RuntimeError):
    """The model cannot be had here; the one-line message names it and how to provide it."""


#: ``purpose`` of a :func:`resolve_model` call -> the ``score`` option that takes a local copy
#: instead (named in the error, so "pass a local folder" says where).
MODEL_OPTIONS: dict[str, str] = {
    "language ID": "lid_model",
    "English dialect ID": "dialect_model",
    "emotion (arousal/valence/dominance)": "emotion_model",
    "emotional naturalness classifier": "naturalness_classifier",
    "VAP turn-taking": "vap_model",
    "UTMOS": "utmos_model",
    "ASR (Whisper)": "whisper_model",
    "ASR (Qwen3-ASR)": "qwen_asr_model",
    "ASR (faster-whisper)": "embedded_asr_model",
    "embedded ASR": "embedded_asr_model",
}


def announce(text: str) -> None:
    """One progress line on stderr (e.g. ``loading ...``) from the main process only, written
    above any tqdm bar rather than through it."""
    if int(os.environ.get("RANK", "0") or 0) != 0:
        return
    import sys

    try:
        from tqdm import tqdm

        tqdm.write(text, file=sys.stderr)
    except ImportError:  # pragma: no cover - tqdm is a dependency
        print(text, file=sys.stderr)


from spear_datasets.hub import hub_offline  # noqa: E402,F401  (THE check; defined below the metrics layer)


def resolve_model(model: str | os.PathLike, *, revision: str | None = None, cache_dir: str | os.PathLike | None = None,
                  allow_patterns: list[str] | None = None, purpose: str = "model", option: str | None = None,
                  flag: str = "-o") -> Path:
    """Local folder holding ``model``'s files; once found, says ``loading <purpose> model <model>``
    on stderr (models load on the first batch, while the progress bar waits).

    Args:
        model: a local folder or file (used as is), or a Hub repo id (``org/name``).
        revision: Hub revision (branch, tag or commit) to pin.
        cache_dir: Hub cache folder (default: ``huggingface_hub``'s, honouring ``HF_HOME``).
        allow_patterns: only fetch these files of the repo (e.g. ``["*.json", "*.safetensors"]``).
        purpose: what the model is for, used in the messages (e.g. ``"UTMOS"``).
        option: the option that takes a local copy instead (default: :data:`MODEL_OPTIONS`
            of ``purpose``), named in the error.
        flag: the command-line flag that sets ``option`` (``-o`` for ``score``'s dimension
            options, ``-a`` for ``infer``'s agent options), named in the error.

    Returns:
        The folder (or file) path.

    Raises:
        ModelUnavailableError: a path that does not exist, or a Hub id that is neither in the
            cache nor downloadable (offline, no network, gated); one line naming the model.
    """
    p = Path(os.path.expanduser(str(model)))
    text = str(model)
    option = option or MODEL_OPTIONS.get(purpose)
    instead = (f"pass a local folder instead with {flag} {option}=FOLDER" if option
               else "pass the path of a local copy instead")
    if p.exists():
        announce(f"loading {purpose} model {text}")
        return p
    if text.startswith((".", "/", "~")) or text.count("/") != 1:
        raise ModelUnavailableError(f"{purpose} model {text!r}: no such local path, and not a Hub id (org/name)"
                                    + (f"; give it with {flag} {option}=FOLDER" if option else ""))
    from huggingface_hub import snapshot_download

    try:
        # local_files_only under HF_HUB_OFFLINE: the cache or nothing, at once
        found = Path(snapshot_download(text, revision=revision, cache_dir=cache_dir, allow_patterns=allow_patterns,
                                       local_files_only=hub_offline()))
    except Exception as e:
        how = ("it is not in the Hugging Face cache and HF_HUB_OFFLINE is set" if hub_offline()
               else f"download failed ({type(e).__name__})")
        raise ModelUnavailableError(
            f"{purpose} model {text!r} is unavailable: {how}; download it once online "
            f"(hf download {text}) or {instead}"
        ) from None
    announce(f"loading {purpose} model {text}")
    return found


def package_file(package: str, *parts: str) -> Path | None:
    """Path of a data file or folder inside an installed package, found without importing the package."""
    try:
        spec = importlib.util.find_spec(package)
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    for root in spec.submodule_search_locations:
        p = Path(root, *parts)
        if p.exists():
            return p
    return None
