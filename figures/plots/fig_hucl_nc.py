"""HUCL at Neural Collapse against beta, with the collision probability q(beta) and L*_UCL.

Jiang et al. (arXiv 2311.05139, §3.6): at NC an exponentially tilted unsupervised negative is of
the anchor's own class with probability ``q(beta) = e^beta / (e^beta + (C-1) e^{-beta/(C-1)})``
(``q(0) = 1/C``), and the population HUCL loss at NC is the binomial mixture
``sum_m Binom(m; K, q(beta)) psi_K(0^m, a^{K-m})``, ``a = -C/(C-1)``. It rises from L*_UCL (the
UCL optimum, dashed) at beta = 0 towards ``psi(0, ..., 0)`` (log 2 for the mean form), so for
beta > 0 NC is not the HUCL optimum's value and L*_UCL is not attained. One panel per C: the
loss on the left axis, q(beta) on the right axis.

Table ``hucl_nc``: ``num_classes, beta, hucl_at_nc, q, ucl_optimum`` (+ ``scl_optimum``,
``limit``, ``num_negatives``).
"""

from __future__ import annotations

import pandas as pd
from matplotlib.figure import Figure

from figures.plots import frames, style
from figures.plots.spec import FigureSpec, TableNeed

COLUMNS = ("num_classes", "beta", "hucl_at_nc", "q", "ucl_optimum")


@style.themed
def render(tables: dict[str, pd.DataFrame]) -> Figure:
    """L_HUCL at NC and q(beta) against beta, one panel per number of classes.

    Args:
        tables: ``{"hucl_nc": frame}`` with :data:`COLUMNS`.

    Returns:
        The figure.

    Raises:
        ValueError: missing columns.
    """
    t = frames.table(tables, "hucl_nc", COLUMNS)
    Cs = sorted(int(c) for c in t["num_classes"].unique())
    fig, axes = style.new_figure(1, len(Cs), width=7.0 * len(Cs), height=5.0)
    for ax, C in zip(axes[0], Cs, strict=True):
        g = t[t["num_classes"].astype(int) == C].sort_values("beta")
        l1 = ax.plot(g["beta"], g["hucl_at_nc"], color=style.method_color("HUCL"), label="L_HUCL at NC")
        ax.axhline(
            float(g["ucl_optimum"].iloc[0]),
            color="black",
            linestyle="--",
            linewidth=1.3,
            label=f"L*_UCL = {float(g['ucl_optimum'].iloc[0]):.4f}",
        )
        if "scl_optimum" in g.columns:
            ax.axhline(
                float(g["scl_optimum"].iloc[0]),
                color="0.45",
                linestyle=":",
                linewidth=1.3,
                label=f"L*_SCL = {float(g['scl_optimum'].iloc[0]):.4f}",
            )
        if "limit" in g.columns:
            ax.axhline(
                float(g["limit"].iloc[0]),
                color="0.6",
                linestyle="-.",
                linewidth=1.0,
                label=f"β → ∞: ψ(0,…,0) = {float(g['limit'].iloc[0]):.4f}",
            )
        ax2 = ax.twinx()
        ax2.grid(False)
        l2 = ax2.plot(
            g["beta"],
            g["q"],
            color=style.method_color("UCL"),
            linestyle="-",
            linewidth=1.4,
            alpha=0.9,
            label="q(β), right axis",
        )
        ax2.set_ylim(0, 1.02)
        ax2.set_ylabel("q(β): probability a negative is same-class", color=style.method_color("UCL"))
        ax.set_xlabel("β (exponential tilt)")
        ax.set_ylabel("population loss at NC")
        ax.set_title(f"C = {C}")
        handles = l1 + ax.get_legend_handles_labels()[0][1:] + l2
        ax.legend(handles=handles, labels=[h.get_label() for h in handles], loc="center right")
    fig.suptitle("HUCL at Neural Collapse against β, with q(β) and L*_UCL")
    ks = sorted({int(k) for k in t["num_negatives"]}) if "num_negatives" in t.columns else []
    negatives = f"K = {', '.join(map(str, ks))} sampled negatives" if ks else "K sampled negatives"
    style.note(fig, f"closed forms: mean-form InfoNCE, τ = 1, {negatives} per pair, uniform classes")
    return fig


FIGURES = (
    FigureSpec(
        id="hucl_at_nc",
        title="HUCL at Neural Collapse against β, with q(β) and L*_UCL",
        claims=("T6", "T7", "S3"),
        needs=(TableNeed("hucl_nc", COLUMNS, ("scl_optimum", "limit", "num_negatives")),),
        render=render,
        produce="python -m figures --only hucl_at_nc",
        description="The closed-form HUCL loss at NC rises with beta above L*_UCL as the collision "
        "probability q(beta) goes to 1.",
    ),
)
