"""The page primitives of SPEARBench's HTML reports: numbers and text as the page writes them
(:func:`fmt`, :func:`fmt_p`, :func:`_e`), a summary value with its interval and ``n`` or why there is
none (:func:`value_cell`, :class:`Notes`), the page being written with its tables and embedded
figures (:class:`Page`, :class:`Figure`), its style sheet (:data:`CSS`) and the page written
into its report folder (:func:`write_page`). The SPEAR report's
sections are :mod:`spear_metrics.reports.html`.
"""

from __future__ import annotations

import base64
import html
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Optional, Sequence

from spear_metrics.reports import plots
from spear_metrics.reports.runs import RunData


# ------------------------------------------------------------------------------------------- text


def fmt(v: Any, digits: int = 3) -> str:
    """A number for the page (never "nan": a missing value is "-")."""
    from spear_metrics.core.stats import as_number

    x = as_number(v)
    if x is None:
        return "-"
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        return str(v)
    if x != 0 and (abs(x) < 10 ** -digits or abs(x) >= 1e6):
        return f"{x:.{digits}e}"
    return f"{x:.{digits}f}"


def fmt_p(p: Any, floor: Any = None) -> str:
    """A p-value for the page: 3 decimals; a bootstrap p at its floor (no resample on the other
    side of 0) as ``≤ floor``; ``-`` when there is none."""
    from spear_metrics.core.stats import as_number

    x, f = as_number(p), as_number(floor)
    if x is None:
        return "-"
    if f is not None and x <= f:
        return f"&le; {f:.3g}"
    return "&lt; 0.001" if x < 0.001 else f"{x:.3f}"


def _e(s: Any) -> str:
    """Text for the page: escaped, absolute local paths reduced to their public form
    (:func:`spear_metrics.results.public_text`: a report travels with a results dataset)."""
    from spear_metrics.results import public_text

    return html.escape(public_text(str(s)) or "", quote=True)


def why_missing(summary: dict[str, Any], key: str, dim: str, scored: bool) -> str:
    """Why a run has no value for ``key``: its note, ``n = 0``, or that it was not scored."""
    if not summary:
        return "no summary.json"
    if not scored:
        return "not scored in this run"
    if key not in summary:
        return "not in summary.json (missing key)"
    from spear_metrics.core.summary import null_reason

    return null_reason(summary, key, dim)


class Notes:
    """The reasons of one table, each written once: a cell shows ``no value (note k)`` and the
    numbered notes follow the table (:meth:`html`)."""

    def __init__(self) -> None:
        self.texts: list[str] = []

    def ref(self, text: str) -> str:
        """The cell for a value that does not exist because of ``text``."""
        if text not in self.texts:
            self.texts.append(text)
        k = self.texts.index(text) + 1
        return f'<span class="why" title="{_e(text)}">no value (note {k})</span>'

    def html(self) -> str:
        if not self.texts:
            return ""
        items = "".join(f"<li>{_e(t)}</li>" for t in self.texts)
        return f'<ol class="notes">{items}</ol>'


def value_cell(run: RunData | None, key: str, dim: str, notes: Notes | None = None) -> str:
    """``value [lo, hi] n = N`` of ``key`` in ``run``'s summary, or why there is none (through
    ``notes`` when given: each reason once per table)."""
    if run is None:
        return '<span class="why">no run given</span>'
    s = run.summary
    scored = dim in (s.get("metrics") or [])
    v = s.get(key) if scored else None
    from spear_metrics.core.stats import as_number

    if as_number(v) is None or isinstance(v, bool):
        why = why_missing(s, key, dim, scored)
        return notes.ref(why) if notes is not None else f'<span class="why">{_e(why)}</span>'
    ci = s.get(f"{key}_ci95")
    n = s.get(f"{key}_n")
    txt = fmt(v)
    from spear_metrics.core.summary import few_events, interval_unit

    if isinstance(ci, list) and len(ci) == 2 and None not in ci:
        txt += f' <span class="ci">[{fmt(ci[0])}, {fmt(ci[1])}] {_e(interval_unit(s))}</span>'
    elif f"{key}_ci95" in s:
        why = (s.get("bootstrap") or {}).get("note")
        txt += f' <span class="ci">[no interval{": " + _e(why) if why else ""}]</span>'
    if n is not None:
        txt += f' <span class="n">n = {_e(n)}</span>'
    if few_events(s, key):
        txt += f' <span class="few">{_e(few_events(s, key))}</span>'
    return txt


# ------------------------------------------------------------------------------------------- page


@dataclass
class Figure:
    """One plot: file name (PNG beside index.html), caption, PNG bytes."""

    name: str
    caption: str
    data: bytes


