"""What the Space reads and offers: every file resolved (links followed) and served only inside
its source's folder; one refusal text for every refused path; only two API endpoints; download
tables bounded. On a results dataset scored from the real AMI stereo call."""

from __future__ import annotations

import importlib.util
import os
import shutil
import socket
import sys
import tempfile
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
from _spear_samples import make_samples  # noqa: E402

from conftest import REPO
from spear_metrics.space import samples, tables

SECRET = "TOP-SECRET-LINE: root:x:0:0"


def _app():
    spec = importlib.util.spec_from_file_location("spear_space_app_paths", REPO / "spear_metrics" / "space" / "app.py")
    app = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(app)
    return app


@pytest.fixture(scope="module")
def dataset(real_dir, tmp_path_factory):
    """A results dataset (scored with interruptions) with a report page, and a secret file
    outside it."""
    from spear_metrics.core.scoring import run_score
    from spear_metrics.results import write_results_dataset

    os.environ["GRADIO_ANALYTICS_ENABLED"] = "False"
    root = tmp_path_factory.mktemp("space_paths")
    md = make_samples(root)
    run_score(md["model"], "interruptions", root / "RESULTS", progress=False, n_resamples=0)
    (root / "RESULTS" / "report").mkdir()
    (root / "RESULTS" / "report" / "index.html").write_text("<h1>the real report</h1>")
    ds = write_results_dataset(root / "RESULTS", root / "ds", model_name="toy", metadata=md["model"])
    secret = root / "outside" / "secret.txt"
    secret.parent.mkdir()
    secret.write_text(SECRET)
    return {"root": root, "ds": ds, "secret": secret}


def _copy(ds: Path, to: Path) -> Path:
    shutil.copytree(ds, to, ignore=shutil.ignore_patterns(".work"))
    return to


def test_links_out_of_a_start_folder_are_never_read_or_served(dataset, tmp_path):
    """A report page linked to a file outside the folder (``/etc/passwd``, a secret), a linked
    summary or report folder: the dataset is refused with one line naming no server path; a
    link swapped in after loading is refused when the page is served (no frame, no download)."""
    cases = {"page_passwd": ("report/index.html", Path("/etc/passwd")),
             "page_secret": ("report/index.html", dataset["secret"]),
             "summary": ("summary.json", dataset["secret"]),
             "report_dir": ("report", dataset["secret"].parent)}
    folders = []
    for name, (rel, target) in cases.items():
        d = _copy(dataset["ds"], tmp_path / name)
        p = d / rel
        shutil.rmtree(p) if p.is_dir() else p.unlink()
        p.symlink_to(target)
        folders.append(d)
    swapped = _copy(dataset["ds"], tmp_path / "swapped")
    tables.set_sources([*map(str, folders), str(swapped)])
    loaded, errors = tables.load_sources(tables.POLICY.start_labels)
    assert [r.source for r in loaded] == ["local:swapped"]
    assert len(errors) == len(cases)
    for e in errors:
        assert "leads outside the dataset's folder" in e and str(tmp_path) not in e and "/etc" not in e, e
    for label in tables.POLICY.start_labels[:-1]:
        html, download = samples.report_view(tables.POLICY.start_labels, label)
        assert download is None and "root:" not in html and SECRET not in html

    html, download = samples.report_view(tables.POLICY.start_labels, "local:swapped")
    assert "the real report" in html and Path(download).read_text() == "<h1>the real report</h1>"
    page = swapped / "report" / "index.html"
    page.unlink()
    page.symlink_to(dataset["secret"])  # swapped in after the dataset was loaded
    html, download = samples.report_view(tables.POLICY.start_labels, "local:swapped")
    assert download is None and SECRET not in html and "has no report" in html


def test_every_refused_path_gets_the_same_words(dataset, tmp_path):
    """A path under a start folder that exists, one that does not, a sibling whose name starts
    with the start folder's, a path elsewhere, a traversal, a home path, a relative path, a
    label with a path tail: one refusal text, word for word; a message about a sibling folder is
    never rewritten as if it were the start folder."""
    from spear_metrics.results import SourcePolicy

    start = _copy(dataset["ds"], tmp_path / "res")
    sibling = tmp_path / "res2"
    sibling.mkdir()
    probes = [str(start / "data"), str(start / "missing"), str(start / "data" / ".." / ".."), str(sibling),
              str(tmp_path / "elsewhere"), "/etc", "../../..", "~/res", "res/data/x", "local:res/data",
              str(start) + "/", "./res"]
    policy = SourcePolicy([str(start)])
    _, errors = policy.load_many(probes)
    assert len(errors) == len(probes)
    assert len(set(errors)) == 1, errors
    assert str(tmp_path) not in errors[0] and "res" not in errors[0].split(":", 1)[0]
    msg = policy.public(f"cannot read {sibling}/summary.json")
    assert msg == "cannot read summary.json"  # the sibling is reduced like any path, not taken for local:res


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_only_the_two_documented_endpoints_and_bounded_table_files(dataset, tmp_path, monkeypatch):
    """The served app offers API clients ``/leaderboard`` and ``/sample`` only (no chained
    ``/refresh_*``); the download table is one file per content, at most a bounded number."""
    from gradio_client import Client

    app = _app()
    demo = app.build_app([str(dataset["ds"])])
    port = _free_port()
    demo.launch(server_name="127.0.0.1", server_port=port, prevent_thread_lock=True, quiet=True)
    try:
        api = Client(f"http://127.0.0.1:{port}", verbose=False).view_api(return_format="dict", print_info=False)
        assert sorted(api["named_endpoints"]) == ["/leaderboard", "/sample"]
        assert not api["unnamed_endpoints"]
    finally:
        demo.close()

    monkeypatch.setattr(tables, "CACHE", tmp_path / "cache")
    tmp_root = Path(tempfile.gettempdir())
    before = set(tmp_root.glob("spearbench_leaderboard_*"))
    rows, _ = tables.all_rows(tables.POLICY.start_labels)
    first = {tables.write_csv(rows) for _ in range(20)}
    assert len(first) == 1
    for k in range(40):  # 40 different tables (filters): the files stay bounded
        tables.write_csv(rows[: 1 + k % len(rows)] if k < len(rows) else list(reversed(rows[: k - len(rows) + 2])))
    made = set(tmp_root.glob("spearbench_leaderboard_*")) - before
    made |= set((tmp_path / "cache").glob("spearbench_leaderboard_*")) if (tmp_path / "cache").is_dir() else set()
    assert 1 <= len(made) <= 16, len(made)
