"""Tests of theory.claims: the one record type for verified claims."""

from __future__ import annotations

import io
import json
import math

import pandas as pd
import pytest

from theory.claims import (
    ALL_IDS,
    CATALOGUE,
    CHECK_IDS,
    CLAIM_IDS,
    OPEN_IDS,
    Claim,
    Evidence,
    SubCheck,
    Verdict,
    format_table,
    from_json,
    not_run,
    statement,
    to_csv,
    to_frame,
    to_json,
)


def _claims() -> list[Claim]:
    subs = [
        SubCheck.tolerance("closed form vs batch", 3e-16, 1e-12, kind="error", instances=60),
        SubCheck.tolerance("Monte Carlo gap", 0.17, 0.0, kind="gap", instances=1000, note="CI99=[0.16,0.18]"),
        SubCheck.tolerance("non-finite", math.nan, 1e-9, kind="error"),
    ]
    t4 = Claim.from_subchecks(
        "T4", subs[:2], setting={"scale": "quick", "seed": 0}, command="python -m theory"
    )
    t5 = Claim.from_subchecks("T5", subs, command="python -m theory")
    s1 = Claim(
        "S1",
        "PARTLY",
        evidence=[
            Evidence("etf_mean", 0.02, 0.001, "std", n=3),
            Evidence("ci", -math.inf, math.inf, "ci", level=0.99),
        ],
        setting={"C": 10},
        command="python -m synthetic claims results",
        figures=("fig1",),
    )
    return [t4, t5, s1, not_run("R1", "python -m realdata r1", criterion="NCM +40 points")]


# ---------------------------------------------------------------------------------------------
# verdicts and the catalogue


def test_verdict_parse_and_ok():
    assert (
        Verdict.parse("NOT RUN") is Verdict.NOT_RUN
        and Verdict.parse("not_reproduced") is Verdict.NOT_REPRODUCED
    )
    assert Verdict.parse(Verdict.PASS) is Verdict.PASS and str(Verdict.NOT_REPRODUCED) == "NOT REPRODUCED"
    assert Verdict.PASS.ok and Verdict.REPRODUCED.ok and not Verdict.PARTLY.ok and not Verdict.FAIL.ok
    with pytest.raises(ValueError, match="verdict"):
        Verdict.parse("maybe")


def test_catalogue_ids_and_statements():
    assert CHECK_IDS == ("T1", "T2", "T3", "T4", "T5", "T6", "T7", "T8", "W-law")
    assert OPEN_IDS == ("O1", "O1b", "O1c")
    # O2, the open problem read from the synthetic runs, is judged by the synthetic package
    assert set(CHECK_IDS) | set(CLAIM_IDS) | set(OPEN_IDS) | {"O2"} == set(ALL_IDS)
    assert len(CHECK_IDS) + len(CLAIM_IDS) + len(OPEN_IDS) + 1 == len(ALL_IDS)
    assert CATALOGUE["O2"].kind == "open" and CATALOGUE["O2"].package == "synthetic"
    assert statement("T4") == CATALOGUE["T4"].statement == "SCL minimised by NC, value L*_SCL"
    with pytest.raises(ValueError, match="claim_id"):
        statement("T99")


def test_verdict_families_are_enforced():
    with pytest.raises(ValueError, match="verdict of check T1"):
        Claim("T1", "REPRODUCED")
    with pytest.raises(ValueError, match="verdict of claim S1"):
        Claim("S1", Verdict.PASS)
    with pytest.raises(ValueError, match="id"):
        Claim("X9", "PASS")
    with pytest.raises(ValueError, match="check id"):
        Claim.from_subchecks("S1", [])
    assert Claim("T1", "NOT RUN").verdict is Verdict.NOT_RUN and Claim("S2", "NOT RUN").kind == "claim"
    assert Claim.from_subchecks("T2", []).verdict is Verdict.NOT_RUN


# ---------------------------------------------------------------------------------------------
# tolerance sub-checks


@pytest.mark.parametrize(
    "kind,value,tol,passed,severity",
    [
        ("error", 0.5e-9, 1e-9, True, 0.5),
        ("error", 2e-9, 1e-9, False, 2.0),
        ("error", 0.0, 0.0, True, 0.0),
        ("error", 1e-300, 0.0, False, math.inf),
        ("gap", -1e-12, 1e-10, True, 0.01),
        ("gap", -1e-9, 1e-10, False, 10.0),
        ("gap", 0.3, 0.0, True, -0.3),  # zero tolerance: the raw margin
        ("gap", -1e-300, 0.0, False, math.inf),
        ("error", math.nan, 1.0, False, math.inf),
        ("error", math.inf, 1.0, False, math.inf),
        ("gap", -math.inf, 1.0, False, math.inf),
        ("gap", math.inf, 1.0, False, math.inf),  # non-finite always fails
    ],
)
def test_tolerance_pass_fail_and_severity(kind, value, tol, passed, severity):
    s = SubCheck.tolerance("x", value, tol, kind=kind, instances=3)
    assert s.passed is passed and s.verdict is (Verdict.PASS if passed else Verdict.FAIL)
    assert s.severity == pytest.approx(severity)
    e = s.evidence[0]
    assert (
        e.label == ("max err" if kind == "error" else "min gap")
        and e.spread == tol
        and e.spread_kind == "tol"
    )
    assert (math.isnan(e.value) and math.isnan(value)) or e.value == value


