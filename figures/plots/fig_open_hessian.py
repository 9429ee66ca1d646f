"""Open problem O1b: the smallest eigenvalue of the Hessian at NC against beta.

docs/open_problems.md (Jiang et al., arXiv 2311.05139). The Riemannian Hessian of the batch loss at
Neural Collapse on the sphere (``theory.hcl.nc_hessian``), global rotations removed: its smallest
eigenvalue for HUCL against beta (lines, one per C, up to the first beta where it is negative: NC a
saddle) and for the controls (markers: SCL and UCL at beta = 0, HSCL at several betas), which stay
positive. Symlog y axis.

Table ``open_hessian`` (``theory.claims.open_search.hessian_rows``): ``kind, loss, num_classes,
beta, min_eigenvalue``; the ``kind == "eigen"`` rows are drawn.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
from matplotlib import colormaps
from matplotlib.figure import Figure

from figures.plots import frames, style
from figures.plots.spec import FigureSpec, TableNeed

COLUMNS = ("kind", "loss", "num_classes", "beta", "min_eigenvalue")
CONTROL_MARKERS = {"SCL": "s", "UCL": "D", "HSCL": "^"}


def check(tables: dict[str, pd.DataFrame]) -> str | None:
    """Why there is nothing to draw: no eigenvalue row."""
    if (tables["open_hessian"]["kind"] == "eigen").sum() == 0:
        return "the open_hessian table has no eigenvalue row"
    return None


@style.themed
def render(tables: dict[str, pd.DataFrame]) -> Figure:
    """Smallest eigenvalue at NC against beta: HUCL lines per C, control markers.

    Args:
        tables: ``{"open_hessian": frame}`` with :data:`COLUMNS`.

    Returns:
        The figure.

    Raises:
        ValueError: missing columns.
    """
    t = frames.table(tables, "open_hessian", COLUMNS)
    e = t[t["kind"] == "eigen"]
    Cs = sorted(int(c) for c in e["num_classes"].unique())
    colors = dict(zip(Cs, colormaps["viridis"](np.linspace(0.0, 0.85, len(Cs))), strict=True))
    fig, axes = style.new_figure(1, 1, width=9.0, height=5.5)
    ax = axes[0, 0]
    for C in Cs:
        g = e[e["num_classes"].astype(int) == C]
        hucl = g[g["loss"] == "HUCL"].sort_values("beta")
        ax.plot(
            hucl["beta"], hucl["min_eigenvalue"], "-o", color=colors[C], markersize=3, label=f"HUCL, C = {C}"
        )
        for loss, marker in CONTROL_MARKERS.items():
            ctl = g[g["loss"] == loss]
            if not ctl.empty:
                ax.plot(
                    ctl["beta"],
                    ctl["min_eigenvalue"],
                    linestyle="none",
                    marker=marker,
                    markerfacecolor="none",
                    color=colors[C],
                    label=f"{loss}" if C == Cs[0] else None,
                )
    ax.axhline(0.0, color="black", linewidth=1.0)
    ax.set_yscale("symlog", linthresh=1e-3)
    ax.set_xscale("symlog", linthresh=1.0)
    ax.set_xlim(-0.05, max(1.0, float(e["beta"].max())) * 1.1)
    style.finish_axes(
        ax,
        xlabel="β (exponential tilt; symlog axis)",
        ylabel="smallest eigenvalue of the Hessian at NC (symlog)",
        outside=True,
    )
    fig.suptitle("Hessian at NC on the sphere: HUCL turns NC into a saddle, the controls do not")
    style.note(
        fig,
        "n = 2, d = C - 1, rotations removed; HUCL up to its first negative eigenvalue; "
        "markers: SCL, UCL (β = 0), HSCL; one colour per C",
    )
    return fig


FIGURES = (
    FigureSpec(
        id="open_hessian",
        title="Hessian at NC on the sphere: HUCL turns NC into a saddle, the controls do not",
        claims=("O1b",),
        needs=(TableNeed("open_hessian", COLUMNS),),
        render=render,
        check=check,
        produce="python -m figures --only open_hessian",
        description="The smallest Hessian eigenvalue at NC falls through zero for HUCL near beta = 1 "
        "and stays positive for SCL, UCL and HSCL.",
    ),
)
