"""Tests of synthetic.sweep and synthetic.store: grids, atomic store, resumability, dask, claims."""

from __future__ import annotations

import itertools
import math
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from synthetic import store
from synthetic import sweep as sw
from synthetic.config import RunConfig

ROOT = Path(__file__).resolve().parents[2]


# ------------------------------------------------------------------ fake runners (picklable)


def fake_run(config: RunConfig) -> pd.DataFrame:
    """Deterministic stand-in for train_run: pseudo-random metrics seeded by the config key."""
    rng = np.random.default_rng(int(config.key(), 16))
    base = config.to_dict()
    base["run_key"] = config.key()
    rows = []
    for e in range(config.epochs + 1):
        rows.append(
            {
                **base,
                "epoch": e,
                "loss": float(rng.standard_normal()) * 10.0 ** rng.integers(-8, 3),
                "etf_mean": float(rng.random()),
                "within_class_variation": float(rng.random()) / 3.0,
                "effective_rank": float(rng.random() * config.num_classes),
            }
        )
    return pd.DataFrame(rows)


def slow_fake_run(config: RunConfig) -> pd.DataFrame:
    time.sleep(0.25)
    return fake_run(config)


def failing_run(config: RunConfig) -> pd.DataFrame:
    if config.seed == 1:
        raise RuntimeError("boom")
    return fake_run(config)


def _spec(epochs: int = 2, seeds=(0, 1, 2)) -> dict:
    return {
        "sweep": {
            "name": "tiny",
            "base": {"epochs": epochs, "num_classes": 3, "n_per_class": 4, "eval_every": 1},
            "axes": {"normalization": ["sphere", "ball"], "seed": list(seeds)},
            "group": [{"method": "SCL", "beta": 0.0}, {"method": "HSCL", "beta": [2.0, 5.0]}],
        },
        "scale": {"paper": {"base": {"epochs": 7}, "axes": {"seed": [0, 1, 2, 3, 4]}}},
    }


def _write_grid(path: Path, epochs: int = 2, n_seeds: int = 3) -> Path:
    path.write_text(
        textwrap.dedent(
            f"""
            [sweep]
            name = "tiny"
            [sweep.base]
            epochs = {epochs}
            num_classes = 3
            n_per_class = 4
            [sweep.axes]
            normalization = ["sphere", "ball"]
            seed = {list(range(n_seeds))}
            [[sweep.group]]
            method = "SCL"
            beta = 0
            [[sweep.group]]
            method = "HSCL"
            beta = [2, 5]
            """
        )
    )
    return path


# ------------------------------------------------------------------ grid expansion


def test_grid_expansion_matches_loop_reference():
    grid = sw.load_grid(_spec())
    ref = []
    for method, betas in (("SCL", [0.0]), ("HSCL", [2.0, 5.0])):
        for norm in ("sphere", "ball"):
            for seed in (0, 1, 2):
                for beta in betas:
                    ref.append((method, beta, norm, seed))
    got = [(c.method, c.beta, c.normalization, c.seed) for c in grid.configs]
    assert sorted(got) == sorted(ref)
    assert len(got) == len(set(got)) == 18
    assert all(c.epochs == 2 and c.num_classes == 3 for c in grid.configs)
    assert len({c.key() for c in grid.configs}) == 18


def test_grid_scales_and_overrides():
    paper = sw.load_grid(_spec(), scale="paper")
    assert len(paper) == 3 * 2 * 5 and {c.epochs for c in paper.configs} == {7}
    quick = sw.load_grid(_spec(), scale="quick")
    assert {c.seed for c in quick.configs} == {0} and {c.epochs for c in quick.configs} == {2}
    over = sw.load_grid(_spec(), overrides={"epochs": 4, "lr": [0.1, 0.01]})
    assert len(over) == 36 and {c.epochs for c in over.configs} == {4}
    assert {c.lr for c in over.configs} == {0.1, 0.01}
    # overriding beta keeps (method, beta) valid via the auto-hard rule
    over = sw.load_grid(_spec(), overrides={"beta": [0.0, 3.0]})
    assert {(c.method, c.beta) for c in over.configs} == {("SCL", 0.0), ("HSCL", 3.0)}


