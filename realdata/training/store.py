"""Where a real-data run's results live: the one adapter to the synthetic results store.

A real-data results folder has the layout of the synthetic store (:mod:`synthetic.store.read`), so
``python -m synthetic summary FOLDER`` and the figures read it like a synthetic grid::

    FOLDER/runs/<run_key>.csv            one finished run: one row per recorded epoch
                                         (config columns, run_key, epoch, metric columns)
    FOLDER/table.csv                     all runs (written by :func:`write_table`)
    FOLDER/gate/<run_key>.csv            WeiNCE runs: per-anchor gate values (epoch, lambda,
                                         lambda_rho, lambda_aic, daic)
    FOLDER/failures/<run_key>.json       a run that became non-finite: config, epoch, reason
                                         (never a result; the synthetic store's failure records)
    FOLDER/checkpoints/<run_key>.pt      the resumable training state (every N epochs; removed once stored)
    FOLDER/checkpoints/<run_key>.final.pt  the trained encoder at the last epoch

Every file is written atomically (temporary file, fsync, rename:
:func:`synthetic.store.folders.atomic_write_text`); a run file carries the store's completion
record (row count, epochs, sha256), so an incomplete or corrupt one is never read as a result. The
store knows no config class (a run frame describes itself), so the real-data runs use it as they
are: this module adds the real-data files (checkpoints, gate tables) and the failure record's
fields.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pandas as pd

from synthetic.store import failures as store_failures
from synthetic.store import tables as store_tables
from synthetic.store.folders import RUNS_SUBDIR, atomic_write_text
from synthetic.store.runs import finished_keys, read_run, write_run

__all__ = [
    "checkpoint_file",
    "final_checkpoint_file",
    "gate_file",
    "is_done",
    "done_keys",
    "write_result",
    "read_result",
    "write_gate",
    "read_gate",
    "write_failure",
    "failure",
    "failures",
    "load",
    "write_table",
]


def _folder(folder: str | os.PathLike) -> Path:
    if not isinstance(folder, (str, os.PathLike)) or str(folder) == "":
        raise ValueError(f"results must be a non-empty path, got {folder!r}")
    return Path(folder)


def checkpoint_file(folder: str | os.PathLike, key: str) -> Path:
    """The resumable training checkpoint of run ``key``."""
    return _folder(folder) / "checkpoints" / f"{key}.pt"


def final_checkpoint_file(folder: str | os.PathLike, key: str) -> Path:
    """The trained encoder of run ``key`` at its last epoch."""
    return _folder(folder) / "checkpoints" / f"{key}.final.pt"


def gate_file(folder: str | os.PathLike, key: str) -> Path:
    """The per-anchor WeiNCE gate table of run ``key``."""
    return _folder(folder) / "gate" / f"{key}.csv"


def done_keys(folder: str | os.PathLike) -> set[str]:
    """Keys of the complete, verified runs stored in ``folder``."""
    return set(finished_keys(_folder(folder))) if (_folder(folder) / RUNS_SUBDIR).is_dir() else set()


def is_done(folder: str | os.PathLike, key: str) -> bool:
    """True when run ``key`` is stored as a complete, verified result."""
    return key in done_keys(folder)


def write_result(folder: str | os.PathLike, frame: pd.DataFrame, expected: list[int] | None = None) -> Path:
    """Store a finished run (one row per recorded epoch) atomically; returns the file.

    Args:
        folder: the results folder.
        frame: the run's rows.
        expected: the epochs a complete run records (default: the frame's own epochs).
    """
    want = [int(e) for e in frame["epoch"]] if expected is None else expected
    path = write_run(_folder(folder), frame, expected=want)
    store_failures.clear_failure(_folder(folder), str(frame["run_key"].iloc[0]))
    return path


def read_result(folder: str | os.PathLike, key: str) -> pd.DataFrame:
    """Read the stored run ``key`` (FileNotFoundError naming the file if absent)."""
    return read_run(_folder(folder), key)


def write_gate(folder: str | os.PathLike, key: str, frame: pd.DataFrame) -> Path:
    """Store a run's per-anchor gate table atomically."""
    return atomic_write_text(gate_file(folder, key), frame.to_csv(index=False, lineterminator="\n"))


def read_gate(folder: str | os.PathLike, key: str) -> pd.DataFrame | None:
    """A run's gate table, or None."""
    p = gate_file(folder, key)
    return pd.read_csv(p) if p.is_file() else None


def write_failure(
    folder: str | os.PathLike, key: str, config: dict[str, Any], epoch: int, reason: str
) -> Path:
    """Record that run ``key`` failed (non-finite parameters, embeddings or loss)."""
    info = {
        "config": config,
        "epoch": int(epoch),
        "reason": str(reason),
        "exception": "NonFiniteRun",
        "traceback": "",
    }
    return store_failures.write_failure(_folder(folder), key, info)


def failure(folder: str | os.PathLike, key: str) -> dict[str, Any] | None:
    """The failure record of run ``key``, or None."""
    return failures(folder).get(key)


def failures(folder: str | os.PathLike) -> dict[str, dict[str, Any]]:
    """Every failure record under ``folder``, by run key."""
    return dict(store_failures.read_failures(_folder(folder)))


def load(folder: str | os.PathLike, keys: list[str] | None = None) -> pd.DataFrame:
    """The tidy table of the runs stored in ``folder`` (empty DataFrame when none)."""
    return store_tables.load_table(_folder(folder), keys)


def write_table(folder: str | os.PathLike) -> Path | None:
    """Write ``FOLDER/table.csv`` from the run files (None when nothing is stored)."""
    return store_tables.write_table(_folder(folder))
