"""Downloads of data packages: HTTP (resumable, checksummed) and the Hugging Face Hub.

- :func:`http_download`: ``httpx`` streaming into ``<dest>.part``; a broken transfer resumes
  from the bytes already there (``Range: bytes=N-``; a server that ignores it restarts the file, one
  that answers another range than asked is retried from byte 0),
  bounded retries with exponential backoff, a total deadline and a size limit; the finished file
  is checked against ``sha256`` when given (a mismatch removes the partial file and fails), then
  renamed into place. The file's sha256 is returned (record it to pin the package).
- :func:`hub_download`: ``huggingface_hub.snapshot_download`` of the files matching patterns of
  a Hub dataset (the Hub client resumes and checks each file against the Hub's own hash), under
  a total deadline (:func:`hub_snapshot`: the Hub client's own time limits are per read, so a
  server that trickles bytes would hold it for ever).

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
        DownloadError: ``sha256`` not 64 hex digits (before any request), HTTP 4xx other than
            408/429, too large, past the deadline, retries spent, a sha256 mismatch (the partial
            file is removed then), or a reply no attempt can read (a redirect loop, a body that
            does not decode as its ``Content-Encoding`` says).
    """
    import re

    import httpx

    if sha256 is not None and not re.fullmatch(r"[0-9a-fA-F]{64}", str(sha256)):
        raise DownloadError(f"--sha256 must be 64 hexadecimal digits, got {str(sha256)[:80]!r}")
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
                        f.write(block)  # before the deadline's check: the count it gives is the bytes kept
                        if time.monotonic() > t_end:
                            f.flush()
                            raise DownloadError(f"the download ran past its {deadline_s:g} s deadline "
                                                f"({got} bytes kept in {part.name}; run again to resume)")
                        if progress is not None:
                            progress(got, total)
                if total is not None and got < total:
                    raise _Retry(f"the transfer stopped at {got} of {total} bytes")
            break
        except (httpx.UnsupportedProtocol, httpx.InvalidURL) as e:  # no attempt can succeed
            raise DownloadError(f"{url!r} is not a URL this can download ({' '.join(str(e).split())[:200]})") from None
        except (httpx.TooManyRedirects, httpx.DecodingError) as e:  # a redirect loop, a body that is not its encoding
            raise DownloadError(f"{url!r}: the server's reply cannot be read ({type(e).__name__}: "
                                f"{' '.join(str(e).split())[:200]})") from None
        except (_Retry, httpx.TransportError) as e:
            attempt += 1
            if attempt > retries:
                raise DownloadError(f"gave up after {retries + 1} attempts: {type(e).__name__}: {e}"
                                    f" ({part.name} kept; run again to resume)") from None
            wait = backoff_s * 2 ** (attempt - 1)
            if time.monotonic() + wait > t_end:
                raise DownloadError(f"the download ran past its {deadline_s:g} s deadline (last attempt: "
                                    f"{type(e).__name__}: {' '.join(str(e).split())[:200]})") from None
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


class HubError(DownloadError):
    """``huggingface_hub.snapshot_download`` failed (one line); ``types``: the names of the
    error's class and its bases (``GatedRepoError``, ``RepositoryNotFoundError``,
    ``LocalEntryNotFoundError``...), for a caller that words each case."""

    def __init__(self, message: str, types: Sequence[str] = ()):
        super().__init__(message)
        self.types = tuple(types)


class HubDeadlineError(DownloadError):
    """A Hub download ran past its total deadline (one line; what was received is kept)."""


