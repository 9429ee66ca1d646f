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


def test_runs_missing_behind_their_record_are_named_not_averaged_away(tmp_path, capsys):
    """Observed: with a run file gone behind its completion record, `summary` and `claims` showed
    n_seeds 2 instead of 3 without a word."""
    from synthetic.__main__ import main
    from synthetic.store import runs

    grid = grids.load_grid(tiny_spec())
    folder = tmp_path / "tiny"
    sw.run_sweep(grid, folder, trainer=Trainer(fake_run), progress=False)

    def setting(c):
        return (c.method, c.beta, c.normalization)

    # one seed of one setting, and every seed of another
    gone = [c for c in grid.configs if setting(c) == ("HSCL", 5.0, "ball") and c.seed == 1]
    gone += [c for c in grid.configs if setting(c) == ("SCL", 0.0, "sphere")]
    for c in gone:
        runs.run_path(folder, c.key()).unlink()
    with pytest.warns(tables.StoreWarning, match=gone[0].key()):
        table = results.load_results(tmp_path)
    assert sorted(m["run_key"] for m in table.attrs["missing"]) == sorted(c.key() for c in gone)
    s = summary.summarize(table, metrics=["etf_mean"])
    assert len(s) == 6
    for _, row in s.iterrows():
        key = (row["method"], row["beta"], row["normalization"])
        present = [c for c in grid.configs if setting(c) == key and c not in gone]
        lost = sorted(c.seed for c in gone if setting(c) == key)
        assert row["n_seeds"] == len(present) and row["missing_seeds"] == ", ".join(map(str, lost)), row
        vals = [fake_run(c)["etf_mean"].iloc[-1] for c in present]
        if vals:
            assert row["etf_mean_mean"] == pytest.approx(sum(vals) / len(vals), rel=1e-12)
        else:
            assert math.isnan(row["etf_mean_mean"])
    # the command line says so too
    assert main(["summary", str(tmp_path)]) == 0
    out, err = capsys.readouterr()
    assert "missing_seeds" in out and f"{len(gone)} run(s) missing behind their completion record" in err
    assert f"tiny/{gone[0].key()} (seed 1)" in err
    # the sweep trains them again; then nothing is missing and the columns are the usual ones
    sw.run_sweep(grid, folder, trainer=Trainer(fake_run), progress=False)
    again = results.load_results(tmp_path)
    assert again.attrs["missing"] == [] and "missing_seeds" not in summary.summarize(again).columns
