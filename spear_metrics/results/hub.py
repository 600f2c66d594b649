"""Uploading folders to the Hub (results datasets, the published dataset, metric and leaderboard
Spaces), one place for the token rule.

The token comes from ``token=`` (never from a command line), else ``HF_TOKEN`` or the login
cache (``hf auth login``), through huggingface_hub's own lookup. It is never printed, logged or
written: error messages are reduced to one line with the token's value masked
(:mod:`spear_metrics.core.secrets`).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from spear_datasets.ownership import WORK_DIR

#: A Hub repository id: ``owner/name``, each starting with a letter or digit (so ``../..`` or
#: ``.hidden/x`` never passes for one), no ``--`` or ``..`` inside.
REPO_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,95}/[A-Za-z0-9][A-Za-z0-9_.-]{0,95}")


def is_repo_id(text: str) -> bool:
    """Whether ``text`` is a well-formed Hub repository id ``owner/name``."""
    return bool(REPO_ID.fullmatch(text or "")) and ".." not in text and "--" not in text and not text.endswith(".")


def safe_error(e: BaseException, limit: int = 300) -> str:
    """One line for an upload error: type and message, whitespace collapsed, every known secret
    masked (:func:`spear_metrics.core.secrets.mask_secrets`: the token's value, whatever its
    shape), cut at a word boundary after ``limit`` characters (with "...")."""
    from spear_metrics.core.secrets import mask_secrets

    msg = mask_secrets(" ".join(str(e).split()))
    return shorten(f"{type(e).__name__}: {msg}" if msg else type(e).__name__, limit)


def shorten(text: str, limit: int = 300) -> str:
    """``text`` whole when it fits ``limit`` characters, else cut at the last space before the
    limit with "..." appended (never mid-word)."""
    if len(text) <= limit:
        return text
    cut = text[:limit].rsplit(" ", 1)[0]
    return cut + " ..."


def hub_api(api: Any = None, token: str | None = None):
    """``api`` when given (tests inject a recorder), else ``huggingface_hub.HfApi(token=token)``
    (a token given here is masked from then on)."""
    from spear_metrics.core.secrets import register_secret

    register_secret(token)
    if api is not None:
        return api
    from huggingface_hub import HfApi

    return HfApi(token=token)


def upload_folder(folder: str | Path, repo_id: str, *, repo_type: str, api: Any = None, private: bool = False,
                  space_sdk: str | None = None, commit_message: str) -> str:
    """Create ``repo_id`` (kept when it exists) and upload ``folder`` in one commit.

    Args:
        repo_type: ``"dataset"`` or ``"space"`` (``space_sdk`` then names the SDK, ``"gradio"``).

    Returns:
        The commit URL (or the repository URL when the API returns none).

    Raises:
        ValueError: ``repo_id`` is not ``owner/name``.
        Exception: whatever huggingface_hub raises (network, auth); callers print
            :func:`safe_error` of it.
    """
    if not is_repo_id(repo_id):
        raise ValueError(f"repo id {repo_id!r} is not OWNER/NAME")
    api = hub_api(api)
    kw = {"space_sdk": space_sdk} if repo_type == "space" and space_sdk else {}
    api.create_repo(repo_id, repo_type=repo_type, private=private, exist_ok=True, **kw)
    # the folder's work folder (the record of what this tool wrote there, locks) is never uploaded
    info = api.upload_folder(folder_path=str(folder), repo_id=repo_id, repo_type=repo_type, commit_message=commit_message,
                             ignore_patterns=[f"{WORK_DIR}/*", f"{WORK_DIR}/**"])
    url = getattr(info, "commit_url", None) or (info if isinstance(info, str) else None)
    prefix = {"dataset": "datasets/", "space": "spaces/"}.get(repo_type, "")
    return url or f"https://huggingface.co/{prefix}{repo_id}"
