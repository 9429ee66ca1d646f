"""The one table layout of the synthetic results, and the canonical run key.

**Table layout** (shared by the synthetic and real-data stores): one row per (run, epoch); the config columns
(:func:`config_columns`: the ``RunConfig`` fields, in order), then :data:`RUN_KEY`, :data:`EPOCH`,
then the metric columns (:data:`METRIC_COLUMNS`, as ``synthetic.train.train_run`` writes them).
A table read from several grid folders (``synthetic.results.load_results``) carries a leading
:data:`GRID` column, the folder's name; it is a label, not a config column.

**Run key.** A run's identity is the hash of its resolved config: :func:`run_key` hashes the
canonical JSON of ``RunConfig.identity_dict()``. :func:`canonical_value` makes equal values hash
equally: ``-0.0`` becomes ``0.0``, numpy scalars become Python scalars, an integer in a field whose
reference value is a float becomes that float, and NaN or infinite values are rejected (a key of
NaN would never equal itself). Values that were already canonical hash exactly as before, so the
keys of stored runs do not change.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
import math
from collections.abc import Mapping
from typing import Any

import pandas as pd

__all__ = [
    "RUN_KEY",
    "EPOCH",
    "GRID",
    "METRIC_COLUMNS",
    "canonical_value",
    "canonical_identity",
    "run_key",
    "expected_epochs",
    "config_columns",
    "sort_table",
    "final_epoch",
]

RUN_KEY = "run_key"
EPOCH = "epoch"
#: Label column of a table read from several grid folders (``synthetic.results.load_results``).
GRID = "grid"
#: Metric columns of a run frame, in order, after :data:`RUN_KEY` and :data:`EPOCH` (written by
#: ``synthetic.train.train_run``; defined in docs/metrics.md). With ``record_means`` a
#: ``class_means`` column follows them.
METRIC_COLUMNS = (
    "loss",
    "skipped_steps",
    "full_loss",
    "optimum",
    "gap_to_optimum",
    "full_gap",
    "unit_norm",
    "zero_sum",
    "etf_mean",
    "etf_max",
    "within_class_variation",
    "nc1",
    "nc2_equinorm",
    "nc2_equiangularity",
    "etf_error",
    "effective_rank",
    "rankme",
    "spectrum_min",
    "mean_norm",
    "ncm_acc",
    "train_ncm_acc",
)
#: Length of a run key (hex digits of the SHA-1 of the canonical identity).
KEY_LENGTH = 16


def canonical_value(value: Any, like: Any = None, *, name: str = "value") -> Any:
    """The canonical form of one config value, as hashed by :func:`run_key`.

    Args:
        value: a JSON-like value (None, bool, int, float, str, list/tuple, dict; numpy scalars).
        like: a reference value of the same field (e.g. its default): an int ``value`` becomes a
            float when ``like`` is a float, so ``beta = 2`` and ``beta = 2.0`` hash equally.
        name: the field's name in error messages.

    Returns:
        ``-0.0`` -> ``0.0``; numpy scalars -> Python scalars; lists and tuples -> lists;
        dict keys -> str; everything else unchanged.

    Raises:
        ValueError: a NaN or infinite number, or a value of another type.
    """
    if hasattr(value, "item") and not isinstance(value, (str, bytes, list, tuple, dict)):
        value = value.item()  # numpy scalar
    if value is None or isinstance(value, (bool, str)):
        return value
    if isinstance(value, int):
        if isinstance(like, float) and not isinstance(like, bool):
            return canonical_value(float(value), name=name)
        return int(value)
    if isinstance(value, float):
        if not math.isfinite(value):
            raise ValueError(f"{name} must be a finite number in a run key, got {value!r}")
        return value + 0.0  # -0.0 + 0.0 == +0.0; every other float is unchanged
    if isinstance(value, (list, tuple)):
        return [canonical_value(v, name=f"{name}[{i}]") for i, v in enumerate(value)]
    if isinstance(value, Mapping):
        return {str(k): canonical_value(v, name=f"{name}.{k}") for k, v in value.items()}
    raise ValueError(f"{name} must be None, a bool, a number, a string or a list, got {type(value).__name__}")


def canonical_identity(identity: Mapping[str, Any], reference: Mapping[str, Any] | None = None) -> dict:
    """:func:`canonical_value` of every field of ``identity`` (``reference``: values of the same fields)."""
    if not isinstance(identity, Mapping):
        raise ValueError(f"identity must be a mapping, got {type(identity).__name__}")
    ref = reference if reference is not None else _reference_values()
    return {str(k): canonical_value(v, ref.get(k), name=str(k)) for k, v in identity.items()}


@functools.lru_cache(maxsize=1)
def _reference_values() -> dict[str, Any]:
    from synthetic.config import RunConfig

    return {f.name: f.default for f in dataclasses.fields(RunConfig)}


def run_key(identity: Mapping[str, Any]) -> str:
    """The run key: 16 hex digits of the SHA-1 of the sorted-key canonical JSON of ``identity``.

    ``RunConfig.key()`` is ``run_key(self.identity_dict())``. For an identity that is already
    canonical this equals the historical hash, so stored runs keep their keys.
    """
    blob = json.dumps(canonical_identity(identity), sort_keys=True, separators=(",", ":"))
    return hashlib.sha1(blob.encode("utf-8")).hexdigest()[:KEY_LENGTH]


def expected_epochs(config: Any) -> list[int]:
    """The epochs a complete run of ``config`` records (``synthetic.train.recorded_epochs``).

    Args:
        config: a ``RunConfig``, or a mapping with its ``epochs`` and ``eval_every`` fields.
    """
    from synthetic.train import recorded_epochs

    if isinstance(config, Mapping):
        epochs, every = config["epochs"], config["eval_every"]
    else:
        epochs, every = config.epochs, config.eval_every
    return [int(e) for e in recorded_epochs(int(epochs), int(every))]


def config_columns(frame: pd.DataFrame | None = None) -> list[str]:
    """The config columns of the table layout (the one definition used by every module).

    Args:
        frame: a run frame or a table; default none.

    Returns:
        Without ``frame``: the ``synthetic.config.RunConfig`` fields in order (the columns
        ``train_run`` writes before ``run_key``). With ``frame``: its columns before ``run_key``,
        less ``epoch`` and the :data:`GRID` label (a stored run keeps the fields of the config
        that wrote it, so the frame decides).
    """
    if frame is None:
        from synthetic.config import RunConfig

        return [f.name for f in dataclasses.fields(RunConfig)]
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
