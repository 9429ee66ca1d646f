"""Tests of synthetic.claims.criteria / synthetic.claims.judges: every verdict of S1-S4, R4, R5 on hand-made tables.

R1s-R3s (the synthetic analogues of R1-R3): tests/synthetic/claims/test_judges_analogue.py."""

from __future__ import annotations

import math

import pandas as pd
import pytest

from synthetic.claims import criteria, records, rows
from synthetic.sweep.grids import grid_files, load_grid
from theory.claims import Claim, Verdict, from_json, to_json

CONFIG = (
    "method",
    "beta",
    "normalization",
    "encoder",
    "positives",
    "batch_size",
    "num_classes",
    "init",
    "seed",
)
BASE = dict(
    method="SCL",
    beta=0.0,
    normalization="ball",
    encoder="mlp",
    positives="label",
    batch_size=512,
    num_classes=50,
    init="random",
)
NC = dict(etf_mean=0.01, within_class_variation=0.02)
OFF = dict(etf_mean=0.3, within_class_variation=0.4)


def _runs(
    grid: str,
    setting: dict,
    final: dict,
    init: dict | None = None,
    seeds: int = 3,
    jitter: float = 1e-3,
    settled: bool = True,
):
    """Rows of `seeds` runs: epoch 0 (`init`) and epoch 10 (`final`), metrics jittered per seed.

    ``settled``: whether the runs' convergence rule held at epoch 10 (a verdict reads settled runs).
    """
    C = setting.get("num_classes", BASE["num_classes"])
    start = {"etf_mean": 0.3, "within_class_variation": 0.9, "rank_1e-2": C - 2.0, "rank_1e-4": C - 1.0}
    start.update(init or {})
    end = {"rank_1e-2": C - 1.0, "rank_1e-4": C - 1.0}
    end.update(final)
    out = []
    for s in range(seeds):
        cfg = {**BASE, **setting, "seed": s}
        key = f"{grid}-{'-'.join(str(cfg[c]) for c in CONFIG)}"
        for epoch, m in ((0, start), (10, end)):
            vals = {
                k: (v + jitter * s if k in ("etf_mean", "within_class_variation") else v)
                for k, v in m.items()
            }
            row = {"grid": grid, **{c: cfg[c] for c in CONFIG}, "run_key": key, "epoch": epoch, **vals}
            out.append({**row, "settled": settled and epoch == 10})
    return out


def _table(*chunks) -> pd.DataFrame:
    rows = [r for c in chunks for r in c]
    return pd.DataFrame(rows)


def _verdict(table: pd.DataFrame, cid: str) -> Claim:
    recs = [r for r in records.judge(table) if r.id == cid]
    assert len(recs) == 1
    return recs[0]


# ----------------------------------------------------------------------------- criteria


@pytest.mark.parametrize("cid", list(criteria.CLAIM_GRIDS))
def test_every_claim_grid_declares_its_criteria(cid):
    crit = criteria.criteria(cid)
    assert crit["id"] == cid
    for key in ("metric", "aggregation", "reproduced", "partly", "not_reproduced"):
        assert isinstance(crit[key], str) and crit[key]
    assert 0 < crit["nc_etf"] < 1 and 0 < crit["nc_wcv"] < 1
    text = criteria.criterion_text(crit)
    assert "REPRODUCED:" in text and "NOT REPRODUCED:" in text
    g = load_grid(criteria.CLAIM_GRIDS[cid])
    # [claim] of a grid of one claim, [claim.<id>] of one shared by several (r1r3_analogue)
    assert criteria.claim_table(g.spec["criteria"], cid) == crit and cid in g.claim.split(", ")
    assert len({c.seed for c in g.configs}) >= 3  # every claim: at least 3 seeds
    with pytest.raises(ValueError, match="claim_id"):
        criteria.criteria("T1")


def test_shipped_grids_are_the_claim_grids():
    assert set(criteria.CLAIM_GRIDS.values()) <= set(grid_files())


def test_rank_column_names():
    assert rows.rank_column(1e-2) == "rank_1e-2" and rows.rank_column(1e-4) == "rank_1e-4"


