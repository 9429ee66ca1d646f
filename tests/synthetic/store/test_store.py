"""Tests of synthetic.store.read: the table layout, the atomic store, reading results back."""

from __future__ import annotations

import csv
import json

import numpy as np
import pandas as pd
import pytest

from synthetic.engine.config import RunConfig
from synthetic.store import folders, keys, runs, schema, tables
from synthetic.store import read as results
from synthetic.sweep.tasks import Trainer
from tests.synthetic.fakes import always_failing as always_failing_run
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
    runs.write_run(tmp_path, frame)
    back = runs.read_run(tmp_path, "k1")
    expect = frame.sort_values("epoch").reset_index(drop=True)
    assert list(back["epoch"]) == list(range(50))
    got, want = back["m"].to_numpy(), expect["m"].to_numpy().astype(np.float64)
    assert np.array_equal(got, want, equal_nan=True)
    assert back["beta"].iloc[0] == 0.1 and bool(back["flag"].iloc[0]) is True
    assert folders.temp_files(tmp_path) == []


def test_store_ignores_temp_files_and_orders_deterministically(tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    cfgs = [RunConfig(epochs=1, seed=s, num_classes=3) for s in (2, 0, 1)]
    for c in cfgs:
        runs.write_run(a, fake_run(c))
    for c in reversed(cfgs):
        runs.write_run(b, fake_run(c))
    # an interrupted write leaves a temp file: ignored by readers
    (a / "runs" / ".deadbeef.csv.123.456.tmp").write_text("method,run_key\nSC")
    assert len(folders.temp_files(a)) == 1
    assert runs.finished_keys(a) == runs.finished_keys(b) == {c.key() for c in cfgs}
    ta, tb = tables.load_table(a), tables.load_table(b)
    pd.testing.assert_frame_equal(ta, tb)
    assert list(ta["seed"]) == [0, 0, 1, 1, 2, 2] and list(ta["epoch"]) == [0, 1] * 3
    assert folders.remove_temp_files(a, older_than_s=3600) == []
    assert len(folders.remove_temp_files(a, older_than_s=0)) == 1


def test_store_validation(tmp_path):
    f = fake_run(RunConfig(epochs=1, num_classes=3))
    with pytest.raises(ValueError, match="key"):
        runs.write_run(tmp_path, f, key="other")
    with pytest.raises(ValueError, match="key"):
        runs.run_path(tmp_path, "../evil")
    with pytest.raises(ValueError, match="epoch"):
        runs.write_run(tmp_path, pd.concat([f, f]))
    with pytest.raises(ValueError, match="run_key"):
        runs.write_run(tmp_path, f.drop(columns=["run_key"]))
    with pytest.raises(FileNotFoundError, match="runs"):
        runs.read_run(tmp_path, "abc")


def test_sort_table_missing_values_order_matches_docstring():
    t = pd.DataFrame(
        {
            "a": ["x", None, "b"],
            "n": [1.0, 2.0, float("nan")],
            "run_key": ["k1", "k2", "k3"],
            "epoch": [0, 0, 0],
        }
    )
    assert list(schema.sort_table(t)["run_key"]) == ["k2", "k3", "k1"]  # missing string first
    t["a"] = "same"
    assert list(schema.sort_table(t)["run_key"]) == ["k1", "k2", "k3"]  # numeric NaN last


def test_config_columns_is_the_one_layout():
    # without a frame: the RunConfig fields, the columns a run frame starts with
    f = fake_run(RunConfig(epochs=1, num_classes=3))
    assert schema.config_columns(f) == list(RunConfig().to_dict())
    # with a frame: the columns before run_key, less epoch and the grid label of load_results
    t = pd.DataFrame({"grid": ["g"], "a": [1], "epoch": [0], "run_key": ["k"], "m": [0.5]})
    assert schema.config_columns(t) == ["a"]
    with pytest.raises(ValueError, match="run_key"):
        schema.config_columns(t.drop(columns=["run_key"]))


# --------------------------------------------------------------------------------------------
# Completeness: a run file is stored only when it matches its completion record
# --------------------------------------------------------------------------------------------


def _stored(tmp_path, n_seeds=2, epochs=5):
    from synthetic.sweep import run as sw

    grid = [RunConfig(epochs=epochs, seed=s, num_classes=3, n_per_class=4) for s in range(n_seeds)]
    sw.run_sweep(grid, tmp_path, trainer=Trainer(fake_run), progress=False)
    return grid


def _truncate(path, how: str, record: bool) -> None:
    data = path.read_bytes()
    if how == "line":  # at a line boundary: header + 3 of the 6 epoch rows
        data = b"".join(data.splitlines(keepends=True)[:4])
    else:  # mid-line, inside the last row
        data = data[: len(data) - 7]
    path.write_bytes(data)
    if not record:
        path.with_suffix(".json").unlink()  # a run file of an older store, without its record


@pytest.mark.parametrize("record", [True, False], ids=["recorded", "legacy"])
@pytest.mark.parametrize("how", ["line", "midline"])
def test_truncated_run_file_is_named_left_out_and_rerun(tmp_path, how, record):
    """Observed: a hand-truncated run file counted as finished forever ("already stored, 0 run
    now") and table.csv / the verdicts used epoch 3 as the final epoch."""
    from synthetic.sweep import run as sw

    grid = _stored(tmp_path)
    clean = tables.read_table(tmp_path)
    victim = runs.run_path(tmp_path, grid[1].key())
    _truncate(victim, how, record)
    check = runs.check_run_file(victim)
    assert not check.ok and "incomplete" in check.reason, check
    assert runs.finished_keys(tmp_path) == {grid[0].key()}
    # readers never use it silently: table.csv (whose run keys still match) is not trusted
    with pytest.warns(tables.StoreWarning, match=victim.name):
        table = tables.read_table(tmp_path)
    assert set(table["run_key"]) == {grid[0].key()}
    assert table.attrs["excluded"] == [check.describe()]
    with pytest.warns(tables.StoreWarning, match=victim.name):
        assert results.load_results(tmp_path).attrs["excluded"] == [check.describe()]
    # the next sweep names it, sets it aside (never deletes it), reruns it: the clean table again
    s = sw.run_sweep(grid, tmp_path, trainer=Trainer(fake_run), progress=False)
    assert (s.n_done, s.n_skipped) == (1, 1) and s.quarantined == [check.describe()]
    assert victim.name in s.format() and "set aside 1" in s.format()
    moved = list((tmp_path / "quarantine").glob(f"*-{victim.name}"))
    assert len(moved) == 1 and "incomplete" in moved[0].with_name(moved[0].name + ".why").read_text()
    pd.testing.assert_frame_equal(tables.read_table(tmp_path), clean)
    assert tables.table_is_current(tmp_path)


def test_table_csv_is_rebuilt_when_a_run_file_changed(tmp_path):
    """Observed: table.csv was trusted whenever its run keys matched the run files."""
    grid = _stored(tmp_path)
    assert tables.table_is_current(tmp_path)
    # the same run key, other (complete, recorded) numbers: the checksums differ, the keys do not
    f = fake_run(grid[0])
    f["loss"] = 123.0
    runs.write_run(tmp_path, f)
    assert not tables.table_is_current(tmp_path)
    table = tables.read_table(tmp_path)
    assert set(table.loc[table["run_key"] == grid[0].key(), "loss"]) == {123.0}
    # a table.csv edited by hand is not trusted either
    tables.write_table(tmp_path)
    text = (tmp_path / "table.csv").read_text()
    (tmp_path / "table.csv").write_text(text.replace("123.0", "7.0"))
    assert not tables.table_is_current(tmp_path)
    assert set(tables.read_table(tmp_path)["loss"]) >= {123.0}


def test_record_detects_an_edit_that_keeps_the_structure(tmp_path):
    grid = _stored(tmp_path, n_seeds=1)
    path = runs.run_path(tmp_path, grid[0].key())
    lines = path.read_text().splitlines(keepends=True)
    lines[-1] = lines[-1].replace(",5,", ",5,", 1)[:-3] + "99\n"  # same fields, other digits
    path.write_text("".join(lines))
    c = runs.check_run_file(path)
    assert not c.ok and "sha256 differs" in c.reason
    with pytest.raises(ValueError, match=path.name):
        runs.read_run(tmp_path, grid[0].key())


def test_write_run_refuses_an_incomplete_frame(tmp_path):
    c = RunConfig(epochs=4, eval_every=2, num_classes=3)
    f = fake_run(c)  # epochs 0..4, but the config records 0, 2, 4
    with pytest.raises(ValueError, match="incomplete"):
        runs.write_run(tmp_path, f)
    good = f[f["epoch"].isin([0, 2, 4])]
    runs.write_run(tmp_path, good)
    assert runs.finished_keys(tmp_path) == {c.key()}
    with pytest.raises(ValueError, match="incomplete"):
        runs.write_run(tmp_path, good.iloc[:2])
    record = json.loads(runs.record_path(tmp_path, c.key()).read_text())
    assert record["epochs"] == [0, 2, 4] and record["rows"] == 3 and len(record["sha256"]) == 64


def test_complete_run_files_of_an_older_store_are_kept_and_given_a_record(tmp_path):
    from synthetic.sweep import run as sw

    grid = _stored(tmp_path)
    before = tables.read_table(tmp_path)
    for c in grid:
        runs.record_path(tmp_path, c.key()).unlink()
    # no reader takes them on trust; a sweep verifies them against its config class, then adopts
    assert runs.finished_keys(tmp_path) == set()
    assert all("not verified" in c.reason for c in runs.scan_store(tmp_path).bad)
    key_of = lambda columns: RunConfig.from_dict(columns).key()  # noqa: E731
    assert runs.scan_store(tmp_path, key_of).keys == {c.key() for c in grid}
    s = sw.run_sweep(grid, tmp_path, trainer=Trainer(always_failing_run), progress=False)
    assert (s.n_done, s.n_skipped, s.adopted, s.ok) == (0, 2, 2, True)
    assert all(runs.check_run_file(runs.run_path(tmp_path, c.key())).recorded for c in grid)
    pd.testing.assert_frame_equal(tables.read_table(tmp_path), before)


@pytest.mark.parametrize(
    "name, content, why",
    [
        ("empty.csv", "", "empty file"),
        ("garbage.csv", '\x00\x01garbage,,\n"unclosed', "not a run file"),
        ("notes.csv", "a,b\n1,2\n", "no 'run_key'"),
        ("0123456789abcdef.csv", None, "not a run file of run 0123456789abcdef"),
    ],
)
def test_foreign_files_are_named_set_aside_and_the_rest_continues(tmp_path, name, content, why):
    """Observed: any such file made every later command fail with "frame must have a 'run_key'
    column" without naming the file."""
    from synthetic.sweep import run as sw

    grid = _stored(tmp_path)
    runs_dir = tmp_path / "runs"
    if content is None:  # a real run file under another run's name
        content = runs.run_path(tmp_path, grid[0].key()).read_text()
    (runs_dir / name).write_text(content)
    with pytest.warns(tables.StoreWarning, match=name):
        table = results.load_results(tmp_path)
    assert len(table) == 2 * 6 and any(name in e and why in e for e in table.attrs["excluded"])
    s = sw.run_sweep(grid, tmp_path, trainer=Trainer(fake_run), progress=False)
    assert s.ok and s.n_done == 0 and len(s.quarantined) == 1 and name in s.quarantined[0]
    assert not (runs_dir / name).exists() and list((tmp_path / "quarantine").glob(f"*-{name}"))
    assert tables.read_table(tmp_path).attrs["excluded"] == []


def test_readers_skip_a_record_without_its_run_and_name_it(tmp_path):
    # a kill between the two writes of write_run leaves the record (written first) alone
    c = RunConfig(epochs=1, num_classes=3, seed=4)
    runs.write_run(tmp_path, fake_run(c))
    runs.run_path(tmp_path, c.key()).unlink()
    assert runs.finished_keys(tmp_path) == set()
    with pytest.warns(tables.StoreWarning, match=f"{c.key()}.csv: missing behind its completion record"):
        table = tables.load_table(tmp_path)
    assert len(table) == 0
    assert table.attrs["missing"] == [
        {"run_key": c.key(), "record": str(runs.record_path(tmp_path, c.key())), "config": c.to_dict()}
    ]


def _rewrite_column(path, column: str, value: str, rows: str) -> None:
    """Set ``column`` to ``value`` in every row (``rows="all"``) or in the last one, keeping the CSV layout."""
    with open(path, newline="") as fh:
        data = list(csv.reader(fh))
    i = data[0].index(column)
    for r in data[1:] if rows == "all" else data[-1:]:
        r[i] = value
    with open(path, "w", newline="") as fh:
        csv.writer(fh, lineterminator="\n").writerows(data)


@pytest.mark.parametrize("rows", ["all", "last"])
def test_an_unrecorded_run_file_is_adopted_only_when_its_config_hashes_to_its_name(tmp_path, rows):
    """Observed: a run file without a completion record, its rows edited to lr = 0.123 under the
    key of lr = 0.001, was adopted as "an older store's" file and its rows reached table.csv."""
    from synthetic.sweep import run as sw

    grid = _stored(tmp_path, n_seeds=3)
    lrs = {c.lr for c in grid}
    assert lrs == {0.001}
    victim = runs.run_path(tmp_path, grid[1].key())
    for c in grid:  # an older store: no completion records at all
        runs.record_path(tmp_path, c.key()).unlink()
    _rewrite_column(victim, "lr", "0.123", rows)
    check = runs.check_run_file(victim, key_of=lambda columns: RunConfig.from_dict(columns).key())
    assert not check.ok and (
        "hash to run" in check.reason if rows == "all" else "differs between rows" in check.reason
    )
    assert runs.finished_keys(tmp_path) == set()  # no reader takes an unverified file
    s = sw.run_sweep(grid, tmp_path, trainer=Trainer(fake_run), progress=False)
    assert (s.adopted, s.n_done, s.n_skipped) == (2, 1, 2), s.format()
    assert len(s.quarantined) == 1 and victim.name in s.quarantined[0]
    assert list((tmp_path / "quarantine").glob(f"*-{victim.name}"))
    table = pd.read_csv(tmp_path / "table.csv")
    assert set(table["lr"]) == lrs
    rerun = runs.read_run(tmp_path, grid[1].key())
    assert np.array_equal(rerun["loss"].to_numpy(), fake_run(grid[1])["loss"].to_numpy())


def test_unrecorded_run_files_of_every_config_field_type_verify(tmp_path):
    # the config columns read back from the CSV rebuild the config of the key (None, bools, strings, ints)
    configs = [
        RunConfig(epochs=2, num_classes=3, n_per_class=4, normalization="none", record_means=True),
        RunConfig(
            epochs=2, num_classes=4, d=5, method="HSCL", beta=2, psi="triplet", margin=0.5, encoder="mlp"
        ),
        RunConfig(epochs=3, eval_every=2, num_classes=3, method="UCL", beta=-0.0, batch_size=None, lr=1e-2),
        RunConfig(
            epochs=2, num_classes=3, method="WeiNCE", positives="noise", centres="orthogonal", input_dim=8
        ),
    ]
    for c in configs:
        frame = fake_run(c)
        frame = frame[frame["epoch"].isin(schema.expected_epochs(c))]
        runs.write_run(tmp_path, frame)
        runs.record_path(tmp_path, c.key()).unlink()
    scan = runs.scan_store(tmp_path, key_of=lambda columns: RunConfig.from_dict(columns).key())
    assert scan.keys == {c.key() for c in configs}, scan.excluded()
    assert set(runs.adopt_unrecorded(tmp_path, scan.ok.values())) == {c.key() for c in configs}
    assert runs.finished_keys(tmp_path) == {c.key() for c in configs}


# --------------------------------------------------------------------------------------------
# Canonical run keys
# --------------------------------------------------------------------------------------------


def test_run_keys_are_canonical():
    """Observed: beta = -0.0 and beta = 0.0 had different keys (trained twice, "two seeds" std 0)."""
    assert RunConfig(beta=-0.0).key() == RunConfig(beta=0.0).key()
    assert RunConfig(method="HSCL", beta=2).key() == RunConfig(method="HSCL", beta=2.0).key()
    assert RunConfig.from_dict({"seed": np.int64(3)}).key() == RunConfig(seed=3).key()
    # values that were canonical already keep their historical key (stored runs stay valid)
    assert RunConfig().key() == "c15761cddb10c93b"
    assert keys.canonical_value(-0.0) == 0.0 and str(keys.canonical_value(-0.0)) == "0.0"
    assert keys.canonical_value(2, like=1.5) == 2.0 and isinstance(keys.canonical_value(2, 1.5), float)
    assert keys.canonical_value(2, like=1) == 2 and isinstance(keys.canonical_value(2, 1), int)
    assert keys.canonical_value(True, like=1.0) is True
    assert keys.canonical_value((np.float64(-0.0), [1])) == [0.0, [1]]
    for bad in (float("nan"), float("inf"), np.float32("nan")):
        with pytest.raises(ValueError, match="finite"):
            keys.canonical_value(bad, name="beta")
    with pytest.raises(ValueError, match="beta"):
        keys.run_key({"beta": float("nan")})
    assert keys.run_key({"a": -0.0, "b": 1}) == keys.run_key({"b": 1, "a": 0.0})


def test_negative_zero_beta_is_trained_once(tmp_path):
    from synthetic.sweep import grids
    from synthetic.sweep import run as sw

    spec = {"sweep": {"base": {"epochs": 1, "num_classes": 3}, "axes": {"beta": [-0.0, 0.0], "seed": [0]}}}
    grid = grids.load_grid(spec)
    assert len(grid) == 1
    configs = [RunConfig(epochs=1, num_classes=3, beta=b) for b in (-0.0, 0.0)]
    s = sw.run_sweep(configs, tmp_path, trainer=Trainer(fake_run), progress=False)
    assert (s.n_runs, s.n_done) == (1, 1)
    text = runs.run_path(tmp_path, configs[0].key()).read_text()
    assert "-0.0" not in text  # the stored config value is canonical too
    assert len(s.summary) == 1 and s.summary["n_seeds"].iloc[0] == 1