def test_tolerance_validation():
    with pytest.raises(ValueError, match="kind"):
        SubCheck.tolerance("x", 1.0, 1.0, kind="ratio")
    with pytest.raises(ValueError, match="tol"):
        SubCheck.tolerance("x", 1.0, -1.0)
    with pytest.raises(ValueError, match="tol"):
        SubCheck.tolerance("x", 1.0, math.nan)
    with pytest.raises(ValueError, match="what"):
        SubCheck.tolerance("", 1.0, 1.0)
    with pytest.raises(ValueError, match="instances"):
        SubCheck.tolerance("x", 1.0, 1.0, instances=-1)


def test_from_subchecks_verdict_and_worst():
    t4, t5, s1, r1 = _claims()
    assert t4.verdict is Verdict.PASS and t4.instances == 1060
    assert t5.verdict is Verdict.FAIL
    assert t4.worst().what == "closed form vs batch"  # severity 3e-4 > -0.17
    assert t5.worst().what == "non-finite"  # inf
    assert s1.worst() is None and r1.worst() is None
    ungraded = Claim("S2", "NOT REPRODUCED", subchecks=[SubCheck("a", "REPRODUCED"), SubCheck("b", "PARTLY")])
    assert ungraded.worst().what == "b"  # the first failing one


# ---------------------------------------------------------------------------------------------
# serialisation


def test_json_round_trip_including_nan_and_inf():
    claims = _claims()
    text = to_json(claims)
    json.loads(text)  # strict JSON: no NaN / Infinity literals
    assert "NaN" not in text and "Infinity" not in text
    back = from_json(text)
    assert [c.to_dict() for c in back][0] == claims[0].to_dict()
    t5 = back[1]
    assert math.isnan(t5.subchecks[2].evidence[0].value) and t5.subchecks[2].severity == math.inf
    s1 = back[2]
    assert s1.evidence[1].value == -math.inf and s1.evidence[1].spread == math.inf and s1.figures == ("fig1",)
    assert back[3].verdict is Verdict.NOT_RUN and back[3].command == "python -m realdata r1"
    assert to_json(back) == text
    with pytest.raises(ValueError, match="JSON"):
        from_json("{not json")
    with pytest.raises(ValueError, match="array"):
        from_json('{"id": "T1"}')


def test_to_frame_columns_and_rows():
    claims = _claims()
    f = to_frame(claims)
    assert list(f.columns) == [
        "id",
        "statement",
        "verdict",
        "evidence",
        "setting",
        "command",
        "criterion",
        "figures",
        "checks",
        "instances",
        "worst",
    ]
    assert f["id"].tolist() == ["T4", "T5", "S1", "R1"]
    assert f["verdict"].tolist() == ["PASS", "FAIL", "PARTLY", "NOT RUN"]
    assert f.loc[0, "setting"] == "scale=quick, seed=0" and f.loc[0, "checks"] == 2
    assert f.loc[0, "worst"].startswith("max err = 3.00e-16 tol")
    s = to_frame(claims, subchecks=True)
    assert list(s.columns) == ["id", "what", "verdict", "evidence", "setting", "instances", "note"]
    assert s["id"].tolist() == ["T4", "T4", "T5", "T5", "T5"]
    assert to_frame([]).empty and list(to_frame([]).columns) == list(f.columns)
    back = pd.read_csv(io.StringIO(to_csv(claims)))
    assert back["id"].tolist() == f["id"].tolist() and back["statement"].tolist() == f["statement"].tolist()


def test_format_table_rows():
    claims = _claims()
    text = format_table(claims)
    lines = text.splitlines()
    assert lines[0].startswith("claim  statement") and lines[0].endswith("result")
    assert set(lines[1]) == {"-"} and len(lines[1]) == len(lines[0])
    row = [ln for ln in lines if ln.startswith("T4 ")][0]
    assert row.endswith("PASS") and "2 checks" in row and "1060" in row
    assert "max err 3.00e-16 (tol 1e-12)" in row
    assert [ln for ln in lines if ln.startswith("T5 ")][0].endswith("FAIL")
    assert [ln for ln in lines if ln.startswith("R1 ")][0].rstrip().endswith("NOT RUN")
    assert "no check ran" in [ln for ln in lines if ln.startswith("R1 ")][0]
    subs = lines[lines.index("sub-checks:") + 1 :]
    assert len(subs) == 5
    assert subs[0] == "  T4     PASS  max err 3.00e-16     tol 1e-12  n=60       closed form vs batch"
    assert subs[1].endswith("Monte Carlo gap  [CI99=[0.16,0.18]]")
    brief = format_table(claims, subchecks=False)
    assert "sub-checks:" not in brief and len(brief.splitlines()) == 2 + len(claims)


def test_evidence_validation_and_text():
    e = Evidence("etf_mean", 0.0213, 0.0011, "std", n=3)
    assert e.text() == "etf_mean = 0.0213 ± 0.0011 (std, n=3)"
    assert Evidence("acc", 81.5, 0.4, "ci", level=0.95, unit="%").text() == "acc = 81.5% ± 0.4% (95% CI)"
    with pytest.raises(ValueError, match="together"):
        Evidence("x", 1.0, 0.1)
    with pytest.raises(ValueError, match="level"):
        Evidence("x", 1.0, 0.1, "ci")
    with pytest.raises(ValueError, match="spread_kind"):
        Evidence("x", 1.0, 0.1, "iqr")
    with pytest.raises(ValueError, match="value"):
        Evidence("x", None)
