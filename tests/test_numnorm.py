"""``WER_numnorm_%``: the project's number-aware normaliser on hand-made pairs with hand-counted
WER, beside Whisper's normaliser (``WER_norm_%``, unchanged), which loses the unit of every
quantity of 1, a detached "%" and the "¥" sign.

Each expected value is counted by hand: (substitutions + deletions + insertions) / words of
the normalised reference, the normalised texts written out in the table.
"""

from __future__ import annotations

import pytest

from spear_metrics.core.textnorm import normalize_text, normalize_text_numbers, number_words, ordinal_words
from spear_metrics.speech_quality.definition import SpeechQuality, error_rates, numnorm_error_rate

# reference, hypothesis, (normalised reference, normalised hypothesis) of WER_numnorm_%, its WER,
# and the WER of WER_norm_% (Whisper's normaliser) on the same pair
PAIRS = [
    # the same quantity written two ways: the same words
    ("It costs $5.", "it costs five dollars", ("it costs five dollars", "it costs five dollars"), 0.0, 0.0),
    ("Prices rose 50%.", "prices rose fifty percent", ("prices rose fifty percent",) * 2, 0.0, 0.0),
    ("It was 3.5 metres.", "it was three point five meters", ("it was three point five meters",) * 2, 0.0, 0.0),
    ("The 21st century.", "the twenty-first century", ("the twenty first century",) * 2, 0.0, 0.0),
    ("About 5 % more", "about five percent more", ("about five percent more",) * 2, 0.0, 1 / 3),  # "5" vs "5%"
    ("It is ¥500.", "it is five hundred yen", ("it is five hundred yen",) * 2, 0.0, 1 / 3),  # "500" vs "500 yen"
    ("It was 5.0 volts", "it was five point zero volts", ("it was five volts",) * 2, 0.0, 1 / 4),  # "5" vs "5.0"
    # different quantities or currencies: different words
    ("It costs $5.", "it costs 5 euros", ("it costs five dollars", "it costs five euros"), 1 / 4, 1 / 3),
    ("One dollar.", "1 euro", ("one dollar", "one euro"), 1 / 2, 0.0),  # Whisper: "one" and "one"
    ("A rate of 1%.", "a rate of one", ("a rate of one percent", "a rate of one"), 1 / 5, 0.0),  # Whisper: % lost
    ("$5 and 6 euros", "five dollars and six dollars",
     ("five dollars and six euros", "five dollars and six dollars"), 1 / 5, 1 / 3),
]


@pytest.mark.parametrize("ref, hyp, texts, wer_numnorm, wer_norm", PAIRS, ids=[p[0] for p in PAIRS])
def test_numbers_written_two_ways_count_as_the_same_words(ref, hyp, texts, wer_numnorm, wer_norm):
    assert (normalize_text_numbers(ref), normalize_text_numbers(hyp)) == texts
    assert numnorm_error_rate(ref, hyp) == pytest.approx(wer_numnorm, abs=1e-12)
    assert error_rates(ref, hyp)[0] == pytest.approx(wer_norm, abs=1e-12)  # WER_norm_% as before


def test_number_words_and_the_dimension_key():
    assert number_words(105) == "one hundred five" and number_words(2024) == "two thousand twenty four"
    assert number_words(1_500_000) == "one million five hundred thousand" and number_words(0) == "zero"
    assert [ordinal_words(n) for n in (1, 2, 3, 12, 21, 40, 100)] == [
        "first", "second", "third", "twelfth", "twenty first", "fortieth", "one hundredth"]
    # Whisper's normaliser (WER_norm_%) is unchanged: "$1", "€1" and "1%" all read "one"
    assert normalize_text("$1") == normalize_text("€1") == normalize_text("1%") == "one"
    assert [normalize_text_numbers(t) for t in ("$1", "€1", "1%")] == ["one dollar", "one euro", "one percent"]

    # the dimension: per-ASR key, pooled key over (row, ASR) values, empty hypothesis = 100 %
    dim = SpeechQuality(asr="embedded", mos="")
    label = dim.asrs[0][0]
    rows = [{f"asr_text_{label}": "x", f"WER_numnorm_%_{label}": v} for v in (0.0, 25.0, 100.0)]
    out = dim.aggregate([], rows)
    assert out["WER_numnorm_%"] == pytest.approx(125 / 3) and out[f"WER_numnorm_%_{label}"] == pytest.approx(125 / 3)
    assert dim.aggregate_counts([], rows, list(out))["WER_numnorm_%"] == 3
    assert numnorm_error_rate("five dollars", "") == 1.0 and numnorm_error_rate("", "five") is None


