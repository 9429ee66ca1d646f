"""Where a real-data run's results live: the one adapter to the synthetic results store.

A real-data results folder has the layout of the synthetic store (:mod:`synthetic.results`), so
``python -m synthetic summary FOLDER`` and the figures read it like a synthetic grid::

    FOLDER/runs/<run_key>.csv            one finished run: one row per recorded epoch
                                         (config columns, run_key, epoch, metric columns)
    FOLDER/table.csv                     all runs (written by :func:`write_table`)
    FOLDER/gate/<run_key>.csv            WeiNCE runs: per-anchor gate values (epoch, lambda,
                                         lambda_rho, lambda_aic, daic)
    FOLDER/failed/<run_key>.json         a run that became non-finite: config, epoch, reason
                                         (never a result; :func:`failures`)
    FOLDER/checkpoints/<run_key>.pt      the resumable training state (every N epochs)
    FOLDER/checkpoints/<run_key>.final.pt  the trained encoder at the last epoch

Every file is written atomically (temporary file, fsync, rename). Every call into
:mod:`synthetic.results` made by the real-data package lives here.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pandas as pd

__all__ = [
    "run_file",
    "checkpoint_file",
    "final_checkpoint_file",
    "gate_file",
    "is_done",
    "write_result",
    "read_result",
    "write_gate",
    "read_gate",
    "write_failure",
    "failure",
    "failures",
    "load",
    "write_table",
    "atomic_write_text",
    "atomic_write_bytes",
]


def _folder(folder: str | os.PathLike) -> Path:
    if not isinstance(folder, (str, os.PathLike)) or str(folder) == "":
        raise ValueError(f"results must be a non-empty path, got {folder!r}")
    return Path(folder)


def atomic_write_text(path: str | os.PathLike, text: str) -> Path:
    """Write ``text`` atomically (the store's writer)."""
    from synthetic.results import atomic_write_text as write

    return write(path, text)


def atomic_write_bytes(path: str | os.PathLike, data: bytes) -> Path:
    """Write ``data`` atomically: temporary file in the same folder, fsync, rename, fsync folder."""
    dest = Path(path)
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = dest.parent / f".{dest.name}.{os.getpid()}.tmp"
    try:
        with open(tmp, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, dest)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    try:
        fd = os.open(str(dest.parent), os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
    except OSError:
        pass
    return dest


def run_file(folder: str | os.PathLike, key: str) -> Path:
    """The stored run ``key`` (exists once the run finished)."""
    from synthetic.results import run_path

    return run_path(_folder(folder), key)


def checkpoint_file(folder: str | os.PathLike, key: str) -> Path:
    """The resumable training checkpoint of run ``key``."""
    return _folder(folder) / "checkpoints" / f"{key}.pt"


def final_checkpoint_file(folder: str | os.PathLike, key: str) -> Path:
    """The trained encoder of run ``key`` at its last epoch."""
    return _folder(folder) / "checkpoints" / f"{key}.final.pt"


def gate_file(folder: str | os.PathLike, key: str) -> Path:
    """The per-anchor WeiNCE gate table of run ``key``."""
    return _folder(folder) / "gate" / f"{key}.csv"


def is_done(folder: str | os.PathLike, key: str) -> bool:
    """True when run ``key`` is stored as a finished result."""
    from synthetic.results import finished_keys

    return key in finished_keys(_folder(folder))


def write_result(folder: str | os.PathLike, frame: pd.DataFrame) -> Path:
    """Store a finished run (one row per recorded epoch) atomically; returns the file."""
    from synthetic.results import write_run

    return write_run(_folder(folder), frame)


def read_result(folder: str | os.PathLike, key: str) -> pd.DataFrame:
    """Read the stored run ``key`` (FileNotFoundError naming the file if absent)."""
    from synthetic.results import read_run

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
    body = {"run_key": key, "epoch": int(epoch), "reason": str(reason), "config": config}
    return atomic_write_text(_folder(folder) / "failed" / f"{key}.json", json.dumps(body, indent=2))


def failure(folder: str | os.PathLike, key: str) -> dict[str, Any] | None:
    """The failure record of run ``key``, or None."""
    p = _folder(folder) / "failed" / f"{key}.json"
    if not p.is_file():
        return None
    out: dict[str, Any] = json.loads(p.read_text(encoding="utf-8"))
    return out


def failures(folder: str | os.PathLike) -> list[dict[str, Any]]:
    """Every failure record under ``folder``."""
    d = _folder(folder) / "failed"
    if not d.is_dir():
        return []
    return [json.loads(p.read_text(encoding="utf-8")) for p in sorted(d.glob("*.json"))]


def load(folder: str | os.PathLike, keys: list[str] | None = None) -> pd.DataFrame:
    """The tidy table of the runs stored in ``folder`` (empty DataFrame when none)."""
    from synthetic.results import load_table

    return load_table(_folder(folder), keys)


def write_table(folder: str | os.PathLike) -> Path | None:
    """Write ``FOLDER/table.csv`` from the run files (None when nothing is stored)."""
    from synthetic.results import write_table as write

    return write(_folder(folder))
