"""The adapter: producers give the tables the figures need; the W5 verdict; synthetic results."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from figures.pipeline import produce_synthetic, produce_theory
from figures.pipeline import w5 as records
from figures.plots import registry
from figures.plots.spec import availability
from figures.report import commands
from theory import claims

ROOT = Path(__file__).resolve().parents[3]
V = claims.Verdict


def _columns_needed(figure_id: str) -> dict[str, tuple[str, ...]]:
    return {n.name: n.columns for n in registry.get(figure_id).needs}


def _nf(ratio=1.0, softmax_rel=0.0, above=True):
    ns = np.array([100, 1000, 10000])
    c, floor, var = 7.0, 0.045, 20.0
    soft = (floor + var / ns) * (1 + softmax_rel)
    weib = c / ns * ratio
    if not above:
        weib = np.maximum(weib, soft * 1.5)
    return pd.DataFrame(
        {
            "n": ns,
            "reps": 100,
            "mse_softmax": soft,
            "mse_weibit": weib,
            "se_mse_softmax": 1e-3,
            "se_mse_weibit": 1e-4,
            "theory_weibit": c / ns,
            "bias2_floor": floor,
            "theory_softmax": floor + var / ns,
            "c": c,
        }
    )


@pytest.mark.parametrize(
    "table, verdict",
    [
        (_nf(), V.REPRODUCED),
        (_nf(ratio=1.6), V.PARTLY),  # Weibit off c/n, softmax at its floor
        (_nf(softmax_rel=0.5), V.PARTLY),  # softmax not at its floor
        (_nf(ratio=1.6, softmax_rel=0.5), V.NOT_REPRODUCED),
        (_nf().iloc[0:0], V.NOT_RUN),
    ],
)
def test_w5_verdict_on_hand_made_tables(table, verdict):
    rec = records.w5_claim(table, scale="quick", results="R")
    assert rec.verdict == verdict
    assert rec.command == "python -m figures --only noise_floor --scale quick"
    if verdict != V.NOT_RUN:
        assert rec.criterion and rec.evidence and rec.figures == ("noise_floor",)
        assert len(rec.subchecks) == len(table) + 1


def test_w5_rejects_a_table_without_the_columns():
    with pytest.raises(ValueError, match="columns"):
        records.w5_claim(pd.DataFrame({"n": [1]}))


def test_command_for_every_catalogue_id():
    assert commands.OPEN_IDS == claims.OPEN_IDS
    assert commands.CHECK_IDS == claims.CHECK_IDS and set(commands.CLAIM_COMMANDS) == set(claims.CATALOGUE)
    for cid in claims.CATALOGUE:
        for scale in commands.SCALES:
            cmd = commands.command_for(cid, results="RES", scale=scale)
            assert cmd.startswith("python -m ") and "{" not in cmd, (cid, cmd)
    assert commands.command_for("S1", results="RES", scale="default").startswith(
        "python -m synthetic sweep s1_scl_hscl_nc --results RES/synthetic"
    )
    assert commands.command_for("T1", scale="quick") == "python -m theory --quick"
    assert commands.command_for("T1", scale="default") == "python -m theory"
    # W5 is the noise-floor simulation, which reads nothing from the results folder
    assert commands.command_for("W5", results="RES", scale="paper") == (
        "python -m figures --only noise_floor --scale paper"
    )
    with pytest.raises(ValueError, match="scale"):
        commands.command_for("T1", scale="a b")
    with pytest.raises(ValueError, match="claim_id"):
        commands.command_for("T9")


def test_commands_agree_with_the_producers_own_commands():
    """The NOT RUN commands are the ones the synthetic and real-data packages give their records."""
    from realdata.claims.grids import group_command
    from synthetic.claims.criteria import CLAIM_GRIDS
    from synthetic.claims.criteria import command as synthetic_command

    assert commands.SYNTHETIC_GRIDS == CLAIM_GRIDS
    for cid in CLAIM_GRIDS:
        for scale in commands.SCALES:
            assert commands.command_for(cid, results="RES", scale=scale) == synthetic_command(
                cid, results="RES/synthetic", scale=scale
            ), (cid, scale)
    groups = {"R1": "r1-r3", "R2": "r1-r3", "R3": "r1-r3", "W1": "w1-w3", "W2": "w1-w3", "W3": "w1-w3"}
    for cid, group in groups.items():
        for scale in commands.SCALES:  # the CIFAR-scale command whatever the job's scale
            assert commands.command_for(cid, results="RES", scale=scale) == group_command(
                group, results="RES"
            )
    from synthetic.claims.open_map import command as open_map_command

    for scale in commands.SCALES:  # O2 reads every synthetic grid
        assert commands.command_for("O2", results="RES", scale=scale) == open_map_command(
            results="RES/synthetic", scale=scale
        )
    covered = (
        set(claims.CHECK_IDS) | set(claims.OPEN_IDS) | set(CLAIM_GRIDS) | set(groups) | {"W4", "W5", "O2"}
    )
    assert covered == set(claims.CATALOGUE)
    assert commands.command_for("W4", results="RES").startswith("python -m benchmarks.gpu_check --out RES/")


def test_pot_and_link_tables_have_what_the_figures_need():
    rng = np.random.default_rng(0)
    z = rng.normal(size=(150, 8))
    z /= np.linalg.norm(z, axis=1, keepdims=True)
    s = (z @ z.T)[np.tril_indices(150, -1)]
    tables = produce_theory.pot_tables(s, source="random")
    for name, cols in _columns_needed("pot_exceedances").items():
        assert name in tables and set(cols) <= set(tables[name].columns), name
    assert tables["pot_fit"]["xi"].iloc[0] < 0  # cosines are bounded: Weibull domain
    cand = np.column_stack([np.full(40, 0.9), rng.uniform(-0.5, 0.8, size=(40, 6))])
    link = produce_theory.link_tables(cand, source="toy")
    for name, cols in _columns_needed("lambda_profile").items():
        assert set(cols) <= set(link[name].columns), name
    assert availability(registry.get("lambda_profile"), link).ok
    assert availability(registry.get("pot_exceedances"), tables).ok


def test_theory_producers_have_what_the_figures_need():
    t = {
        "hucl_nc": produce_theory.hucl_nc_table("quick", num_classes=(10,)),
        "gram": produce_theory.gram_table("quick", num_classes=(3,)),
        "harris_gap": produce_theory.harris_gap_table("quick", betas=(0.0, 5.0)),
    }
    for fid in ("hucl_at_nc", "gram_etf", "harris_gap"):
        assert availability(registry.get(fid), t).ok, fid
    h = t["hucl_nc"]
    assert h["q"].iloc[0] == pytest.approx(0.1) and h["hucl_at_nc"].iloc[0] == pytest.approx(
        h["ucl_optimum"].iloc[0]
    )
    g = t["gram"]
    etf = g[g["program"] == "ETF"]["value"].to_numpy()
    opt = g[g["program"] == "SCL optimum"]["value"].to_numpy()
    assert np.abs(etf - opt).max() < 1e-3
    hg = t["harris_gap"]
    assert (hg["ci_low"] <= hg["estimate"]).all() and (hg["estimate"] <= hg["ci_high"]).all()
    with pytest.raises(ValueError, match="scale"):
        produce_theory.hucl_nc_table("huge")


def test_open_problem_tables_share_the_checks_rows(monkeypatch):
    """The open-problem tables are the rows of theory.claims.open_search at the checks' scale."""
    from theory.claims import open_search

    seen = []
    monkeypatch.setattr(open_search, "landscape_rows", lambda s, seed: seen.append((s, seed)) or ({"a": 1},))
    monkeypatch.setattr(open_search, "hessian_rows", lambda s: seen.append((s,)) or ({"kind": "ball"},))
    assert produce_theory.open_landscape_table("quick", 3).to_dict("records") == [{"a": 1}]
    assert produce_theory.open_hessian_table("paper")["kind"].tolist() == ["ball"]
    assert seen == [("quick", 3), ("full",)]
    for bad in (
        lambda: produce_theory.open_landscape_table("huge"),
        lambda: produce_theory.open_hessian_table("x"),
    ):
        with pytest.raises(ValueError, match="scale"):
            bad()
    with pytest.raises(ValueError, match="seed"):
        produce_theory.open_landscape_table("quick", -1)


