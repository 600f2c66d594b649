"""Full-Duplex-Bench v1.5 behaviour tag: an LLM judge labels how the model handled the overlap.

Source: ``v1_v1.5/evaluation/eval_behavior.py`` and ``instruction/behavior.txt`` of
``DanielLin94144/Full-Duplex-Bench`` (read for the definition; the prompt is upstream's, kept
verbatim as data in ``prompts/behavior.txt``, see ``prompts/SOURCE.md``; the code is ours).

- Messages: system = ``behavior.txt``; user = the four word-timed transcripts (``clean_input``,
  ``input``, ``clean_output``, ``output``; each the whole ``{"text", "chunks"}`` object as compact
  JSON, ``separators=(",", ":")``, ``ensure_ascii=False``) laid into upstream's literal template
  (:func:`user_message`, whitespace included).
- Request: upstream's model ``gpt-4o-2024-08-06``, no temperature (the server's default), ``seed``
  starting at 1.
- Reply parsing (upstream ``extract_json``): from each ``{`` in turn, the first JSON object that
  decodes there and holds the key ``behaviour``. Upstream then counts every entry of its list by
  its first letter; an entry not starting with ``C`` (or a ``behaviour`` that is not a list of
  strings) crashes upstream's count, so here it is a malformed reply.
- Retry: upstream retries any failure forever, ``seed += 1`` and a 5 s sleep each time. Here the
  same rule is bounded (:class:`BehaviourJudge`): at most ``max_attempts`` requests and a total
  deadline; an HTTP error a retry cannot help (e.g. 401) stops at once. Each request goes through
  the shared judge (:meth:`spear_metrics.core.judge.Judge.ask`) and so follows the project's reply
  cache rules (:mod:`spear_metrics.core.judge_cache`, keyed by the whole request, seed included):
  a reply that parses is stored and answers the same request later without a call; a refused one
  (an HTTP or network error, a reply that does not parse, a content refusal) never is, so a rerun
  asks that seed again.
- Distribution (upstream ``stats_by_axis``): per subset, each tag's count / the number of tags
  counted; upstream prints the ratios rounded to 2 decimals, tags that never occur left out
  (:func:`upstream_ratios`).
"""

from __future__ import annotations

import hashlib
import json
import time
from dataclasses import dataclass, field
from importlib import resources
from typing import Any, Sequence

#: the four tags of the C axis (behavior.txt)
TAGS = ("C_RESPOND", "C_RESUME", "C_UNCERTAIN_HANDLING", "C_UNKNOWN")
#: upstream's judge model and first seed (eval_behavior.py)
UPSTREAM_MODEL = "gpt-4o-2024-08-06"
UPSTREAM_FIRST_SEED = 1
#: upstream sleeps this long before each retry (s)
UPSTREAM_RETRY_SLEEP_S = 5.0
#: the bounded form of upstream's retry-forever rule: most requests per sample
DEFAULT_MAX_ATTEMPTS = 5
PROMPT_SHA256 = "19e5477dac9a9a1e11de126783a0b820b3ecb70db5e91181824fa944e1947977"
#: longest reply text kept from a judge (characters)
MAX_REPLY_CHARS = 20_000


def instruction() -> str:
    """Upstream's ``behavior.txt`` (the system message), byte for byte.

    Raises:
        RuntimeError: the packaged file is not the pinned one (sha256 :data:`PROMPT_SHA256`).
    """
    raw = resources.files("spear_metrics.full_duplex_v15").joinpath("prompts/behavior.txt").read_bytes()
    if hashlib.sha256(raw).hexdigest() != PROMPT_SHA256:
        raise RuntimeError("spear_metrics/full_duplex_v15/prompts/behavior.txt is not upstream's behavior.txt "
                           f"(sha256 {PROMPT_SHA256[:12]}... expected)")
    return raw.decode("utf-8")


def compact(obj: Any) -> str:
    """Upstream's ``json_dict_to_compact_text``: ``json.dumps(obj, separators=(",", ":"), ensure_ascii=False)``."""
    return json.dumps(obj, separators=(",", ":"), ensure_ascii=False)