def test_auto_hard_rule_and_plain_product():
    spec = {"sweep": {"auto_hard": True, "axes": {"method": ["SCL", "UCL"], "beta": [0, 2], "epochs": 1}}}
    got = {(c.method, c.beta) for c in sw.load_grid(spec).configs}
    assert got == {("SCL", 0.0), ("HSCL", 2.0), ("UCL", 0.0), ("HUCL", 2.0)}
    spec = {"sweep": {"axes": {"lr": [0.1, 0.2, 0.3], "seed": [0, 1]}, "base": {"epochs": 1}}}
    got = [(c.lr, c.seed) for c in sw.load_grid(spec).configs]
    assert got == list(itertools.product([0.1, 0.2, 0.3], [0, 1]))


def test_duplicate_configs_are_run_once():
    spec = {"sweep": {"base": {"epochs": 1}, "group": [{"seed": [0, 1]}, {"seed": [1, 2]}]}}
    assert [c.seed for c in sw.load_grid(spec).configs] == [0, 1, 2]


@pytest.mark.parametrize(
    "spec, match",
    [
        ({"sweep": {"axes": {"bogus": [1]}}}, "bogus"),
        ({"sweep": {"base": {"lr": 0.1}, "axes": {"lr": [0.2]}}}, "lr"),
        ({"sweep": {"axes": {"seed": []}}}, "seed"),
        ({"sweep": {"axes": {"method": ["SCL"], "beta": [2.0]}}}, "beta"),
        ({"sweep": {"epochs": 3}}, "epochs"),
        ({"other": {}}, "other"),
        ({"sweep": {"group": [{"lr": [0.1]}], "axes": {"lr": [0.2]}}}, "lr"),
    ],
)
def test_invalid_grids_raise(spec, match):
    with pytest.raises(ValueError, match=match):
        sw.load_grid(spec)


def test_unknown_scale_and_bad_toml(tmp_path):
    with pytest.raises(ValueError, match="huge"):
        sw.load_grid(_spec(), scale="huge")
    bad = tmp_path / "bad.toml"
    bad.write_text("[sweep\n")
    with pytest.raises(ValueError, match="bad.toml"):
        sw.load_grid(bad)
    with pytest.raises(ValueError, match="nope"):
        sw.load_grid("nope_not_a_grid")


@pytest.mark.parametrize(
    "name", ["s1_scl_hscl_nc", "s2_ucl_positives", "s3_hucl_beta", "s4_no_normalisation", "r5_batch_size"]
)
def test_shipped_claim_grids(name):
    files = sw.grid_files()
    assert name in files
    default = sw.load_grid(name)
    assert default.claim and len(default) > 0
    assert len({c.seed for c in default.configs}) >= 3
    if name != "r5_batch_size":
        assert {c.num_classes for c in default.configs} == {10}
        assert {c.embed_dim for c in default.configs} == {9}
    else:  # many classes; only the batch size varies (besides the seed)
        assert {c.num_classes for c in default.configs} == {100}
        assert {32, 64, 512} <= {c.batch_size for c in default.configs}
        assert len({c.replace(batch_size=0, seed=0).key() for c in default.configs}) == 1
    paper = sw.load_grid(files[name], scale="paper")
    assert len({c.seed for c in paper.configs}) >= 3
    # paper scale: at least as much data per run, and the authors' K = 256 sampled negatives
    assert max(c.num_train for c in paper.configs) >= max(c.num_train for c in default.configs)
    assert {(c.estimator, c.num_negatives) for c in paper.configs} == {("sampled", 256)}
    quick = sw.load_grid(name, scale="quick")
    assert len(quick) <= len(default)


