"""Tests of synthetic.sweep: determinism, resumability, failures, joblib and dask, stacking, SIGKILL."""

from __future__ import annotations

import os
import sys

import numpy as np
import pytest

from synthetic import grids, results
from synthetic import sweep as sw
from tests.synthetic.fakes import (
    ROOT,
    always_failing,
    failing_run,
    fake_run,
    kill_after_first_runs,
    stack_failing,
    table_bytes,
    tiny_spec,
    write_tiny_grid,
)


def test_sweep_determinism_skip_and_table(tmp_path):
    grid = grids.load_grid(tiny_spec())
    s1 = sw.run_sweep(grid, tmp_path / "a", runner=fake_run, progress=False)
    assert (s1.n_runs, s1.n_done, s1.n_skipped, s1.ok) == (18, 18, 0, True)
    s2 = sw.run_sweep(list(reversed(grid.configs)), tmp_path / "b", runner=fake_run, progress=False)
    assert table_bytes(tmp_path / "a") == table_bytes(tmp_path / "b")
    again = sw.run_sweep(grid, tmp_path / "a", runner=failing_run, progress=False)
    assert (again.n_done, again.n_skipped, again.failures) == (0, 18, {})
    assert table_bytes(tmp_path / "a") == table_bytes(tmp_path / "b")
    table = results.read_table(tmp_path / "a")
    assert len(table) == 18 * 3 and not table.duplicated(["run_key", "epoch"]).any()
    # the stored numbers are the runner's numbers
    c = grid.configs[5]
    direct = fake_run(c)
    mine = table[table["run_key"] == c.key()].reset_index(drop=True)
    assert np.array_equal(mine["loss"].to_numpy(), direct["loss"].to_numpy())
    assert "final epoch" in s2.format()


def test_sweep_reports_failures_and_retries(tmp_path):
    grid = grids.load_grid(tiny_spec())
    s = sw.run_sweep(grid, tmp_path, runner=failing_run, progress=False)
    assert len(s.failures) == 6 and s.n_done == 12 and not s.ok
    assert all(info["reason"] == "boom" and "RuntimeError" in info["traceback"] for info in s.failures.values())
    assert sorted(p.stem for p in (tmp_path / "failures").glob("*.json")) == sorted(s.failures)
    # a later sweep does not retry recorded failures unless asked
    s = sw.run_sweep(grid, tmp_path, runner=fake_run, progress=False)
    assert (s.n_done, s.n_skipped, len(s.failed_before), s.ok) == (0, 12, 6, False)
    assert "6 failed before (not retried: --retry-failed)" in s.format()
    s = sw.run_sweep(grid, tmp_path, runner=fake_run, progress=False, retry_failed=True)
    assert (s.n_done, s.n_skipped, s.ok) == (6, 12, True)
    assert not list((tmp_path / "failures").glob("*.json"))  # a success clears its failure record


def test_sweep_parallel_processes_same_table(tmp_path):
    grid = grids.load_grid(tiny_spec(seeds=(0, 1)))
    sw.run_sweep(grid, tmp_path / "seq", runner=fake_run, progress=False)
    # threads=None: the fake runner needs no torch, which keeps the worker start-up short
    sw.run_sweep(grid, tmp_path / "par", runner=fake_run, n_jobs=2, progress=False, threads=None)
    assert table_bytes(tmp_path / "seq") == table_bytes(tmp_path / "par")


def test_sweep_on_dask_local_cluster_same_table(tmp_path):
    import distributed

    grid = grids.load_grid(tiny_spec(seeds=(0, 1)))
    sw.run_sweep(grid, tmp_path / "local", runner=fake_run, progress=False)
    with distributed.LocalCluster(
        n_workers=1,
        threads_per_worker=1,
        processes=False,
        protocol="tcp",
        host="127.0.0.1",
        scheduler_port=0,
        dashboard_address=None,
    ) as cluster:
        s = sw.run_sweep(
            grid, tmp_path / "dask", runner=fake_run, scheduler=cluster.scheduler_address, progress=False
        )
    assert s.ok and s.n_done == len(grid)
    assert table_bytes(tmp_path / "local") == table_bytes(tmp_path / "dask")