def user_message(input_clean: Any, input_noisy: Any, output_clean: Any, output_noisy: Any) -> str:
    """The user message of upstream's ``eval_behavior_all`` (its f-string, indentation included):
    the four transcript objects ``{"text", "chunks"}`` as compact JSON."""
    return (
        "\n        {\n"
        f'            "input_clean": {compact(input_clean)},\n'
        f'            "input_noisy": {compact(input_noisy)},\n'
        f'            "output_clean": {compact(output_clean)},\n'
        f'            "output_noisy": {compact(output_noisy)}\n'
        "        }\n        "
    )


def messages(input_clean: Any, input_noisy: Any, output_clean: Any, output_noisy: Any) -> list[dict[str, str]]:
    """``[system = behavior.txt, user = :func:`user_message`]``."""
    return [{"role": "system", "content": instruction()},
            {"role": "user", "content": user_message(input_clean, input_noisy, output_clean, output_noisy)}]


def extract_json(text: str, key: str = "behaviour") -> dict[str, Any]:
    """Upstream's ``extract_json``: try ``json.JSONDecoder().raw_decode`` at each ``{``; the first
    decoded object holding ``key`` wins (after an object without it, the search resumes at its end).
    An object the decoder cannot hold (a number past ``int()``'s digit limit, nesting past the
    parser's depth; upstream's call would raise) is skipped like one that is not JSON.

    Raises:
        ValueError: no such object.
    """
    decoder = json.JSONDecoder()
    pos = text.find("{")
    while pos != -1:
        try:
            obj, end = decoder.raw_decode(text, pos)
            if isinstance(obj, dict) and key in obj:
                return obj
            pos = text.find("{", end)
        except (ValueError, RecursionError):  # not JSON there (a number past int()'s digit limit, nesting past the
            pos = text.find("{", pos + 1)     # parser's depth: upstream's code would stop; here the search goes on)
    raise ValueError(f"No JSON object with key '{key}' found.")


def parse_behaviour(text: str) -> list[str]:
    """The tag list of a judge reply (:func:`extract_json`), each entry a string starting with
    ``C`` (what upstream's count can take).

    Raises:
        ValueError: no ``behaviour`` object, or one upstream's count would crash on.
    """
    obj = extract_json(str(text or ""))
    tags = obj["behaviour"]
    if not isinstance(tags, list) or not all(isinstance(t, str) and t[:1] == "C" for t in tags):
        raise ValueError(f"'behaviour' is not a list of C_* tags: {compact(tags)[:120]}")
    return list(tags)


@dataclass
class Verdict:
    """A judged sample: ``tags`` (``None`` when no attempt gave a usable reply), the ``reply``
    that gave them, the ``seed`` of that request, every attempt (``{"seed", "reply", "error",
    "cached"}``) and ``error`` (one line) when there is no verdict."""

    tags: list[str] | None
    reply: str | None = None
    seed: int | None = None
    attempts: list[dict[str, Any]] = field(default_factory=list)
    error: str | None = None


