"""Token usage and its cost: what every judge reply and every adapter call that reports usage
was billed, summed per run, and turned into money by a price table the user gives.

- :func:`normalize_usage` reads the usage objects the services send into one shape,
  :class:`Usage` (``input_tokens``, ``output_tokens``, ``audio_input_tokens``,
  ``audio_output_tokens``, ``cached_input_tokens``, ``cached_audio_input_tokens``; all counts of
  tokens):

  * OpenAI Chat Completions ``usage``: ``prompt_tokens``, ``completion_tokens``,
    ``prompt_tokens_details.{audio_tokens, cached_tokens}``,
    ``completion_tokens_details.audio_tokens``
    (https://platform.openai.com/docs/api-reference/chat/object);
  * OpenAI Realtime ``response.done`` ``response.usage``: ``input_tokens``, ``output_tokens``,
    ``input_token_details.{audio_tokens, cached_tokens, cached_tokens_details.audio_tokens}``,
    ``output_token_details.audio_tokens``
    (https://platform.openai.com/docs/api-reference/realtime-server-events/response/done);
  * Gemini ``usageMetadata``: ``promptTokenCount``, ``candidatesTokenCount`` (Live:
    ``responseTokenCount``), ``cachedContentTokenCount``, ``promptTokensDetails`` /
    ``responseTokensDetails`` / ``cacheTokensDetails`` lists of ``{"modality": "AUDIO", "tokenCount"}``
    (https://ai.google.dev/api/generate-content#UsageMetadata).

  In all three, the input and output counts INCLUDE their audio and cached parts, and the audio
  and cached input counts both include the cached audio (a Realtime session caches its earlier
  turns' audio).
- :class:`UsageTally` sums usage per model (thread-safe); :meth:`UsageTally.to_json` is what
  ``summary.json`` / ``run_info.json`` record.
- :class:`PriceTable` (``--price-table FILE``, format in ``docs/judges.md``, example
  ``docs/price_table.example.json``): per model, prices per million tokens. No price is built in.
"""

from __future__ import annotations

import math
import os
import threading
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any, Mapping, Optional

__all__ = ["PriceTable", "PriceTableError", "Usage", "UsageTally", "normalize_usage", "usage_line"]

#: the largest price table read (bytes)
MAX_PRICE_TABLE_BYTES = 10_000_000
#: the fields of a price table entry (prices per million tokens)
PRICE_FIELDS = ("input", "output", "audio_input", "audio_output", "cached_input", "cached_audio_input")


@dataclass
class Usage:
    """Tokens billed for one reply or summed over many (counts; ``input_tokens`` and
    ``output_tokens`` include their audio and cached parts; ``cached_audio_input_tokens`` is the
    part of the input both audio and cached, counted in ``audio_input_tokens`` and in
    ``cached_input_tokens``)."""

    input_tokens: int = 0
    output_tokens: int = 0
    audio_input_tokens: int = 0
    audio_output_tokens: int = 0
    cached_input_tokens: int = 0
    cached_audio_input_tokens: int = 0

    def __add__(self, other: "Usage") -> "Usage":
        return Usage(*(getattr(self, f.name) + getattr(other, f.name) for f in fields(self)))

    def to_json(self) -> dict[str, int]:
        return asdict(self)


#: the largest token count read from a usage field; a larger one reads as 0 (no service bills
#: 10**15 tokens in one response; an int of 400 digits would not even convert to a float)
MAX_TOKEN_COUNT = 10 ** 15


def _count(v: Any) -> int:
    """A token count from a usage field: an integer in ``0 ..`` :data:`MAX_TOKEN_COUNT`, else 0."""
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return 0
    if isinstance(v, float) and not math.isfinite(v):
        return 0
    return int(v) if 0 <= v <= MAX_TOKEN_COUNT else 0


