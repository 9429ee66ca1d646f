"""Tests of ``python -m synthetic``: --help of every command, a quick sweep, summary, claims, kill/resume."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from synthetic import store
from synthetic import sweep as sw
from synthetic.__main__ import build_parser, main

ROOT = Path(__file__).resolve().parents[2]
ENV = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)}


def _cli(*args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "synthetic", *args], cwd=ROOT, env=ENV, capture_output=True, text=True, timeout=timeout
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
    args = ["sweep", "--method", "SCL", "--beta", "0", "2", "--seeds", "2", "--epochs", "2",
            "--num-classes", "3", "--n-per-class", "4", "--set", "lr=0.05", "eval_every=1",
            "--results", str(res), "--no-progress", "--name", "mini"]
    r = _cli(*args)
    assert r.returncode == 0, r.stderr[-3000:]
    assert "4 runs" in r.stdout and "±" in r.stdout
    table = store.read_table(res / "mini")
    assert set(zip(table["method"], table["beta"])) == {("SCL", 0.0), ("HSCL", 2.0)}
    assert set(table["seed"]) == {0, 1} and set(table["lr"]) == {0.05} and len(table) == 4 * 3
    # in-process: the same command again skips everything; summary and claims print
    assert main(args) == 0
    assert "0 run now" in capsys.readouterr().out
    assert main(["summary", str(res / "mini")]) == 0
    out = capsys.readouterr().out
    assert "etf_mean" in out and "HSCL" in out
    assert main(["claims", str(res), "--details", "--csv", str(tmp_path / "v.csv")]) == 0
    out = capsys.readouterr().out
    assert re.search(r"S1: (NO DATA|REPRODUCED|NOT REPRODUCED|PARTLY REPRODUCED)", out)
    assert list(pd.read_csv(tmp_path / "v.csv")["claim"]) == ["S1", "S2", "S3", "S4", "R5"]


def test_shipped_grid_quick_scale_runs(tmp_path):
    r = _cli("sweep", "s3_hucl_beta", "--quick", "--epochs", "1", "--set", "n_per_class=3",
             "--results", str(tmp_path), "--no-progress")
    assert r.returncode == 0, r.stderr[-3000:]
    n = len(sw.load_grid("s3_hucl_beta", scale="quick"))
    assert len(store.finished_keys(tmp_path / "s3_hucl_beta-quick")) == n


def test_cli_sweep_sigkill_and_restart_equals_uninterrupted(tmp_path, capsys):
    from tests.synthetic.test_sweep import _kill_after_first_runs

    common = ["-m", "synthetic", "sweep", "--method", "HSCL", "--beta", "1", "2", "3", "--seeds", "2",
              "--epochs", "40", "--num-classes", "4", "--n-per-class", "8", "--set", "lr=0.05",
              "--no-progress", "--no-stack", "--name", "k"]
    killed, clean = tmp_path / "killed", tmp_path / "clean"
    _kill_after_first_runs([sys.executable, *common, "--results", str(killed)], killed / "k", 6, ENV)
    # restart and the uninterrupted reference run in-process (same code path as the CLI)
    assert main([*common[2:], "--results", str(killed)]) == 0
    assert re.search(r"6 runs, [1-5] already stored", capsys.readouterr().out)
    assert main([*common[2:], "--results", str(clean)]) == 0
    assert (killed / "k" / "table.csv").read_bytes() == (clean / "k" / "table.csv").read_bytes()
    assert len(store.load_table(killed / "k")) == 6 * 41