# ----------------------------------------------------------------------------- S1


def test_s1_verdicts_and_the_r2_answer():
    g = "s1_scl_hscl_nc"
    free = _runs(g, dict(encoder="free"), NC) + _runs(g, dict(encoder="free", method="HSCL", beta=10.0), NC)
    # MLP: SCL in DC (rank 49 -> 10, below 0.8 x 48), HSCL not at NC but full rank
    mlp = _runs(g, dict(), {**OFF, "rank_1e-2": 10.0, "rank_1e-4": 40.0}) + _runs(
        g, dict(method="HSCL", beta=10.0), OFF
    )
    rec = _verdict(_table(free), "S1")
    assert rec.verdict is Verdict.REPRODUCED
    rec = _verdict(_table(free, mlp), "S1")
    assert rec.verdict is Verdict.PARTLY
    assert "SCL ends in DC (rank at 0.01) in: encoder=mlp" in rec.notes
    assert "SCL (beta = 0) reaches NC in: encoder=free" in rec.notes
    dc = [s for s in rec.subchecks if "ends in DC at 0.01" in s.what][0]
    assert dc.verdict is Verdict.PARTLY and dc.evidence[0].value == 1
    dc4 = [s for s in rec.subchecks if "ends in DC at 0.0001" in s.what][0]
    assert dc4.verdict is Verdict.NOT_REPRODUCED  # 40 > 0.8 x 49
    assert _verdict(_table(mlp), "S1").verdict is Verdict.NOT_REPRODUCED
    # the numbers carry their seed spread
    e = [e for s in rec.subchecks for e in s.evidence if e.label == "etf_mean"][0]
    assert e.spread_kind == "std" and e.n == 3 and e.spread == pytest.approx(1e-3)


def test_s1_record_fields_and_serialisation():
    g = "s1_scl_hscl_nc"
    t = _table(_runs(g, dict(encoder="free"), NC))
    rec = _verdict(t, "S1")
    assert rec.setting["grid"] == g and rec.setting["scale"] == "default" and rec.setting["seeds"] == "3"
    assert rec.setting["encoder"] == "free" and "normalisation" in rec.setting
    assert rec.command.startswith("python -m synthetic sweep s1_scl_hscl_nc --results results")
    assert "NC: seed means etf_mean < 0.05" in rec.criterion
    assert from_json(to_json([rec]))[0] == rec
    # a scaled folder is judged apart, its command names the scale, the default scale first
    t2 = t.assign(grid="s1_scl_hscl_nc-paper")
    recs = [r for r in records.judge(pd.concat([t2, t])) if r.id == "S1"]
    assert [r.setting["grid"] for r in recs] == ["s1_scl_hscl_nc", "s1_scl_hscl_nc-paper"]
    assert "--scale paper" in recs[1].command


# ----------------------------------------------------------------------------- S2


def test_s2_verdicts():
    g = "s2_ucl_positives"
    lab_nc = _runs(g, dict(method="UCL", positives="label"), NC)
    noi_off = _runs(g, dict(method="UCL", positives="noise"), OFF)
    assert _verdict(_table(lab_nc, noi_off), "S2").verdict is Verdict.REPRODUCED
    noi_nc = _runs(g, dict(method="UCL", positives="noise"), NC)
    assert _verdict(_table(lab_nc, noi_nc), "S2").verdict is Verdict.PARTLY
    lab_off = _runs(g, dict(method="UCL", positives="label"), OFF)
    assert _verdict(_table(lab_off, noi_nc), "S2").verdict is Verdict.NOT_REPRODUCED
    assert _verdict(_table(lab_nc), "S2").verdict is Verdict.NOT_RUN


# ----------------------------------------------------------------------------- S3


def _s3(etfs: dict[float, float], wcv: float = 0.3, collision: bool = True, **setting):
    g = "s3_hucl_beta"
    out = []
    for b, e in etfs.items():
        extra = {"collision": 0.1 + b / 100, "collision_nc": 0.1 + b / 50} if collision else {}
        out += _runs(
            g,
            dict(method="HUCL" if b > 0 else "UCL", beta=b, **setting),
            dict(etf_mean=e, within_class_variation=wcv, **extra),
        )
    return out


