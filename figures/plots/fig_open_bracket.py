"""Open problem O1 / O1c: the best HUCL value found, the NC value and the certified bound against beta.

docs/open_problems.md (Jiang et al., arXiv 2311.05139, open problem "a tight lower bound for
HUCL"). For a balanced batch of free embeddings (``theory.hcl.landscape``), per normalisation
(sphere, ball) and number of classes: the smallest loss the restart search found (solid, markers),
the closed-form value at Neural Collapse (dashed) and the certified lower bound, the UCL optimum in
plug-in form (dotted, constant in beta). The bracket [bound, best] is the gap between the dotted
and the solid line; where the solid line leaves the dashed one a configuration beats NC.

Table ``open_landscape`` (``theory.claims.open_search.landscape_rows``): ``loss, normalization,
num_classes, beta, best, nc, bound`` (+ ``n``, ``psi``); the HUCL rows are drawn.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
from matplotlib import colormaps
from matplotlib.figure import Figure

from figures.plots import frames, style
from figures.plots.spec import FigureSpec, TableNeed

COLUMNS = ("loss", "normalization", "num_classes", "beta", "best", "nc", "bound")


def _hucl(t: pd.DataFrame) -> pd.DataFrame:
    return t[t["loss"] == "HUCL"]


def check(tables: dict[str, pd.DataFrame]) -> str | None:
    """Why there is nothing to draw: no HUCL row in ``open_landscape``."""
    if _hucl(tables["open_landscape"]).empty:
        return "the open_landscape table has no HUCL row"
    return None


@style.themed
def render(tables: dict[str, pd.DataFrame]) -> Figure:
    """Best found, NC value and lower bound against beta; one panel per normalisation.

    Args:
        tables: ``{"open_landscape": frame}`` with :data:`COLUMNS`.

    Returns:
        The figure.

    Raises:
        ValueError: missing columns.
    """
    t = frames.table(tables, "open_landscape", COLUMNS)
    h = _hucl(t)
    norms = list(dict.fromkeys(h["normalization"]))
    Cs = sorted(int(c) for c in h["num_classes"].unique())
    colors = dict(zip(Cs, colormaps["viridis"](np.linspace(0.0, 0.85, len(Cs))), strict=True))
    fig, axes = style.new_figure(1, len(norms), width=7.0 * len(norms), height=5.2, sharey=True)
    for ax, norm in zip(axes[0], norms, strict=True):
        for C in Cs:
            g = h[(h["normalization"] == norm) & (h["num_classes"].astype(int) == C)].sort_values("beta")
            if g.empty:
                continue
            c = colors[C]
            ax.plot(g["beta"], g["best"], "-o", color=c, markersize=4, label=f"C = {C}: best found")
            ax.plot(g["beta"], g["nc"], "--", color=c, linewidth=1.2, label=f"C = {C}: NC")
            ax.axhline(float(g["bound"].iloc[0]), color=c, linestyle=":", linewidth=1.2)
        ax.axhline(float(np.log(2.0)), color="0.5", linestyle="-.", linewidth=1.0, label="log 2")
        ax.set_xscale("symlog", linthresh=1.0)
        ax.set_xlim(0.0, max(1.0, float(h["beta"].max())) * 1.05)
        style.finish_axes(
            ax,
            title=f"{norm}",
            xlabel="β (exponential tilt; symlog axis)",
            ylabel="batch HUCL loss (dotted: certified lower bound)",
            loc="lower right",
        )
    fig.suptitle("HUCL: best configuration found vs NC and the certified bound")
    style.note(
        fig,
        "free embeddings, d = C - 1, exact-expectation estimator, mean-form ψ, τ = 1; "
        "dotted: the UCL optimum (Harris + Jensen); a FOUND needs a gain over NC above 1e-6 (relative)",
    )
    return fig


FIGURES = (
    FigureSpec(
        id="open_bracket",
        title="HUCL: best configuration found vs NC and the certified bound",
        claims=("O1", "O1c"),
        needs=(TableNeed("open_landscape", COLUMNS, ("n", "psi")),),
        render=render,
        check=check,
        produce="python -m figures --only open_bracket",
        description="Above a small beta the restart search finds configurations below NC; the "
        "certified lower bound does not move with beta, so the bracket widens.",
    ),
)