# ------------------------------------------------------------------ store


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
    store.write_run(tmp_path, frame)
    back = store.read_run(tmp_path, "k1")
    expect = frame.sort_values("epoch").reset_index(drop=True)
    assert list(back["epoch"]) == list(range(50))
    got, want = back["m"].to_numpy(), expect["m"].to_numpy().astype(np.float64)
    assert np.array_equal(got, want, equal_nan=True)
    assert back["beta"].iloc[0] == 0.1 and bool(back["flag"].iloc[0]) is True
    assert store.temp_files(tmp_path) == []


def test_store_ignores_temp_files_and_orders_deterministically(tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    cfgs = [RunConfig(epochs=1, seed=s, num_classes=3) for s in (2, 0, 1)]
    for c in cfgs:
        store.write_run(a, fake_run(c))
    for c in reversed(cfgs):
        store.write_run(b, fake_run(c))
    # an interrupted write leaves a temp file: ignored by readers
    (a / "runs" / ".deadbeef.csv.123.456.tmp").write_text("method,run_key\nSC")
    assert len(store.temp_files(a)) == 1
    assert store.finished_keys(a) == store.finished_keys(b) == {c.key() for c in cfgs}
    ta, tb = store.load_table(a), store.load_table(b)
    pd.testing.assert_frame_equal(ta, tb)
    assert list(ta["seed"]) == [0, 0, 1, 1, 2, 2] and list(ta["epoch"]) == [0, 1] * 3
    assert store.remove_temp_files(a, older_than_s=3600) == []
    assert len(store.remove_temp_files(a, older_than_s=0)) == 1


def test_store_validation(tmp_path):
    f = fake_run(RunConfig(epochs=1, num_classes=3))
    with pytest.raises(ValueError, match="key"):
        store.write_run(tmp_path, f, key="other")
    with pytest.raises(ValueError, match="key"):
        store.run_path(tmp_path, "../evil")
    with pytest.raises(ValueError, match="epoch"):
        store.write_run(tmp_path, pd.concat([f, f]))
    with pytest.raises(ValueError, match="run_key"):
        store.write_run(tmp_path, f.drop(columns=["run_key"]))
    with pytest.raises(FileNotFoundError, match="runs"):
        store.read_run(tmp_path, "abc")


# ------------------------------------------------------------------ sweeps


def _table_bytes(folder: Path) -> bytes:
    return (folder / store.TABLE_FILE).read_bytes()


def test_sweep_determinism_skip_and_table(tmp_path):
    grid = sw.load_grid(_spec())
    s1 = sw.run_sweep(grid, tmp_path / "a", runner=fake_run, progress=False)
    assert (s1.n_runs, s1.n_done, s1.n_skipped, s1.ok) == (18, 18, 0, True)
    s2 = sw.run_sweep(list(reversed(grid.configs)), tmp_path / "b", runner=fake_run, progress=False)
    assert _table_bytes(tmp_path / "a") == _table_bytes(tmp_path / "b")
    again = sw.run_sweep(grid, tmp_path / "a", runner=failing_run, progress=False)
    assert (again.n_done, again.n_skipped, again.failures) == (0, 18, {})
    assert _table_bytes(tmp_path / "a") == _table_bytes(tmp_path / "b")
    table = store.read_table(tmp_path / "a")
    assert len(table) == 18 * 3 and not table.duplicated(["run_key", "epoch"]).any()
    # the stored numbers are the runner's numbers
    c = grid.configs[5]
    direct = fake_run(c)
    mine = table[table["run_key"] == c.key()].reset_index(drop=True)
    assert np.array_equal(mine["loss"].to_numpy(), direct["loss"].to_numpy())
    assert "final epoch" in s2.format()


def test_sweep_reports_failures_and_retries(tmp_path):
    grid = sw.load_grid(_spec())
    s = sw.run_sweep(grid, tmp_path, runner=failing_run, progress=False)
    assert len(s.failures) == 6 and s.n_done == 12 and not s.ok
    assert all("boom" in tb for tb in s.failures.values())
    s = sw.run_sweep(grid, tmp_path, runner=fake_run, progress=False)
    assert (s.n_done, s.n_skipped, s.ok) == (6, 12, True)


def test_sweep_parallel_processes_same_table(tmp_path):
    grid = sw.load_grid(_spec(seeds=(0, 1)))
    sw.run_sweep(grid, tmp_path / "seq", runner=fake_run, progress=False)
    # threads=None: the fake runner needs no torch, which keeps the worker start-up short
    sw.run_sweep(grid, tmp_path / "par", runner=fake_run, n_jobs=2, progress=False, threads=None)
    assert _table_bytes(tmp_path / "seq") == _table_bytes(tmp_path / "par")


def test_sweep_on_dask_local_cluster_same_table(tmp_path):
    import distributed

    grid = sw.load_grid(_spec(seeds=(0, 1)))
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
    assert _table_bytes(tmp_path / "local") == _table_bytes(tmp_path / "dask")


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

    grid = sw.load_grid(_spec())
    sw.run_sweep(grid, tmp_path / "ref", runner=fake_run, progress=False)
    # a partly stored group is trained whole again (the same groups as an uninterrupted sweep);
    # a fully stored group is skipped
    first = grid.configs[0]
    assert (first.method, first.normalization) == ("SCL", "sphere")
    store.write_run(tmp_path / "st", fake_run(first))
    for c in grid.configs:
        if (c.method, c.normalization) == ("SCL", "ball"):
            store.write_run(tmp_path / "st", fake_run(c))
    s = sw.run_sweep(
        grid, tmp_path / "st", stack=True, group_fn=group_fn, stacked_runner=stacked, progress=False
    )
    assert sorted(calls) == [3, 6, 6] and s.n_done == 14 and s.n_skipped == 4
    assert _table_bytes(tmp_path / "ref") == _table_bytes(tmp_path / "st")


def test_sweep_validation(tmp_path):
    with pytest.raises(ValueError, match="n_jobs"):
        sw.run_sweep(_spec(), tmp_path, n_jobs=0, runner=fake_run)
    with pytest.raises(ValueError, match="runner"):
        sw.run_sweep(_spec(), tmp_path, runner=3)
    with pytest.raises(ValueError, match="grid_or_configs"):
        sw.run_sweep([1, 2], tmp_path, runner=fake_run)
    with pytest.raises(ValueError, match="threads"):
        sw.run_sweep(_spec(), tmp_path, runner=fake_run, threads=0)


def _kill_after_first_runs(cmd: list[str], results: Path, n_total: int, env: dict) -> int:
    """Start ``cmd``, SIGKILL it once some (not all) runs are stored; return how many were."""
    proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 60
    try:
        while time.monotonic() < deadline:
            n = len(store.finished_keys(results))
            if n >= 2 or proc.poll() is not None:
                break
            time.sleep(0.005)
        os.kill(proc.pid, signal.SIGKILL)
    finally:
        proc.wait(timeout=30)
    n = len(store.finished_keys(results))
    assert proc.returncode == -signal.SIGKILL, proc.stderr.read().decode()[-2000:]
    assert 0 < n < n_total, f"kill came too late or too early: {n}/{n_total} stored"
    return n


def test_sigkill_mid_sweep_then_resume_gives_identical_table(tmp_path):
    grid_file = _write_grid(tmp_path / "tiny.toml", epochs=2, n_seeds=2)
    n_total = len(sw.load_grid(grid_file))
    results = tmp_path / "killed"
    script = (
        f"import sys; sys.path.insert(0, {str(ROOT)!r});"
        "from tests.synthetic.test_sweep import slow_fake_run;"
        "from synthetic.sweep import run_sweep;"
        f"run_sweep({str(grid_file)!r}, {str(results)!r}, runner=slow_fake_run, progress=False)"
    )
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    _kill_after_first_runs([sys.executable, "-c", script], results, n_total, env)
    s = sw.run_sweep(grid_file, results, runner=fake_run, progress=False)
    assert s.ok and s.n_skipped > 0 and s.n_skipped + s.n_done == n_total
    sw.run_sweep(grid_file, tmp_path / "clean", runner=fake_run, progress=False)
    assert _table_bytes(results) == _table_bytes(tmp_path / "clean")
    assert len(store.load_table(results)) == n_total * 3


# ------------------------------------------------------------------ real training end to end


def test_real_train_run_sweep_end_to_end(tmp_path):
    spec = {
        "sweep": {
            "name": "real",
            "base": {"epochs": 2, "num_classes": 3, "n_per_class": 4, "n_test_per_class": 2, "lr": 0.05},
            "axes": {"seed": [0, 1]},
            "group": [{"method": "SCL", "beta": 0}, {"method": "HSCL", "beta": 5.0, "dtype": "float64"}],
        }
    }
    grid = sw.load_grid(spec)
    a = sw.run_sweep(grid, tmp_path / "a", progress=False)
    assert a.ok and a.n_done == 4
    from synthetic.train import train_run

    c = grid.configs[-1]
    direct = train_run(c)
    stored = store.read_run(tmp_path / "a", c.key())
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
    assert d.ok and _table_bytes(tmp_path / "a") == _table_bytes(tmp_path / "d")
    # stacked training (synthetic.stacked) gives the same runs up to float rounding
    b = sw.run_sweep(grid, tmp_path / "b", progress=False, stack=True)
    assert b.ok and b.n_done == 4
    ta, tb = store.read_table(tmp_path / "a"), store.read_table(tmp_path / "b")
    assert list(ta["run_key"]) == list(tb["run_key"])
    for col in ("loss", "etf_mean", "within_class_variation"):
        np.testing.assert_allclose(tb[col].to_numpy(float), ta[col].to_numpy(float), rtol=1e-4, atol=1e-6)
    assert {"etf_mean_mean", "etf_mean_std", "n_seeds"} <= set(a.summary.columns)


# ------------------------------------------------------------------ summaries and claims


def test_summarize_matches_manual_loop():
    grid = sw.load_grid(_spec(seeds=(0, 1, 2)))
    table = store.sort_table(pd.concat([fake_run(c) for c in grid.configs], ignore_index=True))
    s = sw.summarize(table, metrics=["loss", "etf_mean"])
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
    text = sw.format_summary(s)
    assert "±" in text and "HSCL" in text


def _claim_table(grid: str, rows: list[dict]) -> pd.DataFrame:
    out = []
    for i, r in enumerate(rows):
        base = {
            "method": "SCL",
            "beta": 0.0,
            "normalization": "sphere",
            "positives": "label",
            "batch_size": 0,
            "num_classes": 10,
            "seed": 0,
        }
        base.update({k: v for k, v in r.items() if k in base})
        metrics = {k: v for k, v in r.items() if k not in base}
        out.append({"grid": grid, **base, "run_key": f"{grid}{i}", "epoch": 5, **metrics})
    return pd.DataFrame(out)


def _seeds(setting: dict, etf: float, wcv: float, n: int = 3, jitter: float = 0.001, **extra) -> list[dict]:
    return [
        {
            **setting,
            "seed": s,
            "etf_mean": etf + jitter * s,
            "within_class_variation": wcv + jitter * s,
            **extra,
        }
        for s in range(n)
    ]


def test_evaluate_claims_verdicts_on_constructed_tables():
    s1 = _claim_table(
        "s1_scl_hscl_nc",
        _seeds({"method": "SCL"}, 0.01, 0.01) + _seeds({"method": "HSCL", "beta": 5.0}, 0.01, 0.02),
    )
    s2 = _claim_table(
        "s2_ucl_positives",
        _seeds({"method": "UCL", "positives": "label"}, 0.01, 0.01)
        + _seeds({"method": "UCL", "positives": "noise"}, 0.3, 0.5),
    )
    s3 = _claim_table(
        "s3_hucl_beta",
        _seeds({"method": "UCL"}, 0.01, 0.01)
        + _seeds({"method": "HUCL", "beta": 2.0}, 0.05, 0.01)
        + _seeds({"method": "HUCL", "beta": 10.0}, 0.4, 0.2),
    )
    s4 = _claim_table(
        "s4_no_normalisation",
        _seeds({"normalization": "none"}, 0.2, 3.0, effective_rank=4.0, spectrum_min=-12.0),
    )
    r5 = _claim_table(
        "r5_batch_size",
        _seeds({"batch_size": 32}, 0.3, 0.2)
        + _seeds({"batch_size": 64}, 0.01, 0.01)
        + _seeds({"batch_size": 512}, 0.02, 0.01),
    )
    table = pd.concat([s1, s2, s3, s4, r5], ignore_index=True)
    v = sw.evaluate_claims(table).set_index("claim")
    assert list(v["verdict"]) == ["reproduced"] * 5, v["measured"].to_dict()
    assert "±" in v.loc["S3", "measured"] and v.loc["S1", "n_runs"] == 6
    # break each claim
    bad = table.copy()
    bad.loc[(bad["grid"] == "s1_scl_hscl_nc") & (bad["method"] == "SCL"), "etf_mean"] = 0.3
    bad.loc[bad["grid"] == "s2_ucl_positives", "etf_mean"] = 0.01
    bad.loc[bad["grid"] == "s2_ucl_positives", "within_class_variation"] = 0.01
    s3m = bad["grid"] == "s3_hucl_beta"
    bad.loc[s3m, "etf_mean"] = 0.4 - bad.loc[s3m, "beta"] * 0.03
    bad.loc[bad["grid"] == "s4_no_normalisation", "etf_mean"] = 0.001
    bad.loc[bad["grid"] == "s4_no_normalisation", "within_class_variation"] = 0.001
    bad.loc[bad["grid"] == "s4_no_normalisation", "spectrum_min"] = -0.5
    bad.loc[(bad["grid"] == "r5_batch_size"), "etf_mean"] = 0.01
    bad.loc[(bad["grid"] == "r5_batch_size"), "within_class_variation"] = 0.01
    v = sw.evaluate_claims(bad).set_index("claim")
    assert v.loc["S1", "verdict"] == "partly reproduced"
    assert v.loc["S2", "verdict"] == "partly reproduced"
    assert v.loc["S3", "verdict"] == "partly reproduced"  # no growth, but HUCL is not NC
    assert "grows over the HUCL betas in 0/1 settings" in v.loc["S3", "measured"]
    assert v.loc["S4", "verdict"] == "not reproduced"
    assert v.loc["R5", "verdict"] == "partly reproduced"
    empty = sw.evaluate_claims(s1)
    assert set(empty.set_index("claim").loc[["S2", "S3", "S4", "R5"], "verdict"]) == {"no data"}


def _s3_rows(curves: dict, wcv: dict | None = None) -> list[dict]:
    """S3 settings: {(encoder, normalization): {beta: etf}} -> seed rows (wcv 0.01 unless given)."""
    rows = []
    for (enc, norm), curve in curves.items():
        for beta, etf in curve.items():
            w = (wcv or {}).get((enc, norm, beta), 0.01)
            rows += _seeds(
                {
                    "method": "HUCL" if beta > 0 else "UCL",
                    "beta": float(beta),
                    "normalization": norm,
                    "encoder": enc,
                },
                etf,
                w,
            )
    return rows


def _s3_table(curves: dict, wcv: dict | None = None) -> pd.DataFrame:
    rows = _s3_rows(curves, wcv)
    out = []
    for i, r in enumerate(rows):
        base = {
            "method": r["method"],
            "beta": r["beta"],
            "normalization": r["normalization"],
            "encoder": r["encoder"],
            "positives": "label",
            "seed": r["seed"],
        }
        out.append(
            {
                "grid": "s3_hucl_beta",
                **base,
                "run_key": f"s3k{i}",
                "epoch": 5,
                "etf_mean": r["etf_mean"],
                "within_class_variation": r["within_class_variation"],
            }
        )
    return pd.DataFrame(out)


def _s3(curves: dict, wcv: dict | None = None) -> tuple[str, str]:
    v = sw.evaluate_claims(_s3_table(curves, wcv)).set_index("claim")
    return v.loc["S3", "verdict"], v.loc["S3", "measured"]


def test_s3_verdict_per_setting_and_hucl_nc():
    grow = {0: 0.01, 1: 0.1, 2: 0.2, 5: 0.3, 10: 0.4}
    verdict, text = _s3({("free", "sphere"): grow, ("mlp", "ball"): grow})
    assert verdict == "reproduced" and "2/2 settings" in text and "reaches NC at beta: none" in text
    # the measured case: HUCL reaches NC at beta 1 and 2, then the deviation grows -> partly
    nc_low = {0: 0.001, 1: 0.001, 2: 0.002, 5: 0.07, 10: 0.2, 30: 0.35}
    verdict, text = _s3({("free", "sphere"): nc_low, ("mlp", "ball"): grow})
    assert verdict == "partly reproduced"
    assert "reaches NC at beta: 1, 2." in text and "2/2 settings" in text
    assert "[normalization=sphere,encoder=free]" in text and "HUCL NC at beta: 1, 2" in text
    # beta = 0 (UCL) is not part of the trend: NC at beta 0, flat above it -> no growth
    flat = {0: 0.01, 1: 0.3, 5: 0.3, 10: 0.3}
    assert _s3({("free", "sphere"): flat})[0] == "partly reproduced"
    # trend judged per setting: one grows, one falls (pooled, the means would still grow)
    falls = {0: 0.01, 1: 0.5, 5: 0.45, 10: 0.4}
    steep = {0: 0.01, 1: 0.1, 5: 0.6, 10: 0.9}
    verdict, text = _s3({("free", "sphere"): steep, ("mlp", "sphere"): falls})
    assert verdict == "partly reproduced" and "1/2 settings" in text
    # no setting grows and HUCL is NC -> not reproduced
    all_nc = {0: 0.001, 1: 0.001, 5: 0.001, 10: 0.001}
    verdict, text = _s3({("free", "sphere"): all_nc})
    assert verdict == "not reproduced" and "reaches NC at beta: 1, 5, 10." in text
    # a single HUCL beta cannot show a trend
    assert _s3({("free", "sphere"): {0: 0.01, 5: 0.3}})[0] == "no data"


def _write_claim_folder(folder: Path, table: pd.DataFrame) -> None:
    for _, run in table.drop(columns=["grid"]).groupby("run_key", sort=False):
        store.write_run(folder, run.reset_index(drop=True))


def _r5_table(grid: str = "r5_batch_size", small_etf: float = 0.3, small_wcv: float = 0.2) -> pd.DataFrame:
    return _claim_table(
        grid,
        _seeds({"batch_size": 32}, small_etf, small_wcv)
        + _seeds({"batch_size": 64}, 0.01, 0.01)
        + _seeds({"batch_size": 512}, 0.02, 0.01),
    )


def test_claims_on_a_single_grid_folder_judge_its_claim(tmp_path):
    _write_claim_folder(tmp_path / "r5_batch_size", _r5_table())
    table = sw.load_results(tmp_path / "r5_batch_size")
    assert set(table["grid"]) == {"r5_batch_size"}
    v = sw.evaluate_claims(table).set_index("claim")
    assert list(v["verdict"]) == ["no data"] * 4 + ["reproduced"]
    assert v.loc["R5", "n_runs"] == 9


def test_claims_match_scaled_grid_folders_and_keep_scales_apart(tmp_path):
    _write_claim_folder(tmp_path / "r5_batch_size", _r5_table())
    # the same runs (same keys) at another scale, where batch size 32 is NC too
    _write_claim_folder(
        tmp_path / "r5_batch_size-paper", _r5_table("r5_batch_size-paper", small_etf=0.01, small_wcv=0.01)
    )
    _write_claim_folder(
        tmp_path / "s3_hucl_beta-quick", _s3_table({("free", "sphere"): {0: 0.01, 1: 0.1, 5: 0.3}})
    )
    table = sw.load_results(tmp_path)
    v = sw.evaluate_claims(table)
    got = list(zip(v["claim"], v["grid"], v["verdict"], v["n_runs"]))
    assert got == [
        ("S1", "", "no data", 0),
        ("S2", "", "no data", 0),
        ("S3", "s3_hucl_beta-quick", "reproduced", 9),
        ("S4", "", "no data", 0),
        ("R5", "r5_batch_size", "reproduced", 9),
        ("R5", "r5_batch_size-paper", "partly reproduced", 9),
    ]


def test_summary_of_parent_folder_keeps_runs_shared_between_grids(tmp_path):
    grid = sw.load_grid(_spec())
    sw.run_sweep(grid, tmp_path / "g1", runner=fake_run, progress=False)
    sw.run_sweep(grid, tmp_path / "g2", runner=fake_run, progress=False)  # the same 18 keys
    table = sw.load_results(tmp_path)
    last = sw.final_epoch(table)
    assert len(last) == 36 and sorted(last["grid"].value_counts()) == [18, 18]
    s = sw.summarize(table)
    assert len(s) == 12 and set(s["n_seeds"]) == {3}
    for g in ("g1", "g2"):
        one = sw.summarize(store.read_table(tmp_path / g))
        mine = s[s["grid"] == g].drop(columns=["grid"]).reset_index(drop=True)
        pd.testing.assert_frame_equal(mine[one.columns], one)


def stack_failing(configs):
    if any(c.seed == 1 for c in configs):
        raise RuntimeError("stack boom")
    return [fake_run(c) for c in configs]


def test_failing_stack_falls_back_to_single_runs(tmp_path):
    def group_fn(configs):
        by = {}
        for c in configs:
            by.setdefault((c.method, c.normalization), []).append(c)
        return list(by.values())

    grid = sw.load_grid(_spec())
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
    assert all("boom" in tb and "stack boom" in tb for tb in s.failures.values())
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
    assert _table_bytes(tmp_path / "ref") == _table_bytes(tmp_path / "st2")


def always_failing(config):
    raise RuntimeError("always")


def test_all_runs_failing_writes_no_table(tmp_path):
    grid = sw.load_grid(_spec(seeds=(0,)))
    (tmp_path / store.TABLE_FILE).write_text("\n")  # a stale empty table of an older version
    s = sw.run_sweep(grid, tmp_path, runner=always_failing, progress=False)
    assert len(s.failures) == 6 and s.table_path is None
    assert not (tmp_path / store.TABLE_FILE).exists()
    assert len(store.read_table(tmp_path)) == 0 and len(sw.load_results(tmp_path)) == 0
    (tmp_path / store.TABLE_FILE).write_text("\n")
    assert len(store.read_table(tmp_path)) == 0  # an empty file reads as an empty table
    assert store.write_table(tmp_path) is None and not (tmp_path / store.TABLE_FILE).exists()


def test_stacking_helpers_come_from_synthetic_stacked(tmp_path, monkeypatch):
    from synthetic import stacked

    assert sw._find_stacking() == (stacked.stack_groups, stacked.train_stacked)
    monkeypatch.setitem(sys.modules, "synthetic.stacked", None)  # the module fails to import
    with pytest.raises(ImportError):
        sw.run_sweep(_spec(seeds=(0,)), tmp_path, runner=fake_run, stack=True, progress=False)


def test_sort_table_missing_values_order_matches_docstring():
    t = pd.DataFrame(
        {
            "a": ["x", None, "b"],
            "n": [1.0, 2.0, float("nan")],
            "run_key": ["k1", "k2", "k3"],
            "epoch": [0, 0, 0],
        }
    )
    assert list(store.sort_table(t)["run_key"]) == ["k2", "k3", "k1"]  # missing string first
    t["a"] = "same"
    assert list(store.sort_table(t)["run_key"]) == ["k1", "k2", "k3"]  # numeric NaN last
