"""Publishing SPEARBench to the Hub: the dataset, one metric Space per metric folder, and the
leaderboard Space (``spearbench publish``; ``scripts/build_space.py`` for the leaderboard alone).

Each repository is first written as a folder, exactly what is uploaded::

    OUT/datasets/<dataset name>/     the folder ``build-dataset`` wrote (card, data/, reports)
    OUT/spaces/<metric>/             <metric>.py (the evaluate module), README.md (card + Space
                                     YAML), app.py, requirements.txt, spearbench-*.whl
    OUT/spaces/<leaderboard>/        app.py, README.md, requirements.txt, packages.txt, data/,
                                     results.txt (Hub ids shown at start), spearbench-*.whl

Until ``spearbench`` is on a package index, every Space bundles the wheel and its
``requirements.txt`` names it (``./spearbench-<version>-py3-none-any.whl[extras]``, the extras
of the folder's own ``spearbench[...]`` line). ``--dry-run OUT`` stops after writing; otherwise
the folders are written to a temporary directory and uploaded (token from ``HF_TOKEN`` or the
login, never printed or written).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

import spear_metrics
from spear_datasets.files import active_folder, atomic_path, make_dirs
from spear_datasets.ownership import open_folder
from spear_metrics.results.validate import PROTOCOL

PACKAGE_DIR = Path(spear_metrics.__file__).resolve().parent
#: Files of a metric folder that make its Space (besides the module ``<metric>.py``).
METRIC_SPACE_FILES = ("README.md", "app.py", "requirements.txt")
#: A requirements line naming the spearbench package (with optional extras).
_PACKAGE_LINE = re.compile(r"^spearbench(\[[A-Za-z0-9_,\s-]*\])?\s*$")


class PublishError(RuntimeError):
    """Publishing cannot proceed (one-line reason)."""


@dataclass(frozen=True)
class Repo:
    """One repository to publish: ``repo_id``, ``repo_type`` (``"dataset"``/``"space"``) and
    the folder holding exactly its files."""

    repo_id: str
    repo_type: str
    folder: Path


def source_checkout() -> Path | None:
    """The source checkout this package was imported from (it holds ``pyproject.toml`` naming
    ``spearbench``), or ``None`` for an installed wheel."""
    root = PACKAGE_DIR.parent
    pp = root / "pyproject.toml"
    try:
        return root if pp.is_file() and re.search(r'(?m)^name\s*=\s*"spearbench"', pp.read_text()) else None
    except OSError:
        return None


def build_wheel(out_dir: Path, checkout: Path | None = None) -> Path:
    """Build the ``spearbench`` wheel from the source checkout into ``out_dir`` with
    ``pip wheel --no-deps`` (no build isolation when setuptools is importable here, so no index
    is needed).

    Raises:
        PublishError: no checkout (pass a wheel instead), or the build failed.
    """
    checkout = checkout or source_checkout()
    if checkout is None:
        raise PublishError("spearbench is installed from a wheel here: give that wheel with --wheel PATH")
    out_dir.mkdir(parents=True, exist_ok=True)
    cmd = [sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(out_dir), str(checkout)]
    try:
        import setuptools  # noqa: F401

        cmd.insert(5, "--no-build-isolation")
    except ImportError:
        pass
    done = subprocess.run(cmd, capture_output=True, text=True)
    wheels = sorted(out_dir.glob("spearbench-*.whl"))
    if done.returncode != 0 or not wheels:
        tail = " ".join((done.stderr or done.stdout).split())[-300:]
        raise PublishError(f"building the spearbench wheel failed: {tail}")
    return wheels[-1]


def pin_wheel(requirements: Path, wheel_name: str) -> None:
    """Replace the ``spearbench[...]`` line of ``requirements`` with ``./<wheel_name>[...]``
    (extras kept); comments and other pins stay.

    Raises:
        PublishError: the file has no ``spearbench`` line.
    """
    lines = requirements.read_text(encoding="utf-8").splitlines()
    out, found = [], False
    for line in lines:
        m = _PACKAGE_LINE.match(line.strip())
        if m and not found:
            out.append(f"./{wheel_name}{(m.group(1) or '').replace(' ', '')}")
            found = True
        else:
            out.append(line)
    if not found:
        raise PublishError(f"{requirements.name} has no 'spearbench' line to pin the wheel on")
    with atomic_path(requirements) as tmp:
        tmp.write_text("\n".join(out) + "\n", encoding="utf-8")


def _fresh(out: Path) -> Path:
    """``out`` emptied of what an earlier ``publish`` wrote there (recorded in the output folder
    holding it; nothing else is removed: a file someone else put there stops the command when
    it would be replaced)."""
    folder = active_folder(out)
    if folder is not None:
        rel = Path(os.path.relpath(os.path.abspath(out), os.path.abspath(folder.root))).as_posix()
        folder.remove_recorded(under=None if rel == "." else rel)
    make_dirs(out)
    return out


def _copy(src: Path, dst: Path) -> None:
    """Copy one file (atomically, recorded like every write)."""
    with atomic_path(dst) as tmp:
        shutil.copy2(src, tmp)


def _copy_tree(src: Path, dst: Path) -> None:
    """Copy the files under ``src`` (no ``__pycache__``/``*.pyc``, no hidden files) to ``dst``."""
    for p in sorted(src.rglob("*")):
        rel = p.relative_to(src)
        if p.is_file() and not any(part == "__pycache__" or part.startswith(".") for part in rel.parts) \
                and p.suffix != ".pyc":
            _copy(p, dst / rel)


def _bundle(out: Path, wheel: Path) -> Path:
    """Copy ``wheel`` into the Space folder ``out`` and pin it in its ``requirements.txt``."""
    _copy(wheel, out / wheel.name)
    pin_wheel(out / "requirements.txt", wheel.name)
    return out


def write_metric_space(metric: str, out: Path, wheel: Path) -> Path:
    """Write the Space folder of metric folder ``spear_metrics/<metric>/`` into ``out``.

    Raises:
        PublishError: the folder lacks one of its Space files.
    """
    src = PACKAGE_DIR / metric
    files = (f"{metric}.py", *METRIC_SPACE_FILES)
    missing = [f for f in files if not (src / f).is_file()]
    if missing:
        raise PublishError(f"metric folder {metric} lacks {', '.join(missing)}")
    _fresh(out)
    for f in files:
        _copy(src / f, out / f)
    return _bundle(out, wheel)


def write_leaderboard_space(out: Path, wheel: Path, results: Sequence[str] = ()) -> Path:
    """Write the leaderboard Space folder (``spear_metrics/space``) into ``out``; ``results``
    (Hub dataset ids) go to ``results.txt``, the sources the Space shows at start.

    Raises:
        PublishError: a results entry that is not a Hub dataset id.
    """
    from spear_metrics.results.hub import is_repo_id
    from spear_metrics.space import SPACE_DIR, SPACE_FILES

    bad = [r for r in results if not is_repo_id(r)]
    if bad:
        raise PublishError(f"--results takes Hub dataset ids OWNER/NAME, not {bad[0]!r}")
    _fresh(out)
    for f in SPACE_FILES:
        p = SPACE_DIR / f
        if p.is_dir():
            _copy_tree(p, out / f)
        else:
            _copy(p, out / f)
    if results:
        with atomic_path(out / "results.txt") as tmp:
            tmp.write_text("\n".join(results) + "\n", encoding="utf-8")
    return _bundle(out, wheel)


def write_dataset(hub_dir: Path, out: Path) -> Path:
    """Copy the files of a ``build-dataset`` folder that are uploaded (the same patterns as
    :func:`spear_datasets.hub.push_dataset`) into ``out``.

    Raises:
        PublishError: ``hub_dir`` is not a built dataset.
    """
    from spear_datasets.hub import REPORT_FILE, SKIPPED_FILE

    if not (hub_dir / "README.md").is_file() or not any((hub_dir / "data").glob("*/*.parquet")):
        raise PublishError(f"--dataset {hub_dir.name}: not a folder written by `spearbench build-dataset` "
                           "(README.md and data/*/*.parquet expected)")
    _fresh(out)
    _copy(hub_dir / "README.md", out / "README.md")
    _copy_tree(hub_dir / "data", out / "data")
    for f in (SKIPPED_FILE, REPORT_FILE):
        if (hub_dir / f).is_file():
            _copy(hub_dir / f, out / f)
    return out


#: the dataset repository name of data that is not SPEAR's split (``publish`` never names it after the benchmark)
CUSTOM_DATASET_NAME = "spearbench-custom-data"


def dataset_is_spear(dataset: Path) -> bool:
    """Whether a ``build-dataset`` folder holds SPEAR's own data: Meta's Seamless Interaction
    recordings (its card) and, for every split it holds, exactly SPEAR's published rows per
    subset (``build_report.json``; :func:`spear_datasets.identity.check_counts`)."""
    import json

    from spear_datasets.hub import REPORT_FILE, SEAMLESS
    from spear_datasets.identity import DataCheckError, check_counts

    try:
        counts = json.loads((dataset / REPORT_FILE).read_text(encoding="utf-8")).get("counts")
        card = (dataset / "README.md").read_text(encoding="utf-8")
    except (OSError, ValueError, AttributeError):
        return False
    if not isinstance(counts, dict) or not counts or SEAMLESS.name not in card:
        return False
    splits = {sp for per in counts.values() if isinstance(per, dict) for sp in per}
    try:
        for sp in splits:
            check_counts({sub: (per or {}).get(sp, 0) for sub, per in counts.items()}, sp)
    except DataCheckError:
        return False
    return bool(splits)


def dataset_repo_name(dataset: Path, dataset_name: str | None) -> str:
    """The dataset repository name: ``dataset_name`` when given, else the benchmark's
    (:data:`PROTOCOL`) for SPEAR's own data (:func:`dataset_is_spear`) and
    :data:`CUSTOM_DATASET_NAME` for any other.

    Raises:
        PublishError: the benchmark's name asked for data that is not SPEAR's split."""
    spear = dataset_is_spear(dataset)
    if dataset_name is None:
        return PROTOCOL if spear else CUSTOM_DATASET_NAME
    if dataset_name == PROTOCOL and not spear:
        raise PublishError(f"--dataset-name {PROTOCOL} names SPEAR's own split, but {dataset.name} is not it (Seamless "
                           "recordings with SPEAR's published rows per subset): give this data another name")
    return dataset_name


def prepare(out: Path, *, dataset: Path, namespace: str, wheel: Path | None = None, metrics: Sequence[str] | None = None,
            dataset_name: str | None = None, leaderboard: str = "leaderboard", results: Sequence[str] = ()) -> list[Repo]:
    """Write every repository's folder under ``out`` (``datasets/<name>``, ``spaces/<name>``).

    Args:
        dataset_name: the dataset repository's name (default :func:`dataset_repo_name`: the
            benchmark's name only for SPEAR's own split).
        wheel: the spearbench wheel to bundle (default: built from the source checkout).
        metrics: metric folders to publish (default: every one, :func:`spear_metrics.core.columns.metric_names`).

    Raises:
        PublishError: a bad argument, a dataset folder that is not one, a metric folder lacking
            a Space file, or no wheel.
    """
    from spear_metrics.core.columns import metric_names
    from spear_metrics.results.hub import is_repo_id

    dataset_name = dataset_repo_name(dataset, dataset_name)
    names = list(metrics) if metrics else list(metric_names())
    unknown = [m for m in names if m not in metric_names()]
    if unknown:
        raise PublishError(f"unknown metric {unknown[0]!r}; known: {', '.join(metric_names())}")
    for name in (dataset_name, leaderboard, *names):
        if not is_repo_id(f"{namespace}/{name}"):
            raise PublishError(f"{namespace}/{name} is not a Hub repository id OWNER/NAME")
    if wheel is not None and not (wheel.is_file() and wheel.name.startswith("spearbench-") and wheel.suffix == ".whl"):
        raise PublishError(f"--wheel {wheel.name}: not a spearbench wheel file")
    # OUT: new, empty or a folder publish wrote; each repository folder replaces only what an
    # earlier publish wrote there
    with open_folder(out, command="publish", flag="--dry-run"), \
            tempfile.TemporaryDirectory(prefix="spearbench-wheel-") as wheel_dir:
        if wheel is None:
            wheel = build_wheel(Path(wheel_dir))
        repos = [Repo(f"{namespace}/{dataset_name}", "dataset", write_dataset(dataset, out / "datasets" / dataset_name))]
        for m in names:
            repos.append(Repo(f"{namespace}/{m}", "space", write_metric_space(m, out / "spaces" / m, wheel)))
        repos.append(Repo(f"{namespace}/{leaderboard}", "space",
                          write_leaderboard_space(out / "spaces" / leaderboard, wheel, results)))
    return repos


def dataset_warnings(dataset: Path, repo_id: str) -> list[str]:
    """What a person should know before ``dataset`` (a ``build-dataset`` folder) is published as
    ``repo_id``, one sentence each: a card whose licence is unknown (``license: unknown``, the
    card of recordings given without ``--license``), and the official dataset's name
    (:data:`spear_datasets.hub.DEFAULT_REPO_ID`) on data that is not Meta's Seamless
    Interaction recordings. Reads the card's front matter and ``build_report.json``."""
    import json

    from spear_datasets.hub import DEFAULT_REPO_ID, REPORT_FILE, SEAMLESS

    card = dataset / "README.md"
    text = card.read_text(encoding="utf-8") if card.is_file() else ""
    front = text.split("---", 2)[1] if text.startswith("---") and text.count("---") >= 2 else ""
    m = re.search(r"(?m)^license:\s*(\S+)\s*$", front)
    licence = m.group(1) if m else "unknown"
    try:
        n_rows = json.loads((dataset / REPORT_FILE).read_text(encoding="utf-8")).get("n_rows")
    except (OSError, ValueError, AttributeError):
        n_rows = None
    rows = f"{n_rows} rows" if isinstance(n_rows, int) else "its rows"
    out = []
    if licence == "unknown":
        out.append(f"the dataset card states no licence (license: unknown): the recordings' licence was not given; "
                   f"rebuild with `spearbench build-dataset ... --license ID --source-name NAME` before publishing {rows}")
    seamless = licence == SEAMLESS.license and SEAMLESS.name in text
    if repo_id == DEFAULT_REPO_ID and not seamless:
        out.append(f"{repo_id} is the name of the official SPEAR dataset (Meta's Seamless Interaction recordings), "
                   f"but this dataset ({rows}, licence {licence}) is not those recordings: pass --namespace YOUR_NAME "
                   "and/or --dataset-name NAME")
    return out


