"""Tests of synthetic.store.summary (and results.load_results / final_epoch): seed-aggregated final metrics."""

from __future__ import annotations

import math

import pandas as pd
import pytest

from synthetic.store import read as results
from synthetic.store import schema, summary, tables
from synthetic.sweep import grids
from synthetic.sweep import run as sw
from synthetic.sweep.tasks import Trainer
from tests.synthetic.fakes import fake_run, tiny_spec


def test_summarize_matches_manual_loop():
    grid = grids.load_grid(tiny_spec(seeds=(0, 1, 2)))
    table = schema.sort_table(pd.concat([fake_run(c) for c in grid.configs], ignore_index=True))
    s = summary.summarize(table, metrics=["loss", "etf_mean"])
    assert len(s) == 6 and set(s["n_seeds"]) == {3}
    for _, row in s.iterrows():
        vals = []
        for c in grid.configs:
            if (c.method, c.beta, c.normalization) == (row["method"], row["beta"], row["normalization"]):
                vals.append(fake_run(c)["etf_mean"].iloc[-1])
        mean = sum(vals) / len(vals)
        std = math.sqrt(sum((v - mean) ** 2 for v in vals) / (len(vals) - 1))
        assert row["etf_mean_mean"] == pytest.approx(mean, rel=1e-12)
        assert row["etf_mean_std"] == pytest.approx(std, rel=1e-12)
    text = summary.format_summary(s)
    assert "±" in text and "HSCL" in text


def test_summary_of_parent_folder_keeps_runs_shared_between_grids(tmp_path):
    grid = grids.load_grid(tiny_spec())
    sw.run_sweep(grid, tmp_path / "g1", trainer=Trainer(fake_run), progress=False)
    sw.run_sweep(grid, tmp_path / "g2", trainer=Trainer(fake_run), progress=False)  # the same 18 keys
    table = results.load_results(tmp_path)
    last = schema.final_epoch(table)
    assert len(last) == 36 and sorted(last["grid"].value_counts()) == [18, 18]
    s = summary.summarize(table)
    assert len(s) == 12 and set(s["n_seeds"]) == {3}
    for g in ("g1", "g2"):
        one = summary.summarize(tables.read_table(tmp_path / g))
        mine = s[s["grid"] == g].drop(columns=["grid"]).reset_index(drop=True)
        pd.testing.assert_frame_equal(mine[one.columns], one)