def test_s3_verdicts_and_collision():
    grows = {0.0: 0.01, 2.0: 0.1, 10.0: 0.3, 30.0: 0.5}
    rec = _verdict(_table(_s3(grows)), "S3")
    assert rec.verdict is Verdict.REPRODUCED, rec.notes
    coll = [s for s in rec.subchecks if "collision" in s.what][0]
    assert coll.verdict is Verdict.REPRODUCED and any(e.label.startswith("q(beta=30)") for e in coll.evidence)
    flat_nc = {0.0: 0.01, 2.0: 0.01, 10.0: 0.01, 30.0: 0.01}
    assert _verdict(_table(_s3(flat_nc, wcv=0.01)), "S3").verdict is Verdict.NOT_REPRODUCED
    mixed = _table(_s3(grows, encoder="mlp"), _s3(flat_nc, wcv=0.01, encoder="free"))
    assert _verdict(mixed, "S3").verdict is Verdict.PARTLY
    # growth within the seed noise does not count: 2 pooled stds
    tiny = {0.0: 0.2, 2.0: 0.2, 10.0: 0.2005, 30.0: 0.201}
    assert _verdict(_table(_s3(tiny)), "S3").verdict is Verdict.PARTLY


# ----------------------------------------------------------------------------- S4


def _s4(norm: str, beta: float, rank: float, nc: bool = False):
    m = "HSCL" if beta > 0 else "SCL"
    return _runs(
        "s4_no_normalisation",
        dict(normalization=norm, method=m, beta=beta),
        {**(NC if nc else OFF), "rank_1e-2": rank, "rank_1e-4": rank + 5},
    )


def test_s4_verdicts_at_two_thresholds_and_the_abstract():
    dc_all = _table(
        _s4("none", 0.0, 10.0), _s4("none", 10.0, 12.0), _s4("ball", 0.0, 10.0), _s4("ball", 10.0, 48.0)
    )
    rec = _verdict(dc_all, "S4")
    assert rec.verdict is Verdict.REPRODUCED
    assert "verdict at 0.01: REPRODUCED; at 0.0001: REPRODUCED" in rec.notes
    abstract = [s for s in rec.subchecks if "(the abstract)" in s.what]
    assert len(abstract) == 2 and all(s.verdict is Verdict.REPRODUCED for s in abstract)
    partly = _table(_s4("none", 0.0, 10.0), _s4("none", 10.0, 48.0))
    assert _verdict(partly, "S4").verdict is Verdict.PARTLY
    # DC at 1e-2 but not at 1e-4 (rank + 5 = 44 > 0.8 x 49): reported beside the verdict
    edge = _table(_s4("none", 0.0, 38.0), _s4("none", 10.0, 38.0))
    rec = _verdict(edge, "S4")
    assert rec.verdict is Verdict.REPRODUCED and "at 0.0001: NOT REPRODUCED" in rec.notes
    none_dc = _table(_s4("none", 0.0, 48.0), _s4("none", 10.0, 49.0))
    assert _verdict(none_dc, "S4").verdict is Verdict.NOT_REPRODUCED
    assert _verdict(_table(_s4("ball", 0.0, 10.0)), "S4").verdict is Verdict.NOT_RUN


def test_dc_is_judged_against_the_initialisation():
    # a run that starts at rank 20 of 49 and stays there is not in DC: it lost nothing
    t = _table(
        _runs(
            "s4_no_normalisation",
            dict(normalization="none"),
            {**OFF, "rank_1e-2": 20.0, "rank_1e-4": 20.0},
            init={"rank_1e-2": 20.0, "rank_1e-4": 20.0},
        )
    )
    assert _verdict(t, "S4").verdict is Verdict.NOT_REPRODUCED


# ----------------------------------------------------------------------------- R4


def _r4(method: str, beta: float, final: dict, source_nc: bool = True):
    init = {**(NC if source_nc else OFF), "rank_1e-2": 49.0, "rank_1e-4": 49.0}
    return _runs("r4_near_nc", dict(method=method, beta=beta, init="nc", encoder="free"), final, init=init)