class BehaviourJudge:
    """Upstream's retry rule, bounded: request with ``seed``, ``seed + 1``, ... until a reply parses
    (:func:`parse_behaviour`), at most ``max_attempts`` requests, sleeping ``retry_sleep_s`` between
    them, and no new request once ``deadline_s`` seconds have passed since the first.

    Args:
        judge: a :class:`spear_metrics.core.judge.Judge` built without retries of its own (one
            :meth:`~spear_metrics.core.judge.Judge.ask` per attempt, each request cut at the
            judge's total time limit, answered from or stored in its reply cache by its rules);
            the ``seed`` field of each request is set here.
        first_seed: the first request's seed (upstream: 1).
    """

    def __init__(self, judge: Any, *, first_seed: int = UPSTREAM_FIRST_SEED, max_attempts: int = DEFAULT_MAX_ATTEMPTS,
                 retry_sleep_s: float = UPSTREAM_RETRY_SLEEP_S, deadline_s: float = 600.0):
        if max_attempts < 1:
            raise ValueError(f"max_attempts must be >= 1, got {max_attempts}")
        self.judge = judge
        self.first_seed = int(first_seed)
        self.max_attempts = int(max_attempts)
        self.retry_sleep_s = max(0.0, float(retry_sleep_s))
        self.deadline_s = float(deadline_s)

    def describe(self) -> str:
        base = self.judge.describe() if hasattr(self.judge, "describe") else str(self.judge)
        return (f"{base}; upstream's behavior.txt; seeds {self.first_seed}, {self.first_seed}+1, ... "
                f"(at most {self.max_attempts} requests, {self.deadline_s:g} s per sample)")

    def _tally(self, reply: Any) -> None:
        """The sample's call (and the reply that answered it) in the judge's :meth:`~spear_metrics.core.judge.Judge.report`."""
        tally = getattr(self.judge, "tally", None)
        if callable(tally):
            tally(reply)

    def _attempt(self, msgs: list[dict], seed: int) -> tuple[list[str], str, bool]:
        """One request with ``seed`` through the shared judge's :meth:`~spear_metrics.core.judge.Judge.ask`
        (its reply cache and its rule of what is stored): ``(tags, reply, from the cache)``.

        Raises:
            JudgeError: no reply (``kind`` ``"no_reply"``, ``fatal`` when a retry cannot help) or
                a reply :func:`parse_behaviour` refuses (``kind`` ``"malformed"``, the reply and
                the reason in its last attempt).
        """
        ans = self.judge.ask(msgs, lambda text: parse_behaviour(text[:MAX_REPLY_CHARS]), extra_body={"seed": seed},
                             count_call=False)
        return ans.value, ans.reply[:MAX_REPLY_CHARS], bool(getattr(ans.meta, "cached", False))

    def ask(self, msgs: list[dict]) -> Verdict:
        """Judge one sample's messages. Never raises for a judge's fault (the verdict says why)."""
        from spear_metrics.core.judge import JudgeError
        from spear_metrics.core.records import one_line

        t0 = time.monotonic()
        attempts: list[dict[str, Any]] = []
        last = "no attempt"
        for k in range(self.max_attempts):
            seed = self.first_seed + k
            if k and time.monotonic() - t0 > self.deadline_s:
                last = f"deadline of {self.deadline_s:g} s passed after {k} request(s); last: {last}"
                break
            if k and self.retry_sleep_s:
                time.sleep(self.retry_sleep_s)
            try:
                tags, reply, cached = self._attempt(msgs, seed)
            except JudgeError as e:
                tried = (getattr(e, "attempts", None) or [None])[-1]
                if getattr(e, "kind", "no_reply") == "malformed" and tried is not None:
                    last = one_line(tried.error or "malformed reply")
                    reply = tried.reply[:MAX_REPLY_CHARS] if isinstance(tried.reply, str) else None
                    attempts.append({"seed": seed, "reply": reply, "error": last, "cached": False})
                    continue
                last = one_line(e)
                attempts.append({"seed": seed, "reply": None, "error": last, "cached": False})
                if getattr(e, "fatal", False):
                    break
                continue
            attempts.append({"seed": seed, "reply": reply, "error": None, "cached": cached})
            self._tally(None)  # the sample's one call (its answer was counted by the judge)
            return Verdict(tags, reply, seed, attempts)
        self._tally(None)
        return Verdict(None, None, None, attempts, f"judge gave no usable behaviour tag after {len(attempts)} "
                                                   f"request(s): {last}")


def tag_counts(tag_lists: Sequence[Sequence[str]]) -> dict[str, int]:
    """Upstream's ``stats_by_axis`` counts for the C axis: every tag of every judged sample."""
    out: dict[str, int] = {}
    for tags in tag_lists:
        for t in tags:
            out[t] = out.get(t, 0) + 1
    return out


def upstream_ratios(tag_lists: Sequence[Sequence[str]]) -> dict[str, float]:
    """What upstream prints as ``Ratios (C-axis)``: count / all counted tags per tag seen, rounded
    to 2 decimals, sorted by tag name (``{}`` when nothing was judged)."""
    counts = tag_counts(tag_lists)
    total = sum(counts.values())
    return {t: round(c / total, 2) for t, c in sorted(counts.items())} if total else {}