def hub_snapshot(repo_id: str, *, deadline_s: float = DEFAULT_DEADLINE_S, **kwargs) -> Path:
    """``huggingface_hub.snapshot_download(repo_id, **kwargs)`` bounded by a total deadline.

    The download runs in a child process of this interpreter (the token and ``HF_*`` settings
    come from the environment it inherits; nothing secret is passed on its command line), killed
    when ``deadline_s`` (s) has passed: the Hub client's own time limits are per read, so a
    server that trickles bytes, or a run of slow files, would otherwise hold it without end, and a
    download thread cannot be stopped. The files received whole stay in place and the client
    resumes from them (and from its partial files) on the next call.

    Args:
        kwargs: ``snapshot_download``'s keyword arguments (JSON values: ``repo_type``,
            ``revision``, ``local_dir``, ``allow_patterns``, ``endpoint``, ``local_files_only``...).

    Returns:
        the folder ``snapshot_download`` returned.

    Raises:
        HubDeadlineError: past ``deadline_s`` (the child is killed first).
        HubError: the client's error, one line (``types``: its class names).
    """
    import json
    import subprocess
    import sys

    import spear_datasets

    env = dict(os.environ)  # the child imports this same package (PYTHONPATH first), whatever its install
    here = str(Path(spear_datasets.__file__).resolve().parents[1])
    env["PYTHONPATH"] = os.pathsep.join([here] + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
    proc = subprocess.Popen([sys.executable, "-c", "from spear_datasets.sources.download import _hub_child; _hub_child()"],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env, text=True)
    try:
        out, _ = proc.communicate(json.dumps({"repo_id": repo_id, **kwargs}), timeout=float(deadline_s))
    except subprocess.TimeoutExpired:
        where = kwargs.get("local_dir")
        raise HubDeadlineError(f"{repo_id}: the Hub download ran past its {deadline_s:g} s deadline"
                               + (f" (what it received is kept in {where}; run again to resume)" if where else
                                  " (run again to resume)")) from None
    finally:
        if proc.poll() is None:  # the deadline, Ctrl-C: the child goes too
            proc.kill()
            proc.wait()
    lines = [ln for ln in (out or "").splitlines() if ln.startswith("{")]
    try:
        reply = json.loads(lines[-1])
    except (IndexError, ValueError):
        raise HubError(f"{repo_id}: the Hub download process ended without a result (exit {proc.returncode})") from None
    if "path" in reply:
        return Path(reply["path"])
    raise HubError(f"{repo_id}: {reply.get('message') or 'download failed'}", reply.get("types") or ())


def _hub_child() -> None:
    """The child process of :func:`hub_snapshot`: its arguments as JSON on stdin, its result as
    one JSON line on stdout (``{"path"}``, or ``{"message", "types"}``: one line of the error)."""
    import json
    import sys

    kwargs = json.loads(sys.stdin.read())
    try:
        from huggingface_hub import snapshot_download

        out = {"path": str(snapshot_download(kwargs.pop("repo_id"), **kwargs))}
    except BaseException as e:  # noqa: BLE001 - reported to the parent, which words it
        text = str(e).strip()
        out = {"message": text.splitlines()[0] if text else type(e).__name__,
               "types": [c.__name__ for c in type(e).__mro__]}
    sys.stdout.write("\n" + json.dumps(out) + "\n")
    sys.stdout.flush()


def hub_download(repo_id: str, local_dir: str | os.PathLike, *, patterns: Sequence[str] = (),
                 revision: Optional[str] = None, repo_type: str = "dataset", endpoint: Optional[str] = None,
                 deadline_s: float = DEFAULT_DEADLINE_S) -> Path:
    """Download the files of a Hub repository matching ``patterns`` (all when empty) into
    ``local_dir`` (``huggingface_hub.snapshot_download``: resumable, each file checked against
    the Hub's hash; ``HF_HUB_OFFLINE=1`` uses the cache only; a gated dataset needs
    ``HF_TOKEN`` from an account that accepted its terms), within ``deadline_s`` s in all
    (:func:`hub_snapshot`).

    Raises:
        DownloadError: the repository, revision or files cannot be had, or the deadline passed
            (one line; :class:`HubDeadlineError` for the deadline)."""
    # one line; the CLI masks every secret in what it prints (spear_metrics.core.secrets.masked_output)
    return hub_snapshot(repo_id, deadline_s=deadline_s, repo_type=repo_type, revision=revision,
                        local_dir=str(local_dir), allow_patterns=list(patterns) or None, endpoint=endpoint)
