"""The judges of the open problems O1, O1b, O1c on hand-made rows, and their record semantics."""

from __future__ import annotations

import math

import pytest

from theory.claims import Claim, SubCheck, Verdict, checks, from_json, to_json
from theory.claims import checks_open as co
from theory.claims.open_search import SCALES, scale_of


def _row(loss, beta, best, nc, *, norm="sphere", C=3):
    gain = (nc - best) / nc
    bound = nc if loss in ("SCL", "HSCL") else 0.39  # L*_SCL, or the UCL optimum
    return {
        "loss": loss,
        "setting": "supervised" if loss in ("SCL", "HSCL") else "unsupervised",
        "normalization": norm,
        "psi": "mean",
        "num_classes": C,
        "n": 2,
        "d": C - 1,
        "beta": beta,
        "best": best,
        "nc": nc,
        "nc_loss": nc,
        "bound": bound,
        "gain": gain,
        "beats_nc": gain > co.FOUND_MARGIN,
        "within_class_variation": 0.0,
        "etf_mean": 0.5,
        "rank_1e-4": 2.0,
        "mean_norm": 1.0,
    }


def _controls(shift=0.0):
    return [_row("SCL", 0.0, 0.3 + shift, 0.3), _row("UCL", 0.0, 0.39, 0.39), _row("HSCL", 1.0, 0.3, 0.3)]


def _judge(monkeypatch, rows):
    monkeypatch.setattr(co, "landscape_rows", lambda scale, seed: tuple(rows))
    out: list = []
    co.check_landscape(out, True, 0)
    return out


def _claim(out, cid):
    return Claim.from_findings(cid, [s for c, s in out if c == cid])


def test_o1_found_with_beta_c_and_o1c_not_found(monkeypatch):
    rows = [_row("HUCL", 0.0, 0.39, 0.39), _row("HUCL", 1.0, 0.50, 0.55), _row("HUCL", 100.0, 0.69, 0.6931)]
    out = _judge(monkeypatch, rows + _controls())
    o1, o1c = _claim(out, "O1"), _claim(out, "O1c")
    assert o1.verdict is Verdict.FOUND and o1c.verdict is Verdict.NOT_FOUND
    finding = [s for s in o1.subchecks if s.verdict is Verdict.FOUND][0]
    assert finding.evidence[0].label == "beta_c" and finding.evidence[0].value == 1.0


def test_o1_not_found_and_o1c_found_when_nc_is_never_beaten_and_the_bound_is_met(monkeypatch):
    rows = [_row("HUCL", b, 0.39, 0.39) for b in (0.0, 1.0, 100.0)]
    out = _judge(monkeypatch, rows + _controls())
    assert _claim(out, "O1").verdict is Verdict.NOT_FOUND
    assert _claim(out, "O1c").verdict is Verdict.FOUND


def test_a_gain_below_the_declared_margin_is_not_found(monkeypatch):
    rows = [_row("HUCL", 0.0, 0.39, 0.39), _row("HUCL", 1.0, 0.55 * (1 - 0.5e-6), 0.55)]
    out = _judge(monkeypatch, rows + _controls())
    assert _claim(out, "O1").verdict is Verdict.NOT_FOUND


def test_a_control_below_nc_fails_o1(monkeypatch):
    rows = [_row("HUCL", 0.0, 0.39, 0.39), _row("HUCL", 1.0, 0.50, 0.55)]
    out = _judge(monkeypatch, rows + _controls(shift=-1e-6))
    assert _claim(out, "O1").verdict is Verdict.FAIL


def test_a_control_that_does_not_reach_nc_fails_o1(monkeypatch):
    rows = [_row("HUCL", 0.0, 0.39, 0.39)]
    out = _judge(monkeypatch, rows + _controls(shift=1e-3))
    assert _claim(out, "O1").verdict is Verdict.FAIL


def test_a_value_below_the_certified_bound_fails_o1c(monkeypatch):
    rows = [_row("HUCL", 0.0, 0.39, 0.39), _row("HUCL", 1.0, 0.30, 0.55)]
    out = _judge(monkeypatch, rows + _controls())
    assert _claim(out, "O1c").verdict is Verdict.FAIL


def _hessian_rows(min_hucl=-0.01, min_control=0.02, ball=0.5, sympy_ball=0.5):
    rows = [
        {"kind": "eigen", "loss": "SCL", "num_classes": 3, "beta": 0.0, "min_eigenvalue": min_control},
        {"kind": "eigen", "loss": "HUCL", "num_classes": 3, "beta": 1.0, "min_eigenvalue": min_hucl},
        {"kind": "saddle", "num_classes": 3, "beta_saddle": 0.77 if min_hucl < 0 else math.nan},
        {"kind": "ball", "num_classes": 3, "beta_ball": ball, "beta_ball_sympy": sympy_ball},
    ]
    for r in rows[:2]:
        r.update(grad_tangent=0.0, rotation_residual=0.0, rotation_dim=1, radial=-0.1)
    return rows


