"""spearbench as a user meets it: installed from its built wheel (not editable, the checkout off
``sys.path``), metric folders copied out of the checkout and loaded with ``evaluate.load``, the
light code paths (results, Space, publish) without torch, and ``spearbench publish --dry-run``
whose folders load (dataset, every metric module) and whose Space starts and serves the
leaderboard.

The environment reuses the installed dependencies: a fresh venv whose only link to them is a
``.pth`` line naming this interpreter's site-packages (a path line: the ``.pth`` files inside it,
e.g. an editable install's finder, are not run), with the wheel installed by pip ``--no-deps``.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import sysconfig
import textwrap
import time
import zipfile
from pathlib import Path

import pytest

from conftest import REPO

pytestmark = pytest.mark.slow


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def env(tmp_path_factory, real_dir):
    """The built wheel, a venv where only it provides spearbench, a scored run, a built dataset."""
    from _spear_samples import make_samples
    from test_hub_dataset import build_spear_source

    from spear_datasets.hub import build_hub_dataset
    from spear_metrics.core.scoring import run_score
    from spear_metrics.publish import build_wheel

    root = tmp_path_factory.mktemp("hub_ready")
    wheel = build_wheel(root / "dist", REPO)
    venv = root / "venv"
    subprocess.run([getattr(sys, "_base_executable", sys.executable), "-m", "venv", "--without-pip", str(venv)],
                   check=True, capture_output=True)
    py = venv / "bin" / "python"
    site = Path(subprocess.run([str(py), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                               check=True, capture_output=True, text=True).stdout.strip())
    (site / "_installed_deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    run_env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    run_env.update(PATH=f"{venv / 'bin'}:{os.environ.get('PATH', '/usr/bin:/bin')}", HF_HUB_OFFLINE="1",
                   HF_DATASETS_OFFLINE="1", HF_HOME=str(root / "hf"), GRADIO_ANALYTICS_ENABLED="False")
    subprocess.run([str(py), "-m", "pip", "install", "-q", "--no-deps", "--no-index", "--ignore-installed", str(wheel)],
                   check=True, capture_output=True, env=run_env, cwd=root)
    md = make_samples(root / "samples")
    run = root / "RESULTS_model"
    run_score(md["model"], "interruptions", run, progress=False)
    info = build_spear_source(real_dir, root / "spear_src", bad_rows=False)
    build_hub_dataset(info["source"], root / "hub", progress=False)
    return {"root": root, "wheel": wheel, "py": py, "site": site, "env": run_env, "run": run,
            "metadata": md["model"], "hub": root / "hub"}


def _script(env: dict, code: str, *, timeout: int = 300) -> dict:
    """Run ``code`` with the venv's python outside the checkout; it prints one JSON line last."""
    out = subprocess.run([str(env["py"]), "-c", textwrap.dedent(code)], cwd=env["root"], env=env["env"],
                         capture_output=True, text=True, timeout=timeout)
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_wheel_without_extras_needs_no_model_stack(env):
    meta = zipfile.ZipFile(env["wheel"]).read("spearbench-0.1.0.dist-info/METADATA").decode()
    base = [line.split(":", 1)[1].strip() for line in meta.splitlines()
            if line.startswith("Requires-Dist:") and "extra ==" not in line]
    assert base and not any(n.split(">")[0].split("=")[0].strip().lower() in
                            ("torch", "torchaudio", "transformers", "evaluate", "accelerate", "silero-vad")
                            for n in base), base
    assert any("torch" in line and 'extra == "score"' in line for line in meta.splitlines())