def _modality(details: Any, modality: str) -> int:
    if not isinstance(details, list):
        return 0
    return sum(_count(d.get("tokenCount")) for d in details
               if isinstance(d, dict) and str(d.get("modality", "")).upper() == modality)


def normalize_usage(raw: Any) -> Optional[Usage]:
    """A service's usage object (module docstring) as :class:`Usage`; ``None`` when ``raw`` is not
    a usage object (absent, not a dict, no count it knows). Counts that are not non-negative
    numbers read as 0."""
    if not isinstance(raw, Mapping):
        return None
    if "promptTokenCount" in raw or "candidatesTokenCount" in raw or "responseTokenCount" in raw:  # Gemini
        out = _count(raw.get("candidatesTokenCount")) + _count(raw.get("responseTokenCount"))
        return Usage(input_tokens=_count(raw.get("promptTokenCount")), output_tokens=out,
                     audio_input_tokens=_modality(raw.get("promptTokensDetails"), "AUDIO"),
                     audio_output_tokens=_modality(raw.get("responseTokensDetails") or raw.get("candidatesTokensDetails"),
                                                   "AUDIO"),
                     cached_input_tokens=_count(raw.get("cachedContentTokenCount")),
                     cached_audio_input_tokens=_modality(raw.get("cacheTokensDetails"), "AUDIO"))
    if "prompt_tokens" in raw or "completion_tokens" in raw:  # Chat Completions
        pin = raw.get("prompt_tokens_details") if isinstance(raw.get("prompt_tokens_details"), Mapping) else {}
        pout = raw.get("completion_tokens_details") if isinstance(raw.get("completion_tokens_details"), Mapping) else {}
        return Usage(_count(raw.get("prompt_tokens")), _count(raw.get("completion_tokens")),
                     _count(pin.get("audio_tokens")), _count(pout.get("audio_tokens")), _count(pin.get("cached_tokens")))
    if "input_tokens" in raw or "output_tokens" in raw:  # Realtime (and the Responses API)
        pin = raw.get("input_token_details") or raw.get("input_tokens_details") or {}
        pout = raw.get("output_token_details") or raw.get("output_tokens_details") or {}
        pin = pin if isinstance(pin, Mapping) else {}
        pout = pout if isinstance(pout, Mapping) else {}
        cached = pin.get("cached_tokens_details") if isinstance(pin.get("cached_tokens_details"), Mapping) else {}
        return Usage(_count(raw.get("input_tokens")), _count(raw.get("output_tokens")),
                     _count(pin.get("audio_tokens")), _count(pout.get("audio_tokens")), _count(pin.get("cached_tokens")),
                     _count(cached.get("audio_tokens")))
    return None


