"""Downloads of data packages: HTTP (resumable, checksummed) and the Hugging Face Hub.

- :func:`http_download`: ``httpx`` streaming into ``<dest>.part``; a broken transfer resumes
  from the bytes already there (``Range: bytes=N-``; a server that ignores it restarts the file, one
  that answers another range than asked is retried from byte 0),
  bounded retries with exponential backoff, a total deadline and a size limit; the finished file
  is checked against ``sha256`` when given (a mismatch removes the partial file and fails), then
  renamed into place. The file's sha256 is returned (record it to pin the package).
- :func:`hub_download`: ``huggingface_hub.snapshot_download`` of the files matching patterns of
  a Hub dataset (the Hub client resumes and checks each file against the Hub's own hash).

Tokens come from the environment only (``HF_TOKEN`` for the Hub); none is written or printed.
"""

from __future__ import annotations

import hashlib
import os
import time
from pathlib import Path
from typing import Callable, Optional, Sequence

#: default total deadline of one download (s) and largest file accepted (bytes)
DEFAULT_DEADLINE_S = 6 * 3600.0
DEFAULT_MAX_BYTES = 200 * 1024 ** 3
CHUNK = 1 << 20


class DownloadError(RuntimeError):
    """A download that cannot finish (one line, no secret)."""


