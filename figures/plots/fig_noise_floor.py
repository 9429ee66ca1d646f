"""The synthetic noise floor: mean squared error of the top-vs-reference log-odds against n.

Erol et al. (arXiv 2606.00262, synthetic noise-floor experiment): winners among four candidates
are drawn from the Weibull (Weibit) law ``p* ∝ (1 - s)^(-beta*)``; a one-parameter softmax-in-s
model and a one-parameter Weibit model (in ``x = -log(1 - s)``) are fitted by maximum likelihood
from n winners. The Weibit estimator is correctly specified and its MSE follows the Fisher line
``c/n`` (dashed); the softmax estimator converges to a pseudo-true value, so its MSE levels off
at the squared bias (the floor, dotted). Log-log axes; error bars are Monte-Carlo standard
errors over the replications.

Table ``noise_floor``: ``n, mse_softmax, mse_weibit, theory_weibit, bias2_floor`` (+
``se_mse_softmax``, ``se_mse_weibit``, ``theory_softmax``, ``reps``, ``c``, ``dgp`` (a text
describing the design)).
"""

from __future__ import annotations

import pandas as pd
from matplotlib.figure import Figure

from figures.plots import frames, style
from figures.plots.spec import FigureSpec, TableNeed

COLUMNS = ("n", "mse_softmax", "mse_weibit", "theory_weibit", "bias2_floor")


@style.themed
def render(tables: dict[str, pd.DataFrame]) -> Figure:
    """MSE of both estimators against n (log-log) with the c/n line and the bias floor.

    Args:
        tables: ``{"noise_floor": frame}`` with :data:`COLUMNS`.

    Returns:
        The figure.

    Raises:
        ValueError: missing columns.
    """
    t = frames.table(tables, "noise_floor", COLUMNS)
    t = t.sort_values("n")
    fig, axes = style.new_figure(1, 1, width=8.0, height=5.0)
    ax = axes[0, 0]
    for col, se, name, method in (
        ("mse_softmax", "se_mse_softmax", "softmax in s (misspecified)", "InfoNCE"),
        ("mse_weibit", "se_mse_weibit", "Weibit in −log(1 − s)", "WeiNCE"),
    ):
        yerr = t[se] if se in t.columns else None
        ax.errorbar(
            t["n"],
            t[col],
            yerr=yerr,
            fmt="o",
            markersize=6,
            color=style.method_color(method),
            capsize=3,
            zorder=2,
            label=f"simulated MSE, {name}",
        )
    c = float(t["c"].iloc[0]) if "c" in t.columns else float((t["theory_weibit"] * t["n"]).iloc[0])
    ax.plot(
        t["n"],
        t["theory_weibit"],
        "--",
        color="black",
        linewidth=1.4,
        zorder=4,
        label=f"Weibit theory c/n, c = {c:.4f}",
    )
    floor = float(t["bias2_floor"].iloc[0])
    ax.axhline(floor, color="0.35", linestyle=":", linewidth=1.5, label=f"softmax bias² floor = {floor:.6f}")
    if "theory_softmax" in t.columns:
        ax.plot(
            t["n"],
            t["theory_softmax"],
            "-.",
            color=style.method_color("InfoNCE"),
            linewidth=1.2,
            zorder=4,
            label="softmax theory: floor + Godambe variance / n",
        )
    ax.set_xscale("log")
    ax.set_yscale("log")
    style.finish_axes(
        ax, xlabel="n (winners per replication)", ylabel="MSE of the log-odds estimate", loc="lower left"
    )
    fig.suptitle("Synthetic noise floor: softmax vs Weibit estimator")
    parts = [str(t["dgp"].iloc[0])] if "dgp" in t.columns else []
    parts += [f"{int(t['reps'].iloc[0])} replications per n"] if "reps" in t.columns else []
    style.note(fig, "; ".join(parts))
    return fig


FIGURES = (
    FigureSpec(
        id="noise_floor",
        title="Synthetic noise floor: softmax vs Weibit estimator",
        claims=("W5",),
        needs=(
            TableNeed(
                "noise_floor",
                COLUMNS,
                ("se_mse_softmax", "se_mse_weibit", "theory_softmax", "reps", "c", "dgp"),
            ),
        ),
        render=render,
        produce="python -m figures --only noise_floor",
        description="The Weibit MSE follows c/n; the softmax MSE stops at its bias floor.",
    ),
)