def upload(repos: Sequence[Repo], *, api: Any = None, private: bool = False) -> list[str]:
    """Upload each prepared folder: the dataset with :func:`spear_datasets.hub.push_dataset`,
    the Spaces with :func:`spear_metrics.results.hub.upload_folder` (gradio SDK); returns one
    URL per repository."""
    from spear_metrics.results.hub import hub_api, upload_folder

    from spear_datasets.hub import push_dataset

    api = hub_api(api)
    urls = []
    for r in repos:
        if r.repo_type == "dataset":  # build-dataset's own upload: a rebuilt dataset replaces the old shards
            urls.append(push_dataset(r.folder, r.repo_id, private=private, api=api,
                                     commit_message=f"spearbench publish: {r.repo_id}"))
        else:
            urls.append(upload_folder(r.folder, r.repo_id, repo_type="space", api=api, private=private,
                                      space_sdk="gradio", commit_message=f"spearbench publish: {r.repo_id}"))
    return urls


def publish(*, dataset: Path, namespace: str = "spearbench", dry_run: Path | None = None, api: Any = None,
            private: bool = False, warn: Any = None, **kwargs: Any) -> tuple[list[Repo], list[str]]:
    """Prepare every repository (:func:`prepare`) under ``dry_run`` (kept) or a temporary folder,
    and upload them unless ``dry_run``. Returns the repositories and their URLs (none in a dry run).
    ``warn(sentence)`` is called with each of :func:`dataset_warnings` once the folders are
    prepared, before anything is uploaded.

    Raises:
        PublishError: see :func:`prepare`.
        Exception: upload errors from huggingface_hub (callers print
            :func:`spear_metrics.results.hub.safe_error`).
    """
    def warned(repos: list[Repo]) -> list[Repo]:
        name = kwargs.get("dataset_name") or repos[0].repo_id.split("/", 1)[1]
        for w in dataset_warnings(Path(dataset), f"{namespace}/{name}") if warn else ():
            warn(w)
        return repos

    if dry_run is not None:
        return warned(prepare(Path(dry_run), dataset=Path(dataset), namespace=namespace, **kwargs)), []
    with tempfile.TemporaryDirectory(prefix="spearbench-publish-") as tmp:
        repos = warned(prepare(Path(tmp), dataset=Path(dataset), namespace=namespace, **kwargs))
        return repos, upload(repos, api=api, private=private)