def test_spectrum_table_from_class_means_and_from_wide_columns():
    C = 4
    etf = (np.eye(C) - 1.0 / C) * np.sqrt(C / (C - 1))  # rows: an ETF in R^C (rank C-1)
    flat = np.zeros((C, C))
    flat[:, 0] = [1, -1, 1, -1]  # rank 1: dimensional collapse
    t = pd.DataFrame(
        {
            "grid": "g",
            "method": "SCL",
            "beta": 0.0,
            "seed": 0,
            "run_key": ["a", "b"],
            "epoch": [5, 5],
            "class_means": [json.dumps(etf.tolist()), json.dumps(flat.tolist())],
        }
    )
    s = produce_synthetic.spectrum_table(t)
    assert set(_columns_needed("spectrum_scl")["spectrum"]) <= set(s.columns)
    a = s[s["run_key"] == "a"]["log_ratio"].to_numpy()
    b = s[s["run_key"] == "b"]["log_ratio"].to_numpy()
    assert len(a) == C - 1 and np.allclose(a, 0.0, atol=1e-9)
    assert b[0] == 0.0 and (b[1:] < -30).all()
    wide = pd.DataFrame(
        {
            "method": ["SCL"],
            "beta": [0.0],
            "run_key": ["a"],
            "epoch": [1],
            "spectrum_0": [0.0],
            "spectrum_1": [-2.0],
        }
    )
    w = produce_synthetic.spectrum_table(wide)
    assert w["index"].tolist() == [0, 1] and w["log_ratio"].tolist() == [0.0, -2.0]
    assert len(produce_synthetic.spectrum_table(pd.DataFrame({"a": [1]}))) == 0


