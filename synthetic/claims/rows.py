"""Run summaries and their seed aggregates: what the synthetic judges read.

A *run summary* (:func:`run_summary`) has one row per run: its config columns, its final-epoch
metrics and, prefixed ``init_``, the same metrics at epoch 0 (the initialisation, or the source
state of a near-NC run); :func:`aggregate` gives the seed mean and sample std (ddof = 1,
``<m>_mean``, ``<m>_std``, ``n_seeds``). The rest are the shared verdict helpers: NC and DC of an
aggregated row (:func:`is_nc`, :func:`is_dc`), labels, evidence and the record's setting.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd

from synthetic.store.schema import EPOCH, GRID, RUN_KEY, SETTLED, config_columns, is_true
from synthetic.store.summary import config_text, format_mean_std, missing_seeds
from theory import claims as records

__all__ = [
    "SUMMARY_METRICS",
    "run_summary",
    "longest_of_lineage",
    "budget_steps",
    "aggregate",
    "missing_note",
    "setting_columns",
    "spectrum_columns",
    "pooled_std",
    "spearman",
]

#: Metrics carried by a run summary (final epoch; ``init_<m>`` at epoch 0), when present.
SUMMARY_METRICS = (
    "etf_mean",
    "within_class_variation",
    "unit_norm",
    "zero_sum",
    "rank_1e-2",
    "rank_1e-4",
    "effective_rank",
    "spectrum_min",
    "mean_norm",
    "collision",
    "collision_nc",
    "loss",
    "gap_to_optimum",
    "ncm_acc",
    "train_ncm_acc",
    "steps",
)

_SPECTRUM = re.compile(r"spectrum_\d+")


def spectrum_columns(table: pd.DataFrame) -> list[str]:
    """The class-mean spectrum columns ``spectrum_0, spectrum_1, ...`` of a table, in index order."""
    cols = [c for c in table.columns if _SPECTRUM.fullmatch(str(c))]
    return sorted(cols, key=lambda c: int(c.split("_")[1]))


def run_summary(rows: pd.DataFrame) -> pd.DataFrame:
    """One row per run: config columns, final-epoch metrics, and ``init_<m>`` at epoch 0.

    Runs are told apart by ``(grid, run_key)`` when there is a ``grid`` column. Also
    ``final_epoch``, ``settled`` (the run's convergence rule held at its last row; False for a run
    without a rule, ``synthetic.engine.convergence``), the last row's ``change_<metric>``
    columns and the final class-mean spectrum ``spectrum_<i>`` where the runs have them.
    Of runs under a convergence rule that differ only in their budget (one lineage,
    docs/claims.md#extending-a-run: a shorter budget and the run that continued it) only the one
    with the largest budget is kept (:func:`longest_of_lineage`).
    """
    if not isinstance(rows, pd.DataFrame) or RUN_KEY not in rows or EPOCH not in rows:
        raise ValueError("rows must be a tidy results table with run_key and epoch columns")
    by = [GRID, RUN_KEY] if GRID in rows.columns else [RUN_KEY]
    order = rows.sort_values(by + [EPOCH], kind="mergesort")
    last = order.groupby(by, sort=False).tail(1).set_index(by)
    first = order.groupby(by, sort=False).head(1).set_index(by)
    metrics = [m for m in SUMMARY_METRICS if m in rows.columns]
    cfg = [c for c in config_columns(rows) if c in rows.columns]
    out = last[cfg + metrics].copy()
    for m in metrics:
        out[f"init_{m}"] = first[m]
    out["final_epoch"] = last[EPOCH]
    # convergence: whether the run's rule held at its last row (False for a run without a rule)
    if SETTLED in rows.columns:
        out[SETTLED] = last[SETTLED].map(is_true).astype(bool)
    else:
        out[SETTLED] = False
    extra = [c for c in rows.columns if c.startswith("change_")] + spectrum_columns(rows)
    if extra:  # one concat, not a column at a time (up to 199 spectrum columns)
        out = pd.concat([out, last[extra].apply(pd.to_numeric, errors="coerce")], axis=1)
    return longest_of_lineage(out.reset_index())


#: The config columns that set a run's budget, not what it computes (a lineage is a config less them).
BUDGET_COLUMNS = ("epochs", "max_steps")


def budget_steps(runs: pd.DataFrame) -> pd.Series:
    """Each run's budget in optimisation steps: ``max_steps``, else ``epochs`` x steps per epoch.

    Steps per epoch: ``N // batch_size`` with ``N = num_classes * n_per_class`` for a mini-batch,
    1 for a full batch (``batch_size`` 0 or at least N), as ``synthetic.engine.config.RunConfig``.
    """
    num = {c: pd.to_numeric(runs[c], errors="coerce").fillna(0).astype(int) for c in ("epochs", "max_steps")}
    N = pd.to_numeric(runs["num_classes"], errors="coerce") * pd.to_numeric(
        runs["n_per_class"], errors="coerce"
    )
    b = pd.to_numeric(runs["batch_size"], errors="coerce").fillna(0)
    spe = (N // b).where((b > 0) & (b < N), 1).fillna(1).astype(int)
    return num["max_steps"].where(num["max_steps"] > 0, num["epochs"] * spe)


def longest_of_lineage(runs: pd.DataFrame) -> pd.DataFrame:
    """A run summary less the runs superseded by a longer run of their lineage.

    Runs with a convergence rule (``settle_window > 0``) whose config columns agree except
    :data:`BUDGET_COLUMNS` are one lineage (a run and its extension with a raised budget,
    docs/claims.md#extending-a-run): only the one with the largest :func:`budget_steps` is kept, so
    an unsettled shorter budget does not keep a setting undecided once its continuation settled.
    Runs without a rule (snapshots at their budget) and summaries without the budget columns are
    returned as they are.
    """
    need = ("settle_window", *BUDGET_COLUMNS, "num_classes", "n_per_class", "batch_size")
    if len(runs) < 2 or not all(c in runs.columns for c in need):
        return runs
    rule = pd.to_numeric(runs["settle_window"], errors="coerce").fillna(0) > 0
    if not bool(rule.any()):
        return runs
    cols = [
        c for c in (GRID, "seed", *setting_columns(runs)) if c in runs.columns and c not in BUDGET_COLUMNS
    ]
    ruled = runs[rule].assign(_budget=budget_steps(runs[rule]))
    # one lineage per config less its budget: the values as text (a missing value is its own key)
    lineage = ruled[cols].apply(lambda col: col.map(repr))
    keep = ruled.groupby([lineage[c] for c in cols], sort=False)["_budget"].idxmax()
    return runs[~rule | runs.index.isin(keep.to_numpy())]


def aggregate(runs: pd.DataFrame, by: Sequence[str]) -> pd.DataFrame:
    """Seed mean and sample std (ddof = 1) of every numeric metric of a run summary, per ``by``."""
    values = [c for c in runs.columns if c.startswith("init_") or c in SUMMARY_METRICS]
    rows = []
    groups = runs.groupby(list(by), sort=False, dropna=False) if by else [((), runs)]
    for key, g in groups:
        key = key if isinstance(key, tuple) else (key,)
        row: dict[str, Any] = dict(zip(by, key, strict=True))
        row["n_seeds"] = int(len(g))
        for m in values:
            v = pd.to_numeric(g[m], errors="coerce").to_numpy(dtype=float)
            row[f"{m}_mean"] = float(np.mean(v)) if len(v) else math.nan
            row[f"{m}_std"] = float(np.std(v, ddof=1)) if len(v) > 1 else math.nan
        rows.append(row)
    return pd.DataFrame(rows)


def pooled_std(stds: Sequence[float]) -> float:
    """Root mean square of the finite seed stds (0 when none is finite: a single seed)."""
    v = [float(x) for x in stds if math.isfinite(float(x))]
    return float(np.sqrt(np.mean(np.square(v)))) if v else 0.0


def spearman(x: Sequence[float], y: Sequence[float]) -> float:
    """Spearman rank correlation of ``y`` with ``x`` (0 for a constant ``y``; the sign for 2 points)."""
    from scipy.stats import spearmanr

    xa, ya = np.asarray(x, float), np.asarray(y, float)
    if len(xa) < 2 or np.ptp(ya) == 0:
        return 0.0
    if len(xa) == 2:
        return float(np.sign(ya[-1] - ya[0]))
    return float(spearmanr(xa, ya).statistic)


def setting_columns(runs: pd.DataFrame) -> list[str]:
    """The config columns of a run summary or table, less ``seed``, ``run_key`` and ``grid``."""
    cfg = [c for c in config_columns(runs) if c in runs.columns] if RUN_KEY in runs.columns else []
    if not cfg:
        cfg = [
            c
            for c in runs.columns
            if not (
                c in SUMMARY_METRICS
                or c.startswith(("init_", "change_"))
                or _SPECTRUM.fullmatch(str(c))
                or c in ("final_epoch", SETTLED)
            )
        ]
    return [c for c in cfg if c not in ("seed", RUN_KEY, GRID)]


def varying(runs: pd.DataFrame, exclude: Sequence[str] = ()) -> list[str]:
    """Config columns that vary across ``runs`` (other than ``seed`` and ``exclude``)."""
    return [
        c for c in setting_columns(runs) if c not in exclude and runs[c].astype(str).nunique(dropna=False) > 1
    ]


#: Order of the columns in a setting label; columns not listed follow in their own order.
LABEL_ORDER = (
    "num_classes",
    "encoder",
    "hidden",
    "depth",
    "separation",
    "sigma",
    "batch_size",
    "normalization",
    "estimator",
    "positives",
    "epochs",
    "max_steps",
    "lr",
)


#: Columns never shown in a label: derived (d = C - 1 by default) or bookkeeping.
_LABEL_SKIP = ("d", "eval_every", "record_means")


def label(row: pd.Series | dict, cols: Sequence[str]) -> str:
    """``"num_classes=50, encoder=mlp, ..."`` of the columns ``cols`` of a row.

    Columns in a fixed reading order; ``hidden`` / ``depth`` only for MLPs, the inputs' fields not
    for free features, ``d`` and ``eval_every`` never.
    """
    enc = row.get("encoder", None)
    shown = [c for c in cols if c not in _LABEL_SKIP]
    if enc is not None and enc != "mlp":
        shown = [c for c in shown if c not in ("hidden", "depth")]
    if enc == "free":
        shown = [c for c in shown if c not in ("separation", "sigma", "input_dim", "centres")]
    rank = {c: i for i, c in enumerate(LABEL_ORDER)}
    shown = sorted(shown, key=lambda c: (rank.get(c, len(rank)), list(cols).index(c)))
    parts = []
    for c in shown:
        v = row[c]
        if isinstance(v, float) and math.isnan(v):
            continue
        if isinstance(v, (float, np.floating)):
            parts.append(f"{c}={float(v):g}")
        else:
            parts.append(f"{c}={v}")
    return ", ".join(parts) or "all"


def evidence(row: pd.Series, metric: str, text: str | None = None, prefix: str = "") -> records.Evidence:
    """The seed mean ± std of ``metric`` in an aggregated row, as an Evidence."""
    mean = float(row.get(f"{metric}_mean", math.nan))
    sd = row.get(f"{metric}_std", math.nan)
    n = int(row.get("n_seeds", 0)) or None
    name = f"{prefix}{text or metric}"
    if sd is None or not math.isfinite(float(sd)):
        return records.Evidence(name, mean, n=n)
    return records.Evidence(name, mean, float(sd), "std", n=n)


def mean_std(row: pd.Series, metric: str) -> str:
    """``"0.123 ± 0.004"`` of an aggregated row."""
    return format_mean_std(
        float(row.get(f"{metric}_mean", math.nan)), float(row.get(f"{metric}_std", math.nan))
    )


def is_nc(row: pd.Series, crit: dict[str, Any]) -> bool:
    """NC of an aggregated row: seed means ``etf_mean < nc_etf`` and ``wcv < nc_wcv``."""
    return bool(
        row["etf_mean_mean"] < float(crit["nc_etf"])
        and row["within_class_variation_mean"] < float(crit["nc_wcv"])
    )


def rank_column(t: float) -> str:
    """The numerical-rank column of threshold ``t`` (``rank_1e-2`` for 0.01)."""
    return f"rank_{t:.0e}".replace("e-0", "e-")


def available(runs: pd.DataFrame, t: float) -> pd.Series:
    """Per run, ``min(r_t at epoch 0, C - 1)``: the class-mean dimensions available to lose."""
    col = f"init_{rank_column(t)}"
    return np.minimum(pd.to_numeric(runs[col], errors="coerce"), runs["num_classes"].astype(float) - 1)


def with_available(runs: pd.DataFrame, thresholds: Sequence[float]) -> pd.DataFrame:
    """The run summary with ``avail_<rank column>`` columns (see :func:`available`)."""
    out = runs.copy()
    for t in thresholds:
        if f"init_{rank_column(t)}" in out.columns:
            out[f"init_avail_{rank_column(t)}"] = available(out, t)
    return out


def is_dc(row: pd.Series, t: float, crit: dict[str, Any]) -> bool | None:
    """DC at threshold t of an aggregated row (None without rank columns), see the grid files."""
    col = rank_column(t)
    if (
        "dc_fraction" not in crit
        or f"{col}_mean" not in row.index
        or f"init_avail_{col}_mean" not in row.index
    ):
        return None
    final, avail = float(row[f"{col}_mean"]), float(row[f"init_avail_{col}_mean"])
    if not (math.isfinite(final) and math.isfinite(avail)):
        return None
    return bool(final <= float(crit["dc_fraction"]) * avail)


def setting_of(runs: pd.DataFrame, folder: str, scale: str) -> dict[str, str]:
    """The ``setting`` of a record: data, encoder, normalisation, batch size, C, ..., scale."""

    def vals(c: str) -> str:
        if c not in runs.columns:
            return ""
        v = list(dict.fromkeys(runs[c].map(str)))  # map(str): pandas 3's astype(str) keeps NaN
        return ", ".join("full" if c == "batch_size" and x == "0" else x for x in v)

    enc = vals("encoder")
    data = "free features (one learnable vector per sample)" if enc == "free" else "Gaussian mixture"
    if "separation" in runs.columns and enc != "free":
        data += f" (separation {vals('separation')}, sigma {vals('sigma')}, D {vals('input_dim')})"
    out = {"data": data, "grid": folder, "scale": scale}
    for c, name in (
        ("num_classes", "C"),
        ("encoder", "encoder"),
        ("hidden", "MLP width"),
        ("depth", "MLP depth"),
        ("normalization", "normalisation"),
        ("batch_size", "batch size"),
        ("estimator", "estimator"),
        ("epochs", "epochs"),
        ("max_steps", "steps"),
        ("init", "init"),
        ("positives", "positives"),
    ):
        v = vals(c)
        if v and not (c == "max_steps" and v == "0"):
            out[name] = v
    if "seed" in runs.columns:
        out["seeds"] = str(runs["seed"].nunique())
    return out


def missing_note(missing: Sequence[dict[str, Any]], runs: pd.DataFrame) -> str:
    """Which seeds of which settings of a grid folder are missing, or "" when none is.

    Args:
        missing: the folder's ``attrs["missing"]`` entries (``synthetic.store.read.load_results``):
            runs whose file is gone behind its completion record, with the config it holds.
        runs: the folder's run summary (:func:`run_summary`), the runs present.

    Returns:
        ``"Missing runs, left out of every number above (...): beta=5: seed 1 (n = 2 of 3); ..."``.
    """
    if not missing:
        return ""
    known = [m for m in missing if m.get("config")]
    cfg = setting_columns(runs)

    def values(c: str) -> set[str]:
        return {config_text(v) for v in runs[c]} | {config_text(m["config"].get(c)) for m in known}

    cols = [c for c in cfg if len(values(c)) > 1]
    parts: list[str] = []
    matched: set[str] = set()
    for _, row in aggregate(runs, cols).iterrows() if len(runs) else ():
        mine = [m for m in known if missing_seeds([m], row.to_dict(), cols)]
        if mine:
            matched.update(m["run_key"] for m in mine)
            seeds = missing_seeds(mine, row.to_dict(), cols)
            n = int(row["n_seeds"])
            parts.append(
                f"{label(row, cols)}: seed {', '.join(map(str, seeds))} (n = {n} of {n + len(seeds)})"
            )
    alone: dict[str, list[Any]] = {}  # settings none of whose runs is present
    for m in known:
        if m["run_key"] not in matched:
            config = {c: m["config"].get(c, math.nan) for c in cols}
            alone.setdefault(label(config, cols), []).append(m["config"].get("seed"))
    parts += [f"{lab}: seed {', '.join(map(str, s))} (n = 0 of {len(s)})" for lab, s in alone.items()]
    unknown = [str(m["run_key"]) for m in missing if not m.get("config")]
    if unknown:
        parts.append(f"runs {', '.join(unknown)} (records without their config)")
    return (
        "Missing runs, left out of every number above (run file gone behind its completion record; "
        "the command trains them again): " + "; ".join(parts) + "."
    )