def sha256_file(path: str | os.PathLike) -> str:
    """sha256 (hex) of a file, read in 1 MiB chunks."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(CHUNK), b""):
            h.update(block)
    return h.hexdigest()


def http_download(url: str, dest: str | os.PathLike, *, sha256: Optional[str] = None, retries: int = 5,
                  timeout_s: float = 60.0, deadline_s: float = DEFAULT_DEADLINE_S,
                  max_bytes: int = DEFAULT_MAX_BYTES, backoff_s: float = 1.0,
                  progress: Optional[Callable[[int, Optional[int]], None]] = None) -> str:
    """Download ``url`` to ``dest``, resuming a partial ``<dest>.part``; returns the file's sha256.

    Args:
        sha256: expected sha256 (hex) of the whole file; ``None``: not checked (the returned
            hash is what to pin).
        retries: further attempts after a failed one (connection errors, time-outs, HTTP 429 and
            5xx), each resuming where the file stands, after ``backoff_s * 2**k`` s.
        timeout_s: one read's time limit (s); ``deadline_s``: the whole download's (s).
        max_bytes: the largest file accepted (bytes).
        progress: called with ``(bytes so far, total or None)``.

    Raises:
        DownloadError: HTTP 4xx other than 408/429, too large, past the deadline, retries spent,
            or a sha256 mismatch (the partial file is removed then).
    """
    import httpx

    dest = Path(dest)
    part = dest.with_name(dest.name + ".part")
    dest.parent.mkdir(parents=True, exist_ok=True)
    if dest.is_file() and (sha256 is None or sha256_file(dest) == sha256.lower()):
        return sha256_file(dest)
    t_end = time.monotonic() + float(deadline_s)
    attempt = 0
    while True:
        have = part.stat().st_size if part.is_file() else 0
        headers = {"Range": f"bytes={have}-"} if have else {}
        try:
            with httpx.Client(timeout=httpx.Timeout(timeout_s), follow_redirects=True) as client, \
                    client.stream("GET", url, headers=headers) as r:
                if r.status_code == 416 and have:  # nothing left to fetch: the partial file is whole
                    break
                if r.status_code >= 400:
                    retryable = r.status_code in (408, 429) or r.status_code >= 500
                    raise (_Retry if retryable else DownloadError)(f"HTTP {r.status_code} from the server")
                resumed = r.status_code == 206 and have > 0
                start = _range_start(r)
                if r.status_code == 206 and start != (have if resumed else 0):
                    # bytes from another offset than asked: appending them would corrupt the file
                    part.unlink(missing_ok=True)
                    raise _Retry(f"asked for bytes from {have if resumed else 0}, the server sent "
                                 f"Content-Range {r.headers.get('content-range')!r}; restarting the file")
                total = _total(r, have if resumed else 0)
                if total is not None and total > max_bytes:
                    raise DownloadError(f"the file is {total} bytes, over the {max_bytes}-byte limit")
                with open(part, "ab" if resumed else "wb") as f:
                    got = have if resumed else 0
                    for block in r.iter_bytes():  # as it arrives: a broken transfer keeps every byte received
                        got += len(block)
                        if got > max_bytes:
                            raise DownloadError(f"the file grew past the {max_bytes}-byte limit")
                        if time.monotonic() > t_end:
                            raise DownloadError(f"the download ran past its {deadline_s:g} s deadline "
                                                f"({got} bytes kept in {part.name}; run again to resume)")
                        f.write(block)
                        if progress is not None:
                            progress(got, total)
                if total is not None and got < total:
                    raise _Retry(f"the transfer stopped at {got} of {total} bytes")
            break
        except (httpx.UnsupportedProtocol, httpx.InvalidURL) as e:  # no attempt can succeed
            raise DownloadError(f"{url!r} is not a URL this can download ({' '.join(str(e).split())[:200]})") from None
        except (_Retry, httpx.TransportError) as e:
            attempt += 1
            if attempt > retries:
                raise DownloadError(f"gave up after {retries + 1} attempts: {type(e).__name__}: {e}"
                                    f" ({part.name} kept; run again to resume)") from None
            wait = backoff_s * 2 ** (attempt - 1)
            if time.monotonic() + wait > t_end:
                raise DownloadError(f"the download ran past its {deadline_s:g} s deadline") from None
            time.sleep(wait)
    digest = sha256_file(part)
    if sha256 is not None and digest != sha256.lower():
        part.unlink(missing_ok=True)
        raise DownloadError(f"sha256 mismatch: got {digest}, expected {sha256.lower()} (the file was removed)")
    os.replace(part, dest)
    return digest


class _Retry(Exception):
    """A failure worth another attempt."""


def _range_start(r) -> Optional[int]:
    """The first byte offset of a ``Content-Range: bytes START-END/TOTAL`` answer (``None``: none
    or unreadable)."""
    cr = (r.headers.get("content-range") or "").strip()
    unit, _, rest = cr.partition(" ")
    first = rest.split("-", 1)[0].strip()
    return int(first) if unit.lower() == "bytes" and first.isdigit() else None


def _total(r, offset: int) -> Optional[int]:
    cr = r.headers.get("content-range")
    if cr and "/" in cr and cr.rsplit("/", 1)[1].strip().isdigit():
        return int(cr.rsplit("/", 1)[1])
    cl = r.headers.get("content-length")
    return offset + int(cl) if cl and cl.isdigit() else None


def hub_download(repo_id: str, local_dir: str | os.PathLike, *, patterns: Sequence[str] = (),
                 revision: Optional[str] = None, repo_type: str = "dataset", endpoint: Optional[str] = None) -> Path:
    """Download the files of a Hub repository matching ``patterns`` (all when empty) into
    ``local_dir`` (``huggingface_hub.snapshot_download``: resumable, each file checked against
    the Hub's hash; ``HF_HUB_OFFLINE=1`` uses the cache only; a gated dataset needs
    ``HF_TOKEN`` from an account that accepted its terms).

    Raises:
        DownloadError: the repository, revision or files cannot be had (one line)."""
    from huggingface_hub import snapshot_download
    from huggingface_hub.utils import HfHubHTTPError

    try:
        path = snapshot_download(repo_id, repo_type=repo_type, revision=revision, local_dir=str(local_dir),
                                 allow_patterns=list(patterns) or None, endpoint=endpoint)
    except (HfHubHTTPError, OSError, ValueError) as e:
        # one line; the CLI masks every secret in what it prints (spear_metrics.core.secrets.masked_output)
        raise DownloadError(f"{repo_id}: {str(e).splitlines()[0] if str(e) else type(e).__name__}") from None
    return Path(path)
