"""Seed-aggregated summaries of a results table: final-epoch metrics as mean ± std over seeds."""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import pandas as pd

from synthetic.store.schema import GRID, config_columns, final_epoch

__all__ = [
    "SUMMARY_METRICS",
    "summarize",
    "format_summary",
    "format_summary_csv",
    "format_summary_markdown",
    "format_mean_std",
]

#: Final-epoch metrics shown by :func:`summarize` when present in the table (in this order).
SUMMARY_METRICS = (
    "loss",
    "gap_to_optimum",
    "unit_norm",
    "zero_sum",
    "etf_mean",
    "within_class_variation",
    "nc1",
    "etf_error",
    "effective_rank",
    "spectrum_min",
    "mean_norm",
    "ncm_acc",
)


def summarize(
    table: pd.DataFrame, metrics: Sequence[str] | None = None, *, seed_column: str = "seed"
) -> pd.DataFrame:
    """Final-epoch metrics aggregated over seeds: mean and sample std (ddof=1) per config.

    Args:
        table: tidy results table (config columns, run_key, epoch, metrics).
        metrics: metric columns; default the :data:`SUMMARY_METRICS` present in the table.
        seed_column: the config column aggregated over.

    Returns:
        One row per config-without-seed: the config columns that vary in the table (plus
        ``grid`` when present), ``n_seeds``, and ``<metric>_mean`` / ``<metric>_std`` columns
        (std NaN for one seed).
    """
    if not isinstance(table, pd.DataFrame):
        raise ValueError(f"table must be a DataFrame, got {type(table).__name__}")
    if len(table) == 0:
        return pd.DataFrame()
    last = final_epoch(table)
    if metrics is None:
        metrics = [m for m in SUMMARY_METRICS if m in last.columns]
    else:
        missing = [m for m in metrics if m not in last.columns]
        if missing:
            raise ValueError(f"metrics not in the table: {missing}")
    cfg = [c for c in config_columns(last) if c != seed_column]
    varying = [c for c in cfg if last[c].astype(str).nunique() > 1]
    by = ([GRID] if GRID in last.columns else []) + varying
    if not by:
        last = last.assign(_all="all")
        by = ["_all"]
    rows = []
    for key, g in last.groupby(by, sort=False, dropna=False):
        key = key if isinstance(key, tuple) else (key,)
        row = dict(zip(by, key, strict=True))
        row["n_seeds"] = int(len(g))
        for m in metrics:
            vals = pd.to_numeric(g[m], errors="coerce").to_numpy(dtype=float)
            row[f"{m}_mean"] = float(np.mean(vals))
            row[f"{m}_std"] = float(np.std(vals, ddof=1)) if len(vals) > 1 else float("nan")
        rows.append(row)
    out = pd.DataFrame(rows)
    return out.drop(columns=["_all"], errors="ignore")


def format_mean_std(mean: float, std: float) -> str:
    """``"mean ± std"`` (4 and 2 significant digits); the mean alone for a non-finite std."""
    if not math.isfinite(mean):
        return "nan"
    if not math.isfinite(std):
        return f"{mean:.4g}"
    return f"{mean:.4g} ± {std:.2g}"


def _check_summary(summary: pd.DataFrame) -> None:
    if not isinstance(summary, pd.DataFrame):
        raise ValueError(f"summary must be a DataFrame, got {type(summary).__name__}")


def _mean_std_cells(summary: pd.DataFrame) -> pd.DataFrame:
    metric_names = [c[: -len("_mean")] for c in summary.columns if c.endswith("_mean")]
    keep = [c for c in summary.columns if not c.endswith("_mean") and not c.endswith("_std")]
    shown = summary[keep].copy()
    for m in metric_names:
        shown[m] = [
            format_mean_std(a, b) for a, b in zip(summary[f"{m}_mean"], summary[f"{m}_std"], strict=True)
        ]
    return shown


def format_summary(summary: pd.DataFrame) -> str:
    """Render :func:`summarize` output as text with ``mean ± std`` cells."""
    _check_summary(summary)
    if len(summary) == 0:
        return "(no finished runs)"
    with pd.option_context("display.max_columns", None, "display.width", 250, "display.max_rows", None):
        return _mean_std_cells(summary).to_string(index=False)


def format_summary_csv(summary: pd.DataFrame) -> str:
    """:func:`summarize` output as CSV, full precision (``<metric>_mean`` / ``<metric>_std`` columns).

    One row per config; an empty string for no runs.
    """
    _check_summary(summary)
    return summary.to_csv(index=False, lineterminator="\n")


def _md_cell(value: object) -> str:
    if isinstance(value, float) and value != value:
        return ""
    return str(value).replace("|", "\\|").replace("\n", " ")


def format_summary_markdown(summary: pd.DataFrame) -> str:
    """:func:`summarize` output as a Markdown (GitHub) table with ``mean ± std`` cells."""
    _check_summary(summary)
    if len(summary) == 0:
        return "(no finished runs)"
    shown = _mean_std_cells(summary)
    cols = list(shown.columns)
    numeric = [pd.api.types.is_numeric_dtype(shown[c]) for c in cols]
    lines = [
        "| " + " | ".join(_md_cell(c) for c in cols) + " |",
        "|" + "|".join("---:" if n else ":---" for n in numeric) + "|",
    ]
    for row in shown.itertuples(index=False):
        lines.append("| " + " | ".join(_md_cell(v) for v in row) + " |")
    return "\n".join(lines)
