"""SPEAR's dev/test data package into the upstream layout, checked against the published split.

The SPEAR website's "Download data" step hands out one archive holding ``dev/`` and ``test/``
folders, each with ``improvised/`` and ``naturalistic/`` subsets (``metadata.csv`` + ``audios/``),
to be placed under ``data/seamless_2t_2s_questions/inputs/`` (the website's
``inference_help_code/README.md``; its metadata rows name the clips as
``data/seamless_2t_2s_questions/inputs/<split>/<subset>/audios/<clip>.wav``).

- :func:`install_package`: a ``.zip`` or ``.tar[.gz]`` archive (or an already unpacked folder)
  -> ``ROOT/data/seamless_2t_2s_questions/inputs/<split>/<subset>/...`` (members that would land
  outside the target, links and oversized archives are refused); ``ROOT`` is then what
  ``spearbench build-dataset --source ROOT`` and ``spearbench infer --metadata`` read.
- :func:`check_layout`: schema and count check of each ``<split>/<subset>``: ``metadata.csv``
  with SPEAR's header, every clip present, rows per subset equal to the published sizes
  (:data:`spear_datasets.identity.SPEAR_SPLIT_SIZES`; test: 994 improvised + 1,731 naturalistic)
  unless ``counts=False``.
"""

from __future__ import annotations

import os
import shutil
import tarfile
import zipfile
from pathlib import Path, PurePosixPath
from typing import Any, Optional, Sequence

from spear_datasets.identity import SPEAR_SPLIT_SIZES, SUBSETS, DataCheckError, check_counts
from spear_datasets.schema import SPEAR_COLUMNS, MetadataError, RowError, read_metadata, resolve_path

PROTOCOL_DIR = Path("data") / "seamless_2t_2s_questions"
#: the largest archive member and archive total accepted (bytes)
MAX_MEMBER_BYTES = 4 * 1024 ** 3
MAX_TOTAL_BYTES = 400 * 1024 ** 3


def inputs_dir(root: str | os.PathLike) -> Path:
    """``ROOT/data/seamless_2t_2s_questions/inputs``."""
    return Path(root) / PROTOCOL_DIR / "inputs"


def _safe_name(name: str) -> Optional[PurePosixPath]:
    p = PurePosixPath(name.replace("\\", "/"))
    if p.is_absolute() or any(part in ("..", "") for part in p.parts) or not p.parts:
        return None
    return p


def _extract(archive: Path, dest: Path) -> None:
    """Extract ``archive`` into ``dest`` member by member (regular files and folders only).

    Raises:
        DataCheckError: an unsafe member (absolute, ``..``, a link), sizes over the limits, or a
            damaged archive (a bad CRC, a member larger than declared, a truncated stream)."""
    import lzma
    import zlib

    try:
        _extract_members(archive, dest)
    except (zipfile.BadZipFile, tarfile.TarError, EOFError, zlib.error, lzma.LZMAError, OSError) as e:
        raise DataCheckError(f"{archive.name}: damaged archive or unwritable target "
                             f"({type(e).__name__}: {' '.join(str(e).split())[:200]})") from None


def _extract_members(archive: Path, dest: Path) -> None:
    total = 0
    for name, size, opener in _members(archive):
        total += size
        if size > MAX_MEMBER_BYTES or total > MAX_TOTAL_BYTES:
            raise DataCheckError(f"{archive.name}: member {name!r} is over the size limits")
        safe = _safe_name(name)
        if safe is None:
            raise DataCheckError(f"{archive.name}: member {name!r} would land outside the target")
        out = dest / Path(*safe.parts)
        out.parent.mkdir(parents=True, exist_ok=True)
        with opener() as src, open(out, "wb") as dst:
            shutil.copyfileobj(src, dst, 1 << 20)


def _members(archive: Path):
    """``(name, size, open)`` of each regular file of a zip or tar archive (folders skipped).

    Raises:
        DataCheckError: a link or special member, or not a zip/tar archive."""
    if zipfile.is_zipfile(archive):
        with zipfile.ZipFile(archive) as z:
            for info in z.infolist():
                if not info.is_dir():
                    yield info.filename, info.file_size, (lambda i=info: z.open(i))
        return
    if tarfile.is_tarfile(archive):
        with tarfile.open(archive) as t:
            for m in t:
                if m.issym() or m.islnk() or not (m.isfile() or m.isdir()):
                    raise DataCheckError(f"{archive.name}: member {m.name!r} is not a plain file or folder")
                if m.isfile():
                    yield m.name, m.size, (lambda m=m: t.extractfile(m))
        return
    raise DataCheckError(f"{archive.name}: not a zip or tar archive")