@pytest.fixture(scope="module")
def tiny_results(tmp_path_factory) -> Path:
    """Two real synthetic runs stored by the synthetic package under the S1 grid's folder name."""
    res = tmp_path_factory.mktemp("results")
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)}
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "synthetic",
            "sweep",
            "--method",
            "SCL",
            "--beta",
            "0",
            "5",
            "--epochs",
            "4",
            "--seeds",
            "1",
            "--encoder",
            "free",
            "--lr",
            "0.05",
            "--num-classes",
            "4",
            "--n-per-class",
            "5",
            "--normalization",
            "ball",
            "--set",
            "record_means=true",
            "eval_every=2",
            "--name",
            "s1_scl_hscl_nc",
            "--results",
            str(res / "synthetic"),
            "--no-progress",
        ],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode == 0, r.stderr[-3000:]
    return res


def test_synthetic_results_are_found_judged_and_drawn(tiny_results, tmp_path):
    assert produce_synthetic.find_synthetic_results(tiny_results) == [(tiny_results / "synthetic").resolve()]
    t = produce_synthetic.load_synthetic(tiny_results)
    assert t.columns[0] == "grid" and set(t["grid"]) == {"s1_scl_hscl_nc"} and t["run_key"].nunique() == 2
    recs = produce_synthetic.synthetic_claims(t, results=str(tiny_results), scale="default")
    s1 = next(r for r in recs if r.id == "S1")
    assert s1.verdict != V.NOT_RUN and s1.evidence and s1.setting["grid"] == "s1_scl_hscl_nc"
    assert s1.setting["C"] == "4" and f"--results {tiny_results}/synthetic" in s1.command
    assert {r.id: r.verdict for r in recs}["S2"] == V.NOT_RUN
    spec = produce_synthetic.spectrum_table(t)
    tables = {"synthetic": t, "spectrum": spec}
    for fid in ("conditions_scl", "spectrum_scl", "loss_optimum_scl", "vs_beta_scl"):
        assert availability(registry.get(fid), tables).ok, fid
        registry.get(fid).build(tables)
    assert not availability(registry.get("conditions_ucl"), tables).ok
