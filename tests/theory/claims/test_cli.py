"""Tests of ``python -m theory``: exit codes, the table, --json / --csv, and failure propagation."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from io import StringIO
from pathlib import Path

import pandas as pd
import pytest

import theory.claims.cli as cli
from theory.claims import CHECK_IDS, OPEN_IDS, SubCheck, Verdict, checks, from_json

ROOT = Path(__file__).resolve().parents[3]


def _run(*args: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=str(ROOT))
    return subprocess.run(
        [sys.executable, "-m", "theory", *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )


@pytest.mark.slow
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
    assert "--quick" in out and "--seed" in out and "--large" in out
    assert "--json" in out and "--csv" in out


def test_cli_bad_flag_exits_nonzero():
    for argv in (["--seed", "-1"], ["--no-such-flag"], ["--json", "--csv"]):
        with pytest.raises(SystemExit) as exc:
            cli.main(argv)
        assert exc.value.code != 0


def _bad(out, quick, seed):
    out.append(("T5", SubCheck.tolerance("deliberately violated", -1.0, 1e-10, kind="gap", instances=1)))


def _crashing(out, quick, seed):
    raise RuntimeError("boom")


def test_failing_check_gives_nonzero_exit(monkeypatch, capsys):
    monkeypatch.setattr(checks, "GROUPS", (("bad (T5)", ("T5",), _bad), ("crash (T7)", ("T7",), _crashing)))
    assert cli.main(["--quick", "--brief"]) == 1
    out = capsys.readouterr().out
    row = [ln for ln in out.splitlines() if ln.startswith("T5 ")][0]
    assert row.rstrip().endswith("FAIL")
    # claims with no check at all are reported as FAIL, never silently passed
    assert [ln for ln in out.splitlines() if ln.startswith("T1 ")][0].rstrip().endswith("FAIL")
    claims = checks.run_checks(quick=True)
    t7 = [c for c in claims if c.id == "T7"][0].subchecks
    assert t7 and not t7[0].passed and "boom" in t7[0].what


def test_subcheck_semantics():
    ok = SubCheck.tolerance("x", -1e-12, 1e-10, kind="gap", instances=1)
    bad = SubCheck.tolerance("x", 2e-9, 1e-9, kind="error", instances=1)
    nan = SubCheck.tolerance("x", float("nan"), 1e-9, kind="error", instances=1)
    assert ok.passed and not bad.passed and not nan.passed


def test_cli_json_and_csv_in_process(monkeypatch, capsys):
    """--json prints the claim records (round trip through theory.claims), --csv a table with one
    row per sub-check (per claim with --brief); the exit status still reflects a FAIL."""
    monkeypatch.setattr(checks, "GROUPS", (("bad (T5)", ("T5",), _bad), ("crash (T7)", ("T7",), _crashing)))
    assert cli.main(["--quick", "--json"]) == 1
    records = from_json(capsys.readouterr().out)
    assert [c.id for c in records] == list(CHECK_IDS + OPEN_IDS)
    by_id = {c.id: c for c in records}
    assert by_id["T5"].verdict is Verdict.FAIL and by_id["T5"].subchecks[0].what == "deliberately violated"
    assert by_id["T1"].verdict is Verdict.FAIL and by_id["T1"].notes == "no check ran"
    assert by_id["T7"].subchecks[0].evidence[0].value == float("inf")  # inf survives JSON
    assert by_id["T5"].command == "python -m theory --quick"
    assert by_id["T5"].setting == {"scale": "quick", "seed": "0"}

    assert cli.main(["--quick", "--csv"]) == 1
    frame = pd.read_csv(StringIO(capsys.readouterr().out))
    assert list(frame.columns) == ["id", "what", "verdict", "evidence", "setting", "instances", "note"]
    assert frame["id"].tolist() == ["T5", "T7"] and frame["verdict"].tolist() == ["FAIL", "FAIL"]

    assert cli.main(["--quick", "--csv", "--brief", "--seed", "2"]) == 1
    frame = pd.read_csv(StringIO(capsys.readouterr().out))
    assert frame["id"].tolist() == list(CHECK_IDS + OPEN_IDS)
    assert set(frame["verdict"]) == {"FAIL"}
    assert (frame["command"] == "python -m theory --quick --seed 2").all()


@pytest.mark.slow
def test_cli_json_of_the_real_checks():
    proc = _run("--quick", "--json")
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    assert [d["id"] for d in data] == list(CHECK_IDS + OPEN_IDS)
    claims = from_json(proc.stdout)
    assert all(c.verdict is Verdict.PASS for c in claims if c.id in CHECK_IDS)
    assert all(c.verdict in (Verdict.FOUND, Verdict.NOT_FOUND) for c in claims if c.id in OPEN_IDS)
    assert sum(len(c.subchecks) for c in claims if c.id in CHECK_IDS) == 48
    assert all(c.command == "python -m theory --quick" for c in claims)