def test_sweep_stacked_groups_cover_whole_grid(tmp_path):
    calls = []

    def group_fn(configs):
        by = {}
        for c in configs:
            by.setdefault((c.method, c.normalization), []).append(c)
        return list(by.values())

    def stacked(configs):
        calls.append(len(configs))
        return [fake_run(c) for c in configs]

    grid = grids.load_grid(tiny_spec())
    sw.run_sweep(grid, tmp_path / "ref", runner=fake_run, progress=False)
    # a partly stored group is trained whole again (the same groups as an uninterrupted sweep);
    # a fully stored group is skipped
    first = grid.configs[0]
    assert (first.method, first.normalization) == ("SCL", "sphere")
    results.write_run(tmp_path / "st", fake_run(first))
    for c in grid.configs:
        if (c.method, c.normalization) == ("SCL", "ball"):
            results.write_run(tmp_path / "st", fake_run(c))
    s = sw.run_sweep(
        grid, tmp_path / "st", stack=True, group_fn=group_fn, stacked_runner=stacked, progress=False
    )
    assert sorted(calls) == [3, 6, 6] and s.n_done == 14 and s.n_skipped == 4
    assert table_bytes(tmp_path / "ref") == table_bytes(tmp_path / "st")


def test_sweep_validation(tmp_path):
    with pytest.raises(ValueError, match="n_jobs"):
        sw.run_sweep(tiny_spec(), tmp_path, n_jobs=0, runner=fake_run)
    with pytest.raises(ValueError, match="runner"):
        sw.run_sweep(tiny_spec(), tmp_path, runner=3)
    with pytest.raises(ValueError, match="grid_or_configs"):
        sw.run_sweep([1, 2], tmp_path, runner=fake_run)
    with pytest.raises(ValueError, match="threads"):
        sw.run_sweep(tiny_spec(), tmp_path, runner=fake_run, threads=0)


def test_sigkill_mid_sweep_then_resume_gives_identical_table(tmp_path):
    grid_file = write_tiny_grid(tmp_path / "tiny.toml", epochs=2, n_seeds=2)
    n_total = len(grids.load_grid(grid_file))
    killed = tmp_path / "killed"
    script = (
        f"import sys; sys.path.insert(0, {str(ROOT)!r});"
        "from tests.synthetic.fakes import slow_fake_run;"
        "from synthetic.sweep import run_sweep;"
        f"run_sweep({str(grid_file)!r}, {str(killed)!r}, runner=slow_fake_run, progress=False)"
    )
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    kill_after_first_runs([sys.executable, "-c", script], killed, n_total, env)
    s = sw.run_sweep(grid_file, killed, runner=fake_run, progress=False)
    assert s.ok and s.n_skipped > 0 and s.n_skipped + s.n_done == n_total
    sw.run_sweep(grid_file, tmp_path / "clean", runner=fake_run, progress=False)
    assert table_bytes(killed) == table_bytes(tmp_path / "clean")
    assert len(results.load_table(killed)) == n_total * 3


