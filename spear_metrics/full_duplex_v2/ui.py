"""Full-Duplex-Bench v2 in the leaderboard Space: the conversation browser under the v2 tab's table
(:func:`build_samples`, the ``samples`` hook of :data:`spear_metrics.full_duplex_v2.results.SPACE_TAB`).

For a conversation of a loaded v2 results dataset it plays the examiner's channel (``A.wav``,
``examiner_audio``), the examinee's (``B.wav``, ``examinee_audio``) and the stereo mix
(``combined.wav``, ``combined_audio``; embedded by ``push-results --with-audio --with-inputs``)
and draws the conversation's time line (:func:`timeline_figure`): each channel's speech as the
judge read it (``a_speech``, ``b_speech``: the ASR word times of ``A.json`` / ``B.json``, s) and
every judged turn-taking event (``events``: ``[start_s, end_s, turn_taking_fluency,
instruction_following]``) as a span labelled with its two scores. No gradio import at module level
(the Space imports it)."""

from __future__ import annotations

import json
import math
from typing import Any, Callable, Sequence

from spear_metrics.full_duplex_v2 import BENCHMARK

#: the players, in order: (audio column, label)
PLAYERS = (("examiner_audio", "examiner (A.wav)"), ("examinee_audio", "examinee (B.wav)"),
           ("combined_audio", "both channels (combined.wav: A left, B right)"))


def conversation_choices(results: Sequence[Any]) -> list[tuple[str, str]]:
    """``(label, value)`` of every conversation of every loaded v2 results dataset: label
    ``<model> · <id> · <status>``, value ``<source>\\t<row>``."""
    from spear_metrics.results.browser import row_choices

    return row_choices(results, BENCHMARK.name, lambda r, s: f"{r.model} · {s.get('id')} · {s.get('status')}")


def _list(v: Any) -> list:
    """A list cell: a list (or array) as it is, JSON text parsed, anything else ``[]``."""
    if isinstance(v, str):
        try:
            v = json.loads(v)
        except (ValueError, RecursionError):
            return []
    try:
        return list(v) if v is not None and not isinstance(v, (str, dict, float, int)) else []
    except TypeError:
        return []


def _finite(*xs: Any) -> bool:
    try:
        return all(math.isfinite(float(x)) for x in xs)
    except (TypeError, ValueError):
        return False


def spans(v: Any) -> list[tuple[float, float]]:
    """``[(start_s, end_s)]`` of a speech cell (``a_speech``/``b_speech``); malformed entries left out."""
    return [(float(a[0]), float(a[1])) for a in _list(v) if len(_list(a)) == 2 and _finite(*a)]


def events(row: dict[str, Any]) -> list[tuple[float, float, int, int]]:
    """``[(start_s, end_s, turn_taking_fluency, instruction_following)]`` of a row's judged events."""
    return [(float(e[0]), float(e[1]), int(e[2]), int(e[3])) for e in map(_list, _list(row.get("events")))
            if len(e) == 4 and _finite(*e)]


def timeline_figure(row: dict[str, Any]):
    """The conversation's time line (matplotlib figure, x in s on the conversation's clock): the
    examiner's (A) and the examinee's (B) speech as bars, and every judged event as a span on
    its own lane, labelled ``TT <fluency> / IF <instruction following>``, coloured by its
    turn-taking fluency (red 1 to green 5)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    evs = events(row)
    fig = Figure(figsize=(11, 2.4 + 0.25 * len(evs)), dpi=100, layout="constrained")
    FigureCanvasAgg(fig)
    ax = fig.add_subplot()
    colours = {1: "#d73027", 2: "#fc8d59", 3: "#fee08b", 4: "#91cf60", 5: "#1a9850"}
    lanes = ["examiner (A) speech", "examinee (B) speech"]
    for y, key, colour in ((0, "a_speech", "tab:blue"), (1, "b_speech", "tab:orange")):
        ax.broken_barh([(a, b - a) for a, b in spans(row.get(key))], (y - 0.3, 0.6), facecolors=colour)
    for i, (a, b, tt, iff) in enumerate(evs):
        y = 2 + i
        ax.broken_barh([(a, max(b - a, 0.05))], (y - 0.35, 0.7), facecolors=colours.get(tt, "grey"),
                       edgecolors="black", linewidth=0.5)
        ax.axvspan(a, b, color=colours.get(tt, "grey"), alpha=0.08)
        ax.annotate(f"TT {tt} / IF {iff}", (b, y), xytext=(4, 0), textcoords="offset points", va="center", fontsize=8)
        lanes.append(f"event {i + 1}")
    ax.set_yticks(range(len(lanes)), lanes, fontsize=8)
    ax.set_ylim(-0.6, len(lanes) - 0.4)
    ax.invert_yaxis()
    ax.set_xlabel("time (s) on the conversation's clock")
    if not evs:
        ax.set_title("no judged event" + (f" ({row.get('reason')})" if row.get("reason") else ""), fontsize=9)
    return fig


def conversation_text(row: dict[str, Any]) -> str:
    """One Markdown line on the conversation: id, split, status (the reason of a failed one),
    the number of events and the per-task means."""
    def num(k: str) -> str:
        v = row.get(k)
        return f"{float(v):.2f}" if _finite(v) else "-"

    head = f"**{row.get('id')}** ({row.get('split')}) · {row.get('status')}"
    if row.get("status") != "ok":
        return f"{head}: {row.get('reason') or '-'}"
    return (f"{head} · {len(events(row))} judged events · turn-taking {num('avg_turn_taking')} · instruction "
            f"following {num('avg_instruction_following')} · task-specific {num('avg_task_specific')}")


def show(results: Sequence[Any], value: str | None, audio_file: Callable[[Any], str | None]) -> tuple:
    """What the browser shows for a choice: ``(examiner file, examinee file, combined file,
    figure, text)`` (files ``None`` when the dataset embeds no such audio; all ``None`` and ``""``
    when the choice names no conversation)."""
    from spear_metrics.results.browser import find_row

    row = find_row(results, BENCHMARK.name, value)
    if row is None:
        return None, None, None, None, ""
    return (*(audio_file(row.get(col)) for col, _ in PLAYERS), timeline_figure(row), conversation_text(row))


def build_samples(src_state: Any, *, load: Callable[[list[str]], Sequence[Any]],
                  audio_file: Callable[[Any], str | None]) -> None:
    """Build the conversation browser inside the open v2 tab (:func:`spear_metrics.results.browser.sample_browser`;
    called by the Space with its sources state, ``load(sources) -> [Results]`` and
    ``audio_file(embedded audio) -> path | None``)."""
    from spear_metrics.results.browser import sample_browser

    sample_browser(src_state, load=load, choices=conversation_choices,
                   show=lambda results, value: show(results, value, audio_file), elem="fdb2",
                   heading="### Conversations", item="conversation",
                   players=tuple((f"fdb2_{col.split('_')[0]}", label) for col, label in PLAYERS),
                   plot_label="time line: each channel's speech (ASR word times) and the judged events with their scores")