@pytest.mark.parametrize(
    "kwargs,verdict",
    [
        ({}, Verdict.FOUND),
        ({"min_control": -1e-6}, Verdict.FAIL),
        ({"sympy_ball": 0.5 + 1e-6}, Verdict.FAIL),
    ],
)
def test_o1b_verdicts(monkeypatch, kwargs, verdict):
    monkeypatch.setattr(co, "hessian_rows", lambda scale: tuple(_hessian_rows(**kwargs)))
    monkeypatch.setattr(co, "_sympy_split", lambda out, classes, mod: None)
    out: list = []
    co.check_hessian(out, True, 0)
    assert _claim(out, "O1b").verdict is verdict


def test_o1b_not_found_without_a_saddle_or_a_ball_threshold(monkeypatch):
    rows = _hessian_rows(min_hucl=0.01, ball=math.nan, sympy_ball=math.nan)
    monkeypatch.setattr(co, "hessian_rows", lambda scale: tuple(rows))
    monkeypatch.setattr(co, "_sympy_split", lambda out, classes, mod: None)
    out: list = []
    co.check_hessian(out, True, 0)
    assert _claim(out, "O1b").verdict is Verdict.NOT_FOUND


def test_open_records_and_their_verdict_family():
    found = SubCheck("x", Verdict.FOUND)
    passed = SubCheck.tolerance("ok", 0.0, 1.0)
    assert Claim.from_findings("O1", [passed, found]).verdict is Verdict.FOUND
    assert Claim.from_findings("O1", [passed, SubCheck("y", Verdict.NOT_FOUND)]).verdict is Verdict.NOT_FOUND
    failed = SubCheck.tolerance("bad", 2.0, 1.0)
    assert Claim.from_findings("O1c", [failed, found]).verdict is Verdict.FAIL
    assert Claim.from_findings("O1b", []).verdict is Verdict.NOT_RUN
    assert Verdict.FOUND.ok and Verdict.NOT_FOUND.ok and not Verdict.FAIL.ok
    assert Verdict.parse("not found") is Verdict.NOT_FOUND
    with pytest.raises(ValueError, match="verdict of open O1"):
        Claim("O1", "PASS")
    with pytest.raises(ValueError, match="claim_id"):
        Claim.from_findings("T1", [found])
    c = Claim.from_findings("O1", [found], criterion="declared")
    assert from_json(to_json([c]))[0] == c


def test_scales_and_groups():
    assert scale_of(True, False) is SCALES["quick"] and scale_of(True, True) is SCALES["large"]
    assert scale_of(False, False) is SCALES["full"]
    for sc in SCALES.values():
        assert list(sc.betas) == sorted(sc.betas) and max(sc.betas) == co.BETA_MAX
        assert set(sc.bracket_betas) <= set(sc.betas)
    ids = {cid for _, cids, _ in checks.GROUPS for cid in cids}
    assert {"O1", "O1b", "O1c"} <= ids
    assert checks.command(True, 2, True) == "python -m theory --quick --large --seed 2"
    assert set(co.CRITERIA) == {"O1", "O1b", "O1c"}


def test_large_flag_reaches_the_open_problem_checks(monkeypatch):
    """--large runs the open problems at SCALES["large"] (shrunk here) and says so in the records."""
    import dataclasses

    from theory.claims import open_search

    tiny = dataclasses.replace(
        SCALES["quick"],
        betas=(0.0, 2.0),
        bracket_betas=(0.0, 2.0),
        control_betas=(),
        restarts=2,
        max_iter=30,
        normalizations=("sphere",),
        hessian_classes=(3,),
        hessian_betas=(0.0, 2.0),
        hessian_control_betas=(1.0,),
    )
    monkeypatch.setitem(open_search.SCALES, "large", tiny)
    monkeypatch.setattr(co, "_sympy_split", lambda out, classes, mod: None)
    open_search.landscape_rows.cache_clear()
    open_search.hessian_rows.cache_clear()
    try:
        recs = checks.run_groups(checks.GROUPS[-2:], quick=True, large=True)
    finally:
        open_search.landscape_rows.cache_clear()
        open_search.hessian_rows.cache_clear()
    by_id = {r.id: r for r in recs}
    assert set(by_id) == {"O1", "O1b", "O1c"}
    assert all(r.setting["scale"] == "large" and "--large" in r.command for r in recs)
    assert by_id["O1"].verdict is Verdict.FOUND and by_id["O1b"].verdict is Verdict.FOUND
    assert by_id["O1"].criterion == co.CRITERIA["O1"]
