"""The training loss against its closed-form optimum L* and the gap to it.

The authors' notebooks compare the training loss with L*_SCL = log(1 + e^{-C/(C-1)}) (mean-form
InfoNCE, tau = 1; Jiang et al., arXiv 2311.05139, Theorem for SCL/HSCL, §3). Left: the epoch-mean
training loss per beta with the closed-form optimum as a dashed line (L*_SCL for SCL/HSCL; L*_UCL
for UCL/HUCL, which is only a lower bound for HUCL at beta > 0: its value at NC is larger, see
the ``hucl_at_nc`` figure); right: the gap ``loss - L*`` on a logarithmic axis (a negative gap,
possible for UCL with mini-batches, is drawn at its absolute value with open markers).

Table ``synthetic``: ``method, beta, epoch, loss, optimum`` (+ ``gap_to_optimum``, ``seed``).
Runs whose optimum is undefined (no normalisation, ``d < C - 1``, two-view losses) are left out.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd
from matplotlib.figure import Figure

from figures.plots import frames, style
from figures.plots.fig_conditions import curves_by_beta
from figures.plots.spec import FigureSpec, TableNeed

COLUMNS = ("method", "beta", "epoch", "loss", "optimum")


def _rows(t: pd.DataFrame, family: str) -> pd.DataFrame:
    return frames.finite(frames.finite(frames.family_rows(t, family), "optimum"), "loss")


def check(tables: dict[str, pd.DataFrame], family: str = "SCL", **_: Any) -> str | None:
    """Reason why there is nothing to draw for ``family``, or None."""
    t = tables.get("synthetic")
    if not frames.has_family(t, family):
        return f"table 'synthetic' holds no {frames.family_name(family)} run"
    if len(_rows(t, family)) == 0:
        return (
            f"no {frames.family_name(family)} run has a finite closed-form optimum "
            "(needs ball or sphere normalisation and d >= C - 1)"
        )
    return None


@style.themed
def render(tables: dict[str, pd.DataFrame], family: str = "SCL", where: dict | None = None) -> Figure:
    """Training loss with L* dashed (left) and the gap to L* (right), per beta.

    Args:
        tables: ``{"synthetic": frame}`` with :data:`COLUMNS`.
        family: ``"SCL"`` or ``"UCL"``.
        where: config filters fixing the setting.

    Returns:
        The figure (two panels).

    Raises:
        ValueError: bad ``family``, missing columns, or no run with a finite optimum.
    """
    t = frames.table(tables, "synthetic", COLUMNS)
    rows = _rows(t, family)
    if len(rows) == 0:
        raise ValueError("no run with a finite loss and optimum for this family")
    rows, setting = frames.pick_setting(rows, where=where)
    rows = rows.assign(gap=rows["loss"].astype(float) - rows["optimum"].astype(float))
    fig, axes = style.new_figure(1, 2, width=14.0, height=5.0)
    ax = axes[0, 0]
    curves_by_beta(ax, rows, "loss", family)
    opts = sorted(set(np.round(rows["optimum"].astype(float), 12)))
    name = "L*_SCL" if family == "SCL" else "L*_UCL"
    for v in opts:
        style.ideal_line(ax, v, label=f"{name} = {v:.4f}")
    style.finish_axes(
        ax, title="training loss", xlabel="epoch", ylabel="epoch-mean training loss", loc="upper right"
    )
    ax = axes[0, 1]
    for b in frames.betas_of(rows):
        r = rows[rows["beta"].astype(float) == b]
        g = style.aggregate_seeds(r, "epoch", "gap")
        neg = g["mean"] <= 0
        style.seed_band(
            ax,
            g["epoch"],
            np.abs(g["mean"]),
            None,
            color=style.beta_color(b),
            label=style.beta_label(b, family),
        )
        if neg.any():
            ax.plot(
                g["epoch"][neg],
                np.abs(g["mean"][neg]),
                "o",
                mfc="none",
                color=style.beta_color(b),
                markersize=4,
            )
    ax.set_yscale("log")
    style.finish_axes(
        ax,
        title=f"gap to the optimum, loss − {name}",
        xlabel="epoch",
        ylabel=f"| loss − {name} | (log scale)",
        loc="upper right",
    )
    fig.suptitle(f"Training loss against the closed-form optimum, {frames.family_name(family)}")
    extra = "" if family == "SCL" else "L*_UCL is a lower bound for HUCL (β > 0), not attained; "
    style.note(fig, extra + "seed mean ± std; " + frames.setting_text(rows, setting))
    return fig


FIGURES = tuple(
    FigureSpec(
        id=f"loss_optimum_{fam.lower()}",
        title=f"Training loss against the closed-form optimum, {frames.family_name(fam)}",
        claims=("T4", "T5") if fam == "SCL" else ("T6", "T7"),
        needs=(TableNeed("synthetic", COLUMNS, ("gap_to_optimum", "seed", "run_key", "grid")),),
        render=render,
        options={"family": fam},
        check=check,
        produce="python -m synthetic sweep s1_scl_hscl_nc s3_hucl_beta --results {results}/synthetic",
        description=f"{frames.family_name(fam)} training loss per beta against the closed-form optimum, and the gap.",
    )
    for fam in ("SCL", "UCL")
)
