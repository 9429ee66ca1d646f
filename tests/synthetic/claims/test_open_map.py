"""Tests of synthetic.claims.open_map: the O2 map of decided settings, on hand-made tables.

An independent reading of the declared thresholds (NC: etf_mean < 0.05 and within-class variation
< 0.1 in seed means; DC: final rank_1e-2 <= 0.8 x min(rank at epoch 0, C - 1)) is written out in
``_cell`` below and compared with the module's classification.
"""

from __future__ import annotations

import pandas as pd
import pytest

from synthetic.claims import open_map, records
from synthetic.claims.rows import run_summary
from synthetic.claims.undecided import split
from tests.synthetic.claims.test_claims import NC, OFF, _runs, _table
from theory.claims import Verdict


def _o2(table: pd.DataFrame):
    recs = [r for r in records.judge(table) if r.id == "O2"]
    assert len(recs) == 1
    return recs[0]


def _cell(etf: float, wcv: float, rank: float, init_rank: float, C: int) -> str:
    """The declared map, written out: DC first (a rank loss), then NC, else rank kept without NC."""
    if rank <= 0.8 * min(init_rank, C - 1):
        return "DC"
    if etf < 0.05 and wcv < 0.1:
        return "NC"
    return "rank kept, no NC"


def test_each_setting_lands_in_its_declared_cell():
    C = 10
    table = _table(
        _runs("s1_scl_hscl_nc", {"num_classes": C}, NC),  # NC
        _runs("s1_scl_hscl_nc", {"num_classes": C, "beta": 10.0, "method": "HSCL"}, OFF),  # rank kept
        _runs("s4_no_normalisation", {"num_classes": C, "normalization": "none"}, {**OFF, "rank_1e-2": 3.0}),
        # a rank exactly at the DC line (0.8 x 8 = 6.4 -> 6 is DC, 7 is not)
        _runs("s3_hucl_beta", {"num_classes": C, "method": "HUCL", "beta": 30.0}, {**OFF, "rank_1e-2": 7.0}),
    )
    decided, undecided = split(run_summary(table))
    assert len(undecided) == 0
    got = open_map.classify(decided)
    assert len(got) == 4
    for _, r in got.iterrows():
        want = _cell(
            r["etf_mean_mean"],
            r["within_class_variation_mean"],
            r["rank_1e-2_mean"],
            r["init_rank_1e-2_mean"],
            C,
        )
        assert r["cell"] == want, r
    assert sorted(got["cell"]) == ["DC", "NC", "rank kept, no NC", "rank kept, no NC"]
    rec = _o2(table)
    assert rec.verdict == Verdict.FOUND
    counts = {e.label: e.value for e in rec.evidence}
    assert counts["decided settings: rank kept, no NC"] == 2 and counts["decided settings: DC"] == 1
    dc0 = [s for s in rec.subchecks if s.what.startswith("DC without hard negatives")]
    assert len(dc0) == 1 and dc0[0].verdict == Verdict.FOUND  # the beta = 0, no-normalisation setting
    assert "rank kept, no NC:" in rec.notes and "DC:" in rec.notes


def test_not_found_when_every_decided_setting_is_nc_or_dc():
    table = _table(
        _runs("s1_scl_hscl_nc", {}, NC),
        _runs("s1_scl_hscl_nc", {"beta": 10.0, "method": "HSCL"}, {**NC, "rank_1e-2": 10.0}),
    )
    rec = _o2(table)
    assert rec.verdict == Verdict.NOT_FOUND
    dc0 = [s for s in rec.subchecks if s.what.startswith("DC without hard negatives")][0]
    assert dc0.verdict == Verdict.NOT_FOUND  # the DC setting has beta = 10


def test_undecided_settings_are_left_out_and_counted():
    table = _table(
        _runs("s1_scl_hscl_nc", {}, NC),
        _runs("s3_hucl_beta", {"method": "HUCL", "beta": 10.0}, OFF, settled=False),
    )
    rec = _o2(table)
    # the only 'rank kept' candidate has not settled: it could still be, so no NOT FOUND
    assert rec.verdict == Verdict.UNDECIDED
    counts = {e.label: e.value for e in rec.evidence}
    assert counts["undecided settings (left out)"] == 1 and "1 undecided setting(s) left out" in rec.notes
    found = _table(
        _runs("s1_scl_hscl_nc", {}, NC),
        _runs("s1_scl_hscl_nc", {"method": "HSCL", "beta": 10.0}, OFF),
        _runs("s3_hucl_beta", {"method": "HUCL", "beta": 10.0}, OFF, settled=False),
    )
    assert _o2(found).verdict == Verdict.FOUND  # an undecided setting cannot undo a finding
    only_open = _table(_runs("s3_hucl_beta", {"method": "HUCL", "beta": 10.0}, OFF, settled=False))
    assert _o2(only_open).verdict == Verdict.UNDECIDED
    # an undecided beta = 0 setting leaves 'DC without hard negatives' undecided too
    open0 = _table(
        _runs("s1_scl_hscl_nc", {"method": "HSCL", "beta": 10.0}, OFF),
        _runs("s4_no_normalisation", {"normalization": "none"}, OFF, settled=False),
    )
    dc0 = [s for s in _o2(open0).subchecks if s.what.startswith("DC without hard negatives")][0]
    assert dc0.verdict == Verdict.UNDECIDED


