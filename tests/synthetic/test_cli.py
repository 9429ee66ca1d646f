"""Tests of ``python -m synthetic``: --help of every command, a quick sweep, summary, claims, kill/resume."""

from __future__ import annotations

import io
import os
import re
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from synthetic.__main__ import build_parser, main
from synthetic.store import runs, tables
from synthetic.sweep import grids

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
    # the cost is measured and printed before training (synthetic.sweep.cost)
    assert "cost estimate: " in r.stdout and "core-hours" in r.stdout and "on 1 worker(s)" in r.stdout
    table = tables.read_table(res / "s1_scl_hscl_nc")
    assert set(zip(table["method"], table["beta"])) == {("SCL", 0.0), ("HSCL", 2.0)}
    assert set(table["seed"]) == {0, 1} and set(table["lr"]) == {0.05} and len(table) == 4 * 3
    # in-process: the same command again skips everything; summary and claims print
    assert main(args) == 0
    cap = capsys.readouterr()
    assert "0 run now" in cap.out and "cost estimate" not in cap.out  # nothing to train, nothing to probe
    # --estimate-only: the cost of every run of the grid (stored ones too), nothing trained or written
    only = tmp_path / "only"
    assert main([*(a if a != str(res) else str(only) for a in args), "--estimate-only", "--jobs", "2"]) == 0
    cap = capsys.readouterr()
    assert "4 runs" in cap.out and "cost estimate: " in cap.out and "on 2 worker(s)" in cap.out
    assert "run now" not in cap.out and not only.exists()
    other = [a if a != str(res) else str(tmp_path / "other") for a in args]
    assert main([*other, "--no-estimate"]) == 0
    cap = capsys.readouterr()
    assert "4 run now" in cap.out and "cost estimate" not in cap.out
    assert main(["summary", str(res / "s1_scl_hscl_nc")]) == 0
    out = capsys.readouterr().out
    assert "etf_mean" in out and "HSCL" in out
    assert main(["claims", str(res), "--details", "--csv", str(tmp_path / "v.csv")]) == 0
    out = capsys.readouterr().out
    # the folder is named like claim S1's grid: S1 reads its 4 runs; a quick grid declares no
    # convergence rule, so its 2-epoch snapshots decide nothing
    assert "S1: UNDECIDED  (4 runs)" in out and "settings decided (every seed settled) = 0 (n=2)" in out
    assert "no convergence rule declared" in out
    for claim in ("S2", "S3", "S4", "R1s", "R2s", "R3s", "R4", "R5"):
        assert f"{claim}: NO DATA  (0 runs)" in out
    v = pd.read_csv(tmp_path / "v.csv")
    assert list(v["claim"]) == ["S1", "S2", "S3", "S4", "R1s", "R2s", "R3s", "R4", "R5", "O2"]
    # O2 reads the one grid's runs: none settled (no rule), so it is undecided too
    assert list(v["verdict"]) == ["undecided"] + ["no data"] * 8 + ["undecided"]
    # the single grid folder judges the same claim
    assert main(["claims", str(res / "s1_scl_hscl_nc")]) == 0
    single = capsys.readouterr().out
    assert "S1: UNDECIDED  (4 runs)" in single and "R5: NO DATA  (0 runs)" in single


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
    table = tables.read_table(tmp_path / "q-quick")
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
    assert len(runs.finished_keys(tmp_path / "s3_hucl_beta-quick")) == n
    # claims finds the scaled grid folder and names it
    assert main(["claims", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    # 1-epoch quick runs cannot settle under the grid's rule: the claim is UNDECIDED
    assert re.search(rf"S3 \[s3_hucl_beta-quick\]: UNDECIDED  \({n} runs\)", out), out[:2000]


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
    assert len(tables.load_table(killed / "k")) == 6 * 41


# --------------------------------------------------------------------------------------------
# One-line errors (exit 2), output formats, hints
# --------------------------------------------------------------------------------------------


def _fake_results(folder: Path) -> None:
    from synthetic.sweep import run as sw
    from synthetic.sweep.tasks import Trainer
    from tests.synthetic.fakes import fake_run, tiny_spec

    sw.run_sweep(grids.load_grid(tiny_spec()), folder, trainer=Trainer(fake_run), progress=False)


def _one_error_line(r: subprocess.CompletedProcess) -> str:
    assert r.returncode == 2, (r.returncode, r.stderr[-2000:])
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and "Traceback" not in r.stderr, r.stderr
    return lines[0]


def test_one_line_errors_exit_2(tmp_path):
    """Observed: raw tracebacks for an unreachable --scheduler (after 30 s), for a file given as
    --results, and for output piped into head."""
    import socket
    import time

    a_file = tmp_path / "a_file"
    a_file.write_text("x")
    quick = ["sweep", "--method", "SCL", "--epochs", "1", "--num-classes", "3", "--no-progress"]
    assert "is a file, not a folder" in _one_error_line(_cli(*quick, "--results", str(a_file)))
    assert "is a file, not a folder" in _one_error_line(_cli(*quick, "--results", str(a_file / "sub")))
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    t0 = time.monotonic()
    r = _cli(
        *quick,
        "--results",
        str(tmp_path / "r"),
        "--scheduler",
        f"tcp://127.0.0.1:{port}",
        "--connect-timeout",
        "1",
    )
    assert "cannot reach the dask scheduler" in _one_error_line(r) and time.monotonic() - t0 < 25
    # did you mean, for --set keys and grid fields
    line = _one_error_line(_cli(*quick, "--results", str(tmp_path / "r"), "--set", "normalisation=ball"))
    assert line == "error: --set: unknown config field 'normalisation' (did you mean 'normalization'?)"
    grid = tmp_path / "typo.toml"
    grid.write_text('[sweep]\nname = "typo"\n[sweep.axes]\nnormalisation = ["ball"]\n')
    line = _one_error_line(_cli("sweep", str(grid), "--results", str(tmp_path / "r")))
    assert "unknown config field 'normalisation' (did you mean 'normalization'?)" in line
    # the output's reader went away (`| head`): quiet, exit 2
    res = tmp_path / "res"
    _fake_results(res / "tiny")
    proc = subprocess.Popen(
        [sys.executable, "-m", "synthetic", "summary", str(res)],
        cwd=ROOT, env=ENV, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    proc.stdout.close()  # before the child writes anything: its first write hits a closed pipe
    err = proc.stderr.read()
    assert proc.wait(timeout=120) == 2 and err == ""


def test_summary_csv_and_markdown(tmp_path, capsys):
    _fake_results(tmp_path / "tiny")
    assert main(["summary", str(tmp_path), "--csv"]) == 0
    text = capsys.readouterr().out
    back = pd.read_csv(io.StringIO(text))
    assert len(back) == 6 and {
        "grid",
        "method",
        "beta",
        "normalization",
        "n_seeds",
        "loss_mean",
        "loss_std",
    } <= set(back)
    assert set(back["n_seeds"]) == {3}
    assert main(["summary", str(tmp_path), "--markdown"]) == 0
    md = capsys.readouterr().out.strip().splitlines()
    assert md[0].startswith("| grid | method | beta | normalization | n_seeds | loss |")
    assert set(md[1]) <= set("|-:") and len(md) == 2 + 6 and all(" ± " in row for row in md[2:])


def test_claims_pointed_one_level_too_high_says_where(tmp_path, capsys):
    _fake_results(tmp_path / "results" / "claims" / "s1_scl_hscl_nc")
    with pytest.raises(SystemExit) as exc:
        main(["claims", str(tmp_path / "results")])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert f"the grid folders are in {tmp_path / 'results' / 'claims'} (1: s1_scl_hscl_nc)" in err
    with pytest.raises(SystemExit):
        main(["summary", str(tmp_path / "results" / "claims" / "s1_scl_hscl_nc" / "runs")])
    assert "this is a runs folder; give its parent" in capsys.readouterr().err


def test_summary_and_claims_name_the_runs_they_leave_out(tmp_path, capsys):
    folder = tmp_path / "s1_scl_hscl_nc"
    _fake_results(folder)
    victim = sorted((folder / "runs").glob("*.csv"))[0]
    victim.write_bytes(victim.read_bytes()[:-5])
    assert main(["summary", str(folder)]) == 0
    captured = capsys.readouterr()
    assert (
        "1 incomplete, corrupt or unverified run file(s) left out" in captured.err
        and victim.name in captured.err
    )
    assert main(["claims", str(tmp_path)]) == 0
    captured = capsys.readouterr()
    assert victim.name in captured.err and "1 run(s) left out" in captured.out
    assert "S1: UNDECIDED  (17 runs)" in captured.out


def test_locked_folder_exit_2_names_the_holder(tmp_path):
    from tests.synthetic.fakes import hold_lock_cmd

    folder = tmp_path / "quick"
    holder = subprocess.Popen(hold_lock_cmd(folder, 30), stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "locked"
        r = _cli(
            "sweep", "--method", "SCL", "--epochs", "1", "--num-classes", "3", "--results", str(tmp_path)
        )
        line = _one_error_line(r)
        assert f"is in use by another sweep: pid {holder.pid} on host" in line and "--wait" in line
    finally:
        holder.kill()
        holder.wait()


def test_progress_lines_on_a_pipe(tmp_path):
    # stderr is a pipe here, not a terminal: periodic one-line progress, no bar
    r = _cli(
        "sweep", "--method", "SCL", "--seeds", "2", "--epochs", "1", "--num-classes", "3", "--n-per-class", "3",
        "--results", str(tmp_path), "--progress-every", "0", "--no-stack",
    )  # fmt: skip
    assert r.returncode == 0, r.stderr[-3000:]
    lines = [ln for ln in r.stderr.splitlines() if ln.startswith("progress: ")]
    assert lines[0].startswith("progress: 1/2 runs trained; elapsed") and "ETA" in lines[0], r.stderr
    assert lines[-1].startswith("progress: 2/2 runs trained; elapsed"), r.stderr
    assert "\r" not in r.stderr  # no bar


@pytest.mark.slow
def test_cluster_flags(tmp_path):
    # --cluster local: a dask LocalCluster of worker processes, the same code path as SLURM
    r = _cli(
        "sweep", "--method", "SCL", "--seeds", "2", "--epochs", "1", "--num-classes", "3", "--n-per-class", "3",
        "--results", str(tmp_path / "c"), "--cluster", "local", "--jobs", "1", "--no-stack", "--no-progress",
    )  # fmt: skip
    assert r.returncode == 0, r.stderr[-3000:]
    ref = _cli(
        "sweep", "--method", "SCL", "--seeds", "2", "--epochs", "1", "--num-classes", "3", "--n-per-class", "3",
        "--results", str(tmp_path / "l"), "--no-stack", "--no-progress",
    )  # fmt: skip
    assert ref.returncode == 0
    assert (tmp_path / "c/quick/table.csv").read_bytes() == (tmp_path / "l/quick/table.csv").read_bytes()
    pytest.importorskip("dask_jobqueue")
    r = _cli(
        "sweep", "--method", "SCL", "--epochs", "1", "--results", str(tmp_path), "--cluster", "slurm",
        "--partition", "short", "--cores", "2", "--memory", "8GB", "--walltime", "00:30:00",
        "--account", "acc1", "--slurm-directive=--gres=gpu:1", "--print-job-script",
    )  # fmt: skip
    assert r.returncode == 0, r.stderr[-3000:]
    for line in ("#SBATCH -p short", "#SBATCH -A acc1", "#SBATCH --cpus-per-task=2", "#SBATCH -t 00:30:00",
                 "#SBATCH --gres=gpu:1"):  # fmt: skip
        assert line in r.stdout, r.stdout
