"""Evidence reads in the units of what it compares: an error and its tolerance, never their ratio."""

from __future__ import annotations

import math

import pytest

from theory.claims import SubCheck, Verdict
from theory.claims._support import _mc_worst, _rounding_worst
from theory.claims.checks_scl import check_scl


def test_rounding_worst_gives_the_error_and_the_half_unit_of_the_pair_nearest_its_tolerance():
    # 0.31 vs "0.3": |err| 0.01 of 0.05 (ratio 0.2); 0.12349 vs "0.1235": 1e-5 of 5e-5 (0.2);
    # 1.0004 vs "1.000": 4e-4 of 5e-4 (0.8) -> the last one, though its error is not the largest
    err, half, printed = _rounding_worst([(0.31, "0.3"), (0.12349, "0.1235"), (1.0004, "1.000")])
    assert printed == "1.000"
    assert err == pytest.approx(4e-4) and half == pytest.approx(5e-4)
    with pytest.raises(ValueError, match="pairs"):
        _rounding_worst([])


def test_mc_worst_picks_the_largest_ratio_and_handles_zero_tolerances():
    assert _mc_worst([(0.5, 1.0), (0.01, 0.0125), (0.2, 0.1)]) == (0.2, 0.1)
    assert _mc_worst([(0.0, 0.0), (0.1, 1.0)]) == (0.1, 1.0)  # 0 of 0 holds
    d, t = _mc_worst([(0.1, 1.0), (1e-9, 0.0)])  # anything of 0 fails
    assert (d, t) == (1e-9, 0.0)
    assert SubCheck.tolerance("mc", d, t).verdict == Verdict.FAIL


def test_tolerance_label_names_the_quantity_and_keeps_verdict_and_severity():
    s = SubCheck.tolerance("printed value", 4.4e-7, 5e-7, label="|L - 0.471495|")
    assert s.evidence[0].text() == "|L - 0.471495| = 4.40e-07 tol 5.00e-07"
    assert s.verdict == Verdict.PASS and s.severity == pytest.approx(0.88)
    assert SubCheck.tolerance("x", 1.0, 0.5).evidence[0].label == "max err"  # the default stays


def test_t4_printed_values_evidence_carries_the_error_and_the_tolerance():
    out: list[tuple[str, SubCheck]] = []
    check_scl(out, True, 0)
    sub = next(s for c, s in out if c == "T4" and "printed" in s.what)
    e = sub.evidence[0]
    # six printed decimals: the tolerance is half a unit in the sixth, the error is in loss units
    assert e.spread_kind == "tol" and e.spread == pytest.approx(5e-7)
    assert 0.0 <= e.value <= 5e-7 and sub.verdict == Verdict.PASS
    assert sub.severity == pytest.approx(e.value / e.spread)
    text = e.text()
    assert "tol 5.00e-07" in text and f"= {e.value:.2e}" in text and "printed" in text
    assert not any(
        math.isclose(s.evidence[0].spread or 0.0, 1.0) and s.evidence[0].value < 1 for _, s in out
    ), "a ratio against a tolerance of 1 is shown"