class UsageTally:
    """Usage summed per model (thread-safe): ``add(model, usage)`` for each billed reply,
    ``add_unreported(model)`` for a reply that carried no usage (so the sums are known to be
    incomplete)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._by_model: dict[str, Usage] = {}
        self._replies: dict[str, int] = {}
        self._unreported: dict[str, int] = {}

    def add(self, model: str, usage: Optional[Usage]) -> None:
        with self._lock:
            if usage is None:
                self._unreported[model] = self._unreported.get(model, 0) + 1
                return
            self._by_model[model] = self._by_model.get(model, Usage()) + usage
            self._replies[model] = self._replies.get(model, 0) + 1

    def add_unreported(self, model: str) -> None:
        self.add(model, None)

    def merge(self, other: "UsageTally") -> None:
        """Add every count of ``other`` into this tally."""
        with other._lock:
            items = [(m, u, other._replies.get(m, 0)) for m, u in other._by_model.items()]
            unrep = dict(other._unreported)
        with self._lock:
            for m, u, n in items:
                self._by_model[m] = self._by_model.get(m, Usage()) + u
                self._replies[m] = self._replies.get(m, 0) + n
            for m, n in unrep.items():
                self._unreported[m] = self._unreported.get(m, 0) + n

    @classmethod
    def from_json(cls, summed: dict[str, Any]) -> "UsageTally":
        """The tally :meth:`to_json` wrote (``by_model`` read back; e.g. to price it later)."""
        t = cls()
        for m, u in (summed.get("by_model") or {}).items():
            if not isinstance(u, dict):
                continue
            t._by_model[str(m)] = Usage(**{k: _count(u.get(k)) for k in Usage.__dataclass_fields__})
            t._replies[str(m)] = _count(u.get("n_replies"))
            t._unreported[str(m)] = _count(u.get("n_replies_without_usage"))
        return t

    def total(self) -> Usage:
        with self._lock:
            out = Usage()
            for u in self._by_model.values():
                out = out + u
            return out

    def to_json(self, prices: Optional["PriceTable"] = None) -> dict[str, Any]:
        """``{"by_model": {model: {<Usage fields>, "n_replies", "n_replies_without_usage"[, "cost",
        "cost_note"]}}, "total": {<Usage fields>}[, "cost", "currency", "cost_note"]}``; the cost
        keys only with a price table (a model the table lacks, an audio count without an audio
        price, or replies that stated no usage give ``cost: null`` with the reason)."""
        with self._lock:
            models = sorted(set(self._by_model) | set(self._unreported))
            by = {m: {**self._by_model.get(m, Usage()).to_json(), "n_replies": self._replies.get(m, 0),
                      "n_replies_without_usage": self._unreported.get(m, 0)} for m in models}
            total = Usage()
            for u in self._by_model.values():
                total = total + u
        out: dict[str, Any] = {"by_model": by, "total": total.to_json()}
        if prices is not None:
            costs, notes = [], []
            for m in models:
                cost, note = prices.cost(m, self._by_model.get(m, Usage()))
                unreported = self._unreported.get(m, 0)
                if unreported and cost is not None:  # tokens the service never stated: the cost is not known
                    cost, note = None, (f"{unreported} repl{'y' if unreported == 1 else 'ies'} of {m!r} stated no "
                                        "usage: their tokens, and so the cost, are unknown")
                by[m]["cost"] = cost
                if note:
                    by[m]["cost_note"] = note
                    notes.append(note)
                costs.append(cost)
            out["cost"] = None if any(c is None for c in costs) else round(sum(costs), 12)
            out["currency"] = prices.currency
            out["price_table"] = prices.source
            if notes:
                out["cost_note"] = "; ".join(notes)
        return out


class PriceTableError(ValueError):
    """An unusable price table (one line: the file and what is wrong)."""


class PriceTable:
    """Prices per million tokens, per model, read from a JSON file (format in ``docs/judges.md``)::

        {"currency": "USD",
         "models": {"gpt-4o-2024-08-06": {"input": 2.5, "output": 10.0, "cached_input": 1.25},
                    "gpt-4o-audio-preview-2024-12-17": {"input": 2.5, "output": 10.0,
                                                         "audio_input": 40.0, "audio_output": 80.0}}}

    ``input``/``output`` price text tokens; ``audio_input``/``audio_output`` the audio parts;
    ``cached_input`` the cached text part of the input (default: the ``input`` price);
    ``cached_audio_input`` its cached audio part (default: the ``audio_input`` price).

    Raises (constructor):
        PriceTableError: not a regular file (a FIFO, a device, a folder), not readable JSON, no
            ``models`` object, a ``currency`` that is not a short text, or a price that is not a
            finite non-negative number.
    """

    def __init__(self, path: str | os.PathLike):
        p = Path(path)
        self.source = p.name
        from spear_datasets.files import read_json
        from spear_metrics.core.stats import as_number

        try:
            obj = read_json(p, MAX_PRICE_TABLE_BYTES)  # never more than the limit in memory (a huge or endless file)
        except (OSError, ValueError) as e:
            raise PriceTableError(f"--price-table {p}: not readable JSON: {' '.join(str(e).split())[:200]}") from None
        if not isinstance(obj, dict) or not isinstance(obj.get("models"), dict):
            raise PriceTableError(f"--price-table {p}: needs a \"models\" object {{model: {{input, output, ...}}}}")
        currency = obj.get("currency") or "USD"
        if not isinstance(currency, str) or len(currency) > 16:
            raise PriceTableError(f"--price-table {p}: \"currency\" must be a short text (e.g. \"USD\")")
        self.currency = currency
        self.models: dict[str, dict[str, float]] = {}
        for m, entry in obj["models"].items():
            if not isinstance(entry, dict):
                raise PriceTableError(f"--price-table {p}: model {m!r} is not an object of prices")
            prices = {}
            for k, v in entry.items():
                if k not in PRICE_FIELDS:
                    raise PriceTableError(f"--price-table {p}: model {m!r}: unknown price {k!r} "
                                          f"(known: {', '.join(PRICE_FIELDS)})")
                if isinstance(v, bool) or not isinstance(v, (int, float)) or as_number(v) is None or v < 0:
                    raise PriceTableError(f"--price-table {p}: model {m!r}: {k} must be a non-negative number")
                prices[k] = float(v)
            self.models[str(m)] = prices

    def cost(self, model: str, usage: Usage) -> tuple[Optional[float], Optional[str]]:
        """``(cost, None)`` of ``usage`` billed by ``model`` in :attr:`currency`, or ``(None,
        reason)``. Each input token is priced once: cached audio = ``cached_audio_input_tokens``;
        cached text = cached input - cached audio; audio (not cached) = audio input - cached audio;
        text (not cached) = input - audio input - cached text; text output = output - audio output;
        each part times its price per million tokens."""
        pr = self.models.get(model)
        if pr is None:
            return None, f"no price for model {model!r} in {self.source}"
        cached_audio = min(usage.cached_audio_input_tokens, usage.audio_input_tokens, usage.cached_input_tokens)
        cached_text = usage.cached_input_tokens - cached_audio
        need = [("input", usage.input_tokens - usage.audio_input_tokens - cached_text),
                ("output", usage.output_tokens - usage.audio_output_tokens),
                ("audio_input", usage.audio_input_tokens - cached_audio), ("audio_output", usage.audio_output_tokens),
                ("cached_input", cached_text), ("cached_audio_input", cached_audio)]
        fallback = {"cached_input": "input", "cached_audio_input": "audio_input"}
        total = 0.0
        for k, n in need:
            if n <= 0:
                continue
            price = pr.get(k, pr.get(fallback[k]) if k in fallback else None)
            if price is None:
                return None, f"{model!r} billed {n} {k.replace('_', ' ')} tokens and {self.source} has no {k} price"
            total += n * price / 1e6
        if not math.isfinite(total):
            return None, f"{model!r}: the cost overflows with the prices of {self.source}"
        return round(total, 12), None


def usage_line(summed: dict[str, Any]) -> str:
    """One line of :meth:`UsageTally.to_json` for the end of a command: tokens per model, and
    the cost when priced."""
    parts = [f"{m}: {u.get('input_tokens', 0)} in / {u.get('output_tokens', 0)} out" +
             (f" ({u['audio_input_tokens']} / {u['audio_output_tokens']} audio)"
              if u.get("audio_input_tokens") or u.get("audio_output_tokens") else "") +
             (f" + {u['n_replies_without_usage']} repl{'y' if u['n_replies_without_usage'] == 1 else 'ies'} "
              "stating no usage" if u.get("n_replies_without_usage") else "")
             for m, u in (summed.get("by_model") or {}).items()]
    line = "tokens billed: " + ("; ".join(parts) or "none reported")
    if "cost" in summed:
        line += (f"; cost {summed['cost']:.6f} {summed.get('currency', '')}" if summed.get("cost") is not None
                 else f"; cost unknown ({summed.get('cost_note')})")
    return line
