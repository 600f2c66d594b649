"""The documentation: the site builds with MkDocs in strict mode, its generated reference pages
are up to date, no Markdown file of the repository links outside it or to a missing file, and
the README's examples agree with what they show (test command, custom agent)."""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path
from urllib.parse import unquote

import numpy as np
import pytest

from conftest import REPO
from helpers import CONTEXT_END, QUESTION_END, row

#: Folders whose Markdown is not the repository's own (environments, build outputs).
SKIP_DIRS = {".git", ".venv", "venv", "node_modules", "site", "build", "dist", "__pycache__"}


def _gen_docs():
    spec = importlib.util.spec_from_file_location("gen_docs", REPO / "scripts" / "gen_docs.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def markdown_files() -> list[Path]:
    """Every Markdown file of the repository (README.md, docs/, metric cards, the Space's card...)."""
    out = []
    for dirpath, dirnames, filenames in os.walk(REPO):
        dirnames[:] = [d for d in dirnames if d not in SKIP_DIRS and not d.startswith(".") and not d.endswith(".egg-info")]
        out += [Path(dirpath) / f for f in filenames if f.endswith(".md")]
    return sorted(out)


_FENCE = re.compile(r"^([ \t]*)(```|~~~).*?^\1\2[ \t]*$", re.S | re.M)
_CODE_SPAN = re.compile(r"(`+)(?:(?!\1).)+?\1", re.S)
_INLINE_LINK = re.compile(r"!?\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
_REF_DEF = re.compile(r"^\s{0,3}\[[^\]]+\]:\s*<?(\S+?)>?(?:\s|$)", re.M)
_HTML_REF = re.compile(r"<(?:a|img)\b[^>]*?\b(?:href|src)=[\"']([^\"']+)[\"']", re.I)


def local_links(text: str) -> list[str]:
    """Link targets of Markdown ``text`` that are local paths (code blocks and code spans left
    out; URLs with a scheme, ``//host`` links and in-page ``#anchors`` are not local)."""
    text = _CODE_SPAN.sub("", _FENCE.sub("", text))
    targets = _INLINE_LINK.findall(text) + _REF_DEF.findall(text) + _HTML_REF.findall(text)
    return [t for t in targets if not re.match(r"^([a-zA-Z][a-zA-Z0-9+.-]*:|//|#)", t)]


def test_link_finder_sees_links_and_skips_code():
    text = ("[a](docs/x.md#y) ![i](img.png \"t\") [u](https://h/x) [p](#top) `[c](in/code.md)`\n"
            "```\n[d](in/fence.md)\n```\n[r]: ../shared/spec/S.md\n<a href=\"../up.md\">x</a>\n")  # not a read
    assert local_links(text) == ["docs/x.md#y", "img.png", "../shared/spec/S.md", "../up.md"]  # not a read


def test_markdown_links_stay_inside_the_repository_and_resolve():
    files = markdown_files()
    names = {f.relative_to(REPO).as_posix() for f in files}
    assert {"README.md", "docs/index.md", "docs/CONTRIBUTING.md", "docs/protocols/SPEAR_PROTOCOL.md",
            "spear_metrics/interruptions/README.md", "space/README.md"} <= names
    bad = []
    for f in files:
        text = f.read_text(encoding="utf-8")
        where = f.relative_to(REPO).as_posix()
        if "shared/spec" in text:
            bad.append(f"{where}: names shared/spec (the protocols are docs/protocols/)")
        for target in local_links(text):
            path = unquote(target.split("#", 1)[0].split("?", 1)[0])
            if not path:
                continue
            resolved = (REPO / path.lstrip("/")) if path.startswith("/") else (f.parent / path)
            resolved = Path(os.path.normpath(resolved))
            if not resolved.is_relative_to(REPO):
                bad.append(f"{where}: {target} points outside the repository")
            elif not resolved.exists():
                bad.append(f"{where}: {target} does not exist")
    assert not bad, "\n".join(bad)


def test_site_builds_in_strict_mode(tmp_path):
    """`mkdocs build --strict`: a page missing from the nav, a nav entry or link to a missing page
    or anchor, or a link out of docs/ fails the build."""
    site = tmp_path / "site"
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    proc = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "-f", str(REPO / "mkdocs.yml"),
                           "-d", str(site)], capture_output=True, text=True, env=env, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    for page in ("index.html", "getting-started/index.html", "protocols/SPEAR_PROTOCOL/index.html",
                 "reference/index.html", "reference/interruptions/index.html", "reference/full_duplex/index.html"):
        assert (site / page).is_file(), page
    html = (site / "reference" / "interruptions" / "index.html").read_text(encoding="utf-8")
    assert "vad_time_resolution" in html and "742.055" in html  # an option and the published human value


def test_reference_pages_are_up_to_date(tmp_path, monkeypatch):
    """Regenerated into a temporary folder, the reference pages equal the committed ones, and the
    Reference nav of mkdocs.yml is the generated one; a changed option is caught."""
    gen = _gen_docs()
    gen.write_reference(tmp_path)
    fresh = {p.name: p.read_text(encoding="utf-8") for p in (tmp_path / gen.REFERENCE).glob("*.md")}
    committed = {p.name: p.read_text(encoding="utf-8") for p in (REPO / gen.REFERENCE).glob("*.md")}
    assert sorted(fresh) == sorted(committed), "run scripts/gen_docs.py"
    stale = [name for name in fresh if fresh[name] != committed[name]]
    assert not stale, f"reference pages out of date (run scripts/gen_docs.py): {stale}"
    from spear_metrics.core.columns import metric_names

    assert set(fresh) == {"index.md", *(f"{m}.md" for m in metric_names())}
    yml = (REPO / "mkdocs.yml").read_text(encoding="utf-8")
    assert gen.splice_nav(yml, gen.nav_block()) == yml, "mkdocs.yml Reference nav out of date (run scripts/gen_docs.py)"
    # drift: an option's doc edited in a declaration makes the committed page stale
    from spear_metrics.interruptions.definition import Interruptions

    edited = tuple(o.__class__(**{**o.__dict__, "doc": o.doc + " (edited)"}) for o in Interruptions.option_schema)
    monkeypatch.setattr(Interruptions, "option_schema", edited)
    assert gen.write_reference(REPO, write=False) == ["docs/reference/interruptions.md"]


def test_readme_gives_the_ci_test_command():
    ci = (REPO / ".ci" / "run").read_text(encoding="utf-8")
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    command = ".venv/bin/python -m pytest"
    assert command in ci.splitlines() and f"\n{command}\n" in readme
    assert "bash scripts/setup.sh" in ci and "bash scripts/setup.sh" in readme
    assert len(readme.splitlines()) <= 150  # a few screens; the rest lives in docs/


def _agent_blocks() -> dict[str, str]:
    out = {}
    for name in ("README.md", "docs/running.md"):
        text = (REPO / name).read_text(encoding="utf-8")
        out[name] = next(b for b in re.findall(r"```python\n(.*?)```", text, re.S) if "class EchoAgent" in b)
    return out


@pytest.mark.parametrize("where", ["README.md", "docs/running.md"])
def test_custom_agent_examples_answer_with_text(where):
    """The documented custom agent returns its words (WER/CER need them as transcript_answer) and
    the question segment of the questioner's channel."""
    from spear_metrics.agents import GenerationConfig, validate_answer

    namespace: dict = {}
    exec(compile(_agent_blocks()[where], where, "exec"), namespace)
    agent = namespace["EchoAgent"](gap=0.5)
    audio = np.stack([np.full(16 * 16_000, 0.1, np.float32), np.full(16 * 16_000, 0.2, np.float32)])
    r = row("in.wav", "a.wav", None, transcript_question="MEO015: Menu, alright. FEE016: ... a little L_C_D_ display?")
    ans = agent.respond(audio, r, GenerationConfig())
    wav, sr = validate_answer(ans)
    assert ans.text == "... a little L_C_D_ display?"
    assert sr == 16_000 and wav.shape == (1, round(QUESTION_END * 16_000) - round(CONTEXT_END * 16_000))
    assert np.all(wav == np.float32(0.1))  # FEE016 is the first speaker of "FEE016|MEO015": channel 0
    assert ans.onset == pytest.approx(QUESTION_END + 0.5)
