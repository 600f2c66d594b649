"""The Space folder assembled for deployment carries the spearbench wheel it imports."""

import subprocess
import sys
import zipfile

from conftest import REPO


def test_build_space_pins_the_wheel(tmp_path):
    out = tmp_path / "space"
    subprocess.run([sys.executable, str(REPO / "scripts" / "build_space.py"), "--out", str(out)], check=True,
                   capture_output=True, cwd=tmp_path)
    (wheel,) = out.glob("spearbench-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    assert "spear_metrics/results/validate.py" in names and "spear_metrics/space/data/spear_benchmark.csv" in names
    req = [line for line in (out / "requirements.txt").read_text().splitlines() if not line.startswith("#")]
    assert req[0] == f"./{wheel.name}" and "gradio==6.31.0" in req
    assert (out / "app.py").read_text() == (REPO / "spear_metrics" / "space" / "app.py").read_text()
    assert (out / "data" / "spear_benchmark.csv").is_file() and "app_file: app.py" in (out / "README.md").read_text()
