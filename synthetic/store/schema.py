"""The table layout of a results store, and which epochs a complete run records.

**Layout** (shared by the synthetic and real-data stores): one row per (run, epoch); the config
columns (the run config's fields, in order), then :data:`RUN_KEY`, :data:`EPOCH`, then the metric
columns. :func:`config_columns` reads the config columns off a frame (the columns before
``run_key``), so the store depends on no particular config class: a frame describes itself. A
table read from several grid folders (``synthetic.store.read.load_results``) carries a leading
:data:`GRID` column, the folder's name; it is a label, not a config column.

**Recorded epochs.** A run records epoch 0, every ``eval_every`` epochs and its last epoch
(:func:`recorded_epochs`, the one rule of both training stacks); :func:`expected_epochs` applies
it to a config's (or a frame's) ``epochs`` and ``eval_every`` fields, which is how the store tells
a complete run from an incomplete one. A run stopped by its convergence rule
(``synthetic.engine.convergence``) is complete with the recorded epochs up to the one at which it
settled: its last row has :data:`SETTLED` true (:func:`stopped_at`). ``class_means`` cells hold JSON (:func:`decode_class_means`).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import numpy as np
import pandas as pd

__all__ = [
    "RUN_KEY",
    "EPOCH",
    "GRID",
    "recorded_epochs",
    "expected_epochs",
    "SETTLED",
    "stopped_at",
    "is_true",
    "encode_class_means",
    "decode_class_means",
    "config_columns",
    "sort_table",
    "final_epoch",
]

RUN_KEY = "run_key"


EPOCH = "epoch"


#: Label column of a table read from several grid folders (``synthetic.store.read.load_results``).
GRID = "grid"


def recorded_epochs(epochs: int, eval_every: int) -> list[int]:
    """Epochs with a row: 0, every ``eval_every``, and ``epochs``."""
    out = list(range(0, epochs + 1, eval_every))
    if out[-1] != epochs:
        out.append(epochs)
    return out


#: The column of a run with a convergence rule saying whether the rule held at that row; a run
#: whose last row has it true stopped there (``synthetic.engine.convergence``).
SETTLED = "settled"


def expected_epochs(config: Any, stopped: int | None = None) -> list[int]:
    """The epochs a complete run of ``config`` records (``synthetic.engine.train.recorded_epochs``).

    Args:
        config: a ``RunConfig``, or a mapping with its ``epochs`` and ``eval_every`` fields.
        stopped: the epoch at which the run's convergence rule stopped it (:func:`stopped_at`),
            or None: the run records the schedule up to that epoch only.

    Raises:
        ValueError: ``stopped`` is not one of the schedule's epochs.
    """
    if isinstance(config, Mapping):
        epochs, every = config["epochs"], config["eval_every"]
    else:
        epochs, every = config.epochs, config.eval_every
    full = [int(e) for e in recorded_epochs(int(epochs), int(every))]
    if stopped is None:
        return full
    if int(stopped) not in full:
        raise ValueError(
            f"stopped must be a recorded epoch of the schedule {full[:3]}..{full[-1]}, got {stopped}"
        )
    return [e for e in full if e <= int(stopped)]


def is_true(value: Any) -> bool:
    """A ``settled`` cell read back from a frame or a CSV (``True``/``"True"``/1) as a bool."""
    if isinstance(value, str):
        return value.strip().lower() in ("true", "1", "1.0")
    try:
        return bool(value) and value == value  # NaN is not true
    except (TypeError, ValueError):
        return False


def stopped_at(frame: pd.DataFrame) -> int | None:
    """The epoch at which a run frame's convergence rule stopped it, else None.

    The last row's epoch when the frame has a :data:`SETTLED` column that is true there (a run
    stops at the first epoch its rule holds), None without the column or when it is false (the
    run trained its whole budget).
    """
    if SETTLED not in frame.columns or EPOCH not in frame.columns or len(frame) == 0:
        return None
    last = frame.loc[frame[EPOCH].astype(int).idxmax()]
    return int(last[EPOCH]) if is_true(last[SETTLED]) else None


def config_columns(frame: pd.DataFrame) -> list[str]:
    """The config columns of a run frame or table (the one definition used by every module).

    Args:
        frame: a run frame or a table.

    Returns:
        Its columns before ``run_key``, less ``epoch`` and the :data:`GRID` label (a stored run
        keeps the fields of the config that wrote it, so the frame decides).
    """
    if RUN_KEY not in frame.columns:
        raise ValueError(f"frame must have a {RUN_KEY!r} column, got columns {list(frame.columns)}")
    cols = list(frame.columns)
    return [c for c in cols[: cols.index(RUN_KEY)] if c not in (EPOCH, GRID)]


def sort_table(table: pd.DataFrame) -> pd.DataFrame:
    """Sort a tidy table deterministically: by the config columns in order, then by epoch.

    Numeric columns sort numerically with missing values (NaN) last; other columns sort by
    their string form, a missing value counting as the empty string (so it sorts first);
    ``run_key`` breaks remaining ties. The index is reset.
    """
    cols = config_columns(table) + [RUN_KEY, EPOCH]
    if GRID in table.columns[: table.columns.get_loc(RUN_KEY)]:
        cols = [GRID, *cols]  # the label of a table read from grid folders sorts first

    def _key(s: pd.Series) -> pd.Series:
        if pd.api.types.is_numeric_dtype(s) and not pd.api.types.is_bool_dtype(s):
            return s
        return s.map(lambda v: "" if v is None or (isinstance(v, float) and v != v) else str(v))

    return table.sort_values(cols, key=_key, kind="mergesort", na_position="last").reset_index(drop=True)


def final_epoch(table: pd.DataFrame) -> pd.DataFrame:
    """The last-epoch row of every run of a tidy table (sorted like the table).

    Runs are told apart by ``(grid, run_key)`` when the table has a ``grid`` column (a parent
    folder: the same config may be stored in several grid folders), else by ``run_key``.
    """
    if not isinstance(table, pd.DataFrame) or RUN_KEY not in table or EPOCH not in table:
        raise ValueError("table must be a tidy results table with run_key and epoch columns")
    by = [GRID, RUN_KEY] if GRID in table.columns else RUN_KEY
    idx = table.groupby(by, sort=False)[EPOCH].idxmax()
    return table.loc[sorted(idx.values)].reset_index(drop=True)


def encode_class_means(mu: Any) -> str:
    """The ``class_means`` cell of a ``(C, d)`` array: JSON of its float64 rows (both stacks)."""
    return json.dumps(np.asarray(mu, dtype=np.float64).tolist())


def decode_class_means(value: str) -> np.ndarray:
    """Decode a ``class_means`` cell (JSON list of lists) to a ``(C, d)`` float64 array."""
    if not isinstance(value, str):
        raise ValueError(f"value must be a JSON string, got {type(value).__name__}")
    return np.asarray(json.loads(value), dtype=np.float64)
