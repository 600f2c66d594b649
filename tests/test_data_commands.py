"""``spearbench data``: SPEAR's package downloaded over loopback HTTP (resumed after a broken
transfer, sha256-checked), installed into the upstream layout and checked against the published
split sizes; the same layout cut from a miniature Seamless Interaction copy through the selection
protocol, membership taken from the package's lists.

The miniature Seamless copy is built from the real AMI stereo dialogue of the fixtures: one 48 kHz
WAV per participant (its channel) and a transcript JSON of that participant's turns (the fixture's
RTTM-derived turns; FEE016's long turn given a closing "?" so that it is a question)."""

from __future__ import annotations

import contextlib
import json
import re
import shlex
import time
import zipfile
from http.server import BaseHTTPRequestHandler
from pathlib import Path

import numpy as np
import pytest

from conftest import STEREO_DIALOGUE
from helpers import FakeHub, LoopbackHTTP, hub_env
from spear_datasets.identity import DataCheckError
from spear_datasets.sources.download import DownloadError, http_download, sha256_file
from spear_datasets.sources.package import check_layout, inputs_dir, install_package
from spear_datasets.sources.seamless import build_from_seamless, package_members

CONVERSATIONS = {"improvised": [("V00_S0001_I00000001", "P0001A", "P0002A"), ("V00_S0001_I00000002", "P0003", "P0004")],
                 "naturalistic": [("V01_S0002_I00000003", "P0005", "P0006")]}


def _seamless_copy(root: Path) -> Path:
    """``root/<subset>/test/<conv>/<conv>_<pid>.wav`` (48 kHz mono) + transcript JSON per participant."""
    import soundfile as sf
    from scipy.signal import resample_poly

    x, sr = sf.read(STEREO_DIALOGUE, dtype="float32")  # (n, 2) at 16 kHz
    turns = json.loads(STEREO_DIALOGUE.with_suffix(".json").read_text())["turns"]
    for subset, convs in CONVERSATIONS.items():
        for conv, p_left, p_right in convs:
            folder = root / subset / "test" / "0000" / conv
            folder.mkdir(parents=True)
            for ch, pid in enumerate((p_left, p_right)):
                sf.write(folder / f"{conv}_{pid}.wav", resample_poly(x[:, ch], 3, 1).astype(np.float32), 3 * sr,
                         subtype="PCM_16")
                mine = [{"start": t["start"], "end": t["end"],
                         "transcript": t["text"].rstrip(".") + "?" if t["start"] == 0.78 else t["text"], "words": []}
                        for t in turns if t["channel"] == ch]
                # the release's record form ({"metadata:transcript": [...]}) for the naturalistic copy
                record = {"id": f"{conv}_{pid}", "metadata:transcript": mine} if subset == "naturalistic" else mine
                (folder / f"{conv}_{pid}.json").write_text(json.dumps(record))
    return root


@pytest.fixture(scope="module")
def seamless(tmp_path_factory):
    return _seamless_copy(tmp_path_factory.mktemp("seamless"))


@pytest.fixture(scope="module")
def package(seamless, tmp_path_factory):
    """SPEAR's package in miniature: ``spear_package/test/<subset>/{metadata.csv, audios/, answers/}``
    zipped, listing the first improvised conversation's clip and the naturalistic one."""
    tmp = tmp_path_factory.mktemp("pkg")
    n = build_from_seamless(seamless, tmp / "full", split="test")
    assert {k: v["rows"] for k, v in n.items()} == {"improvised": 2, "naturalistic": 1}  # one question per conversation
    src = inputs_dir(tmp / "full") / "test"
    imp = src / "improvised" / "metadata.csv"
    lines = imp.read_text().splitlines()
    imp.write_text("\n".join([lines[0]] + [ln for ln in lines[1:] if "V00_S0001_I00000001" in ln]) + "\n")
    archive = tmp / "spear_package.zip"
    with zipfile.ZipFile(archive, "w") as z:
        for f in sorted(src.rglob("*")):
            # SPEAR's package holds no record of this tool's (.work/): only the inputs
            if f.is_file() and "V00_S0001_I00000002" not in f.name and ".work" not in f.relative_to(src).parts:
                z.write(f, Path("spear_package") / "test" / f.relative_to(src))
    return archive