def test_r4_verdicts():
    keep = [_r4("SCL", 0.0, NC), _r4("HSCL", 10.0, NC)]
    drift = [_r4("HUCL", 10.0, {**OFF, "rank_1e-2": 12.0}), _r4("HUCL", 30.0, {**OFF, "rank_1e-2": 5.0})]
    small = [_r4("UCL", 0.0, NC), _r4("HUCL", 2.0, NC)]
    rec = _verdict(_table(*keep, *drift, *small), "R4")
    assert rec.verdict is Verdict.REPRODUCED, rec.notes
    drift_no_dc = [_r4("HUCL", 10.0, OFF), _r4("HUCL", 30.0, OFF)]
    assert _verdict(_table(*keep, *drift_no_dc), "R4").verdict is Verdict.PARTLY
    stay = [_r4("HUCL", 10.0, NC), _r4("HUCL", 30.0, NC)]
    assert _verdict(_table(*keep, *stay), "R4").verdict is Verdict.PARTLY
    lose = [_r4("SCL", 0.0, OFF), _r4("HSCL", 10.0, OFF)]
    assert _verdict(_table(*lose, *stay), "R4").verdict is Verdict.NOT_REPRODUCED
    bad = [_r4(m, b, NC, source_nc=False) for m, b in (("SCL", 0.0), ("HUCL", 10.0), ("HUCL", 30.0))]
    rec = _verdict(_table(*bad), "R4")
    assert rec.verdict is Verdict.NOT_REPRODUCED and "PREMISE FAILED" in rec.notes


# ----------------------------------------------------------------------------- R5


def _r5(C: int, b: int, final: dict):
    return _runs(
        "r5_batch_size",
        dict(method="HSCL", beta=10.0, batch_size=b, num_classes=C, encoder="free"),
        {**final, "steps": 1500},
    )


def test_r5_verdicts():
    good = [_r5(C, b, NC) for C in (100, 200) for b in (64, 128, 512)] + [_r5(C, 32, OFF) for C in (100, 200)]
    rec = _verdict(_table(*good), "R5")
    assert rec.verdict is Verdict.REPRODUCED
    assert any("after 1500 steps" in s.what for s in rec.subchecks)
    half = [_r5(100, b, NC) for b in (64, 512)] + [_r5(100, 32, NC)]
    assert _verdict(_table(*half), "R5").verdict is Verdict.PARTLY
    none = [_r5(100, b, OFF) for b in (64, 512)] + [_r5(100, 32, NC)]
    assert _verdict(_table(*none), "R5").verdict is Verdict.NOT_REPRODUCED
    assert _verdict(_table(*[_r5(100, 64, NC)]), "R5").verdict is Verdict.NOT_RUN


# ----------------------------------------------------------------------------- views


def test_not_run_records_and_frame_views():
    recs = records.judge(pd.DataFrame(), results="R")
    # every claim of a grid, then the open problem O2 (the map of every grid's settled settings)
    assert [r.id for r in recs] == [*criteria.CLAIM_GRIDS, "O2"]
    assert all(r.verdict is Verdict.NOT_RUN and "--results R" in r.command and r.criterion for r in recs)
    t = _table(_runs("s1_scl_hscl_nc", dict(encoder="free"), NC))
    frame = records.evaluate_claims(t)
    assert list(frame.columns) == [
        "claim",
        "grid",
        "statement",
        "n_runs",
        "measured",
        "verdict",
        "record_verdict",
    ]
    row = frame.set_index("claim").loc["S1"]
    assert row["verdict"] == "reproduced" and "etf_mean = 0.011 ± 0.001" in row["measured"]
    assert frame.set_index("claim").loc["S2", "verdict"] == "no data"
    tidy = records.to_frame(records.judge(t))
    assert set(tidy["id"]) == {*criteria.CLAIM_GRIDS, "O2"}
    details = records.claim_details(t)
    assert bool(details["nc"].all()) and "dc_rank_1e-2" in details.columns
    # grids whose criteria define no DC (S2, S3, R5) give no DC flags, and no error
    s2 = _table(_runs("s2_ucl_positives", dict(method="UCL", positives="label"), NC))
    both = records.claim_details(pd.concat([t, s2], ignore_index=True))
    assert set(both["claim"]) == {"S1", "S2"} and both.loc[both["claim"] == "S2", "dc_rank_1e-2"].isna().all()
    text = records.format_records(records.judge(t))
    assert "S1 [s1_scl_hscl_nc]: REPRODUCED" in text
    assert frame.set_index("claim").loc["S1", "n_runs"] == 3