# A table of spoken number forms: (written form, spoken form, the words both become). Each pair
# must give the same words under WER_numnorm_%; the words are written out by hand. Known limits,
# left as they are: Whisper's reader joins number words said in a row, so "three thirty" (and so
# "3:30") reads as 330 and "one third" (and so "1/3") as 13th; "half past three", "two or three"
# and "three dollars fifty" (no "cents") are not matched with "3:30", "2-3" and "$3.50".
SPOKEN_FORMS = [
    # clock times
    ("at 3:30 pm", "at three thirty pm", "at three hundred thirty pm"),
    ("at 10:05", "at ten oh five", "at one thousand five"),
    ("at 7:00", "at seven o'clock", "at seven oclock"),
    # years
    ("in 1999", "in nineteen ninety nine", "in one thousand nine hundred ninety nine"),
    ("in 2005", "in two thousand five", "in two thousand five"),
    ("in 2024", "in twenty twenty four", "in two thousand twenty four"),
    ("the 1990s", "the nineteen nineties", "the one thousand nine hundred nineties"),
    # ordinals
    ("the 3rd time", "the third time", "the third time"),
    ("on May 2nd", "on may second", "on may second"),
    ("the 100th day", "the hundredth day", "the one hundredth day"),
    # fractions
    ("1/2 of it", "one half of it", "one half of it"),
    ("3/4 cup", "three quarters cup", "three quarters cup"),
    ("2/3 done", "two thirds done", "two thirds done"),
    # currencies
    ("$3.50", "three dollars and fifty cents", "three dollars fifty cents"),
    ("£20", "twenty pounds", "twenty pounds"),
    ("€1,000", "one thousand euros", "one thousand euros"),
    ("$1.5 million", "one point five million dollars", "one million five hundred thousand dollars"),
    # percentages
    ("10%", "ten percent", "ten percent"),
    ("2.5 per cent", "two point five percent", "two point five percent"),
    # ranges
    ("5-10 minutes", "five to ten minutes", "five to ten minutes"),
    ("pages 10\u201320", "pages ten to twenty", "pages ten to twenty"),
    # plain numbers
    ("1,234", "one thousand two hundred thirty four", "one thousand two hundred thirty four"),
    ("100 people", "a hundred people", "one hundred people"),
    ("-5 degrees", "minus five degrees", "minus five degrees"),
]


@pytest.mark.parametrize("written, spoken, words", SPOKEN_FORMS, ids=[p[0] for p in SPOKEN_FORMS])
def test_spoken_number_forms_table(written, spoken, words):
    assert normalize_text_numbers(written) == words
    assert normalize_text_numbers(spoken) == words
    assert numnorm_error_rate(written, spoken) == 0.0


def test_dates_and_clock_like_strings_are_not_ranges_or_times():
    """An ISO date is not a range, a time with seconds or an hour past 23 is not a clock time, and a
    denominator past 10 is not a fraction: they are read digit group by digit group as before."""
    assert normalize_text_numbers("2024-05-01") == "two thousand twenty four five one"
    assert normalize_text_numbers("at 25:10") == normalize_text_numbers("at 25 10")
    assert normalize_text_numbers("5/12") == "five twelve"
