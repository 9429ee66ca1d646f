"""Tests of synthetic.results: the table layout, the atomic store, reading results back."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from synthetic import results
from synthetic.config import RunConfig
from tests.synthetic.fakes import fake_run


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_store_round_trip_is_exact(tmp_path, dtype):
    rng = np.random.default_rng(0)
    span = 300 if dtype == np.float64 else 30
    vals = (rng.standard_normal(50) * 10.0 ** rng.integers(-span, span, 50)).astype(dtype)
    vals[:4] = [np.inf, -np.inf, 0.0, np.finfo(dtype).tiny]
    vals[5] = np.nan
    frame = pd.DataFrame(
        {"method": "SCL", "beta": 0.1, "flag": True, "run_key": "k1", "epoch": np.arange(50)[::-1], "m": vals}
    )
    results.write_run(tmp_path, frame)
    back = results.read_run(tmp_path, "k1")
    expect = frame.sort_values("epoch").reset_index(drop=True)
    assert list(back["epoch"]) == list(range(50))
    got, want = back["m"].to_numpy(), expect["m"].to_numpy().astype(np.float64)
    assert np.array_equal(got, want, equal_nan=True)
    assert back["beta"].iloc[0] == 0.1 and bool(back["flag"].iloc[0]) is True
    assert results.temp_files(tmp_path) == []


def test_store_ignores_temp_files_and_orders_deterministically(tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    cfgs = [RunConfig(epochs=1, seed=s, num_classes=3) for s in (2, 0, 1)]
    for c in cfgs:
        results.write_run(a, fake_run(c))
    for c in reversed(cfgs):
        results.write_run(b, fake_run(c))
    # an interrupted write leaves a temp file: ignored by readers
    (a / "runs" / ".deadbeef.csv.123.456.tmp").write_text("method,run_key\nSC")
    assert len(results.temp_files(a)) == 1
    assert results.finished_keys(a) == results.finished_keys(b) == {c.key() for c in cfgs}
    ta, tb = results.load_table(a), results.load_table(b)
    pd.testing.assert_frame_equal(ta, tb)
    assert list(ta["seed"]) == [0, 0, 1, 1, 2, 2] and list(ta["epoch"]) == [0, 1] * 3
    assert results.remove_temp_files(a, older_than_s=3600) == []
    assert len(results.remove_temp_files(a, older_than_s=0)) == 1


def test_store_validation(tmp_path):
    f = fake_run(RunConfig(epochs=1, num_classes=3))
    with pytest.raises(ValueError, match="key"):
        results.write_run(tmp_path, f, key="other")
    with pytest.raises(ValueError, match="key"):
        results.run_path(tmp_path, "../evil")
    with pytest.raises(ValueError, match="epoch"):
        results.write_run(tmp_path, pd.concat([f, f]))
    with pytest.raises(ValueError, match="run_key"):
        results.write_run(tmp_path, f.drop(columns=["run_key"]))
    with pytest.raises(FileNotFoundError, match="runs"):
        results.read_run(tmp_path, "abc")


def test_sort_table_missing_values_order_matches_docstring():
    t = pd.DataFrame(
        {
            "a": ["x", None, "b"],
            "n": [1.0, 2.0, float("nan")],
            "run_key": ["k1", "k2", "k3"],
            "epoch": [0, 0, 0],
        }
    )
    assert list(results.sort_table(t)["run_key"]) == ["k2", "k3", "k1"]  # missing string first
    t["a"] = "same"
    assert list(results.sort_table(t)["run_key"]) == ["k1", "k2", "k3"]  # numeric NaN last


def test_config_columns_is_the_one_layout():
    # without a frame: the RunConfig fields, the columns a run frame starts with
    f = fake_run(RunConfig(epochs=1, num_classes=3))
    assert results.config_columns() == list(RunConfig().to_dict())
    assert results.config_columns(f) == results.config_columns()
    # with a frame: the columns before run_key, less epoch and the grid label of load_results
    t = pd.DataFrame({"grid": ["g"], "a": [1], "epoch": [0], "run_key": ["k"], "m": [0.5]})
    assert results.config_columns(t) == ["a"]
    with pytest.raises(ValueError, match="run_key"):
        results.config_columns(t.drop(columns=["run_key"]))