def test_run_summary_final_and_initial_rows():
    t = _table(_runs("s2_ucl_positives", dict(method="UCL"), NC))
    runs = rows.run_summary(t)
    assert len(runs) == 3 and (runs["final_epoch"] == 10).all()
    assert runs["init_etf_mean"].tolist() == pytest.approx([0.3, 0.301, 0.302])
    agg = rows.aggregate(runs, [])
    assert agg["n_seeds"].iloc[0] == 3 and math.isclose(agg["etf_mean_std"].iloc[0], 1e-3, rel_tol=1e-9)
    with pytest.raises(ValueError):
        rows.run_summary(pd.DataFrame({"a": [1]}))


def test_a_claim_names_the_seeds_missing_behind_their_records():
    """Observed: a run file gone behind its completion record made a claim average 2 seeds
    instead of 3 without a word."""
    g = "s1_scl_hscl_nc"
    scl, hscl = dict(encoder="free"), dict(encoder="free", method="HSCL", beta=10.0)
    full = _table(_runs(g, scl, NC), _runs(g, hscl, NC))
    lost = full[(full["method"] == "HSCL") & (full["seed"] == 1)]
    table = full.drop(lost.index).reset_index(drop=True)
    config = {**BASE, **hscl, "seed": 1}
    table.attrs["missing"] = [
        {"grid": g, "run_key": lost["run_key"].iloc[0], "record": "r.json", "config": config}
    ]
    rec = _verdict(table, "S1")
    assert rec.verdict is _verdict(full.drop(lost.index), "S1").verdict  # the rule itself is unchanged
    assert "method=HSCL" in rec.notes and "seed 1 (n = 2 of 3)" in rec.notes, rec.notes
    assert rec.setting["missing runs"] == "1"
    assert "seed 1 (n = 2 of 3)" in records.evaluate_claims(table).set_index("claim").loc["S1", "measured"]
    details = records.claim_details(table)
    s1 = details[(details["claim"] == "S1")].set_index("method")
    assert s1.loc["HSCL", "n_seeds"] == 2 and s1.loc["HSCL", "missing_seeds"] == "1"
    assert s1.loc["SCL", "n_seeds"] == 3 and s1.loc["SCL", "missing_seeds"] == ""
    # a whole grid folder missing: NOT RUN says so
    gone = table.iloc[:0].copy()
    gone.attrs["missing"] = table.attrs["missing"]
    assert "missing behind its completion record" in _verdict(gone, "S1").notes


# ----------------------------------------------------------------------------- UNDECIDED


def test_a_setting_with_an_unsettled_run_makes_the_claim_undecided():
    g = "s1_scl_hscl_nc"
    scl = _runs(g, dict(encoder="free"), NC)
    hscl = _runs(g, dict(encoder="free", method="HSCL", beta=10.0), NC)
    assert _verdict(_table(scl, hscl), "S1").verdict is Verdict.REPRODUCED
    hscl_open = [dict(r) for r in hscl]
    for r in hscl_open:  # seed 2 of HSCL did not settle within its budget
        if r["seed"] == 2 and r["epoch"] == 10:
            r["settled"] = False
            r["change_etf_mean"] = 0.02
    rec = _verdict(_table(scl, hscl_open), "S1")
    assert rec.verdict is Verdict.UNDECIDED
    assert "On the 1 decided setting(s) alone the rule gives REPRODUCED" in rec.notes
    assert "python -m synthetic sweep s1_scl_hscl_nc --epochs 20" in rec.notes
    und = [s for s in rec.subchecks if s.verdict is Verdict.UNDECIDED]
    assert len(und) == 1 and "method=HSCL" in und[0].what and "1 of 3 runs" in und[0].what
    labels = {e.label: e for e in und[0].evidence}
    assert labels["seeds settled"].value == 2 and labels["seeds settled"].n == 3
    assert labels["largest last-window change of etf_mean"].value == 0.02
    # the decided setting's numbers are judged from settled runs only; the open one has none
    nc = [s for s in rec.subchecks if s.what.endswith("at NC") and s.verdict is not Verdict.UNDECIDED]
    assert [s.what for s in nc] == ["[method=SCL, beta=0] SCL beta=0: at NC"] or len(nc) == 1
    assert {e.label: e.value for e in rec.evidence}["settings decided (every seed settled)"] == 1


