"""Tests of ``python -m synthetic``: --help of every command, a quick sweep, summary, claims, kill/resume."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from synthetic import grids, results
from synthetic.__main__ import build_parser, main

ROOT = Path(__file__).resolve().parents[2]
ENV = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)}


def _cli(*args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "synthetic", *args],
        cwd=ROOT,
        env=ENV,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def test_help_of_every_command_explains_every_flag(capsys):
    top = _cli("--help")
    assert top.returncode == 0 and "sweep" in top.stdout and "claims" in top.stdout
    parser = build_parser()
    sub = next(a for a in parser._actions if a.__class__.__name__ == "_SubParsersAction")
    for name, p in sub.choices.items():
        with pytest.raises(SystemExit) as exc:
            main([name, "--help"])
        assert exc.value.code == 0
        text = capsys.readouterr().out
        for action in p._actions:
            for opt in action.option_strings:
                assert opt in text, (name, opt)
            if action.option_strings and action.help not in (None, "==SUPPRESS=="):
                assert len(action.help) > 10, (name, action.option_strings)


def test_bad_arguments_exit_2(tmp_path):
    assert _cli("sweep", "--results", str(tmp_path)).returncode == 2  # no grid, no flags
    assert _cli("sweep", "no_such_grid", "--results", str(tmp_path)).returncode == 2
    assert _cli("sweep", "--method", "SCL", "--jobs", "0").returncode == 2
    with pytest.raises(SystemExit) as exc:
        main(["summary", str(tmp_path / "missing")])
    assert exc.value.code == 2


def test_quick_grid_sweep_summary_and_claims(tmp_path, capsys):
    res = tmp_path / "res"
    args = [
        "sweep",
        "--method",
        "SCL",
        "--beta",
        "0",
        "2",
        "--seeds",
        "2",
        "--epochs",
        "2",
        "--num-classes",
        "3",
        "--n-per-class",
        "4",
        "--set",
        "lr=0.05",
        "eval_every=1",
        "--results",
        str(res),
        "--no-progress",
        "--name",
        "s1_scl_hscl_nc",
    ]
    r = _cli(*args)
    assert r.returncode == 0, r.stderr[-3000:]
    assert "4 runs" in r.stdout and "±" in r.stdout
    table = results.read_table(res / "s1_scl_hscl_nc")
    assert set(zip(table["method"], table["beta"])) == {("SCL", 0.0), ("HSCL", 2.0)}
    assert set(table["seed"]) == {0, 1} and set(table["lr"]) == {0.05} and len(table) == 4 * 3
    # in-process: the same command again skips everything; summary and claims print
    assert main(args) == 0
    assert "0 run now" in capsys.readouterr().out
    assert main(["summary", str(res / "s1_scl_hscl_nc")]) == 0
    out = capsys.readouterr().out
    assert "etf_mean" in out and "HSCL" in out
    assert main(["claims", str(res), "--details", "--csv", str(tmp_path / "v.csv")]) == 0
    out = capsys.readouterr().out
    # the folder is named like claim S1's grid: S1 is judged on its 4 runs (2 epochs: no NC yet)
    assert "S1: NOT REPRODUCED  (4 runs)" in out and "0/2 settings NC" in out
    for claim in ("S2", "S3", "S4", "R5"):
        assert f"{claim}: NO DATA  (0 runs)" in out
    v = pd.read_csv(tmp_path / "v.csv")
    assert list(v["claim"]) == ["S1", "S2", "S3", "S4", "R5"]
    assert list(v["verdict"]) == ["not reproduced"] + ["no data"] * 4
    # the single grid folder judges the same claim
    assert main(["claims", str(res / "s1_scl_hscl_nc")]) == 0
    single = capsys.readouterr().out
    assert "S1: NOT REPRODUCED  (4 runs)" in single and "R5: NO DATA  (0 runs)" in single


def test_quick_scale_keeps_epochs_and_seeds_of_a_flag_grid(tmp_path, capsys):
    args = [
        "sweep",
        "--method",
        "SCL",
        "--quick",
        "--epochs",
        "3",
        "--seeds",
        "2",
        "--num-classes",
        "3",
        "--n-per-class",
        "3",
        "--set",
        "eval_every=1",
        "--results",
        str(tmp_path),
        "--no-progress",
        "--name",
        "q",
    ]
    assert main(args) == 0
    table = results.read_table(tmp_path / "q-quick")
    assert (
        set(table["seed"]) == {0, 1} and set(table["epochs"]) == {3} and set(table["epoch"]) == {0, 1, 2, 3}
    )


def test_jobs_and_threads_are_checked_by_run_sweep(tmp_path, capsys):
    for flag, value in (("--threads", "0"), ("--jobs", "-2")):
        with pytest.raises(SystemExit) as exc:
            main(["sweep", "--method", "SCL", "--epochs", "1", flag, value, "--results", str(tmp_path)])
        assert exc.value.code == 2
        err = capsys.readouterr().err
        assert (
            "threads must be a positive int" if flag == "--threads" else "n_jobs must be a positive int"
        ) in err
    assert not list((tmp_path / "quick" / "runs").glob("*.csv"))


def test_shipped_grid_quick_scale_runs(tmp_path, capsys):
    r = _cli(
        "sweep",
        "s3_hucl_beta",
        "--quick",
        "--epochs",
        "1",
        "--set",
        "n_per_class=3",
        "--results",
        str(tmp_path),
        "--no-progress",
    )
    assert r.returncode == 0, r.stderr[-3000:]
    n = len(grids.load_grid("s3_hucl_beta", scale="quick"))
    assert len(results.finished_keys(tmp_path / "s3_hucl_beta-quick")) == n
    # claims finds the scaled grid folder and names it
    assert main(["claims", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert re.search(r"S3 \[s3_hucl_beta-quick\]: (NOT |PARTLY )?REPRODUCED  \(6 runs\)", out), out[:2000]


def test_cli_sweep_sigkill_and_restart_equals_uninterrupted(tmp_path, capsys):
    from tests.synthetic.fakes import kill_after_first_runs

    common = [
        "-m",
        "synthetic",
        "sweep",
        "--method",
        "HSCL",
        "--beta",
        "1",
        "2",
        "3",
        "--seeds",
        "2",
        "--epochs",
        "40",
        "--num-classes",
        "4",
        "--n-per-class",
        "8",
        "--set",
        "lr=0.05",
        "--no-progress",
        "--no-stack",
        "--name",
        "k",
    ]
    killed, clean = tmp_path / "killed", tmp_path / "clean"
    kill_after_first_runs([sys.executable, *common, "--results", str(killed)], killed / "k", 6, ENV)
    # restart and the uninterrupted reference run in-process (same code path as the CLI)
    assert main([*common[2:], "--results", str(killed)]) == 0
    assert re.search(r"6 runs, [1-5] already stored", capsys.readouterr().out)
    assert main([*common[2:], "--results", str(clean)]) == 0
    assert (killed / "k" / "table.csv").read_bytes() == (clean / "k" / "table.csv").read_bytes()
    assert len(results.load_table(killed / "k")) == 6 * 41
