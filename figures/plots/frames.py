"""Selections on tidy result tables shared by the figure modules (pandas only).

Result tables follow the project's layout (DESIGN.md "Results"): one row per (run, epoch),
config columns first, then ``run_key``, ``epoch`` and the metric columns; tables assembled from
several grid folders carry a leading ``grid`` column. A *setting* is the value of every config
column except the ones a figure draws against (method, beta, seed, ...): a figure shows one
setting at a time (:func:`pick_setting`) and prints it in its caption (:func:`setting_text`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import pandas as pd

__all__ = [
    "FAMILIES",
    "table",
    "config_columns",
    "family_rows",
    "has_family",
    "setting_columns",
    "pick_setting",
    "setting_text",
    "final_rows",
    "early_epoch",
    "betas_of",
    "finite",
    "SCALE_RANK",
    "grid_scale",
    "primary_grids",
]

#: The two families of the hard-negative paper (arXiv 2311.05139, §2): base and hard method.
FAMILIES = {"SCL": ("SCL", "HSCL"), "UCL": ("UCL", "HUCL")}
_FAMILY_NAMES = {"SCL": "SCL / HSCL", "UCL": "UCL / HUCL"}

#: Config columns that are never part of a setting (they are drawn, or are the replicate).
_DRAWN = ("method", "beta", "seed", "run_key", "epoch")
#: When several settings are present, prefer these values (the authors' choices first).
_PREFER: dict[str, tuple[Any, ...]] = {
    "normalization": ("ball", "sphere", "none"),
    "positives": ("label", "noise"),
    "estimator": ("sampled", "expectation"),
    "psi": ("mean", "sum", "triplet"),
    "encoder": ("mlp", "linear", "free"),
}
#: Known config columns, used when a table has no ``run_key`` column to mark their end.
_KNOWN_CONFIG = (
    "grid",
    "method",
    "beta",
    "tau",
    "psi",
    "margin",
    "estimator",
    "num_negatives",
    "batch_size",
    "lr",
    "weight_decay",
    "epochs",
    "eval_every",
    "normalization",
    "positives",
    "noise_std",
    "encoder",
    "hidden",
    "d",
    "init_scale",
    "num_classes",
    "n_per_class",
    "n_test_per_class",
    "input_dim",
    "separation",
    "sigma",
    "centres",
    "seed",
    "record_means",
    "dtype",
    "init",
    "dataset",
    "arch",
)


def table(tables: Mapping[str, pd.DataFrame], name: str, columns: Sequence[str]) -> pd.DataFrame:
    """``tables[name]``, checked to hold every one of ``columns`` (a figure's input).

    Raises:
        ValueError: the table is missing or lacks a column (naming the table and the columns).
    """
    t = tables.get(name)
    if t is None:
        raise ValueError(f"tables[{name!r}] must have the columns {list(columns)} (no such table)")
    missing = [c for c in columns if c not in t.columns]
    if missing:
        raise ValueError(f"tables[{name!r}] must have the columns {list(columns)} (missing: {missing})")
    return t


def family_name(family: str) -> str:
    """``"SCL / HSCL"`` or ``"UCL / HUCL"``.

    Raises:
        ValueError: unknown family.
    """
    if family not in FAMILIES:
        raise ValueError(f"family must be one of {list(FAMILIES)}, got {family!r}")
    return _FAMILY_NAMES[family]


def config_columns(frame: pd.DataFrame) -> list[str]:
    """Config columns of a tidy table: those before ``run_key`` (else the known config names)."""
    cols = list(frame.columns)
    if "run_key" in cols:
        return [c for c in cols[: cols.index("run_key")] if c != "epoch"]
    return [c for c in cols if c in _KNOWN_CONFIG]


def family_rows(frame: pd.DataFrame, family: str) -> pd.DataFrame:
    """Rows of ``frame`` whose ``method`` belongs to ``family`` (``"SCL"`` or ``"UCL"``).

    Raises:
        ValueError: unknown family or no ``method`` column.
    """
    family_name(family)
    if "method" not in frame.columns:
        raise ValueError("frame must have a 'method' column")
    return frame[frame["method"].astype(str).isin(FAMILIES[family])]


def has_family(frame: pd.DataFrame | None, family: str) -> bool:
    """True when ``frame`` holds at least one run of ``family``."""
    return frame is not None and "method" in frame.columns and len(family_rows(frame, family)) > 0


def setting_columns(frame: pd.DataFrame, exclude: Sequence[str] = ()) -> list[str]:
    """Config columns that vary in ``frame``, other than the drawn ones and ``exclude``."""
    skip = set(_DRAWN) | set(exclude)
    out = []
    for c in config_columns(frame):
        if c in skip:
            continue
        if frame[c].astype(str).nunique(dropna=False) > 1:
            out.append(c)
    return out


def _pref_rank(col: str, value: Any) -> int:
    prefs = _PREFER.get(col)
    if prefs is None or value not in prefs:
        return len(prefs) if prefs else 0
    return prefs.index(value)


def pick_setting(
    frame: pd.DataFrame,
    *,
    exclude: Sequence[str] = (),
    where: Mapping[str, Any] | None = None,
    maximise: Sequence[str] = ("beta",),
) -> tuple[pd.DataFrame, dict[str, Any]]:
    """Restrict ``frame`` to one setting.

    ``where`` fixes columns first (``{"normalization": "sphere"}``). Among the remaining
    settings (combinations of the varying config columns, :func:`setting_columns`), the one with
    the most distinct values of the ``maximise`` columns (default ``beta``) wins, then the one
    with the most runs, then the preferred
    values of :data:`_PREFER` (the authors' choices: unit ball, label positives, ...), then the
    sort order: deterministic for a given table.

    Args:
        frame: tidy table.
        exclude: config columns that stay free (drawn by the figure, e.g. ``normalization``).
        where: column -> value filters applied first.
        maximise: columns whose number of distinct values a setting should maximise.

    Returns:
        ``(rows, setting)``: the rows of the chosen setting and ``{column: value}`` of it
        (including the ``where`` columns).

    Raises:
        ValueError: a ``where`` column is missing.
    """
    setting: dict[str, Any] = {}
    d = frame
    for col, val in (where or {}).items():
        if col not in d.columns:
            raise ValueError(f"where: column {col!r} not in the table")
        d = d[d[col].astype(str) == str(val)]
        setting[col] = val
    cols = setting_columns(d, exclude=[*exclude, *setting])
    if not cols or len(d) == 0:
        return d, setting
    best_key, best = None, None
    for key, g in d.groupby(cols, sort=True, dropna=False):
        key = key if isinstance(key, tuple) else (key,)
        cover = tuple(-g[c].nunique() if c in g.columns else 0 for c in maximise)
        n_runs = g["run_key"].nunique() if "run_key" in g.columns else len(g)
        pref = sum(_pref_rank(c, v) for c, v in zip(cols, key, strict=True))
        score = (*cover, -n_runs, pref)
        if best_key is None or score < best_key:
            best_key, best = score, (key, g)
    assert best is not None
    key, rows = best
    setting.update(dict(zip(cols, key, strict=True)))
    return rows, setting


def setting_text(
    frame: pd.DataFrame,
    setting: Mapping[str, Any] | None = None,
    columns: Sequence[str] = (
        "grid",
        "encoder",
        "normalization",
        "batch_size",
        "num_classes",
        "estimator",
        "positives",
    ),
) -> str:
    """One line naming the setting a figure shows: the chosen values plus the constant columns.

    Example: ``"grid=s1_scl_hscl_nc, encoder=mlp, normalization=ball, batch_size=0 (full),
    num_classes=10, 3 seeds"``.
    """
    parts = []
    setting = dict(setting or {})
    for c in columns:
        if c in setting:
            v = setting[c]
        elif c in frame.columns and frame[c].astype(str).nunique() == 1 and len(frame):
            v = frame[c].iloc[0]
        else:
            continue
        if c == "batch_size" and _num(v) == 0:
            v = "full"
        parts.append(f"{c}={_fmt(v)}")
    for c, v in setting.items():
        if c not in columns:
            parts.append(f"{c}={_fmt(v)}")
    if "seed" in frame.columns and len(frame):
        n = frame["seed"].nunique()
        parts.append(f"{n} seed{'s' if n != 1 else ''}")
    return ", ".join(parts)


def _num(v: Any) -> float:
    try:
        return float(v)
    except (TypeError, ValueError):
        return float("nan")


def _fmt(v: Any) -> str:
    if isinstance(v, (float, np.floating)):
        return f"{float(v):g}"
    return str(v)


def final_rows(frame: pd.DataFrame) -> pd.DataFrame:
    """The last-epoch row of each run (runs told apart by ``grid`` + ``run_key`` when present)."""
    if "epoch" not in frame.columns:
        raise ValueError("frame must have an 'epoch' column")
    if len(frame) == 0:
        return frame
    by = [c for c in ("grid", "run_key") if c in frame.columns] or [c for c in config_columns(frame)]
    idx = frame.groupby(by, sort=False, dropna=False)["epoch"].idxmax()
    return frame.loc[sorted(idx.values)]


def early_epoch(epochs: Sequence[int], fraction: float = 0.2) -> int | None:
    """The recorded epoch nearest ``fraction`` of the last one, other than 0 and the last.

    The authors plot the spectrum at epoch 80 of 400 besides the final one (fraction 0.2).
    None when fewer than three epochs are recorded.
    """
    ep = sorted({int(e) for e in epochs})
    if len(ep) < 3:
        return None
    last = ep[-1]
    inner = [e for e in ep if 0 < e < last]
    if not inner:
        return None
    return min(inner, key=lambda e: (abs(e - fraction * last), e))


def betas_of(frame: pd.DataFrame) -> list[float]:
    """Sorted distinct ``beta`` values of ``frame``."""
    if "beta" not in frame.columns:
        return []
    return sorted({float(b) + 0.0 for b in pd.to_numeric(frame["beta"], errors="coerce").dropna()})


def finite(frame: pd.DataFrame, column: str) -> pd.DataFrame:
    """Rows whose ``column`` is a finite number."""
    if column not in frame.columns:
        return frame.iloc[0:0]
    v = pd.to_numeric(frame[column], errors="coerce").to_numpy(dtype=float)
    return frame[np.isfinite(v)]


#: Rank of the scales of the results: the paper scale wins over the default over the quick one;
#: anything else (e.g. the real-data digits scale) ranks below.
SCALE_RANK = {"paper": 3, "default": 2, "quick": 1}


def grid_scale(grid: str) -> tuple[str, str]:
    """``(grid name, scale)`` of a grid folder name.

    ``"s3_hucl_beta-paper"`` -> ``("s3_hucl_beta", "paper")``; a name without a ``-<scale>``
    suffix is the default scale.
    """
    name, _, scale = str(grid).rpartition("-")
    return (name, scale) if name and scale else (str(grid), "default")


def primary_grids(frame: pd.DataFrame) -> pd.DataFrame:
    """Per grid, the rows of its largest stored scale (:data:`SCALE_RANK`), the others dropped.

    A table without a ``grid`` column is returned as it is.
    """
    if not isinstance(frame, pd.DataFrame) or "grid" not in frame.columns or len(frame) == 0:
        return frame
    folders = list(dict.fromkeys(frame["grid"].astype(str)))
    best: dict[str, str] = {}
    for f in folders:
        name, scale = grid_scale(f)
        if name not in best or SCALE_RANK.get(scale, 0) > SCALE_RANK.get(grid_scale(best[name])[1], 0):
            best[name] = f
    keep = set(best.values())
    out = frame[frame["grid"].astype(str).isin(keep)]
    out.attrs.update(frame.attrs)
    return out
