"""Trajectories of every synthetic setting: does NC arrive, does DC deepen or recover, has it settled?

One row of panels per claim grid (S1-S4, R1s-R3s, R4, R5; its largest stored scale): ``etf_mean`` (left,
logarithmic) and the numerical rank ``rank_1e-2`` of the centred class means as a fraction of the
``min(C - 1, d)`` dimensions a simplex ETF needs (right) against the epoch, one line per setting
(a grid point less its seed: seed means). A setting whose seeds all **settled** under the grid's
convergence rule is drawn solid with a filled dot where it stopped; an undecided one (a seed reached
its budget first, or the runs have no rule) dotted with an open circle at its budget
(docs/claims.md#convergence-and-undecided). The dashed line on the left is the NC threshold on
``etf_mean`` (0.05), on the right the DC threshold (0.8 of the dimensions available at epoch 0 is
the criterion; 0.8 of ``C - 1`` is drawn as a guide).

Table ``synthetic``: ``grid, run_key, epoch, etf_mean, rank_1e-2, num_classes`` (+ ``settled``,
``d``, ``seed`` and the config columns).
"""

from __future__ import annotations

from typing import Any

import pandas as pd
from matplotlib.figure import Figure

from figures.plots import frames, style
from figures.plots.spec import FigureSpec, TableNeed

COLUMNS = ("grid", "run_key", "epoch", "etf_mean", "rank_1e-2", "num_classes")

#: The claim each shipped grid judges (its name's first token), in report order.
_ORDER = ("s1", "s2", "s3", "s4", "r1", "r4", "r5")  # r1: r1r3_analogue (R1s-R3s)

#: etf_mean (docs/metrics.md#etf_mean-and-etf_max).
ETF_LABEL = "mean | cos(μ_c, μ_c′) + 1/(C−1) |"

#: The NC threshold on etf_mean and the DC fraction of the shipped grids' [claim] tables.
NC_ETF, DC_FRACTION = 0.05, 0.8


def _grids(t: pd.DataFrame) -> list[str]:
    t = frames.primary_grids(t)
    names = list(dict.fromkeys(t["grid"].astype(str)))
    return sorted(names, key=lambda g: (_ORDER.index(g[:2]) if g[:2] in _ORDER else len(_ORDER), g))


def check(tables: dict[str, pd.DataFrame], **_: Any) -> str | None:
    """Reason why there is nothing to draw, or None."""
    t = tables.get("synthetic")
    if t is None or len(t) == 0:
        return "table 'synthetic' is empty"
    if len(frames.finite(t, "etf_mean")) == 0:
        return "no finite etf_mean value"
    return None


def _settings(rows: pd.DataFrame) -> list[tuple[pd.DataFrame, bool]]:
    """Per setting (config less seed): its seed-mean trajectory and whether every seed settled."""
    cfg = [c for c in frames.config_columns(rows) if c not in ("seed", "grid")]
    out = []
    groups = rows.groupby(cfg, sort=False, dropna=False) if cfg else [((), rows)]
    for _, g in groups:
        last = g.sort_values("epoch").groupby("run_key").tail(1)
        settled = "settled" in g.columns and bool(
            last["settled"].map(lambda v: str(v).strip().lower() in ("true", "1", "1.0")).all()
        )
        C = float(g["num_classes"].iloc[0])
        d = float(g["d"].iloc[0]) if "d" in g.columns and pd.notna(g["d"].iloc[0]) else C - 1
        avail = max(1.0, min(C - 1, d))
        traj = (
            g.assign(rank_fraction=pd.to_numeric(g["rank_1e-2"], errors="coerce") / avail)
            .groupby("epoch")[["etf_mean", "rank_fraction"]]
            .mean()
            .reset_index()
        )
        out.append((traj, settled))
    return out


