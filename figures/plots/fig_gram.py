"""The optimal Gram matrix of a convex program next to the simplex-ETF Gram matrix.

Jiang et al. (arXiv 2311.05139, §3.3, §3.5): over within-class-collapsed representations the
population SCL (and, with conditionally independent views, UCL) loss is a convex function of
the C x C Gram matrix ``G`` of the class representations, ``G`` PSD with unit diagonal; its
minimiser is the simplex-ETF Gram ``C/(C-1) I - 1/(C-1) 11^T`` (off-diagonal ``-1/(C-1)``).
Each column is one C: the Gram matrices found by the solver (cvxpy) for each program, and the
ETF Gram, as heatmaps on one colour scale; panel titles give ``max |G - G_ETF|``.

Table ``gram``: ``num_classes, program, row, col, value`` (``program`` names the matrix, e.g.
``"SCL optimum"``, ``"UCL optimum"``, ``"ETF"``) (+ ``num_negatives``, k of the programs).
"""

from __future__ import annotations

import numpy as np
import pandas as pd
from matplotlib.figure import Figure

from figures.plots import frames, style
from figures.plots.spec import FigureSpec, TableNeed

COLUMNS = ("num_classes", "program", "row", "col", "value")
ETF = "ETF"


def _matrix(g: pd.DataFrame) -> np.ndarray:
    n = int(max(g["row"].max(), g["col"].max())) + 1
    m = np.full((n, n), np.nan)
    m[g["row"].astype(int), g["col"].astype(int)] = g["value"].astype(float)
    return m


@style.themed
def render(tables: dict[str, pd.DataFrame], annotate_max: int = 6) -> Figure:
    """Heatmaps: one row per program (the ETF last), one column per C.

    Args:
        tables: ``{"gram": frame}`` with :data:`COLUMNS`.
        annotate_max: write the entries into the cells for C up to this.

    Returns:
        The figure.

    Raises:
        ValueError: missing columns.
    """
    t = frames.table(tables, "gram", COLUMNS)
    Cs = sorted(int(c) for c in t["num_classes"].unique())
    programs = [p for p in dict.fromkeys(t["program"].astype(str)) if p != ETF]
    programs += [ETF] if (t["program"].astype(str) == ETF).any() else []
    fig, axes = style.new_figure(
        len(programs), len(Cs), width=3.6 * len(Cs) + 1.4, height=3.3 * len(programs)
    )
    im = None
    for j, C in enumerate(Cs):
        gC = t[t["num_classes"].astype(int) == C]
        etf = gC[gC["program"].astype(str) == ETF]
        ref = _matrix(etf) if len(etf) else None
        for i, prog in enumerate(programs):
            ax = axes[i, j]
            g = gC[gC["program"].astype(str) == prog]
            if len(g) == 0:
                ax.set_axis_off()
                continue
            m = _matrix(g)
            im = ax.imshow(m, cmap="vlag", vmin=-1.0, vmax=1.0)
            if C <= annotate_max:
                for (r, c), v in np.ndenumerate(m):
                    ax.text(
                        c,
                        r,
                        f"{v:.2f}",
                        ha="center",
                        va="center",
                        fontsize=7,
                        color="white" if abs(v) > 0.6 else "black",
                    )
            dev = (
                "" if ref is None or prog == ETF else f"\nmax |G − G_ETF| = {np.nanmax(np.abs(m - ref)):.1e}"
            )
            ax.set_title(f"{prog}, C = {C}{dev}", fontsize=10)
            ax.set_xticks(range(C))
            ax.set_yticks(range(C))
            ax.grid(False)
            ax.set_xlabel("class c′")
            ax.set_ylabel("class c")
    if im is not None:
        fig.colorbar(im, ax=axes, shrink=0.8, label="G[c, c′] = u_c · u_c′")
    fig.suptitle("Optimal Gram matrix (cvxpy) vs simplex-ETF Gram")
    ks = sorted({int(k) for k in t["num_negatives"]}) if "num_negatives" in t.columns else []
    per_pair = f", k = {', '.join(map(str, ks))} negative(s) per pair" if ks else ""
    style.note(
        fig,
        "population loss over collapsed class representations, unit sphere, mean-form InfoNCE, τ = 1"
        + per_pair,
    )
    return fig


FIGURES = (
    FigureSpec(
        id="gram_etf",
        title="Optimal Gram matrix (cvxpy) vs simplex-ETF Gram",
        claims=("T4", "T6"),
        needs=(TableNeed("gram", COLUMNS, ("num_negatives",)),),
        render=render,
        produce="python -m figures --only gram_etf",
        description="The solver's optimal Gram matrices for SCL and UCL equal the simplex-ETF Gram.",
    ),
)
