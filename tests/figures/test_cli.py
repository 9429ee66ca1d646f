"""``python -m figures``: --help explains every flag, --list, usage errors, a quick end-to-end run."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from figures.__main__ import build_parser, main
from figures.pipeline import produce_realdata
from figures.plots import registry
from realdata.claims.grids import digits_runs
from synthetic.claims.criteria import CLAIM_GRIDS
from synthetic.sweep.grids import load_grid
from theory import claims

ROOT = Path(__file__).resolve().parents[2]
ENV = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)}


def _cli(*args: str, cwd: Path = ROOT, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "figures", *args],
        cwd=cwd,
        env=ENV,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def test_help_explains_every_flag(capsys):
    with pytest.raises(SystemExit) as exc:
        main(["--help"])
    assert exc.value.code == 0
    text = capsys.readouterr().out
    for action in build_parser()._actions:
        for opt in action.option_strings:
            assert opt in text, opt
        if action.option_strings and action.help:
            assert len(action.help) > 20, action.option_strings
    assert "results/figures" in text and "exit status" in text


def test_list_prints_every_figure(capsys):
    assert main(["--list"]) == 0
    out = capsys.readouterr().out
    for s in registry.all_figures():
        assert s.id in out


def test_usage_errors_exit_2(tmp_path, capsys):
    for argv in (
        ["--only", "no_such_figure"],
        ["--jobs", "0"],
        ["--scale", "huge"],
        ["--results", str(tmp_path / "f.txt")],
    ):
        (tmp_path / "f.txt").write_text("x")
        with pytest.raises(SystemExit) as exc:
            main(argv)
        assert exc.value.code == 2, argv
    assert "--only" in capsys.readouterr().err


def test_quick_end_to_end_then_warm(tmp_path):
    """The brief's command from a cold cache (the quick synthetic grids and digits runs train),
    then a warm run that reuses the cache and the stored runs. (No timed assertion: the README
    states the measured times of both scales.)"""
    out = tmp_path / "out"
    r = _cli("--scale", "quick", "--out", str(out), cwd=tmp_path)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    assert f"report: {out / 'report.html'}" in r.stdout
    assert (out / "report.md").is_file() and (out / "report.html").is_file()
    for fid in ("harris_gap", "hucl_at_nc", "gram_etf", "noise_floor"):
        assert (out / f"{fid}.png").stat().st_size > 1000 and (out / f"{fid}.pdf").is_file()
    # the quick synthetic grids and the digits quick scale were trained into the default --results
    res = tmp_path / "results"
    for grid in CLAIM_GRIDS.values():
        assert list((res / "synthetic" / f"{grid}-quick" / "runs").glob("*.csv")), grid
    assert (res / "records" / "R1.json").is_file() and (res / "weince" / "pot_scores.csv").is_file()
    hcl, two = digits_runs("quick")
    assert f"{len(hcl) + len(two)} runs trained, 0 cached" in r.stdout  # realdata's own count
    assert produce_realdata.digits_progress(res, "quick") == (len(hcl) + len(two),) * 2  # the progress count
    for fid in ("conditions_scl", "spectrum_ucl", "ucl_positives", "pot_exceedances", "lambda_profile"):
        assert (out / f"{fid}.png").stat().st_size > 1000, fid
    for stage in ("theory", "synthetic", "realdata", "weince", "pickup", "render", "report"):
        assert f"stage {stage} ..." in r.stderr and f"stage {stage}: " in r.stderr, stage  # progress lines
    md = (out / "report.md").read_text()
    for cid in claims.CATALOGUE:
        assert f"| {cid} |" in md
    for cid in ("S1", "S2", "S3", "S4", "R1s", "R2s", "R3s", "R4", "R5", "O2"):  # judged from the quick runs
        row = next(line for line in md.splitlines() if line.startswith(f"| {cid} |"))
        assert "NOT RUN" not in row.split(" | ")[2], row
    assert (res / "cache" / "figures" / "theory").is_dir()
    warm = _cli("--scale", "quick", "--out", str(out), "--no-progress", cwd=tmp_path)
    assert warm.returncode == 0, warm.stderr[-3000:]
    assert "cached" in warm.stdout and warm.stderr.strip() == ""
    n_synthetic = sum(len(load_grid(name, scale="quick")) for name in dict.fromkeys(CLAIM_GRIDS.values()))
    assert f"0 runs trained, {n_synthetic} reused" in warm.stdout
    assert f"0 runs trained, {len(hcl) + len(two)} cached" in warm.stdout


def test_default_jobs_are_the_usable_cores_except_at_quick_scale():
    from figures.__main__ import default_jobs

    assert default_jobs("quick") == 1
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    assert default_jobs("default") == default_jobs("paper") == cores
