"""``push-results``' upload: a results dataset written to a temporary folder and uploaded."""

from __future__ import annotations

import os
import tempfile
from typing import Any

from spear_metrics.results.hub import is_repo_id, upload_folder
from spear_metrics.results.validate import ResultsError
from spear_metrics.results.write import write_results_dataset


def push_results(
    results_dir: str | os.PathLike,
    repo_id: str,
    *,
    private: bool = False,
    api: Any = None,
    token: str | None = None,
    **kwargs: Any,
) -> str:
    """Publish ``results_dir`` as the Hub dataset ``repo_id`` (created when missing).

    The dataset is written to a temporary folder with
    :func:`~spear_metrics.results.write.write_results_dataset` (``kwargs``; every check runs
    before any network call) and uploaded in one commit
    (:func:`~spear_metrics.results.hub.upload_folder`). The token comes from ``token``,
    ``HF_TOKEN`` or the ``hf auth login`` cache; it is never printed or written.

    Args:
        api: an ``HfApi``-like object (tests inject a recorder); default ``HfApi(token=token)``.

    Returns:
        The URL of the upload commit (or of the repo when the API returns none).

    Raises:
        ResultsError: invalid run or options (nothing is uploaded).
    """
    from spear_metrics.core.secrets import register_secret

    register_secret(token)  # masked in every message from now on
    if not is_repo_id(repo_id):
        raise ResultsError(f"repo id {repo_id!r} is not OWNER/NAME")
    if api is None:
        from huggingface_hub import HfApi

        api = HfApi(token=token)
    kwargs.setdefault("model_name", repo_id.split("/", 1)[1])
    with tempfile.TemporaryDirectory(prefix="spearbench-results-") as tmp:
        folder = write_results_dataset(results_dir, tmp, own=False, **kwargs)  # a fresh folder of ours: no record
        return upload_folder(folder, repo_id, repo_type="dataset", api=api, private=private,
                             commit_message=f"SPEARBench results: {kwargs['model_name']}")
