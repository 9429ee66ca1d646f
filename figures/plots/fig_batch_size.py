"""The batch-size study: Neural Collapse against the batch size.

Jiang et al. (arXiv 2311.05139, §5.7) report that NC is reached for batch sizes 64-512 and that
batch size 32 hinders it when there are many classes. Left and middle: the final-epoch
equal-inner-product deviation and within-class variation against the batch size (log scale),
one line per number of classes C (and method), seed mean ± std; right: the ETF deviation over
training, one line per batch size. Full-batch runs (``batch_size = 0``) are drawn at ``N``, the
training-set size, when ``n_per_class`` and ``num_classes`` are known. The right panel's x-axis is
the number of optimisation steps, so batch sizes are compared at equal steps: the table's
``steps`` column, or ``epoch x floor(N / batch)`` (one step per epoch for a full batch) when
``N`` is known, else the epoch.

Table ``synthetic``: ``method, beta, epoch, batch_size, etf_mean, within_class_variation``
(+ ``num_classes``, ``n_per_class``, ``steps``, ``seed``).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd
import seaborn as sns
from matplotlib.figure import Figure

from figures.plots import frames, style
from figures.plots.spec import FigureSpec, TableNeed

COLUMNS = ("method", "beta", "epoch", "batch_size", "etf_mean", "within_class_variation")


def _effective_batch(rows: pd.DataFrame) -> pd.Series:
    b = pd.to_numeric(rows["batch_size"], errors="coerce").fillna(0).astype(float)
    if {"n_per_class", "num_classes"} <= set(rows.columns):
        n = rows["n_per_class"].astype(float) * rows["num_classes"].astype(float)
        b = b.where((b > 0) & (b < n), n)
    return b


def check(tables: dict[str, pd.DataFrame], **_: Any) -> str | None:
    """Reason why there is nothing to draw, or None."""
    t = tables.get("synthetic")
    if t is None or "batch_size" not in t.columns:
        return "table 'synthetic' has no batch_size column"
    most = (
        t.groupby("grid")["batch_size"].nunique().max() if "grid" in t.columns else t["batch_size"].nunique()
    )
    if most < 2:
        return "no grid of the 'synthetic' table varies the batch size"
    return None


@style.themed
def render(tables: dict[str, pd.DataFrame], where: dict | None = None) -> Figure:
    """Final NC metrics against the batch size, and the ETF deviation over training per batch size.

    Args:
        tables: ``{"synthetic": frame}`` with :data:`COLUMNS`.
        where: config filters fixing the setting (batch size and C stay free).

    Returns:
        The figure (three panels).

    Raises:
        ValueError: missing columns.
    """
    t = frames.table(tables, "synthetic", COLUMNS)
    rows, setting = frames.pick_setting(
        t,
        where=where,
        exclude=("batch_size", "num_classes", "method", "beta", "epochs", "eval_every"),
        maximise=("batch_size", "num_classes"),
    )
    rows = rows.assign(batch=_effective_batch(rows))
    last = frames.final_rows(rows)
    groups = [c for c in ("num_classes", "method", "beta") if c in last.columns and last[c].nunique() > 1]
    fig, axes = style.new_figure(1, 3, width=17.0, height=5.0)
    keys = (
        [k if isinstance(k, tuple) else (k,) for k in last.groupby(groups, sort=True).groups]
        if groups
        else [None]
    )

    def part(frame: pd.DataFrame, key: tuple | None) -> pd.DataFrame:
        if key is None:
            return frame
        return frame[np.logical_and.reduce([frame[c] == v for c, v in zip(groups, key, strict=True)])]

    def label(key: tuple | None) -> str | None:
        if key is None:
            return None
        return ", ".join(
            f"{c}={v:g}" if isinstance(v, float) else f"{c}={v}" for c, v in zip(groups, key, strict=True)
        )

    pal = sns.color_palette("crest", max(len(keys), 1))
    for k, (metric, ylabel) in enumerate(
        (("etf_mean", "mean | cos(μ_c, μ_c′) + 1/(C−1) |"), ("within_class_variation", "mean ‖z − μ_c‖"))
    ):
        ax = axes[0, k]
        for i, key in enumerate(keys):
            g = style.aggregate_seeds(frames.finite(part(last, key), metric), "batch", metric)
            style.seed_band(ax, g["batch"], g["mean"], g["std"], color=pal[i], marker="o", label=label(key))
        style.ideal_line(ax, 0.0, label="ideal 0")
        ax.set_xscale("log", base=2)
        bs = sorted(last["batch"].unique())
        ax.set_xticks(bs)
        ax.set_xticklabels([f"{int(b)}" for b in bs])
        style.finish_axes(
            ax,
            title=("ETF deviation" if k == 0 else "within-class variation") + " (final epoch)",
            xlabel="batch size",
            ylabel=ylabel,
            loc="best",
        )
    ax = axes[0, 2]
    x = "steps" if "steps" in rows.columns else "epoch"
    derived = False
    if x == "epoch" and {"n_per_class", "num_classes"} <= set(rows.columns):
        n = rows["n_per_class"].astype(float) * rows["num_classes"].astype(float)
        rows = rows.assign(steps=rows["epoch"].astype(float) * np.floor(n / rows["batch"]).clip(lower=1))
        x, derived = "steps", True
    sizes = sorted(rows["batch"].unique())
    pal2 = sns.color_palette("flare", len(sizes))
    base = part(rows, keys[-1])
    for i, b in enumerate(sizes):
        g = style.aggregate_seeds(frames.finite(base[base["batch"] == b], "etf_mean"), x, "etf_mean")
        style.seed_band(ax, g[x], g["mean"], g["std"], color=pal2[i], label=f"batch {int(b)}")
    style.ideal_line(ax, 0.0, label="ideal 0")
    if x == "steps":
        ax.set_xscale("symlog", linthresh=10.0)
        ax.set_xlim(left=0)
    style.finish_axes(
        ax,
        title="ETF deviation over training" + ("" if keys[-1] is None else f" ({label(keys[-1])})"),
        xlabel=("optimisation steps = epoch × ⌊N / batch⌋" if derived else "optimisation steps")
        if x == "steps"
        else "epoch",
        ylabel="mean | cos(μ_c, μ_c′) + 1/(C−1) |",
        loc="upper right",
    )
    fig.suptitle("Batch-size study")
    style.note(
        fig,
        "seed mean ± std; "
        + frames.setting_text(rows, setting, columns=("grid", "encoder", "normalization")),
    )
    return fig


FIGURES = (
    FigureSpec(
        id="batch_size",
        title="Batch-size study",
        claims=("R5",),
        needs=(TableNeed("synthetic", COLUMNS, ("num_classes", "n_per_class", "steps", "seed", "grid")),),
        render=render,
        check=check,
        produce="python -m synthetic sweep r5_batch_size --results {results}/synthetic",
        description="Final ETF deviation and within-class variation against the batch size, and the ETF "
        "deviation over training per batch size.",
    ),
)
