"""The Space folder assembled for deployment carries the spearbench wheel it imports."""

import subprocess
import sys
import zipfile

from conftest import REPO


def test_build_space_pins_the_wheel(tmp_path):
    out = tmp_path / "space"
    subprocess.run([sys.executable, str(REPO / "scripts" / "build_space.py"), "--out", str(out)], check=True, capture_output=True)
    (wheel,) = out.glob("spearbench-*.whl")
    assert zipfile.ZipFile(wheel).getinfo("spear_metrics/results.py").file_size > 0
    req = (out / "requirements.txt").read_text().splitlines()
    assert req[0] == f"./{wheel.name}" and "gradio>=5" in req
    assert (out / "app.py").read_text() == (REPO / "space" / "app.py").read_text()
    assert (out / "data" / "spear_benchmark.csv").is_file() and "app_file: app.py" in (out / "README.md").read_text()