def test_runs_without_a_rule_decide_nothing():
    g = "s1_scl_hscl_nc"
    table = _table(_runs(g, dict(encoder="free"), NC, settled=False)).drop(columns="settled")
    rec = _verdict(table, "S1")
    assert rec.verdict is Verdict.UNDECIDED
    assert "No setting is decided" in rec.notes
    assert all(s.verdict is Verdict.UNDECIDED for s in rec.subchecks)
    assert "no convergence rule declared" in rec.subchecks[0].note
    # the record serialises with the new verdict
    assert from_json(to_json([rec]))[0] == rec
    frame = records.evaluate_claims(table)
    assert set(frame.loc[frame["claim"] == "S1", "verdict"]) == {"undecided"}


def test_a_longer_budget_supersedes_the_run_it_continued():
    """docs/claims.md#extending-a-run: after a continue command a folder holds both budgets of a
    lineage; only the longer one is judged, so the shorter budget's unsettled runs do not keep
    the claim undecided, and runs that differ in anything else are all kept."""
    g = "s1_scl_hscl_nc"
    extra = dict(settle_window=16, n_per_class=50, max_steps=0)

    def runs(setting, final, epochs, settled):
        out = []
        for r in _runs(g, {**setting, "batch_size": 0}, final, settled=settled):
            cfg = {c: r[c] for c in ("grid", *CONFIG)}  # config columns come before run_key
            rest = {k: v for k, v in r.items() if k not in cfg and k != "run_key"}
            out.append({**cfg, **extra, "epochs": epochs, "run_key": f"{r['run_key']}-e{epochs}", **rest})
        return out

    scl = runs(dict(encoder="free"), NC, 1500, True)
    hscl_short = runs(dict(encoder="free", method="HSCL", beta=10.0), OFF, 1500, False)
    hscl_long = runs(dict(encoder="free", method="HSCL", beta=10.0), NC, 3000, True)
    assert _verdict(_table(scl, hscl_short), "S1").verdict is Verdict.UNDECIDED
    rec = _verdict(_table(scl, hscl_short, hscl_long), "S1")
    assert rec.verdict is Verdict.REPRODUCED
    summary = rows.run_summary(_table(scl, hscl_short, hscl_long))
    assert len(summary) == 6 and set(summary.loc[summary["method"] == "HSCL", "epochs"]) == {3000}
    # a step budget is compared in steps: 2 epochs of N // b = 5 steps (10) < max_steps 12
    # (run key, seed, epochs, max_steps, settle_window); C = 2, 10 per class, batch 4: 5 steps per epoch
    spec = [("a", 0, 2, 0, 4), ("b", 0, 3, 12, 4), ("c", 1, 2, 0, 4), ("d", 1, 9, 0, 0), ("e", 1, 8, 0, 0)]
    cols = ["run_key", "seed", "epochs", "max_steps", "settle_window"]
    t = pd.DataFrame([dict(zip(cols, r, strict=True)) for r in spec]).assign(
        num_classes=2, n_per_class=10, batch_size=4
    )
    # hidden: a config value that is missing (NaN) for every run, as free features store it
    t.insert(3, "hidden", math.nan)
    assert list(rows.budget_steps(t)) == [10, 12, 10, 45, 40]
    # b supersedes a; c has another seed; d and e have no rule (snapshots): all kept
    assert list(rows.longest_of_lineage(t)["run_key"]) == ["b", "c", "d", "e"]
