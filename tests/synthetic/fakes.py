"""Shared helpers of the synthetic sweep tests: picklable fake runners, a tiny grid, kill-and-resume.

The runners are module-level functions so that joblib processes, dask workers and the subprocess
of the SIGKILL tests can import them (``from tests.synthetic.fakes import slow_fake_run``).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from synthetic.engine.config import RunConfig
from synthetic.engine.errors import NonFiniteRun
from synthetic.store import folders, runs

ROOT = Path(__file__).resolve().parents[2]


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
    """:func:`fake_run` after a 0.25 s sleep (time for a kill mid-sweep)."""
    time.sleep(0.25)
    return fake_run(config)


def failing_run(config: RunConfig) -> pd.DataFrame:
    """:func:`fake_run`, except that the seed-1 runs raise ``RuntimeError("boom")``."""
    if config.seed == 1:
        raise RuntimeError("boom")
    return fake_run(config)


def stack_failing(configs):
    """A stacked runner that fails for every stack holding a seed-1 run."""
    if any(c.seed == 1 for c in configs):
        raise RuntimeError("stack boom")
    return [fake_run(c) for c in configs]


def always_failing(config):
    """A runner that always raises."""
    raise RuntimeError("always")


def diverging_run(config: RunConfig) -> pd.DataFrame:
    """:func:`fake_run`, except that the seed-1 runs diverge (the engine's NonFiniteRun at epoch 2)."""
    if config.seed == 1:
        raise NonFiniteRun("non-finite parameters after the Adam step", key=config.key(), epoch=2)
    return fake_run(config)


def sleepy_run(config: RunConfig) -> pd.DataFrame:
    """:func:`fake_run` after a 1 s sleep (runs still in flight when a test interrupts the sweep)."""
    time.sleep(1.0)
    return fake_run(config)


def endless_run(config: RunConfig) -> pd.DataFrame:
    """A run that takes 120 s (workers busy when their sweep is killed)."""
    time.sleep(120)
    return fake_run(config)


def cli_with_runner(runner_name: str, argv: list[str]) -> int:
    """``python -m synthetic`` with the sweep's default runner replaced by ``fakes.<runner_name>``."""
    from synthetic.__main__ import main
    from synthetic.sweep import run as sweep
    from synthetic.sweep.tasks import Trainer

    runner = globals()[runner_name]
    sweep.engine_trainer = lambda: Trainer(runner)
    return main(argv)


def cli_with_runner_cmd(runner_name: str, argv: list[str]) -> list[str]:
    """The command line of a subprocess running :func:`cli_with_runner`."""
    code = (
        f"import sys; sys.path.insert(0, {str(ROOT)!r}); from tests.synthetic.fakes import cli_with_runner;"
        f"sys.exit(cli_with_runner({runner_name!r}, {list(argv)!r}))"
    )
    return [sys.executable, "-c", code]


def hold_lock_cmd(folder: Path, seconds: float) -> list[str]:
    """A subprocess that takes ``folder``'s sweep lock, prints "locked", and sleeps ``seconds``."""
    code = (
        f"import sys, time; sys.path.insert(0, {str(ROOT)!r}); from synthetic.store.locking import SweepLock;"
        f"lock = SweepLock({str(folder)!r}).acquire(); print('locked', flush=True); time.sleep({seconds}); lock.release()"
    )
    return [sys.executable, "-c", code]


def wait_for(predicate, timeout: float = 60.0, step: float = 0.02) -> bool:
    """Poll ``predicate`` until it is true or ``timeout`` seconds pass; return its last value."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(step)
    return bool(predicate())


#: A convergence rule that never holds (tolerances far below any change): runs train their budget.
NEVER_SETTLES = dict(
    settle_window=4, settle_etf=1e-12, settle_wcv=1e-12, settle_erank=1e-12, settle_gap=1e-12
)


def never_settling_free_run(**fields: Any) -> RunConfig:
    """A small HSCL (beta 2) run of free features on the unit ball under :data:`NEVER_SETTLES`,
    with ``fields`` replaced (the base of the extension tests)."""
    base = RunConfig(method="HSCL", beta=2.0, encoder="free", lr=0.05, normalization="ball", **NEVER_SETTLES)
    return base.replace(**fields)


@contextlib.contextmanager
def read_only(*folders: Path):
    """Make folders read-only for this process: chmod for a normal user, ``chattr +i`` for root.

    Skips the test where neither works (root without CAP_LINUX_IMMUTABLE).
    """
    import pytest

    root = os.geteuid() == 0
    done = []
    try:
        for d in folders:
            if root:
                if shutil.which("chattr") is None:
                    pytest.skip("running as root without chattr: cannot make a folder read-only")
                r = subprocess.run(["chattr", "+i", str(d)], capture_output=True)
                if r.returncode != 0:
                    pytest.skip(f"running as root and chattr +i fails: {r.stderr.decode().strip()}")
            else:
                d.chmod(0o555)
            done.append(d)
        yield
    finally:
        for d in done:
            if root:
                subprocess.run(["chattr", "-i", str(d)], capture_output=True)
            else:
                d.chmod(0o755)


def tiny_spec(epochs: int = 2, seeds=(0, 1, 2)) -> dict:
    """A 2 x 3 x (1 + 2) grid of tiny runs (18 configs with three seeds) and a ``paper`` scale."""
    return {
        "sweep": {
            "name": "tiny",
            "base": {"epochs": epochs, "num_classes": 3, "n_per_class": 4, "eval_every": 1},
            "axes": {"normalization": ["sphere", "ball"], "seed": list(seeds)},
            "group": [{"method": "SCL", "beta": 0.0}, {"method": "HSCL", "beta": [2.0, 5.0]}],
        },
        "scale": {"paper": {"base": {"epochs": 7}, "axes": {"seed": [0, 1, 2, 3, 4]}}},
    }


def write_tiny_grid(path: Path, epochs: int = 2, n_seeds: int = 3) -> Path:
    """Write the TOML form of :func:`tiny_spec` (without the scale) to ``path``."""
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


def table_bytes(folder: Path) -> bytes:
    """The bytes of ``folder``'s ``table.csv``."""
    return (folder / folders.TABLE_FILE).read_bytes()


def kill_after_first_runs(cmd: list[str], folder: Path, n_total: int, env: dict) -> int:
    """Start ``cmd``, SIGKILL it once some (not all) runs are stored; return how many were."""
    proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 60
    try:
        while time.monotonic() < deadline:
            n = len(runs.finished_keys(folder))
            if n >= 2 or proc.poll() is not None:
                break
            time.sleep(0.005)
        os.kill(proc.pid, signal.SIGKILL)
    finally:
        proc.wait(timeout=30)
    n = len(runs.finished_keys(folder))
    assert proc.returncode == -signal.SIGKILL, proc.stderr.read().decode()[-2000:]
    assert 0 < n < n_total, f"kill came too late or too early: {n}/{n_total} stored"
    return n