def test_the_dc_line_the_available_rank_and_unknown_ranks():
    C = 6
    # final rank exactly 0.8 x min(rank at epoch 0, C - 1) = 0.8 x 5 = 4 is DC; 5 is not
    at_line = _runs("s1_scl_hscl_nc", {"num_classes": C}, {**OFF, "rank_1e-2": 4.0}, init={"rank_1e-2": 9.0})
    above = _runs(
        "s1_scl_hscl_nc",
        {"num_classes": C, "method": "HSCL", "beta": 2.0},
        {**OFF, "rank_1e-2": 5.0},
        init={"rank_1e-2": 9.0},
    )
    # min(): an initial rank above C - 1 (9 > 5) is capped at C - 1
    got = open_map.classify(split(run_summary(_table(at_line, above)))[0]).set_index("beta")
    assert got.loc[0.0, "cell"] == _cell(0.3, 0.4, 4.0, 9.0, C) == "DC"
    assert got.loc[2.0, "cell"] == _cell(0.3, 0.4, 5.0, 9.0, C) == "rank kept, no NC"
    assert got.loc[0.0, "init_avail_rank_1e-2_mean"] == C - 1
    # a rank never recorded is neither kept nor lost, and never makes the answer FOUND
    unknown = _table(
        _runs("s1_scl_hscl_nc", {"num_classes": C}, {**OFF, "rank_1e-2": float("nan")}),
        _runs("s1_scl_hscl_nc", {"num_classes": C, "method": "HSCL", "beta": 2.0}, NC),
    )
    rec = _o2(unknown)
    assert rec.verdict == Verdict.NOT_FOUND
    assert {e.label: e.value for e in rec.evidence}["decided settings: rank unknown"] == 1


def test_a_config_stored_in_two_grids_is_one_setting():
    same = {"method": "UCL", "encoder": "free"}
    table = _table(_runs("s2_ucl_positives", same, NC), _runs("s3_hucl_beta", same, NC))
    table["run_key"] = table["run_key"].str.replace("s3_hucl_beta", "s2_ucl_positives")  # one key
    got = open_map.classify(split(run_summary(table))[0])
    assert len(got) == 1 and got.loc[0, "grid"] == "s2_ucl_positives+s3_hucl_beta"
    assert got.loc[0, "n_seeds"] == 3


def test_near_nc_starts_are_not_part_of_the_map_and_no_runs_is_not_run():
    table = _table(
        _runs("r4_near_nc", {"init": "nc", "method": "HUCL", "beta": 30.0}, OFF),
        _runs("r4_near_nc", {"init": "nc"}, NC),
    )
    assert _o2(table).verdict == Verdict.NOT_RUN and "random initialisation" in _o2(table).notes
    # undecided near-NC runs are not counted either
    mixed = _table(
        _runs("s1_scl_hscl_nc", {}, NC),
        _runs("r4_near_nc", {"init": "nc", "method": "HUCL", "beta": 30.0}, OFF, settled=False),
        _runs("r4_near_nc", {"init": "nc"}, NC),
    )
    rec = _o2(mixed)
    assert rec.verdict == Verdict.NOT_FOUND and rec.setting["runs"] == "3"
    assert {e.label: e.value for e in rec.evidence}["undecided settings (left out)"] == 0
    empty = _o2(pd.DataFrame(columns=["grid", "run_key", "epoch"]))
    assert (
        empty.verdict == Verdict.NOT_RUN
        and "python -m synthetic sweep synthetic/grids/*.toml" in empty.command
    )


def test_each_scale_gets_its_own_map():
    table = _table(_runs("s1_scl_hscl_nc", {}, NC), _runs("s1_scl_hscl_nc-paper", {}, OFF))
    recs = [r for r in records.judge(table) if r.id == "O2"]
    assert [r.setting["scale"] for r in recs] == ["default", "paper"]
    assert [r.verdict for r in recs] == [Verdict.NOT_FOUND, Verdict.FOUND]
    assert "--scale paper" in recs[1].command


def test_classify_names_the_missing_columns():
    with pytest.raises(ValueError, match="etf_mean"):
        open_map.classify(pd.DataFrame({"grid": ["g"], "num_classes": [3]}))
    with pytest.raises(ValueError, match="runs"):
        open_map.classify([1, 2])
