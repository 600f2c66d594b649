"""Text normalisation before WER/CER: Whisper's English normaliser and the project's
number-aware variant.

:func:`normalize_text`: OpenAI Whisper's English normaliser
(``transformers.models.whisper.english_normalizer.EnglishTextNormalizer``) with its British->American
spelling map ``english.json``, read from an installed package without any download
(``whisper-normalizer``: ``whisper_normalizer/normalizers/english.json``; or ``openai-whisper``:
``whisper/normalizers/english.json``; both the same file, sha256 :data:`SPELLING_JSON_SHA256`). :func:`normalize_text_numbers` is the
project's number-aware variant (``WER_numnorm_%``): the same steps with every number written out in
words (:func:`number_words`, :func:`ordinal_words`).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from functools import lru_cache
from pathlib import Path

from spear_metrics.core.models import ModelUnavailableError, package_file

#: sha256 of Whisper's ``english.json`` spelling map as shipped by ``whisper-normalizer==0.1.15``
SPELLING_JSON_SHA256 = "6607f948be9824d2e1b2fa2223cd94c06c45afa4e05ea0e3d5e1f2bdffde2465"


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def spelling_mapping_path() -> Path:
    """Where Whisper's ``english.json`` (British->American spellings) is installed; a packaged
    copy is checked against :data:`SPELLING_JSON_SHA256` (``SPEAR_WHISPER_SPELLING_JSON`` names a
    file of the user's, taken as it is).

    Raises:
        ModelUnavailableError: neither ``whisper-normalizer`` nor ``openai-whisper`` is installed,
            or the installed file is not the pinned one.
    """
    env = os.environ.get("SPEAR_WHISPER_SPELLING_JSON")
    if env and Path(env).is_file():
        return Path(env)
    for pkg, parts in (("whisper_normalizer", ("normalizers", "english.json")), ("whisper", ("normalizers", "english.json"))):
        p = package_file(pkg, *parts)
        if p is not None:
            if _sha256(p) != SPELLING_JSON_SHA256:  # another spelling map would change every WER
                raise ModelUnavailableError(
                    f"the installed {pkg} ships an english.json whose sha256 is not the pinned one "
                    f"({SPELLING_JSON_SHA256[:16]}...): pip install whisper-normalizer==0.1.15")
            return p
    raise ModelUnavailableError(
        "Whisper English normaliser spelling map english.json not found: pip install whisper-normalizer==0.1.15 "
        "(or openai-whisper), or set SPEAR_WHISPER_SPELLING_JSON to a normalizer.json of a Whisper model folder"
    )


@lru_cache(maxsize=1)
def _normalizer():
    from transformers.models.whisper.english_normalizer import EnglishTextNormalizer

    with open(spelling_mapping_path(), encoding="utf-8") as f:
        return EnglishTextNormalizer(json.load(f))


def normalize_text(text: str | None) -> str:
    """Whisper's English normalisation (lower case, punctuation and fillers "hmm/mm/mhm/mmm/uh/um"
    removed, numbers and British spellings standardised, contractions expanded).

    Apply it to references and hypotheses alike before WER/CER. ``None`` -> ``""``.
    Source: OpenAI Whisper ``EnglishTextNormalizer`` (as in ``transformers``).
    """
    if not text:
        return ""
    return " ".join(_normalizer()(str(text)).split())


# ---------------------------------------------------------------- the project's number-aware variant

_ONES = ("zero one two three four five six seven eight nine ten eleven twelve thirteen fourteen fifteen sixteen "
         "seventeen eighteen nineteen").split()
_TENS = "_ _ twenty thirty forty fifty sixty seventy eighty ninety".split()
_SCALES = ((10 ** 18, "quintillion"), (10 ** 15, "quadrillion"), (10 ** 12, "trillion"), (10 ** 9, "billion"),
           (10 ** 6, "million"), (10 ** 3, "thousand"))
_ORDINAL_WORDS = {"one": "first", "two": "second", "three": "third", "five": "fifth", "eight": "eighth",
                  "nine": "ninth", "twelve": "twelfth"}
#: currency sign -> (singular, plural) spoken unit; ``$ € £ ¢`` are the ones Whisper's number
#: normaliser writes as prefixes, ``¥ ₹`` are read here before it (it drops them)
CURRENCY_WORDS: dict[str, tuple[str, str]] = {"$": ("dollar", "dollars"), "€": ("euro", "euros"),
                                              "£": ("pound", "pounds"), "¢": ("cent", "cents"),
                                              "¥": ("yen", "yen"), "₹": ("rupee", "rupees")}
#: a number as Whisper's number normaliser writes it: sign, minus, integer, fraction, suffix
_NUMBER_TOKEN = re.compile(r"^([$€£¢])?(-)?(\d*)(?:\.(\d+))?(%|st|nd|rd|th|s)?$")


def number_words(n: int) -> str:
    """Cardinal words of a non-negative integer, the form WER_numnorm_% counts: no "and", no
    hyphens (``105`` -> ``"one hundred five"``, ``2024`` -> ``"two thousand twenty four"``).
    Integers of 10**21 and more are read digit by digit."""
    if n < 0:
        return "minus " + number_words(-n)
    if n >= 10 ** 21:
        return " ".join(_ONES[int(d)] for d in str(n))
    if n < 20:
        return _ONES[n]
    if n < 100:
        return _TENS[n // 10] + ("" if n % 10 == 0 else " " + _ONES[n % 10])
    if n < 1000:
        return _ONES[n // 100] + " hundred" + ("" if n % 100 == 0 else " " + number_words(n % 100))
    for size, name in _SCALES:
        if n >= size:
            head, rest = divmod(n, size)
            return number_words(head) + " " + name + ("" if rest == 0 else " " + number_words(rest))
    raise AssertionError(n)  # unreachable


def ordinal_words(n: int) -> str:
    """Ordinal words of a non-negative integer (``21`` -> ``"twenty first"``, ``100`` -> ``"one hundredth"``)."""
    words = number_words(n).split()
    last = words[-1]
    if last in _ORDINAL_WORDS:
        words[-1] = _ORDINAL_WORDS[last]
    elif last.endswith("y"):
        words[-1] = last[:-1] + "ieth"
    else:
        words[-1] = last + "th"
    return " ".join(words)


def _decimal_words(integer: str, fraction: str) -> str:
    """``"3", "50"`` -> ``"three point five"``: the integer part as a cardinal, the fraction digit
    by digit, trailing zeros dropped (``5.0`` and ``5`` are the same quantity)."""
    head = number_words(int(integer or "0"))
    fraction = fraction.rstrip("0")
    return head if not fraction else head + " point " + " ".join(_ONES[int(d)] for d in fraction)


def _speak_token(token: str) -> str:
    """One token of Whisper's number normaliser output in words (``$5.50``, ``50%``, ``21st``,
    ``-3.5``, ``1990s``...); a token that is no number is returned as it is."""
    m = _NUMBER_TOKEN.match(token)
    if m is None or not (m.group(3) or m.group(4)):
        return token
    sign, minus, integer, fraction, suffix = m.groups()
    value = int(integer or "0")
    if suffix in ("st", "nd", "rd", "th"):
        if fraction is not None or sign:
            return token
        words = ordinal_words(value)
    elif sign:
        one, many = CURRENCY_WORDS[sign]
        cents = None
        if fraction is not None and len(fraction) <= 2 and sign != "¢":
            cents = int(fraction.ljust(2, "0"))
        if fraction is None or cents is not None:
            parts = [] if value == 0 and cents else [f"{number_words(value)} {one if value == 1 else many}"]
            if cents:
                parts.append(f"{number_words(cents)} {'cent' if cents == 1 else 'cents'}")
            words = " ".join(parts)
        else:
            words = f"{_decimal_words(integer, fraction)} {many}"
        if suffix == "%":
            words += " percent"
    else:
        words = _decimal_words(integer, fraction or "")
        if suffix == "%":
            words += " percent"
        elif suffix == "s":
            last = words.split()[-1]
            plural = last[:-1] + "ies" if last.endswith("y") else last + ("es" if last.endswith("x") else "s")
            words = words[: len(words) - len(last)] + plural
    return ("minus " + words) if minus else words


class _NumbersInWords:
    """The ``standardize_numbers`` step of the project's normaliser: Whisper's
    ``EnglishNumberNormalizer`` reads spoken and written numbers into one written form
    (``preprocess`` + ``process_words``: "five dollars" and "$5" -> ``$5``), its cents are
    joined (``$5 and ¢50`` -> ``$5.50``, ``$0.50`` -> ``¢50``, as its ``postprocess``), then
    every number is written out in words (:func:`_speak_token`). Its postprocess's "1" ->
    "one" rewrite is not applied: it dropped the unit of every quantity of 1 ("$1", "1%" and
    "€1" all became "one")."""

    def __init__(self):
        from transformers.models.whisper.english_normalizer import EnglishNumberNormalizer

        self.whisper = EnglishNumberNormalizer()

    def __call__(self, s: str) -> str:
        s = self.whisper.preprocess(s)
        s = " ".join(w for w in self.whisper.process_words(s.split()) if w is not None)
        s = re.sub(r"([€£$])(\d+) (?:and )?¢(\d{1,2})\b", lambda m: f"{m[1]}{m[2]}.{int(m[3]):02d}", s)
        s = re.sub(r"[€£$]0\.(\d{1,2})\b", lambda m: f"¢{int(m[1].ljust(2, '0'))}", s)
        return " ".join(_speak_token(t) for t in s.split())


@lru_cache(maxsize=1)
def _numbers_normalizer():
    from transformers.models.whisper.english_normalizer import EnglishTextNormalizer

    with open(spelling_mapping_path(), encoding="utf-8") as f:
        norm = EnglishTextNormalizer(json.load(f))
    norm.standardize_numbers = _NumbersInWords()
    return norm


#: denominators of written fractions read as words (``3/4`` -> ``three quarters``), singular and plural
_FRACTION_WORDS = {2: ("half", "halves"), 3: ("third", "thirds"), 4: ("quarter", "quarters"), 5: ("fifth", "fifths"),
                   6: ("sixth", "sixths"), 7: ("seventh", "sevenths"), 8: ("eighth", "eighths"), 9: ("ninth", "ninths"),
                   10: ("tenth", "tenths")}


def _clock_words(m: re.Match) -> str:
    """``H:MM`` as it is said: ``3:30`` -> ``three thirty``, ``10:05`` -> ``ten oh five``, ``7:00`` ->
    ``seven oclock`` (the words Whisper's normaliser then reads as the spoken form's)."""
    h, mm = int(m[1]), int(m[2])
    tail = "oclock" if mm == 0 else (f"oh {_ONES[mm]}" if mm < 10 else number_words(mm))
    return f"{number_words(h)} {tail}"


def _fraction_words(m: re.Match) -> str:
    """``n/d`` (d in 2..10) as it is said: ``1/2`` -> ``one half``, ``3/4`` -> ``three quarters``."""
    n, d = int(m[1]), int(m[2])
    if d not in _FRACTION_WORDS or n == 0:
        return m[0]
    one, many = _FRACTION_WORDS[d]
    return f"{number_words(n)} {one if n == 1 else many}"


def _written_number_forms(text: str) -> str:
    """What Whisper's normaliser misreads, rewritten before it runs: ``5 %`` -> ``5%`` and
    ``per cent`` -> ``percent`` (it dropped a detached sign), ``¥5``/``₹5`` -> ``5 yen``/``5
    rupees`` (it dropped the sign), a minus sign before a number -> ``minus`` (it dropped it),
    ``a hundred/thousand/...`` and ``a dollar/euro/pound/cent`` -> ``one ...``; clock times
    ``H:MM`` -> the words said (:func:`_clock_words`; ``o'clock`` -> ``oclock``, which it read as
    "o" = 0), fractions ``n/d`` with d up to 10 -> words (:func:`_fraction_words`), ranges
    ``5-10`` -> ``5 to 10`` (it dropped the dash)."""
    s = re.sub(r"\bo'?\s?clock\b", "oclock", text, flags=re.I)
    s = re.sub(r"(?<![\d:])([01]?\d|2[0-3]):([0-5]\d)(?![\d:])", _clock_words, s)
    s = re.sub(r"(?<![\d/])(\d{1,2})/(\d{1,2})(?![\d/])", _fraction_words, s)
    s = re.sub(r"(?<![\d\-\u2013.])(\d{1,4})\s?[\-\u2013]\s?(\d{1,4})(?![\d\-\u2013.])", r"\1 to \2", s)
    s = re.sub(r"(\d)\s+%", r"\1%", s)
    s = re.sub(r"\bper\s+cent\b", "percent", s, flags=re.I)
    s = re.sub(r"¥\s?(\d[\d,]*(?:\.\d+)?)", r"\1 yen", s)
    s = re.sub(r"₹\s?(\d[\d,]*(?:\.\d+)?)", r"\1 rupees", s)
    s = re.sub(r"(?<![\w.])[-\u2212](?=\d)", "minus ", s)
    s = re.sub(r"\ban?\s+(hundred|thousand|million|billion|trillion|dollar|euro|pound|cent)\b", r"one \1", s,
               flags=re.I)
    return s


def normalize_text_numbers(text: str | None) -> str:
    """The project's number-aware English normalisation (``WER_numnorm_%``): Whisper's English
    normaliser (:func:`normalize_text`: case, punctuation, fillers, spellings, contractions)
    with every number written out in words, so that the same quantity written two ways gives
    the same words and different quantities or units give different words:

    - ``"$5"``, ``"5 dollars"``, ``"five dollars"`` -> ``"five dollars"``; ``"5 euros"`` ->
      ``"five euros"``; ``"$5.50"`` / ``"five dollars and fifty cents"`` -> ``"five dollars
      fifty cents"``; ``"$1"`` -> ``"one dollar"``;
    - ``"50%"``, ``"50 %"``, ``"fifty percent"`` -> ``"fifty percent"``;
    - ``"3.5"``, ``"three point five"`` -> ``"three point five"``; ``"2.50"`` and ``"2.5"`` alike;
    - ``"21st"``, ``"twenty first"``, ``"twenty-first"`` -> ``"twenty first"``;
    - ``"2024"``, ``"twenty twenty four"`` -> ``"two thousand twenty four"``; ``"-5"``, ``"minus
      five"`` -> ``"minus five"``.

    Whisper's own rules (``normalize_text``, ``WER_norm_%``) turn spoken numbers into digits and
    lose the unit of quantities of 1 ("$1", "€1", "1%" -> "one"), a detached ``%`` and the
    ``¥`` sign; those are fixed here (:func:`_written_number_forms`, :class:`_NumbersInWords`).
    ``None`` -> ``""``. Source: Whisper's ``EnglishTextNormalizer`` and ``EnglishNumberNormalizer``
    (``transformers``) for everything but the number spelling, which is this project's.
    """
    if not text:
        return ""
    return " ".join(_numbers_normalizer()(_written_number_forms(str(text))).split())
