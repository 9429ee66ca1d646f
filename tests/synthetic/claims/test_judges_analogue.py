"""Tests of R1s, R2s, R3s (synthetic.claims.judges_analogue): the synthetic analogues of R1-R3.

Every verdict on hand-made tables, the spectrum cliff against a plain loop, the grid at its three
scales, the criteria of a grid shared by three claims, UNDECIDED and NOT RUN.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from synthetic.claims import criteria, records
from synthetic.claims.judges import JUDGES
from synthetic.claims.judges_analogue import spectrum_cliff
from synthetic.sweep.grids import load_grid
from theory.claims import CATALOGUE, Claim, Verdict

GRID = "r1r3_analogue"
IDS = ("R1s", "R2s", "R3s")
C = 6
BETAS = (0.0, 2.0, 5.0, 10.0, 30.0)
CONFIG = ("method", "beta", "num_classes", "encoder", "normalization", "positives", "batch_size", "seed")
FLAT = [0.0, -0.1, -0.2, -0.3, -0.4]  # no cliff
JITTERED = ("ncm_acc", "etf_mean")


def _runs(
    method: str,
    beta: float,
    *,
    ncm: float = 0.5,
    etf: float = 0.1,
    rank: float = C - 1.0,
    spectrum=FLAT,
    jitter: float = 1e-3,
    seeds: int = 3,
    settled: bool = True,
    grid: str = GRID,
) -> list[dict]:
    """Rows of ``seeds`` runs of one (method, beta): epoch 0 and epoch 10; ncm_acc, etf_mean jittered."""
    m = ("H" + method if beta > 0 else method) if method in ("SCL", "UCL") else method
    start = {
        "ncm_acc": 1.0 / C,
        "etf_mean": 0.3,
        "within_class_variation": 0.9,
        "rank_1e-2": C - 1.0,
        "rank_1e-4": C - 1.0,
        **{f"spectrum_{i}": -0.05 * i for i in range(C - 1)},
    }
    end = {
        "ncm_acc": ncm,
        "etf_mean": etf,
        "within_class_variation": 0.05,
        "rank_1e-2": rank,
        "rank_1e-4": rank,
        **{f"spectrum_{i}": v for i, v in enumerate(spectrum)},
    }
    out = []
    for s in range(seeds):
        cfg = dict(
            method=m,
            beta=float(beta),
            num_classes=C,
            encoder="mlp",
            normalization="ball",
            positives="label",
            batch_size=512,
            seed=s,
        )
        key = f"{grid}-{'-'.join(str(cfg[c]) for c in CONFIG)}"
        for epoch, vals in ((0, start), (10, end)):
            v = {k: (x + jitter * s if k in JITTERED else x) for k, x in vals.items()}
            out.append(
                {"grid": grid, **cfg, "run_key": key, "epoch": epoch, **v, "settled": settled and epoch == 10}
            )
    return out


def _family(method, ncm=None, etf=None, *, jitter=1e-3, settled=True, extra=None) -> list[dict]:
    """Runs of a whole family: ``ncm`` / ``etf`` map beta -> value (defaults 0.5 / 0.1);
    ``extra`` maps beta -> more keyword arguments of :func:`_runs`."""
    rows: list[dict] = []
    for b in BETAS:
        rows += _runs(
            method,
            b,
            ncm=(ncm or {}).get(b, 0.5),
            etf=(etf or {}).get(b, 0.1),
            jitter=jitter,
            settled=settled,
            **(extra or {}).get(b, {}),
        )
    return rows


def _judge(*chunks) -> dict[str, Claim]:
    table = pd.DataFrame([r for c in chunks for r in c])
    recs = [r for r in records.judge(table) if r.id in IDS]
    assert [r.id for r in recs] == list(IDS)  # one record each, from the one shared grid folder
    return {r.id: r for r in recs}


GOOD_NCM = {0.0: 0.30, 2.0: 0.50, 5.0: 0.60, 10.0: 0.55, 30.0: 0.30}
FALLING_ETF = {0.0: 0.30, 2.0: 0.20, 5.0: 0.10, 10.0: 0.05, 30.0: 0.02}
RISING_ETF = {0.0: 0.02, 2.0: 0.05, 5.0: 0.10, 10.0: 0.20, 30.0: 0.50}


# ----------------------------------------------------------------------------- the cliff


def _slow_cliff(curve, decades):
    """The definition, one consecutive pair at a time, from the singular values themselves."""
    sig = []
    for v in curve:
        if not math.isfinite(v):
            break
        sig.append(math.exp(v))  # spectrum_i = ln(sigma_i / sigma_1)
    for i in range(len(sig) - 1):
        if math.log10(sig[i + 1] / sig[i]) < -decades:
            return i
    return None


def test_spectrum_cliff_agrees_with_a_plain_loop():
    rng = np.random.default_rng(0)
    hits = 0
    for trial in range(300):
        n = int(rng.integers(2, 40))
        steps = -rng.exponential(0.3, size=n - 1)
        jumps = rng.random(n - 1) < 0.05
        steps[jumps] -= rng.uniform(1.0, 20.0, size=int(jumps.sum()))
        curve = np.concatenate([[0.0], np.cumsum(steps)])
        if trial % 7 == 0:
            curve = np.concatenate([curve, [np.nan] * 3])  # a smaller C's empty tail
        for decades in (0.5, 1.0, 2.0):
            want = _slow_cliff(list(curve), decades)
            assert spectrum_cliff(curve, decades) == want, (list(curve), decades)
            hits += want is not None
    assert hits > 50  # the random curves do have cliffs


def test_spectrum_cliff_cases():
    assert spectrum_cliff([0.0, -0.5, -1.0, -1.5]) is None
    ln10 = math.log(10.0)
    assert spectrum_cliff([0.0, -0.1, -0.1 - 1.01 * ln10, -30.0]) == 1  # just over a decade at 1 -> 2
    assert spectrum_cliff([0.0, -0.1, -0.1 - 0.99 * ln10]) is None  # just under
    assert spectrum_cliff([0.0, -69.08, np.nan]) == 0  # an exact zero sits at the floor
    assert spectrum_cliff([0.0]) is None and spectrum_cliff([]) is None


# ----------------------------------------------------------------------------- the grid and its criteria


@pytest.mark.parametrize(
    ("scale", "n", "classes", "seeds"),
    [("default", 30, {50}, 3), ("quick", 6, {6}, 1), ("paper", 100, {50, 100}, 5)],
)
def test_the_grid_parses_at_its_scales(scale, n, classes, seeds):
    g = load_grid(GRID, scale=scale)
    cfgs = g.configs
    assert len(g) == n and {c.num_classes for c in cfgs} == classes
    assert len({c.seed for c in cfgs}) == seeds
    assert all(c.embed_dim == c.num_classes - 1 for c in cfgs)  # d = C - 1
    assert {c.method for c in cfgs} == {"SCL", "HSCL", "UCL", "HUCL"}
    assert all((c.beta > 0) == c.method.startswith("H") for c in cfgs)  # auto_hard
    assert {(c.normalization, c.positives, c.encoder, c.n_test_per_class) for c in cfgs} == {
        ("ball", "label", "mlp", 20)
    }
    if scale != "quick":
        assert {c.beta for c in cfgs} == set(BETAS)
    if scale == "default":
        assert {(c.hidden, c.depth, c.epochs, c.eval_every, c.batch_size, c.estimator) for c in cfgs} == {
            (256, 1, 400, 8, 512, "expectation")
        }
        assert {(c.settle_window, c.settle_etf) for c in cfgs} == {(16, 0.005)}
    if scale == "paper":
        assert {(c.hidden, c.epochs, c.estimator) for c in cfgs} == {(512, 3000, "sampled")}


def test_criteria_reads_the_three_claims_of_one_grid():
    assert [criteria.CLAIM_GRIDS[c] for c in IDS] == [GRID] * 3
    r1, r2, r3 = (criteria.criteria(c) for c in IDS)
    assert (r1["id"], r2["id"], r3["id"]) == IDS
    assert r1["min_gain"] == 0.05 and r1["margin_stds"] == 2.0 and r1["gain_betas"] == [5.0, 10.0]
    assert r2["spearman"] == 0.5 and r2["dc_fraction"] == 0.8 and r2["rank_thresholds"][0] == 1e-2
    assert r2["cliff_log10"] == r3["cliff_log10"] == 1.0 and r3["betas"] == list(BETAS)
    for crit in (r1, r2, r3):
        text = criteria.criterion_text(crit)
        assert "REPRODUCED:" in text and "PARTLY:" in text and "NOT REPRODUCED:" in text
        assert "project's design" in text
    assert "40 points" in criteria.criterion_text(r1)
    assert criteria.criteria("S1")["id"] == "S1"  # a grid of one claim reads as before
    table = {"R1s": {"id": "R1s", "x": 1}, "R2s": {"id": "R3s"}}
    assert criteria.claim_table(table, "R1s") == {"id": "R1s", "x": 1}
    assert criteria.claim_table(table, "R2s") is None  # a sub-table naming another claim
    assert criteria.claim_table({"id": "S1"}, "R1s") is None
    for cid in IDS:
        entry = CATALOGUE[cid]
        assert (
            entry.package == "synthetic" and entry.kind == "claim" and "Synthetic analogue" in entry.statement
        )
        assert cid in JUDGES
    order = list(CATALOGUE)
    assert (
        order.index("R3") < order.index("R1s") < order.index("R2s") < order.index("R3s") < order.index("R4")
    )


# ----------------------------------------------------------------------------- R1s


def test_r1s_verdicts():
    sup_good = _family("SCL", ncm=GOOD_NCM)
    unsup_good = _family("UCL", ncm=GOOD_NCM)
    rec = _judge(sup_good, unsup_good)["R1s"]
    assert rec.verdict is Verdict.REPRODUCED
    gains = [e for e in rec.evidence if "NCM gain" in e.label]
    assert len(gains) == 2 and all(e.value == pytest.approx(0.30) for e in gains)
    assert any("ncm_acc HSCL beta=5" in e.text() and "0.601 ± 0.001" in e.text() for e in rec.evidence)
    # a gain of 0.03: beyond 2 pooled stds (0.002) but under the declared 5 points
    small = {0.0: 0.30, 2.0: 0.3, 5.0: 0.33, 10.0: 0.32, 30.0: 0.3}
    assert _judge(sup_good, _family("UCL", ncm=small))["R1s"].verdict is Verdict.PARTLY
    # a gain of 0.08 > 0.05, but within 2 pooled seed stds (std 0.05)
    noisy = _family("UCL", ncm={0.0: 0.30, 2.0: 0.3, 5.0: 0.38, 10.0: 0.37, 30.0: 0.3}, jitter=0.05)
    assert _judge(sup_good, noisy)["R1s"].verdict is Verdict.PARTLY
    none = _judge(_family("SCL"), _family("UCL", ncm={0.0: 0.5, 5.0: 0.4, 10.0: 0.45}))["R1s"]
    assert none.verdict is Verdict.NOT_REPRODUCED
    assert "40 points" in none.notes and "not a verdict on the CIFAR-100 claim R1" in none.notes


# ----------------------------------------------------------------------------- R2s


CLIFF = [0.0, -0.1, -0.2, -8.0, -9.0]  # cliff at index 2: the means span 3 dimensions


def test_r2s_verdicts_and_the_cliff_beside_them():
    unsup = _family("UCL", ncm=GOOD_NCM)
    dc = {0.0: dict(rank=2.0, spectrum=CLIFF)}  # SCL: 2 of 5 dimensions kept (<= 0.8 x 5)
    rec = _judge(_family("SCL", etf=FALLING_ETF, extra=dc), unsup)["R2s"]
    assert rec.verdict is Verdict.REPRODUCED
    assert "beta=0: 2; beta=2: none" in rec.notes
    reported = [s for s in rec.subchecks if "reported beside" in s.what]
    assert len(reported) == 5 and "spectrum cliff at index 2" in reported[0].note
    assert "per seed: 2, 2, 2" in reported[0].note and "no spectrum cliff" in reported[1].note
    rho = next(e for e in rec.evidence if "Spearman" in e.label)
    assert rho.value == pytest.approx(-1.0)
    # (a) only: no DC at beta = 0
    assert _judge(_family("SCL", etf=FALLING_ETF), unsup)["R2s"].verdict is Verdict.PARTLY
    # (b) only: etf_mean rises with beta
    assert _judge(_family("SCL", etf=RISING_ETF, extra=dc), unsup)["R2s"].verdict is Verdict.PARTLY
    # a fall within 2 pooled seed stds does not count: etf 0.30 -> 0.25 with std 0.05
    flat = _family("SCL", etf={0.0: 0.30, 2.0: 0.29, 5.0: 0.28, 10.0: 0.27, 30.0: 0.25}, jitter=0.05)
    assert _judge(flat, unsup)["R2s"].verdict is Verdict.NOT_REPRODUCED
    assert _judge(_family("SCL", etf=RISING_ETF), unsup)["R2s"].verdict is Verdict.NOT_REPRODUCED


# ----------------------------------------------------------------------------- R3s


def test_r3s_verdicts():
    sup = _family("SCL", ncm=GOOD_NCM)
    etf = {0.0: 0.2, 2.0: 0.1, 5.0: 0.05, 10.0: 0.1, 30.0: 0.5}
    rec = _judge(sup, _family("UCL", ncm=GOOD_NCM, etf=etf))["R3s"]
    assert rec.verdict is Verdict.REPRODUCED
    best = next(e for e in rec.evidence if "best beta" in e.label)
    assert best.value == 5.0
    assert "Spectrum cliff index per beta" in rec.notes
    # interior maximum, but beta = 30 within 2 pooled stds of it (std 0.01, gap 0.005)
    close = {**GOOD_NCM, 30.0: 0.595}
    rec = _judge(sup, _family("UCL", ncm=close, etf=etf, jitter=0.01))["R3s"]
    assert rec.verdict is Verdict.PARTLY
    # interior maximum, but etf_mean at beta = 30 below that at the best beta
    assert _judge(sup, _family("UCL", ncm=GOOD_NCM, etf=FALLING_ETF))["R3s"].verdict is Verdict.PARTLY
    # the best at beta = 30 (or at 0): NOT REPRODUCED
    rising = {0.0: 0.3, 2.0: 0.4, 5.0: 0.5, 10.0: 0.55, 30.0: 0.6}
    assert _judge(sup, _family("UCL", ncm=rising, etf=etf))["R3s"].verdict is Verdict.NOT_REPRODUCED
    falling = {0.0: 0.6, 2.0: 0.5, 5.0: 0.4, 10.0: 0.35, 30.0: 0.3}
    assert _judge(sup, _family("UCL", ncm=falling, etf=etf))["R3s"].verdict is Verdict.NOT_REPRODUCED


# ----------------------------------------------------------------------------- UNDECIDED, NOT RUN


def test_unsettled_runs_leave_all_three_undecided():
    good = (_family("SCL", ncm=GOOD_NCM, etf=FALLING_ETF), _family("UCL", ncm=GOOD_NCM))
    recs = _judge(_family("SCL", ncm=GOOD_NCM, etf=FALLING_ETF, settled=False), good[1])
    for cid in IDS:
        assert recs[cid].verdict is Verdict.UNDECIDED, cid
        assert f"python -m synthetic sweep {GRID} --epochs 20" in recs[cid].notes
    assert any(s.verdict is Verdict.UNDECIDED for s in recs["R1s"].subchecks)
    assert all(r.verdict is not Verdict.UNDECIDED for r in _judge(*good).values())


def test_no_runs_of_the_grid_gives_not_run_with_the_command():
    other = pd.DataFrame(_runs("SCL", 0.0, grid="s1_scl_hscl_nc"))
    for table in (pd.DataFrame(), other):
        recs = {r.id: r for r in records.judge(table, results="RES", scale="quick")}
        for cid in IDS:
            assert recs[cid].verdict is Verdict.NOT_RUN
            assert recs[cid].command == (
                f"python -m synthetic sweep {GRID} --scale quick --results RES && python -m synthetic claims RES"
            )
            assert f"no stored runs of grid {GRID}" in recs[cid].notes and recs[cid].criterion
