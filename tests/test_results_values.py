"""The one comparison of a recorded value with its recomputation (results.validate.same_value),
which every benchmark's results check uses."""

from __future__ import annotations

import math

from spear_metrics.results.validate import ABS_TOL, REL_TOL, same_value


def test_missing_values_are_equal_only_to_missing_ones():
    assert same_value(None, None) and same_value(math.nan, None) and same_value(None, math.nan)
    assert not same_value(None, 0.0) and not same_value(math.nan, 0.0) and not same_value(0, None)


def test_numbers_agree_within_the_stated_tolerances():
    assert (REL_TOL, ABS_TOL) == (1e-6, 1e-9)
    assert same_value(100.0, 100.0 + 5e-5)          # 5e-7 relative: within 1e-6
    assert not same_value(100.0, 100.0 + 5e-4)      # 5e-6 relative: beyond
    assert same_value(0.0, 5e-10) and not same_value(0.0, 5e-9)  # near 0 the absolute tolerance decides
    assert same_value(3, 3.0) and not same_value(3, 4)


def test_other_values_compare_exactly():
    assert same_value("ok", "ok") and not same_value("ok", "failed")
    assert not same_value("1", 1) and same_value([1, 2], [1, 2])