class _RangeServer(LoopbackHTTP):
    """Serves one file with Range support; the first full request is cut after half the bytes.
    ``wrong_offset``: every ``Range: bytes=N-`` is answered ``206`` with the file from byte 0
    (``Content-Range: bytes 0-...``), a server that ignores the offset asked for but says so."""

    def __init__(self, data: bytes, wrong_offset: bool = False):
        self.data, self.requests = data, []
        outer = self

        class H(BaseHTTPRequestHandler):
            def log_message(self, *a):
                pass

            def do_GET(self):
                rng = self.headers.get("Range")
                outer.requests.append(rng)
                if rng:
                    start = 0 if wrong_offset else int(rng.split("=")[1].split("-")[0])
                    body = outer.data[start:]
                    self.send_response(206)
                    self.send_header("Content-Range", f"bytes {start}-{len(outer.data) - 1}/{len(outer.data)}")
                else:
                    body = outer.data
                    self.send_response(200)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                if not rng and len(outer.requests) == 1:  # a broken transfer: half, then the connection drops
                    self.wfile.write(body[: len(body) // 2])
                    self.wfile.flush()
                    self.close_connection = True
                    return
                self.wfile.write(body)

        self._serve(H, "/spear_package.zip")


def test_download_resumes_and_checks_sha256(package, tmp_path):
    data = package.read_bytes()
    want = sha256_file(package)
    with _RangeServer(data) as srv:
        got = http_download(srv.url, tmp_path / "pkg.zip", sha256=want, backoff_s=0.0, timeout_s=30.0)
        assert got == want and (tmp_path / "pkg.zip").read_bytes() == data
        # resumed from the bytes kept, not restarted: the second request asks for the rest only
        assert srv.requests[0] is None and srv.requests[1].startswith("bytes=") and len(srv.requests) == 2
        assert 0 < int(srv.requests[1][6:-1]) <= len(data) // 2
        with pytest.raises(DownloadError, match="sha256 mismatch"):
            http_download(srv.url, tmp_path / "bad.zip", sha256="0" * 64, backoff_s=0.0, timeout_s=30.0)
    assert not (tmp_path / "bad.zip").exists() and not (tmp_path / "bad.zip.part").exists()


def test_install_and_count_check(package, tmp_path, capsys):
    from spear_metrics.cli import main

    target = install_package(package, tmp_path / "root")
    assert (target / "test" / "improvised" / "metadata.csv").is_file()
    assert check_layout(tmp_path / "root", counts=False) == {"test": {"improvised": 1, "naturalistic": 1}}
    with pytest.raises(DataCheckError, match=r"improvised 1, naturalistic 1 \(2\); SPEAR's test split has "
                                             r"improvised 994, naturalistic 1731 \(2725\)"):
        check_layout(tmp_path / "root")
    assert main(["data", "check", str(tmp_path / "root")]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("spearbench data: ") and "SPEAR's test split has" in err and "\n" not in err
    # the files are all there, only the counts differ: the line ends with the command that accepts them,
    # which runs as printed
    head, hint = err.split("; to use these rows as custom data: ")
    assert head.endswith("(2725)") and hint.endswith(" --no-count-check")
    assert main(shlex.split(hint)[1:]) == 0
    assert "labelled custom data" in capsys.readouterr().out
    # a clip the metadata names but the package lacks is a schema failure
    (target / "test" / "naturalistic" / "audios").rename(target / "test" / "naturalistic" / "gone")
    with pytest.raises(DataCheckError, match="is not there"):
        check_layout(tmp_path / "root", counts=False)
    assert main(["data", "check", str(tmp_path / "root")]) == 2  # a missing clip: no custom-data hint
    err = capsys.readouterr().err
    assert "is not there" in err and "--no-count-check" not in err
    with pytest.raises(DataCheckError, match="already exists"):
        install_package(package, tmp_path / "root")
    evil = tmp_path / "evil.zip"
    with zipfile.ZipFile(evil, "w") as z:
        z.writestr("../outside.txt", "x")
    with pytest.raises(DataCheckError, match="outside the target"):
        install_package(evil, tmp_path / "r3")
    assert not (tmp_path / "outside.txt").exists()


def test_seamless_cut_keeps_the_package_members(seamless, package, tmp_path):
    pkg_root = tmp_path / "pkg"
    install_package(package, pkg_root)
    members = {s: package_members(inputs_dir(pkg_root) / "test" / s / "metadata.csv") for s in CONVERSATIONS}
    n = build_from_seamless(seamless, tmp_path / "root", split="test", members=members)
    assert {k: v["rows"] for k, v in n.items()} == {"improvised": 1, "naturalistic": 1}  # the unlisted one is left out
    got = check_layout(tmp_path / "root", counts=False)
    assert got == {"test": {"improvised": 1, "naturalistic": 1}}
    imp = inputs_dir(tmp_path / "root") / "test" / "improvised"
    # only the listed clip is written (never written, then removed)
    assert sorted(p.name for p in (imp / "audios").iterdir()) == ["V00_S0001_I00000001_P0001A_P0002A_0.wav"]
    # the cut clip: the question runs from FEE016's turn start (0.78 s) to its end (15.48 s), 16 kHz stereo
    import soundfile as sf

    info = sf.info(imp / "audios" / "V00_S0001_I00000001_P0001A_P0002A_0.wav")
    assert info.samplerate == 16000 and info.channels == 2 and info.frames == round(15.48 * 16000) - round(0.78 * 16000)
    with pytest.raises(DataCheckError, match="missing"):
        build_from_seamless(seamless, tmp_path / "r2", split="dev")


def test_seamless_into_an_installed_package_root_is_refused_in_one_line(seamless, package, tmp_path, capsys):
    """`data seamless --root` of a `data install`: the installed inputs are not the command's (no
    record), so it is refused, in one line that says where they came from, and nothing is written."""
    from spear_metrics.cli import main

    root = tmp_path / "root"
    install_package(package, root)
    before = sorted(p.relative_to(root) for p in root.rglob("*"))
    assert main(["data", "seamless", "--seamless", str(seamless), "--root", str(root), "--no-progress"]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "already holds inputs that data seamless did not cut" in err and "data install" in err
    assert sorted(p.relative_to(root) for p in root.rglob("*")) == before


def _clone_conversation(subset_dir: Path, conv: str, new: str) -> dict[str, Path]:
    """A copy of conversation ``conv`` under the id ``new`` (same participants): ``{pid: wav}``."""
    import shutil

    src = next(p for p in subset_dir.rglob(conv) if p.is_dir())
    dst = src.parent / new
    dst.mkdir()
    out = {}
    for f in src.iterdir():
        g = dst / f.name.replace(conv, new)
        shutil.copy(f, g)
        if g.suffix == ".wav":
            out[g.stem.rsplit("_", 1)[1]] = g
    return out


def test_seamless_cut_fails_bad_conversations_alone_and_resumes(seamless, tmp_path, capsys):
    """Three bad conversations beside the two good improvised ones: an undecodable WAV, a missing
    transcript, a WAV cut short before the turns the clip needs. Each fails alone with its reason;
    the good ones are cut. A rerun cuts nothing (the failed ones stay failed without
    --retry-failed); a clip removed since is cut again; --retry-failed retries the failed ones only."""
    import shutil

    import soundfile as sf

    from spear_metrics.cli import main

    copy = tmp_path / "seamless"
    shutil.copytree(seamless, copy)
    imp = copy / "improvised" / "test"
    corrupt = _clone_conversation(imp, "V00_S0001_I00000002", "V00_S0001_I00000007")
    corrupt["P0003"].write_bytes(b"RIFF0000WAVEnot a wav")
    no_json = _clone_conversation(imp, "V00_S0001_I00000002", "V00_S0001_I00000008")
    no_json["P0004"].with_suffix(".json").unlink()
    short = _clone_conversation(imp, "V00_S0001_I00000002", "V00_S0001_I00000009")
    x, sr = sf.read(short["P0003"], dtype="float32")
    sf.write(short["P0003"], x[: 2 * sr], sr, subtype="PCM_16")  # 2 s of a 31 s recording
    root = tmp_path / "root"
    argv = ["data", "seamless", "--seamless", str(copy), "--root", str(root), "--no-count-check", "--no-progress"]
    assert main(argv) == 0
    out, err = capsys.readouterr()
    assert "improvised: 2 rows from 5 conversations (2 cut this run), 3 failed" in out
    assert "naturalistic: 1 rows from 1 conversations (1 cut this run), 0 failed" in out
    failed = dict(line.split(": ", 1) for line in err.splitlines() if line.startswith("  failed conversation "))
    assert sorted(failed) == [f"  failed conversation V00_S0001_I0000000{k}" for k in (7, 8, 9)]
    assert failed["  failed conversation V00_S0001_I00000007"].startswith("audio file is truncated: no data chunk")
    assert failed["  failed conversation V00_S0001_I00000008"].startswith("P0004: no transcript JSON beside its WAV")
    assert "P0003's WAV ends at 2.00 s, before the turn" in failed["  failed conversation V00_S0001_I00000009"]
    dest = inputs_dir(root) / "test" / "improvised"
    logged = [json.loads(x) for x in (dest / ".work" / "failures.jsonl").read_text().splitlines()]
    assert [f["conversation"] for f in logged] == [f"V00_S0001_I0000000{k}" for k in (7, 8, 9)]
    assert check_layout(root, counts=False) == {"test": {"improvised": 2, "naturalistic": 1}}
    assert not any("I00000007" in p.name or "I00000009" in p.name for p in dest.rglob("*.wav"))  # nothing half-cut
    clips = {p: p.stat().st_mtime_ns for p in dest.rglob("*.wav")}
    metadata = (dest / "metadata.csv").read_text()
    # a rerun: every conversation has its record; nothing is cut again, the failed ones stay failed
    assert main(argv) == 0
    out, err = capsys.readouterr()
    assert "improvised: 2 rows from 5 conversations (0 cut this run, 2 done before), 3 failed" in out
    assert {p: p.stat().st_mtime_ns for p in dest.rglob("*.wav")} == clips
    assert (dest / "metadata.csv").read_text() == metadata
    # a clip removed since its conversation finished: that conversation (only) is cut again
    gone = dest / "audios" / "V00_S0001_I00000002_P0003_P0004_0.wav"
    gone.unlink()
    assert main(argv) == 0
    assert "(1 cut this run, 1 done before), 3 failed" in capsys.readouterr().out
    assert gone.is_file() and all(p.stat().st_mtime_ns == t for p, t in clips.items() if "I00000002" not in p.name)
    # the corrupt WAV replaced by a good one: --retry-failed cuts it; the two others fail again
    shutil.copy(next(imp.rglob("V00_S0001_I00000002_P0003.wav")), corrupt["P0003"])
    assert main(argv + ["--retry-failed"]) == 0
    out = capsys.readouterr().out
    assert "improvised: 3 rows from 5 conversations (1 cut this run, 2 done before), 2 failed" in out
    assert check_layout(root, counts=False) == {"test": {"improvised": 3, "naturalistic": 1}}
    # a rerun with other package members is refused in one line (the folder holds another cut)
    members = tmp_path / "pkg"
    shutil.copytree(inputs_dir(root), inputs_dir(members))
    assert main(argv + ["--package", str(members)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "with other settings" in err[0]


def test_seamless_turns_with_unusable_times_fail_their_conversation(seamless, tmp_path, capsys):
    """A transcript segment with text whose start is not a number, or NaN, fails its conversation
    with the segment named (it was skipped, and the question it held vanished without a word: the
    conversation logged ok with no rows); the good conversations are still cut."""
    import shutil

    from spear_metrics.cli import main

    copy = tmp_path / "seamless"
    shutil.copytree(seamless, copy)
    imp = copy / "improvised" / "test"
    for new, bad in (("V00_S0001_I00000021", "x"), ("V00_S0001_I00000022", float("nan"))):
        j = _clone_conversation(imp, "V00_S0001_I00000002", new)["P0003"].with_suffix(".json")
        segments = json.loads(j.read_text())
        segments[0]["start"] = bad
        j.write_text(json.dumps(segments))
    root = tmp_path / "root"
    assert main(["data", "seamless", "--seamless", str(copy), "--root", str(root), "--no-count-check",
                 "--no-progress"]) == 0
    out, err = capsys.readouterr()
    assert "improvised: 2 rows from 4 conversations (2 cut this run), 2 failed" in out
    failed = dict(line.split(": ", 1) for line in err.splitlines() if line.startswith("  failed conversation "))
    assert failed["  failed conversation V00_S0001_I00000021"] == \
        "V00_S0001_I00000021_P0003.json: segment 0 ('Actually that just raises a point, I won'): start is not a number: 'x'"
    assert failed["  failed conversation V00_S0001_I00000022"].endswith("start is not finite: nan")


def test_seamless_cut_with_only_bad_conversations_exits_2_in_one_line(seamless, tmp_path, capsys):
    """A subset whose every conversation fails: nothing to write, one line naming the failures' file."""
    import shutil

    from spear_metrics.cli import main

    copy = tmp_path / "seamless"
    shutil.copytree(seamless, copy)
    for wav in (copy / "naturalistic" / "test").rglob("*.wav"):
        wav.write_bytes(b"RIFF0000WAVEnot a wav")
    rc = main(["data", "seamless", "--seamless", str(copy), "--root", str(tmp_path / "root"), "--no-count-check",
               "--no-progress"])
    out, err = capsys.readouterr()
    last = err.strip().splitlines()[-1]
    assert rc == 2 and last.startswith("spearbench data: ") and "no sample kept" in last and "failures.jsonl" in last
    assert "unexpected" not in err and "naturalistic: " not in out


def test_seamless_from_hub_downloads_the_split_then_cuts(seamless, tmp_path, monkeypatch, capsys):
    """--from-hub through the real Hub client (in the deadline's child process) against a loopback
    Hub serving the miniature copy: only <subset>/test/ is fetched, then cut as from a local copy."""
    from spear_metrics.cli import main

    files = {p.relative_to(seamless).as_posix(): p.read_bytes() for p in sorted(seamless.rglob("*")) if p.is_file()}
    files["improvised/dev/0000/V09_S0009_I00000009/V09_S0009_I00000009_P0009.json"] = b"[]"  # another split
    with FakeHub("me/seamless-mini", files) as hub:
        hub_env(monkeypatch, tmp_path, hub.url)
        local = tmp_path / "local"
        assert main(["data", "seamless", "--from-hub", "me/seamless-mini", "--seamless", str(local), "--root",
                     str(tmp_path / "root"), "--no-count-check", "--no-progress", "--deadline-s", "300"]) == 0
    got = {p.relative_to(local).as_posix() for p in local.rglob("*") if p.is_file() and ".cache" not in p.parts}
    assert got == {f for f in files if "/test/" in f}  # the test split only
    assert check_layout(tmp_path / "root", counts=False) == {"test": {"improvised": 2, "naturalistic": 1}}
    assert "improvised: 2 rows from 2 conversations" in capsys.readouterr().out


def test_a_hub_download_that_never_ends_is_cut_at_its_total_deadline(tmp_path, monkeypatch, capsys):
    """A Hub server that trickles a file one byte every 0.1 s until it is closed (every read in time,
    so the client's own per-read limits never fire): --deadline-s ends the command, one line, exit 2."""
    from spear_metrics.cli import main

    with FakeHub("me/slow", {"improvised/test/x/V00_S0001_I00000001_P0001.wav": b"\0" * 1_000_000}, trickle=True) as hub:
        hub_env(monkeypatch, tmp_path, hub.url)
        rc = main(["data", "seamless", "--from-hub", "me/slow", "--seamless", str(tmp_path / "local"), "--root",
                   str(tmp_path / "root"), "--no-progress", "--deadline-s", "4"])
        err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1, err
    assert err[0].startswith("spearbench data: me/slow: the Hub download ran past its 4 s deadline")
    assert "run again to resume" in err[0]
    assert not (tmp_path / "root").exists()  # nothing was cut


def test_a_range_answer_from_the_wrong_offset_restarts_the_file(package, tmp_path):
    """Appending a 206 body that starts at byte 0 to the half already kept would give a file of
    1.5x the bytes; the answer's Content-Range start is checked against the offset asked for, the
    partial file is dropped and fetched again whole (no sha256 given: nothing else would catch it)."""
    data = package.read_bytes()
    with _RangeServer(data, wrong_offset=True) as srv:
        got = http_download(srv.url, tmp_path / "pkg.zip", backoff_s=0.0, timeout_s=30.0)
    assert (tmp_path / "pkg.zip").read_bytes() == data and got == sha256_file(package)
    assert srv.requests[0] is None and srv.requests[1].startswith("bytes=") and srv.requests[2] is None


class _TrickleServer(LoopbackHTTP):
    """Declares ``n`` bytes and sends them one 4 KiB block at a time, ``pause_s`` apart (never done
    within a short deadline; each read comes well within a read's time limit)."""

    def __init__(self, n: int = 10_000_000, pause_s: float = 0.2):
        class H(BaseHTTPRequestHandler):
            def log_message(self, *a):
                pass

            def do_GET(self):
                self.send_response(200)
                self.send_header("Content-Length", str(n))
                self.end_headers()
                with contextlib.suppress(OSError):
                    for _ in range(n // 4096):
                        self.wfile.write(b"x" * 4096)
                        self.wfile.flush()
                        time.sleep(pause_s)

        self._serve(H, "/spear_package.zip")


def test_a_download_past_its_deadline_says_the_bytes_it_kept(tmp_path):
    """A server trickling a file: past ``deadline_s`` the download stops in one line that counts the
    bytes kept in the .part file, exactly (it counted the block received at the deadline that was
    never written), and a rerun resumes from them."""
    with _TrickleServer() as srv:
        with pytest.raises(DownloadError, match="deadline") as e:
            http_download(srv.url, tmp_path / "pkg.zip", timeout_s=30.0, deadline_s=1.0)
    kept = int(re.search(r"\((\d+) bytes kept in pkg.zip.part", str(e.value)).group(1))
    assert kept > 0 and kept == (tmp_path / "pkg.zip.part").stat().st_size


@pytest.mark.parametrize("damage", ["bad_crc", "truncated_tar_gz"])
def test_a_damaged_archive_is_a_one_line_refusal(damage, tmp_path, capsys):
    """A zip member whose CRC does not match its bytes, or a .tar.gz cut in half: exit 2 with the
    archive's name and what is wrong (was exit 1, 'unexpected error')."""
    import io
    import tarfile

    from spear_metrics.cli import main

    a = tmp_path / ("p.zip" if damage == "bad_crc" else "p.tar.gz")
    if damage == "bad_crc":
        with zipfile.ZipFile(a, "w") as z:
            z.writestr("test/improvised/metadata.csv", "a,b\n1,2\n")
        b = bytearray(a.read_bytes())
        for sig, at in ((b"PK\x03\x04", 14), (b"PK\x01\x02", 16)):  # the CRC-32 field of both headers
            b[b.find(sig) + at] ^= 0xFF
        a.write_bytes(bytes(b))
    else:
        buf = io.BytesIO()
        payload = np.random.default_rng(0).integers(0, 256, 200_000, dtype=np.uint8).tobytes()  # incompressible
        with tarfile.open(fileobj=buf, mode="w:gz") as t:
            ti = tarfile.TarInfo("test/improvised/audios/a.wav")
            ti.size = len(payload)
            t.addfile(ti, io.BytesIO(payload))
        a.write_bytes(buf.getvalue()[: len(buf.getvalue()) // 2])
    assert main(["data", "install", str(a), "--root", str(tmp_path / "root")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and f"{a.name}: damaged archive" in err[0]
    assert not (tmp_path / "root" / ".spearbench-unpack").exists()


@pytest.mark.parametrize("url", ["ftp://127.0.0.1/spear_package.zip", "ht!tp://127.0.0.1/spear_package.zip"])
def test_a_url_no_attempt_can_fetch_is_refused_at_once(url, tmp_path):
    """A URL httpx cannot request at all (another scheme, a mangled one) was retried with backoff
    like a broken connection (6 attempts, 31 s by default); it is refused on the first attempt."""
    with pytest.raises(DownloadError, match="is not a URL this can download"):
        http_download(url, tmp_path / "pkg.zip", retries=5, backoff_s=3600.0, deadline_s=1.0)
    assert not (tmp_path / "pkg.zip").exists()


def test_check_of_a_folder_without_the_layout_says_so(tmp_path, capsys):
    """`data check` of a folder that holds no SPEAR layout named a metadata file deep inside a layout
    it never found (`ROOT/inputs/test/improvised/metadata.csv: missing`), a path the documented
    layout (`ROOT/data/seamless_2t_2s_questions/inputs/`) does not even have; it says what it
    looked for, and a folder that does not exist is said to be missing."""
    from spear_metrics.cli import main

    (tmp_path / "empty").mkdir()
    assert main(["data", "check", str(tmp_path / "empty")]) == 2
    err = capsys.readouterr().err.strip()
    assert err == (f"spearbench data: {tmp_path / 'empty'}: holds neither data/seamless_2t_2s_questions/inputs/ nor "
                   "inputs/ (give the --root that 'data install' or 'data seamless' wrote)")
    assert main(["data", "check", str(tmp_path / "nowhere")]) == 2
    assert capsys.readouterr().err.strip().startswith(f"spearbench data: {tmp_path / 'nowhere'}: no such folder (")
    (tmp_path / "empty" / "data" / "seamless_2t_2s_questions" / "inputs").mkdir(parents=True)  # the layout, no split
    with pytest.raises(DataCheckError, match=r"inputs/test/improvised/metadata\.csv: missing"):
        check_layout(tmp_path / "empty")


def test_a_deadline_reached_between_attempts_says_what_failed(tmp_path):
    """A server that refuses every connection ended in `the download ran past its N s deadline`
    alone: the cause (a refused connection, not a slow transfer) was left out. The last attempt's
    error is said."""
    import socket

    with socket.socket() as s:  # a port nothing listens on: every connection is refused
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with pytest.raises(DownloadError, match=r"ran past its 1 s deadline \(last attempt: ConnectError: "):
        http_download(f"http://127.0.0.1:{port}/pkg.zip", tmp_path / "pkg.zip", retries=5, backoff_s=3600.0,
                      deadline_s=1.0)
    assert not (tmp_path / "pkg.zip").exists()