def test_installed_wheel_end_to_end(env, real_dir):
    """One pass over the installed wheel (processes run side by side to keep it short):
    metric folders copied out of the checkout load and compute; results and Space code run
    without importing torch; publish --dry-run folders load; the Space folder serves."""
    root = env["root"]
    for m in ("interruptions", "speech_quality"):
        shutil.copytree(REPO / "spear_metrics" / m, root / "copies" / m)
    # a stereo input clip (the one channel rule of every command)
    q, a = real_dir / "DERIVED__pyannote-audio__seriously_29-60s_stereo_L-FEE016_R-MEO015.wav", real_dir / "speechbrain__p226_002.wav"
    metrics = subprocess.Popen([str(env["py"]), "-c", textwrap.dedent(f"""
        import json, evaluate, spear_metrics
        kw = dict(audio_path=[{str(q)!r}], answer_audio_path=[{str(a)!r}], context_end_time=[10.0],
                  question_end_time=[12.0], answer_start_time=[0.5])
        out = {{"spear_metrics": spear_metrics.__file__}}
        r = evaluate.load({str(root / 'copies' / 'interruptions')!r}).compute(**kw)
        out["latency_ms"] = r["latency_ms"]
        r = evaluate.load({str(root / 'copies' / 'speech_quality')!r}).compute(
            **kw, transcript_answer=["P0002: Ask her to bring these things with her from the store."], mos="dnsmos")
        out.update(wer=r["WER_%"], wer_note=r.get("WER_note"), wer_norm=r["WER_norm_%"], utmos=r["UTMOS"],
                   note=r["UTMOS_note"], dnsmos=r["DNSMOS_OVRL"])
        print(json.dumps(out))
        """)], cwd=root, env=env["env"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        light = _script(env, f"""
            import json, sys
            import spear_metrics
            from spear_metrics.cli import main
            rc = main(["push-results", {str(env['run'])!r}, "--local-dir", "ds_model", "--model-name", "toy",
                       "--with-audio", "--metadata", {str(env['metadata'])!r}])
            from spear_metrics.results import load_results
            res = load_results("ds_model")
            from spear_metrics.space import app
            app.build_app(["ds_model"])
            rc2 = main(["publish", "--dataset", {str(env['hub'])!r}, "--dry-run", "OUT", "--wheel", {str(env['wheel'])!r}])
            light = sorted(m for m in ("torch", "transformers", "torchaudio", "silero_vad", "onnxruntime")
                           if m in sys.modules)
            import datasets, evaluate
            ds = datasets.load_dataset("OUT/datasets/spearbench-custom-data", "all", split="test", cache_dir="c")
            loaded = {{}}
            from pathlib import Path
            for p in sorted(Path("OUT/spaces").iterdir()):
                if (p / f"{{p.name}}.py").is_file():
                    loaded[p.name] = evaluate.load(str(p)).name
            print(json.dumps({{"spear_metrics": spear_metrics.__file__, "rc": [rc, rc2], "latency": res.summary["latency_ms"],
                              "model": res.model, "imported": light, "rows": ds.num_rows, "loaded": loaded,
                              "spaces": sorted(p.name for p in Path("OUT/spaces").iterdir())}}))
            """)
        assert light["spear_metrics"].startswith(str(env["site"])), light["spear_metrics"]
        assert light["rc"] == [0, 0] and light["model"] == "toy" and light["latency"] is not None
        assert light["imported"] == []  # results, the Space and publish never import torch or a model library
        assert light["rows"] == 4
        names = ["distributional", "dynamic_superb", "emotions", "explainable_features", "full_duplex", "interruptions",
                 "language_dialect", "speech_quality", "speechrole", "stances", "turn_taking"]
        assert sorted(light["loaded"]) == names and light["spaces"] == sorted([*names, "leaderboard"])
        out = root / "OUT"
        for name in names + ["leaderboard"]:
            req = (out / "spaces" / name / "requirements.txt").read_text().splitlines()
            assert f"./{env['wheel'].name}" in "\n".join(req) and (out / "spaces" / name / env["wheel"].name).is_file()
        assert "./spearbench-0.1.0-py3-none-any.whl[score,quality]" in (out / "spaces/speech_quality/requirements.txt").read_text()
        _leaderboard_space_serves(env, out / "spaces" / "leaderboard", root / "ds_model")
    finally:
        stdout, stderr = metrics.communicate(timeout=300)
    assert metrics.returncode == 0, stderr[-3000:]
    got = json.loads(stdout.strip().splitlines()[-1])
    assert got["spear_metrics"].startswith(str(env["site"])), got["spear_metrics"]
    assert got["latency_ms"] > 500  # 0.5 s onset + the VCTK clip's leading silence
    assert got["wer_norm"] is not None and got["wer_norm"] < 50  # the answer is that sentence
    assert got["wer"] is None and got["wer_note"]  # SPEAR's WER_% needs SPEAR's two ASR systems
    assert got["utmos"] is None and "UTMOS" in got["note"] and 1 <= got["dnsmos"] <= 5


def _leaderboard_space_serves(env: dict, folder: Path, results: Path) -> None:
    """``python app.py`` in the published Space folder starts and serves the leaderboard API."""
    from gradio_client import Client

    port = _free_port()
    space_env = dict(env["env"], GRADIO_SERVER_NAME="127.0.0.1", GRADIO_SERVER_PORT=str(port),
                     SPEARBENCH_RESULTS=str(results))
    proc = subprocess.Popen([str(env["py"]), "app.py"], cwd=folder, env=space_env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.time() + 120
        while True:
            assert proc.poll() is None, proc.stderr.read()[-3000:]
            try:
                client = Client(f"http://127.0.0.1:{port}", verbose=False)
                break
            except Exception:
                assert time.time() < deadline, "the Space did not start within 120 s"
                time.sleep(1)
        table = client.predict(api_name="/leaderboard")
        rows = {r[0] + "|" + r[1]: dict(zip(table["headers"], r)) for r in table["data"]}
        assert rows["human|published"]["Interruptions · latency_ms [ms] ≈human"] == "742.055"
        assert "toy|local:ds_model" in rows and table["errors"] == []
    finally:
        proc.terminate()
        proc.wait(timeout=30)
