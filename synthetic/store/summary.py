"""Seed-aggregated summaries of a results table: final-epoch metrics as mean ± std over seeds.

A run whose file is missing behind its completion record (``attrs["missing"]`` of a table from
``synthetic.store.read.load_results``) is never averaged over silently: :func:`summarize` names
its seed in a ``missing_seeds`` column beside ``n_seeds`` (a setting all of whose runs are missing
gets a row with ``n_seeds`` 0), matched to its setting by the config its record holds
(:func:`missing_seeds`).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np
import pandas as pd

from synthetic.store.schema import GRID, config_columns, final_epoch

__all__ = [
    "SUMMARY_METRICS",
    "summarize",
    "missing_seeds",
    "config_text",
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


def config_text(value: Any) -> str:
    """The text a config value is matched by: numbers as floats, NaN and None as ""."""
    if hasattr(value, "item") and not isinstance(value, (str, bytes)):
        value = value.item()
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return ""
    if isinstance(value, bool):
        return str(value)
    if isinstance(value, (int, float)):
        return repr(float(value))
    return str(value)


def _order(value: Any) -> tuple[int, float, str]:
    """Sort key of seeds: numbers by value, then anything else by its text."""
    if hasattr(value, "item") and not isinstance(value, (str, bytes)):
        value = value.item()
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return (0, float(value), "")
    return (1, 0.0, str(value))


def _matches(missing: Mapping[str, Any], row: Mapping[str, Any], columns: Iterable[str]) -> bool:
    config = missing.get("config") or {}
    if GRID in row and missing.get(GRID) is not None and str(missing[GRID]) != str(row[GRID]):
        return False
    return all(config_text(config[c]) == config_text(row[c]) for c in columns if c in config and c in row)


def missing_seeds(
    missing: Iterable[Mapping[str, Any]],
    row: Mapping[str, Any],
    columns: Iterable[str],
    *,
    seed_column: str = "seed",
) -> list[Any]:
    """Seeds of the missing runs whose config equals ``row`` in ``columns`` (and ``grid``), sorted.

    Args:
        missing: ``attrs["missing"]`` entries of a table (``grid``, ``run_key``, ``config``);
            entries without a config (records written before they held one) match nothing.
        row: one run (or one setting) of the table: its config values.
        columns: the config columns that define the setting (the seed column is skipped).
        seed_column: the seed's column.
    """
    cols = [c for c in columns if c != seed_column]
    seeds = [m["config"].get(seed_column) for m in missing if m.get("config") and _matches(m, row, cols)]
    return sorted(seeds, key=_order)


def summarize(
    table: pd.DataFrame,
    metrics: Sequence[str] | None = None,
    *,
    seed_column: str = "seed",
    missing: Sequence[Mapping[str, Any]] | None = None,
) -> pd.DataFrame:
    """Final-epoch metrics aggregated over seeds: mean and sample std (ddof=1) per config.

    Args:
        table: tidy results table (config columns, run_key, epoch, metrics).
        metrics: metric columns; default the :data:`SUMMARY_METRICS` present in the table.
        seed_column: the config column aggregated over.
        missing: the runs missing behind their completion record (default
            ``table.attrs["missing"]``, see ``synthetic.store.read.load_results``).

    Returns:
        One row per config-without-seed: the config columns that vary in the table (plus
        ``grid`` when present), ``n_seeds`` (the runs present), ``missing_seeds`` (when a run with a
        recorded config is missing: its seeds, ``"1, 4"``; ``""`` where none is) and
        ``<metric>_mean`` / ``<metric>_std`` columns (std NaN for one seed; NaN for a setting
        whose runs are all missing).
    """
    if not isinstance(table, pd.DataFrame):
        raise ValueError(f"table must be a DataFrame, got {type(table).__name__}")
    gone = [m for m in (table.attrs.get("missing", []) if missing is None else missing) if m.get("config")]
    if len(table) == 0:
        return pd.DataFrame()
    last = final_epoch(table)
    if metrics is None:
        metrics = [m for m in SUMMARY_METRICS if m in last.columns]
    else:
        absent = [m for m in metrics if m not in last.columns]
        if absent:
            raise ValueError(f"metrics not in the table: {absent}")
    cfg = [c for c in config_columns(last) if c != seed_column]

    def values(c: str) -> set[str]:  # a column's values, the missing runs' included
        return {config_text(v) for v in last[c]} | {
            config_text(m["config"][c]) for m in gone if c in m["config"]
        }

    varying = [c for c in cfg if len(values(c)) > 1]
    by = ([GRID] if GRID in last.columns else []) + varying
    if not by:
        last = last.assign(_all="all")
        by = ["_all"]
    rows = []
    matched: set[int] = set()
    for key, g in last.groupby(by, sort=False, dropna=False):
        key = key if isinstance(key, tuple) else (key,)
        row = dict(zip(by, key, strict=True))
        row["n_seeds"] = int(len(g))
        if gone:
            ref = g.iloc[0].to_dict()
            mine = [i for i, m in enumerate(gone) if _matches(m, ref, cfg)]
            matched.update(mine)
            row["missing_seeds"] = _seeds_text(
                sorted((gone[i]["config"].get(seed_column) for i in mine), key=_order)
            )
        for m in metrics:
            vals = pd.to_numeric(g[m], errors="coerce").to_numpy(dtype=float)
            row[f"{m}_mean"] = float(np.mean(vals))
            row[f"{m}_std"] = float(np.std(vals, ddof=1)) if len(vals) > 1 else float("nan")
        rows.append(row)
    rows += _all_missing_rows([m for i, m in enumerate(gone) if i not in matched], by, metrics, seed_column)
    out = pd.DataFrame(rows)
    return out.drop(columns=["_all"], errors="ignore")


def _seeds_text(seeds: Sequence[Any]) -> str:
    return ", ".join(str(s) for s in seeds)


def _all_missing_rows(
    gone: Sequence[Mapping[str, Any]], by: Sequence[str], metrics: Sequence[str], seed_column: str
) -> list[dict[str, Any]]:
    """One row per setting none of whose runs is present: ``n_seeds`` 0, the missing seeds, NaN metrics."""
    settings: dict[tuple, list[Any]] = {}
    for m in gone:
        config = m["config"]
        key = tuple(m.get(GRID) if c == GRID else config.get(c) for c in by)
        settings.setdefault(key, []).append(config.get(seed_column))
    rows = []
    for key, seeds in settings.items():
        row: dict[str, Any] = dict(zip(by, key, strict=True))
        row["n_seeds"] = 0
        row["missing_seeds"] = _seeds_text(sorted(seeds, key=_order))
        row.update({f"{m}_{s}": float("nan") for m in metrics for s in ("mean", "std")})
        rows.append(row)
    return rows


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
