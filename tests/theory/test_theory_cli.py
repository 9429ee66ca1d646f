"""Tests of ``python -m theory``: exit codes, the table, and failure propagation."""

from __future__ import annotations

import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

import theory.__main__ as cli

ROOT = Path(__file__).resolve().parents[2]


def _run(*args: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=str(ROOT))
    return subprocess.run([sys.executable, "-m", "theory", *args], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=300)


def test_cli_quick_passes():
    proc = _run("--quick", "--seed", "3")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    out = proc.stdout
    lines = out.splitlines()
    for claim in ["T1", "T2", "T3", "T4", "T5", "T6", "T7", "T8", "W-law"]:
        row = [ln for ln in lines if ln.startswith(claim + " ")]
        assert len(row) == 1 and row[0].rstrip().endswith("PASS"), out
    assert "ALL PASS" in out
    assert "FAIL" not in out.replace("FAILED", "")


def test_cli_help(capsys):
    """In-process (argparse exits before any check runs)."""
    with pytest.raises(SystemExit) as exc:
        cli.main(["--help"])
    assert exc.value.code == 0
    out = capsys.readouterr().out
    assert "--quick" in out and "--seed" in out


def test_cli_bad_flag_exits_nonzero():
    for argv in (["--seed", "-1"], ["--no-such-flag"]):
        with pytest.raises(SystemExit) as exc:
            cli.main(argv)
        assert exc.value.code != 0


def test_failing_check_gives_nonzero_exit(monkeypatch, capsys):
    def bad(rep, quick, seed):
        rep.add("T5", "deliberately violated", 1, "gap", -1.0, 1e-10)

    def crashing(rep, quick, seed):
        raise RuntimeError("boom")

    monkeypatch.setattr(cli, "CHECKS", [("bad (T5)", bad), ("crash (T7)", crashing)])
    assert cli.main(["--quick", "--brief"]) == 1
    out = capsys.readouterr().out
    row = [ln for ln in out.splitlines() if ln.startswith("T5 ")][0]
    assert row.rstrip().endswith("FAIL")
    # claims with no check at all are reported as FAIL, never silently passed
    assert [ln for ln in out.splitlines() if ln.startswith("T1 ")][0].rstrip().endswith("FAIL")
    rep = cli.run_checks(quick=True)
    t7 = [c for c in rep.checks if c.claim == "T7"]
    assert t7 and not t7[0].passed and "boom" in t7[0].what


def test_subcheck_semantics():
    ok = cli.SubCheck("T1", "x", 1, "gap", -1e-12, 1e-10)
    bad = cli.SubCheck("T1", "x", 1, "error", 2e-9, 1e-9)
    nan = cli.SubCheck("T1", "x", 1, "error", math.nan, 1e-9)
    assert ok.passed and not bad.passed and not nan.passed