@dataclass
class Page:
    """The report being written: HTML parts and the figures (written once at the end)."""

    parts: list[str] = field(default_factory=list)
    figures: list[Figure] = field(default_factory=list)

    def add(self, s: str) -> None:
        self.parts.append(s)

    def figure(self, name: str, caption: str, fig) -> None:
        data = plots.png(fig)
        self.figures.append(Figure(name, caption, data))
        b64 = base64.b64encode(data).decode("ascii")
        self.add(f'<figure><img src="data:image/png;base64,{b64}" alt="{_e(caption)}" data-file="{_e(name)}">'
                 f"<figcaption>{_e(caption)} <code>{_e(name)}</code></figcaption></figure>")

    def section(self, build: Callable[..., Any], *args: Any) -> Optional[str]:
        """``build(*args, self)``: one section's content. A section that fails on what the run's
        files hold (a summary value of the wrong type...) is a unit that fails alone: what it added
        is taken back, one line on the page says why, and the reason is returned (``None`` when
        it was built); the other sections are built."""
        n_parts, n_figs = len(self.parts), len(self.figures)
        try:
            build(*args, self)
        except Exception as e:  # noqa: BLE001 -- the section's one-line reason, the page goes on
            from spear_metrics.core.records import one_line

            del self.parts[n_parts:], self.figures[n_figs:]
            reason = one_line(e)
            self.add(f'<p class="problem">This section could not be built from the run\'s files: {_e(reason)}</p>')
            return reason
        return None

    def table(self, head: Sequence[str], rows: Sequence[Sequence[str]], cls: str = "") -> None:
        """A table; cells are HTML already (escape text with :func:`_e`)."""
        thead = "<thead><tr>" + "".join(f"<th>{h}</th>" for h in head) + "</tr></thead>" if any(head) else ""
        self.add(f'<table class="{cls}">{thead}<tbody>')  # no empty header band over a key/value table
        for r in rows:
            self.add("<tr>" + "".join(f"<td>{c}</td>" for c in r) + "</tr>")
        self.add("</tbody></table>")


CSS = """
body{font-family:system-ui,-apple-system,Segoe UI,Roboto,sans-serif;max-width:1200px;margin:2em auto;padding:0 1em;color:#222}
h1{font-size:1.6em}h2{border-bottom:1px solid #ccc;padding-bottom:.2em;margin-top:2em}h3{margin-top:1.4em}
table{border-collapse:collapse;margin:.6em 0;font-size:.86em}td,th{border:1px solid #ddd;padding:.25em .5em;text-align:left;vertical-align:top}
th{background:#f3f3f3}.ci{color:#555}.n{color:#888;font-size:.9em}.why{color:#a15c00;font-style:italic}
.problem{color:#b00020}.few{color:#8a5a00;font-size:.85em}.caution{background:#fff6e0;border-left:4px solid #e0a000;padding:.4em .7em;margin:.6em 0}
figure{margin:1em 0}figure img{max-width:100%;border:1px solid #eee}figcaption{font-size:.85em;color:#555}
code{font-size:.92em}.small{font-size:.85em;color:#555}.notes{font-size:.85em;color:#7a4600;margin-top:0}
nav.toc{background:#f7f7f7;border:1px solid #e3e3e3;padding:.5em 1em;margin:1em 0;font-size:.9em}
nav.toc ol{margin:.3em 0;padding-left:1.4em;columns:2}nav.toc .off{color:#888}

"""


def write_page(out: Path, title: str, lead: str, page: Page, source: str) -> Path:
    """Write a report page into the open report folder ``out``: ``index.html`` (``title``, the
    ``lead`` HTML, then the page's parts; secrets masked), the page's figures as PNG files beside
    it and the record of the results it was built from (the sha256 of ``source``/summary.json,
    :data:`spear_metrics.results.write.REPORT_RECORD`). Returns the page's path.

    Raises:
        spear_datasets.files.OutputError: a file cannot be written.
    """
    import hashlib
    import json

    from spear_datasets.files import atomic_path
    from spear_metrics.core.secrets import mask_secrets
    from spear_metrics.results.write import REPORT_RECORD

    body = lead + "\n" + "\n".join(page.parts)
    doc = (f'<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8"><title>{_e(title)}</title>'
           f'<meta name="viewport" content="width=device-width, initial-scale=1"><style>{CSS}</style></head>\n'
           f"<body>\n{body}\n</body></html>\n")
    for f in page.figures:
        with atomic_path(out / f.name) as tmp:
            tmp.write_bytes(f.data)
    summary = Path(source) / "summary.json"
    digest = hashlib.sha256(summary.read_bytes()).hexdigest() if summary.is_file() else None
    with atomic_path(out / ".work" / REPORT_RECORD) as tmp:
        tmp.write_text(json.dumps({"summary_sha256": digest}) + "\n", encoding="utf-8")
    path = out / "index.html"
    with atomic_path(path) as tmp:
        tmp.write_text(mask_secrets(doc, shapes=False), encoding="utf-8")
    return path