@style.themed
def render(tables: dict[str, pd.DataFrame]) -> Figure:
    """etf_mean and rank_1e-2 / min(C - 1, d) against the epoch, per claim grid and setting.

    Args:
        tables: ``{"synthetic": frame}`` with :data:`COLUMNS`.

    Returns:
        The figure.

    Raises:
        ValueError: missing columns.
    """
    t = frames.table(tables, "synthetic", COLUMNS)
    grids = _grids(t)
    fig, axes = style.new_figure(len(grids), 2, width=11.0, height=2.6 * len(grids) + 0.8)
    n_set = n_done = 0
    for i, grid in enumerate(grids):
        rows = t[t["grid"].astype(str) == grid]
        left, right = axes[i, 0], axes[i, 1]
        for traj, settled in _settings(rows):
            n_set += 1
            n_done += settled
            color = "C0" if settled else "0.55"
            ls, lw = ("-", 1.4) if settled else (":", 1.0)
            etf = traj["etf_mean"].clip(lower=1e-6)
            left.plot(traj["epoch"], etf, color=color, linestyle=ls, linewidth=lw)
            right.plot(traj["epoch"], traj["rank_fraction"], color=color, linestyle=ls, linewidth=lw)
            end = traj.iloc[-1]
            marker = dict(marker="o", markersize=4, color=color)
            if not settled:
                marker.update(markerfacecolor="white")
            left.plot([end["epoch"]], [max(float(end["etf_mean"]), 1e-6)], **marker)
            right.plot([end["epoch"]], [end["rank_fraction"]], **marker)
        left.set_yscale("log")
        left.axhline(NC_ETF, color="black", linestyle="--", linewidth=1.0)
        right.axhline(DC_FRACTION, color="black", linestyle="--", linewidth=1.0)
        right.set_ylim(0.0, 1.1)
        claim = grid[:2].upper() if grid[:2] in _ORDER else grid
        style.finish_axes(left, title=f"{claim} ({grid})", xlabel="epoch", ylabel=ETF_LABEL, legend=False)
        style.finish_axes(
            right,
            title=f"{claim}: numerical rank",
            xlabel="epoch",
            ylabel="rank_1e-2 / min(C − 1, d)",
            legend=False,
        )
    axes[0, 0].plot([], [], color="C0", linestyle="-", marker="o", label="settled (all seeds)")
    axes[0, 0].plot(
        [], [], color="0.55", linestyle=":", marker="o", markerfacecolor="white", label="undecided"
    )
    axes[0, 0].plot([], [], color="black", linestyle="--", label=f"NC threshold {NC_ETF:g}")
    axes[0, 1].plot([], [], color="black", linestyle="--", label=f"DC guide {DC_FRACTION:g}")
    axes[0, 0].legend(loc="best", fontsize=8)
    axes[0, 1].legend(loc="best", fontsize=8)
    fig.suptitle("Training trajectories of every synthetic setting, and whether they settled")
    style.note(
        fig,
        f"{n_done} of {n_set} settings settled under their grid's convergence rule; seed means per "
        "setting; marker = where the runs stopped (filled: settled, open: budget reached)",
    )
    return fig


FIGURES = (
    FigureSpec(
        id="convergence",
        title="Training trajectories of every synthetic setting, and whether they settled",
        claims=("S1", "S2", "S3", "S4", "R1s", "R2s", "R3s", "R4", "R5"),
        needs=(TableNeed("synthetic", COLUMNS, ("settled", "d", "seed")),),
        render=render,
        check=check,
        produce="python -m synthetic sweep s1_scl_hscl_nc s2_ucl_positives s3_hucl_beta "
        "s4_no_normalisation r4_near_nc r5_batch_size --results {results}/synthetic",
        description="etf_mean and the class-mean rank over training for every setting of each claim grid; "
        "solid where every seed settled under the convergence rule, dotted where the budget ended it.",
    ),
)

__all__ = ["COLUMNS", "FIGURES", "check", "render"]