def _split_parent(folder: Path) -> Optional[Path]:
    """The folder under ``folder`` that holds ``<split>/<subset>/metadata.csv`` (shallowest)."""
    found = sorted((p.parent.parent.parent for p in folder.rglob("metadata.csv")
                    if p.parent.name in SUBSETS and p.parent.parent.name in SPEAR_SPLIT_SIZES),
                   key=lambda p: len(p.parts))
    return found[0] if found else None


def install_package(package: str | os.PathLike, root: str | os.PathLike) -> Path:
    """Place SPEAR's package (an archive or an unpacked folder) in the upstream layout under ``root``.

    Returns:
        ``ROOT/data/seamless_2t_2s_questions/inputs``.

    Raises:
        DataCheckError: not an archive/folder, unsafe members, no ``<split>/<subset>/metadata.csv``
            inside, or ``root`` already holds a split/subset the package brings.
    """
    src, root = Path(package), Path(root)
    target = inputs_dir(root)
    staging = root / ".spearbench-unpack"
    if staging.exists():
        shutil.rmtree(staging)
    staging.mkdir(parents=True)
    try:
        if src.is_dir():
            base = _split_parent(src)
        elif src.is_file():
            _extract(src, staging)
            base = _split_parent(staging)
        else:
            raise DataCheckError(f"{src}: no such archive or folder")
        if base is None:
            raise DataCheckError(f"{src.name}: holds no <split>/<subset>/metadata.csv (split dev or test, subset "
                                 "improvised or naturalistic)")
        for split in SPEAR_SPLIT_SIZES:
            for subset in SUBSETS:
                s = base / split / subset
                if not (s / "metadata.csv").is_file():
                    continue
                d = target / split / subset
                if d.exists():
                    raise DataCheckError(f"{d} already exists: install into another root, or remove it first")
                d.parent.mkdir(parents=True, exist_ok=True)
                (shutil.copytree if src.is_dir() else shutil.move)(str(s), str(d))
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return target


def check_layout(root: str | os.PathLike, *, splits: Sequence[str] = ("test",), counts: bool = True) -> dict[str, Any]:
    """Schema and count check of the upstream layout under ``root``.

    Args:
        root: the folder holding ``data/seamless_2t_2s_questions/inputs`` (or that ``inputs`` folder's
            protocol folder itself).
        splits: the splits that must be there.
        counts: compare rows per subset with SPEAR's published sizes.

    Returns:
        ``{split: {subset: rows}}``.

    Raises:
        DataCheckError: ``root`` holding neither layout, a missing split/subset, a metadata file without SPEAR's columns, a clip
            that is not there, or (``counts``) rows per subset that differ from the published ones
            (the message gives both).
    """
    base = inputs_dir(root) if inputs_dir(root).is_dir() else Path(root) / "inputs"
    if not base.is_dir():  # neither layout: say what was looked for, not a file deep inside one
        what = "no such folder" if not Path(root).is_dir() else f"holds neither {PROTOCOL_DIR}/inputs/ nor inputs/"
        raise DataCheckError(f"{root}: {what} (give the --root that 'data install' or 'data seamless' wrote)")
    out: dict[str, dict[str, int]] = {}
    for split in splits:
        out[split] = {}
        for subset in SUBSETS:
            csv_path = base / split / subset / "metadata.csv"
            if not csv_path.is_file():
                raise DataCheckError(f"{csv_path}: missing (SPEAR's {split} split has both subsets)")
            try:  # SPEAR's header: every column of the metadata format present
                rows = read_metadata(csv_path, required=SPEAR_COLUMNS)
            except MetadataError as e:
                raise DataCheckError(str(e)) from None
            for i, r in enumerate(rows):
                try:
                    clip = resolve_path(str(r.get("audio_path") or ""), csv_path.parent)
                except RowError as e:
                    raise DataCheckError(f"{csv_path}: row {i}: {e}") from None
                if not clip.is_file():
                    raise DataCheckError(f"{csv_path}: row {i}: input clip {r.get('audio_path')!r} is not there")
            out[split][subset] = len(rows)
        if counts:
            check_counts(out[split], split, where=str(base / split))
    return out
