"""The command line end to end on digits, and the claim commands on tiny fake CIFAR / Tiny-ImageNet
folders: what they write must be readable by the figures package's own loaders."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys

import numpy as np
import pandas as pd
import pytest

from realdata.cli import build_parser, main
from realdata.training import store
from tests.conftest import sigint_as_terminal
from tests.realdata import fakes
from tests.synthetic.fakes import ROOT, wait_for


def _every_flag_documented(parser):
    for action in parser._actions:
        if action.dest not in ("help",) and action.option_strings:
            assert action.help, action.option_strings


def test_help_explains_every_flag(capsys):
    p = build_parser()
    _every_flag_documented(p)
    for sub in p._subparsers._group_actions[0].choices.values():
        _every_flag_documented(sub)
    with pytest.raises(SystemExit):
        main(["train", "--help"])
    out = capsys.readouterr().out
    for flag in (
        "--views",
        "--num-negatives",
        "--recipe",
        "--balanced-sampler",
        "--checkpoint-every",
        "--resume",
        "--compile",
        "--amp",
        "--channels-last",
        "--workers",
        "--eval-every",
        "--init",
        "--download",
    ):
        assert flag in out


def test_bad_argument_names_it(capsys):
    assert main(["train", "--method", "HSCL", "--beta", "-1", "--results", "unused"]) == 2
    assert "beta" in capsys.readouterr().err
    assert main(["train", "--dataset", "cifar100", "--root", "/nonexistent/x", "--results", "unused"]) == 2
    err = capsys.readouterr().err
    assert "/nonexistent/x" in err and "--download" in err


@pytest.mark.parametrize("value", ["-1", "-10"])
def test_negative_checkpoint_every_is_rejected(capsys, value):
    """Observed: --checkpoint-every -1 was accepted (and wrote a checkpoint every epoch)."""
    with pytest.raises(SystemExit) as exc:
        main(["train", "--checkpoint-every", value, "--results", "unused", "--dry-run"])
    err = capsys.readouterr().err
    assert exc.value.code == 2
    assert f"argument --checkpoint-every: must be an integer >= 0 (0: at the end only), got {value}" in err


@pytest.mark.parametrize(
    "command, rank, hint",
    [
        (["digits"], None, "run the same command again to continue"),
        (["train", "--checkpoint-every", "5"], "0", "add --resume to continue from the last checkpoint"),
        (["train"], "1", None),  # another torchrun rank: silent (rank 0 speaks for the job)
    ],
    ids=["digits", "train_rank0", "train_rank1"],
)
def test_ctrl_c_is_one_line_and_exit_130(monkeypatch, capsys, command, rank, hint):
    """Observed: Ctrl-C printed a KeyboardInterrupt traceback from every torchrun rank."""
    import realdata.cli as cli

    def interrupted(args):
        raise KeyboardInterrupt

    monkeypatch.setattr(cli, f"_cmd_{command[0]}", interrupted)
    if rank is None:
        monkeypatch.delenv("RANK", raising=False)
    else:
        monkeypatch.setenv("RANK", rank)
    assert main([*command, "--results", "unused"]) == 130
    captured = capsys.readouterr()
    assert captured.out == ""
    if hint is None:
        assert captured.err == ""
    else:
        assert captured.err.startswith("interrupted") and hint in captured.err
        assert len(captured.err.strip().splitlines()) == 1, captured.err


@pytest.mark.slow  # the workers' start-up (torch) makes it 10-30 s on 2 shared cores
def test_ctrl_c_of_digits_with_workers_prints_one_line(tmp_path):
    """Observed: Ctrl-C of `python -m realdata digits --jobs 2` printed a KeyboardInterrupt traceback,
    and the killed workers' named semaphores (tqdm's lock) a resource_tracker warning; once in CI,
    loky's tracker reported the stopped pool's own semaphore (backends.quiet_resource_tracker)."""
    import psutil

    proc = subprocess.Popen(
        [sys.executable, "-m", "realdata", "digits", "--scale", "quick", "--jobs", "2", "--results", str(tmp_path)],
        cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        start_new_session=True, preexec_fn=sigint_as_terminal,
    )  # fmt: skip
    try:
        assert "runs to train" in proc.stdout.readline()

        def alive(procs, cpu_s=0.0):
            out = []
            for p in procs:
                try:
                    if p.status() != psutil.STATUS_ZOMBIE and p.cpu_times().user > cpu_s:
                        out.append(p)
                except psutil.Error:
                    pass
            return out

        # a worker has stored a run (its progress bars made it a lock) and goes on with the next
        assert wait_for(lambda: any(tmp_path.glob("realdata/*/runs/*.csv")), timeout=120)
        busy = alive(psutil.Process(proc.pid).children(recursive=True), cpu_s=1.0)
        assert len(busy) >= 2
        os.killpg(proc.pid, signal.SIGINT)  # what Ctrl-C in a terminal does: the whole group
        _, err = proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert proc.returncode == 130, err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1, err
    assert err.startswith("interrupted")
    assert wait_for(lambda: not alive(busy), timeout=10)


def test_train_then_eval_on_digits(tmp_path, capsys):
    res = str(tmp_path / "rd")
    args = [
        "train",
        "--method",
        "HSCL",
        "--beta",
        "5",
        "--epochs",
        "1",
        "--batch-size",
        "128",
        "--width",
        "4",
        "--estimator",
        "expectation",
        "--results",
        res,
        "--progress",
        "off",
    ]
    assert main(args) == 0
    out = capsys.readouterr().out
    key = out.split()[1]
    frame = store.read_result(res, key)
    assert list(frame["epoch"]) == [0, 1]
    assert {
        "ncm_acc",
        "etf_mean",
        "spectrum_min",
        "rank_1e-2",
        "ncm_top5",
        "spectrum_0",
        "class_means",
        "optimum",
    } <= set(frame.columns)
    assert frame["optimum"].iloc[-1] == pytest.approx(np.log1p(np.exp(-10 / 9)))  # L*_SCL, C = 10
    assert main(args) == 0  # cached
    assert "already stored" in capsys.readouterr().out
    ck = store.final_checkpoint_file(res, key)
    assert main(["eval", "--checkpoint", str(ck), "--metrics", "ncm,knn,recall", "--results", res]) == 0
    out = capsys.readouterr().out
    assert "ncm_features: z" in out and "knn_features: h" in out and "recall_features: h" in out
    ev = store.load(tmp_path / "rd" / "eval")
    assert len(ev) == 1 and ev["trained_key"].iloc[0] == key and 0 <= ev["ncm_top1"].iloc[0] <= 1


def _check_figures_can_read(results):
    from figures.pipeline import inputs
    from figures.plots.fig_lambda_training import check as gate_check
    from theory.claims import Verdict, from_json

    recs = {}
    for p in sorted((results / "records").glob("*.json")):
        (rec,) = from_json(p.read_text())
        assert rec.id == p.stem
        recs[rec.id] = rec
    assert set(recs) == {"R1", "R2", "R3", "R4", "R5", "W1", "W2", "W3", "W4"}
    assert inputs.read_scores(results / "weince" / "pot_scores.csv").size > 100
    cands = inputs.read_candidates(results / "weince" / "link_candidates.npz")
    assert cands and all(a.shape[1] >= 2 for a in cands)
    gate = pd.read_csv(results / "tables" / "weince_gate.csv")
    assert gate_check({"weince_gate": gate}) is None
    for name in ("realdata", "realdata_summary", "realdata_eval"):
        assert len(pd.read_csv(results / "tables" / f"{name}.csv")) > 0
    return recs, Verdict


def test_digits_end_to_end_through_the_cli(tmp_path, capsys):
    assert main(["digits", "--results", str(tmp_path), "--scale", "quick", "--jobs", "1"]) == 0
    assert "runs trained" in capsys.readouterr().out
    recs, Verdict = _check_figures_can_read(tmp_path)
    # digits evidence is attached, but no claim is asserted from it
    assert all(r.verdict == Verdict.NOT_RUN for r in recs.values())
    r1 = recs["R1"]
    assert r1.setting["data"].startswith("digits") and r1.setting["paper_scale"] == "NOT RUN"
    assert "python -m realdata claims r1-r3" in r1.command and r1.subchecks
    diag = json.loads((tmp_path / "weince" / "diagnostics.json").read_text())
    assert diag["files_scale"] == "digits"
    # a second call trains nothing
    assert main(["digits", "--results", str(tmp_path), "--scale", "quick", "--jobs", "1"]) == 0
    assert "0 runs trained" in capsys.readouterr().out


@pytest.mark.slow
def test_claim_commands_on_fake_folders(tmp_path, monkeypatch):
    from realdata.claims.run import run_group

    monkeypatch.setenv("REALDATA_CACHE", str(tmp_path / "cache"))
    root = tmp_path / "data"
    fakes.write_cifar100(root, n_train=500, n_test=100, balanced=True)
    fakes.write_tiny_imagenet(root, per_class=8, n_val=6)
    res = tmp_path / "results"
    for group in ("r1-r3", "r4", "r5", "w1-w3"):
        assert run_group(group, root=str(root), results=res, device="cpu", scale="small") == 0
    recs, Verdict = _check_figures_can_read(res)
    # smoke-test runs are evidence only, never a verdict on the paper's claims
    assert all(r.verdict == Verdict.NOT_RUN for r in recs.values())
    assert recs["R4"].subchecks and recs["R5"].subchecks and recs["W3"].subchecks
    assert "small" in recs["R1"].setting["scale"]
    diag = json.loads((res / "weince" / "diagnostics.json").read_text())
    assert diag["files_scale"] == "small"
    assert run_group("r1-r3", root=str(root), results=res, device="cpu", scale="small", dry_run=True) == 0
