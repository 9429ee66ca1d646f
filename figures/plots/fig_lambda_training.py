"""The WeiNCE gate over training: distributions of lambda, lambda_rho, lambda_AIC and dAIC.

Erol et al. (arXiv 2606.00262, the WeiNCE recipe; docs/weince.md#the-gate): per anchor and step,
the blend weight ``lambda = lambda_rho * lambda_AIC`` of the Weibull shortfall logit is set from
batch statistics: a cap-proximity part ``lambda_rho = sigmoid(kappa_rho (log rho_0 - log rho))``,
where the cap proximity ``rho = max(1 - T_1, eps)`` is the shortfall of the anchor's hardest
negative and ``rho_0`` its lower ``q``-quantile over the batch, and a tail-fit part
``lambda_AIC = sigmoid(kappa_AIC (dAIC - m))``, where ``dAIC = AIC_G - AIC_W`` compares the
Weibull line with the Gumbel-fast proxy fitted to the anchor's tail (``> 0`` favours the Weibull
line). One panel per quantity against the epoch: the median over anchors (line), the
interquartile range (dark band) and the 5-95 % range (light band).

Table ``weince_gate``: ``epoch`` and any of ``lambda, lambda_rho, lambda_aic, daic`` (one row per
anchor, step or epoch; the quantiles are taken over the rows of each epoch).
"""

from __future__ import annotations

import pandas as pd
from matplotlib.figure import Figure

from figures.plots import style
from figures.plots.spec import FigureSpec, TableNeed

#: (column, panel title, y label): the symbols and names of docs/weince.md#the-gate.
QUANTITIES = (
    ("lambda", "λ = λ_ρ · λ_AIC (blend weight)", "λ"),
    ("lambda_rho", "λ_ρ (cap-proximity part)", "λ_ρ"),
    ("lambda_aic", "λ_AIC (tail-fit part)", "λ_AIC"),
    ("daic", "ΔAIC = AIC_G − AIC_W (tail fits)", "ΔAIC"),
)

#: What the symbols are (the figure's caption).
CAPTION = (
    "λ: weight of the Weibull shortfall logit; ρ: cap proximity, the shortfall 1 − s of the anchor's "
    "hardest negative, λ_ρ = sigmoid(κ_ρ log(ρ_0 / ρ)); ΔAIC > 0 favours the Weibull line over the "
    "Gumbel-fast proxy, λ_AIC = sigmoid(κ_AIC (ΔAIC − m)); per epoch over anchors"
)


def check(tables: dict[str, pd.DataFrame], **_) -> str | None:
    """Reason why there is nothing to draw, or None."""
    t = tables.get("weince_gate")
    if t is None or not any(q in t.columns for q, _, _ in QUANTITIES):
        return f"table 'weince_gate' has none of the columns {[q for q, _, _ in QUANTITIES]}"
    return None


@style.themed
def render(tables: dict[str, pd.DataFrame]) -> Figure:
    """Median, IQR and 5-95 % range of each gate quantity against the epoch.

    Args:
        tables: ``{"weince_gate": frame}`` with ``epoch`` and the gate columns present.

    Returns:
        The figure (one panel per quantity present).

    Raises:
        ValueError: no ``epoch`` column or no gate column.
    """
    t = tables.get("weince_gate")
    if t is None or "epoch" not in t.columns:
        raise ValueError("tables['weince_gate'] must have an 'epoch' column")
    present = [(q, title, ylabel) for q, title, ylabel in QUANTITIES if q in t.columns]
    if not present:
        raise ValueError(f"tables['weince_gate'] must have one of {[q for q, _, _ in QUANTITIES]}")
    ncols = 2 if len(present) > 1 else 1
    nrows = (len(present) + 1) // 2
    fig, axes = style.new_figure(nrows, ncols, width=6.5 * ncols, height=4.2 * nrows)
    color = style.method_color("WeiNCE")
    for k, (q, title, ylabel) in enumerate(present):
        ax = axes[k // ncols, k % ncols]
        g = t.groupby("epoch")[q]
        qs = g.quantile([0.05, 0.25, 0.5, 0.75, 0.95]).unstack()
        ax.fill_between(qs.index, qs[0.05], qs[0.95], color=color, alpha=0.15, linewidth=0, label="5-95 %")
        ax.fill_between(
            qs.index, qs[0.25], qs[0.75], color=color, alpha=0.35, linewidth=0, label="interquartile"
        )
        ax.plot(qs.index, qs[0.5], color=color, label="median")
        if q == "daic":
            style.ideal_line(ax, 0.0, label="ΔAIC = 0")
        style.finish_axes(ax, title=title, xlabel="epoch", ylabel=ylabel, loc="best")
    for k in range(len(present), nrows * ncols):
        axes[k // ncols, k % ncols].set_axis_off()
    fig.suptitle("WeiNCE gate over training")
    style.note(fig, CAPTION)
    return fig


FIGURES = (
    FigureSpec(
        id="weince_gate",
        title="WeiNCE gate over training",
        claims=("W2", "W3"),
        needs=(TableNeed("weince_gate", ("epoch",), ("lambda", "lambda_rho", "lambda_aic", "daic")),),
        render=render,
        check=check,
        produce="WeiNCE training diagnostics: {results}/tables/weince_gate.csv, written by WeiNCE training runs "
        "(python -m realdata train --method WeiNCE, not available yet)",
        description="Distribution over anchors of the WeiNCE blend weight and its parts, per epoch.",
    ),
)