def test_real_train_run_sweep_end_to_end(tmp_path):
    spec = {
        "sweep": {
            "name": "real",
            "base": {"epochs": 2, "num_classes": 3, "n_per_class": 4, "n_test_per_class": 2, "lr": 0.05},
            "axes": {"seed": [0, 1]},
            "group": [{"method": "SCL", "beta": 0}, {"method": "HSCL", "beta": 5.0, "dtype": "float64"}],
        }
    }
    grid = grids.load_grid(spec)
    a = sw.run_sweep(grid, tmp_path / "a", progress=False)
    assert a.ok and a.n_done == 4
    from synthetic.train import train_run

    c = grid.configs[-1]
    direct = train_run(c)
    stored = results.read_run(tmp_path / "a", c.key())
    assert list(stored.columns) == list(direct.columns)
    for col in ("loss", "etf_mean", "within_class_variation"):
        assert np.array_equal(stored[col].to_numpy(float), direct[col].to_numpy(float), equal_nan=True)
    # the same real runs on a dask cluster: byte-identical table
    import distributed

    with distributed.LocalCluster(
        n_workers=1,
        threads_per_worker=1,
        processes=False,
        protocol="tcp",
        host="127.0.0.1",
        scheduler_port=0,
        dashboard_address=None,
    ) as cluster:
        d = sw.run_sweep(grid, tmp_path / "d", scheduler=cluster.scheduler_address, progress=False)
    assert d.ok and table_bytes(tmp_path / "a") == table_bytes(tmp_path / "d")
    # stacked training (synthetic.stacked) gives the same runs up to float rounding
    b = sw.run_sweep(grid, tmp_path / "b", progress=False, stack=True)
    assert b.ok and b.n_done == 4
    ta, tb = results.read_table(tmp_path / "a"), results.read_table(tmp_path / "b")
    assert list(ta["run_key"]) == list(tb["run_key"])
    for col in ("loss", "etf_mean", "within_class_variation"):
        np.testing.assert_allclose(tb[col].to_numpy(float), ta[col].to_numpy(float), rtol=1e-4, atol=1e-6)
    assert {"etf_mean_mean", "etf_mean_std", "n_seeds"} <= set(a.summary.columns)


def test_failing_stack_falls_back_to_single_runs(tmp_path):
    def group_fn(configs):
        by = {}
        for c in configs:
            by.setdefault((c.method, c.normalization), []).append(c)
        return list(by.values())

    grid = grids.load_grid(tiny_spec())
    sw.run_sweep(grid, tmp_path / "ref", runner=fake_run, progress=False)
    # every stack holds a seed-1 run and fails; alone, only the seed-1 runs fail
    s = sw.run_sweep(
        grid,
        tmp_path / "st",
        runner=failing_run,
        stack=True,
        group_fn=group_fn,
        stacked_runner=stack_failing,
        progress=False,
    )
    assert s.n_done == 12 and sorted(s.failures) == sorted(c.key() for c in grid.configs if c.seed == 1)
    assert all(i["reason"].endswith("boom") and "stack boom" in i["reason"] for i in s.failures.values())
    # the stack fails, every run succeeds alone: all stored, same table as single runs
    s = sw.run_sweep(
        grid,
        tmp_path / "st2",
        runner=fake_run,
        stack=True,
        group_fn=group_fn,
        stacked_runner=stack_failing,
        progress=False,
    )
    assert s.ok and s.n_done == 18
    assert table_bytes(tmp_path / "ref") == table_bytes(tmp_path / "st2")


def test_all_runs_failing_writes_no_table(tmp_path):
    grid = grids.load_grid(tiny_spec(seeds=(0,)))
    (tmp_path / results.TABLE_FILE).write_text("\n")  # a stale empty table of an older version
    s = sw.run_sweep(grid, tmp_path, runner=always_failing, progress=False)
    assert len(s.failures) == 6 and s.table_path is None
    assert not (tmp_path / results.TABLE_FILE).exists()
    assert len(results.read_table(tmp_path)) == 0 and len(results.load_results(tmp_path)) == 0
    (tmp_path / results.TABLE_FILE).write_text("\n")
    assert len(results.read_table(tmp_path)) == 0  # an empty file reads as an empty table
    assert results.write_table(tmp_path) is None and not (tmp_path / results.TABLE_FILE).exists()


def test_stacking_helpers_come_from_synthetic_stacked(tmp_path, monkeypatch):
    from synthetic import stacked

    assert sw._find_stacking() == (stacked.stack_groups, stacked.train_stacked)
    monkeypatch.setitem(sys.modules, "synthetic.stacked", None)  # the module fails to import
    with pytest.raises(ImportError):
        sw.run_sweep(tiny_spec(seeds=(0,)), tmp_path, runner=fake_run, stack=True, progress=False)
