"""Tests of the convergence rule (synthetic/engine/convergence.py) and of runs that stop when settled.

The reference is a plain loop over the recorded rows written from the rule's definition (the
range of each metric over the rows of the trailing window), independent of the code under test;
the engine is checked against the same config trained for its whole budget without a rule.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from synthetic.engine.config import RunConfig
from synthetic.engine.convergence import (
    SETTLE_COLUMNS,
    SETTLE_METRICS,
    SettleRule,
    settle_row,
    window_changes,
)
from synthetic.engine.train import train_run, train_runs
from synthetic.store import runs as store_runs
from synthetic.store.schema import expected_epochs, recorded_epochs, stopped_at

TINY = dict(
    method="SCL",
    num_classes=4,
    n_per_class=6,
    encoder="free",
    lr=0.05,
    normalization="ball",
    eval_every=2,
)


def _reference_changes(rows: list[dict], window: int, watched: dict[str, float]) -> dict[str, float]:
    """Slow reference: per watched metric, max - min over rows with epoch in [last - w, last], w = max(W, last // 2)."""
    out = {m: math.nan for m in SETTLE_METRICS}
    last = rows[-1]["epoch"]
    if last < window:
        return out
    w = window if window > last // 2 else last // 2
    inside = []
    for r in rows:
        if last - w <= r["epoch"] <= last:
            inside.append(r)
    if len(inside) < 2:
        return out
    for m in watched:
        vals = []
        for r in inside:
            if m == "within_class_relative":
                vals.append(r["within_class_variation"] / r["mean_norm"])
            else:
                vals.append(r[m])
        if any(v != v for v in vals):
            continue
        hi, lo = vals[0], vals[0]
        for v in vals:
            hi, lo = max(hi, v), min(lo, v)
        out[m] = hi - lo
    return out


def _rows(n: int, every: int, rng: np.random.Generator, nan_at: int | None = None) -> list[dict]:
    rows = []
    for i in range(n):
        r = {
            "epoch": i * every,
            "etf_mean": float(rng.uniform(0, 0.1)),
            "within_class_variation": float(rng.uniform(0, 0.5)),
            "mean_norm": float(rng.uniform(0.5, 1.0)),
            "rank_1e-2": float(rng.integers(3, 5)),
            "rank_1e-4": 4.0,
            "effective_rank": float(rng.uniform(3, 4)),
            "gap_to_optimum": float(rng.uniform(0, 0.01)),
        }
        if nan_at is not None and i == nan_at:
            r["etf_mean"] = math.nan
        rows.append(r)
    return rows


@pytest.mark.parametrize("window, every, n", [(4, 2, 6), (5, 2, 8), (10, 5, 3), (3, 1, 10), (20, 2, 5)])
@pytest.mark.parametrize("normalization", ["ball", "none"])
def test_window_changes_equal_the_loop_reference(window, every, n, normalization):
    rng = np.random.default_rng(window * 100 + n)
    rows = _rows(n, every, rng, nan_at=1 if n > 6 else None)
    rule = SettleRule.of(
        RunConfig(**{**TINY, "normalization": normalization}, settle_window=window, epochs=40)
    )
    assert rule is not None
    for k in range(1, n + 1):
        got = window_changes(rows[:k], rule)
        want = _reference_changes(rows[:k], window, rule.tolerances)
        assert list(got) == list(SETTLE_METRICS)
        for m in SETTLE_METRICS:
            assert (math.isnan(got[m]) and math.isnan(want[m])) or got[m] == pytest.approx(want[m], abs=0)
        row = settle_row(rows[:k], rule)
        assert set(row) == set(SETTLE_COLUMNS)
        assert row["settled"] == all(want[m] <= t for m, t in rule.tolerances.items())


def test_a_gap_without_closed_form_is_not_watched_any_other_nan_is():
    rule = SettleRule.of(RunConfig(**TINY, settle_window=4, epochs=40))
    assert rule is not None
    flat = {
        "etf_mean": 0.01,
        "within_class_variation": 0.01,
        "mean_norm": 1.0,
        "rank_1e-2": 3.0,
        "rank_1e-4": 3.0,
        "effective_rank": 3.0,
    }
    rows = [{"epoch": e, **flat, "gap_to_optimum": math.nan} for e in range(0, 12, 2)]
    assert settle_row(rows, rule)["settled"]  # InfoNCE / WeiNCE: no closed form, a flat run settles
    rows[-2]["gap_to_optimum"] = 0.1  # a gap that exists somewhere in the window is watched
    assert not settle_row(rows, rule)["settled"]
    rows = [{"epoch": e, **flat, "gap_to_optimum": 0.0} for e in range(0, 12, 2)]
    assert settle_row(rows, rule)["settled"]
    rows[-1]["etf_mean"] = math.nan
    assert not settle_row(rows, rule)["settled"]


def test_the_rule_of_a_config():
    assert SettleRule.of(RunConfig(**TINY, epochs=10)) is None
    rule = SettleRule.of(RunConfig(**TINY, epochs=10, settle_window=4, settle_etf=0.02, settle_rank=1))
    assert rule is not None and rule.window == 4
    assert rule.tolerances["etf_mean"] == 0.02 and rule.tolerances["rank_1e-2"] == 1
    assert "gap_to_optimum" in rule.tolerances
    free = SettleRule.of(RunConfig(**{**TINY, "normalization": "none"}, epochs=10, settle_window=4))
    assert free is not None and "gap_to_optimum" not in free.tolerances  # not scale-free there


@pytest.mark.parametrize(
    "kwargs, field",
    [
        (dict(settle_window=-1), "settle_window"),
        (dict(settle_window=1.5), "settle_window"),
        (dict(settle_window=4, settle_etf=-0.1), "settle_etf"),
        (dict(settle_window=4, settle_gap=float("nan")), "settle_gap"),
        (dict(settle_window=4, settle_rank=0.5), "settle_rank"),
    ],
)
def test_rule_fields_are_validated_naming_the_field(kwargs, field):
    with pytest.raises(ValueError, match=field):
        RunConfig(**{**TINY, **kwargs}, epochs=10)


def test_rule_window_and_tolerances_in_the_key_only_with_a_rule():
    base = RunConfig(**TINY, epochs=10)
    # without a rule the tolerances do not change the run, nor its key (stored runs keep theirs)
    assert base.replace(settle_etf=0.5, settle_gap=0.2).key() == base.key()
    assert "settle_window" not in base.identity_dict()
    ruled = base.replace(settle_window=4)
    assert ruled.key() != base.key()
    assert ruled.replace(settle_etf=0.5).key() != ruled.key()
    none = RunConfig(**{**TINY, "normalization": "none"}, epochs=10, settle_window=4)
    assert none.replace(settle_gap=0.5).key() == none.key()  # the gap is not watched there
    src = RunConfig(**TINY, epochs=10, settle_window=4, init="nc", init_epochs=3).source_config()
    assert src is not None and src.settle_window == 0


def _settled_epochs(frame: pd.DataFrame, rule: SettleRule) -> list[int]:
    rows = frame.to_dict("records")
    return [int(rows[k]["epoch"]) for k in range(len(rows)) if settle_row(rows[: k + 1], rule)["settled"]]


def test_a_run_stops_at_the_first_epoch_its_rule_holds():
    cfg = RunConfig(**TINY, epochs=200, settle_window=6, seed=2)
    rule = SettleRule.of(cfg)
    assert rule is not None
    full = train_run(cfg.replace(settle_window=0))  # the same run for its whole budget, no rule
    first = _settled_epochs(full, rule)
    assert first, "the test run must settle within its budget"
    stop = first[0]
    assert stop < 200
    ruled = train_run(cfg)
    assert list(ruled["epoch"]) == [e for e in recorded_epochs(200, 2) if e <= stop]
    assert stopped_at(ruled) == stop
    assert list(ruled["settled"]) == [e == stop for e in ruled["epoch"]]
    shared = [c for c in full.columns if c in ruled.columns and c not in ("run_key", "settle_window")]
    pd.testing.assert_frame_equal(
        ruled[shared].reset_index(drop=True), full[shared].iloc[: len(ruled)].reset_index(drop=True)
    )


def test_a_run_that_does_not_settle_trains_its_budget():
    cfg = RunConfig(**TINY, epochs=8, settle_window=6, settle_etf=0.0, settle_wcv=0.0, seed=0)
    t = train_run(cfg)
    assert list(t["epoch"]) == recorded_epochs(8, 2)
    assert not t["settled"].any() and stopped_at(t) is None
    assert math.isnan(t["change_etf_mean"].iloc[2]) and not math.isnan(t["change_etf_mean"].iloc[-1])


def test_stacked_runs_stop_on_their_own():
    """A settled run stops while its stack goes on; each table equals the run trained alone."""
    configs = [
        RunConfig(**TINY, epochs=200, settle_window=6, seed=2),  # settles at epoch 150
        RunConfig(**TINY, epochs=200, settle_window=6, seed=0),  # still moving at 300
    ]
    stacked = train_runs(configs, mode="stacked")
    alone = [train_run(c) for c in configs]
    assert stopped_at(stacked[0]) is not None and stopped_at(stacked[1]) is None
    for s, a in zip(stacked, alone, strict=True):
        assert list(s["epoch"]) == list(a["epoch"])
        num = [c for c in s.columns if pd.api.types.is_float_dtype(s[c])]
        np.testing.assert_allclose(s[num].to_numpy(), a[num].to_numpy(), rtol=1e-4, atol=1e-5)


def test_the_store_takes_a_run_stopped_by_its_rule_and_refuses_one_cut_short(tmp_path):
    cfg = RunConfig(**TINY, epochs=200, settle_window=6, seed=2)
    t = train_run(cfg)
    stop = stopped_at(t)
    assert stop is not None and stop < 200
    assert expected_epochs(cfg, stop) == list(t["epoch"])
    store_runs.write_run(tmp_path, t)
    assert cfg.key() in store_runs.finished_keys(tmp_path)
    # the same rows without their settled flag are a run cut short: refused
    cut = t.copy()
    cut.loc[cut.index[-1], "settled"] = False
    with pytest.raises(ValueError, match="incomplete"):
        store_runs.write_run(tmp_path / "other", cut)


def test_an_unrecorded_stopped_run_file_is_checked_against_its_stop(tmp_path):
    cfg = RunConfig(**TINY, epochs=200, settle_window=6, seed=2)
    t = train_run(cfg)
    path = store_runs.write_run(tmp_path, t)
    store_runs.record_path(tmp_path, cfg.key()).unlink()  # an older store's file: no record
    data = path.read_bytes()
    assert store_runs._check_unrecorded(data, cfg.key()) == ""
    lines = data.decode().splitlines(keepends=True)
    body = "".join(lines[:-1])  # the settling row lost: an incomplete run
    assert "incomplete" in store_runs._check_unrecorded(body.encode(), cfg.key())
