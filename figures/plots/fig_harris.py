"""The Harris gap: hard-negative loss minus base loss against beta, with its confidence band.

Jiang et al. (arXiv 2311.05139, §3, Harris-inequality lemma) show that for every representation
the hard-negative loss is at least the base loss (L_HSCL >= L_SCL, L_HUCL >= L_UCL) when the
hardening function is non-decreasing. For random unit-ball features this figure estimates
``E[psi(hard negatives)] - E[psi(base negatives)]`` by Monte Carlo at each beta of the
exponential tilt ``exp(beta z.z^-)``, with its two-sided confidence interval as a band, for the
supervised and the unsupervised setting; the bound (gap >= 0) is the dashed line. The gap is 0 at
beta = 0 by construction.

Table ``harris_gap``: ``setting, beta, estimate, ci_low, ci_high, confidence`` (+ ``num_pairs``,
``sizes``).
"""

from __future__ import annotations

import pandas as pd
from matplotlib.figure import Figure

from figures.plots import frames, style
from figures.plots.spec import FigureSpec, TableNeed

COLUMNS = ("setting", "beta", "estimate", "ci_low", "ci_high", "confidence")
_COLORS = {"supervised": "HSCL", "unsupervised": "HUCL"}


@style.themed
def render(tables: dict[str, pd.DataFrame]) -> Figure:
    """Harris gap against beta with its confidence band, per setting.

    Args:
        tables: ``{"harris_gap": frame}`` with :data:`COLUMNS`.

    Returns:
        The figure.

    Raises:
        ValueError: missing columns.
    """
    t = frames.table(tables, "harris_gap", COLUMNS)
    fig, axes = style.new_figure(1, 1, width=8.0, height=5.0)
    ax = axes[0, 0]
    for setting, g in t.groupby("setting", sort=True):
        g = g.sort_values("beta")
        color = style.method_color(_COLORS.get(str(setting), "HSCL"))
        name = (
            "HSCL − SCL (supervised)"
            if setting == "supervised"
            else "HUCL − UCL (unsupervised)"
            if setting == "unsupervised"
            else str(setting)
        )
        ax.plot(g["beta"], g["estimate"], marker="o", color=color, label=name)
        ax.fill_between(
            g["beta"].astype(float),
            g["ci_low"].astype(float),
            g["ci_high"].astype(float),
            color=color,
            alpha=0.25,
            linewidth=0,
        )
    level = float(t["confidence"].iloc[0])
    style.ideal_line(ax, 0.0, label="Harris bound: gap ≥ 0")
    ax.set_xscale("symlog", linthresh=1.0)
    betas = sorted(t["beta"].astype(float).unique())
    ax.set_xticks(betas)
    ax.set_xticklabels([f"{b:g}" for b in betas])
    style.finish_axes(ax, xlabel="β (exponential tilt)", ylabel="E[ψ(hard)] − E[ψ(base)]", loc="upper left")
    fig.suptitle("Harris gap: hard-negative minus base loss")
    sizes = str(t["sizes"].iloc[0]) if "sizes" in t.columns else ""
    n = f", {int(t['num_pairs'].iloc[0])} pairs per point" if "num_pairs" in t.columns else ""
    style.note(
        fig,
        f"Monte Carlo on random unit-ball features, band = {100 * level:g} % confidence interval{n}"
        + (f"; {sizes}" if sizes else ""),
    )
    return fig


FIGURES = (
    FigureSpec(
        id="harris_gap",
        title="Harris gap: hard-negative minus base loss",
        claims=("T1", "T2", "T3"),
        needs=(TableNeed("harris_gap", COLUMNS, ("num_pairs", "sizes")),),
        render=render,
        produce="python -m figures --only harris_gap",
        description="Monte Carlo estimate of the hard minus base loss against beta with its confidence band.",
    ),
)
