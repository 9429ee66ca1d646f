"""Peaks over threshold on the similarity scores of an encoder: GPD fit, QQ plot, shape stability.

Erol et al. (arXiv 2606.00262, extreme-value diagnostics): the negative-pair cosine similarities
of a trained encoder have a bounded upper tail (cosines cannot exceed 1), so their exceedances
over a high threshold follow a generalised Pareto law with shape ``xi < 0`` (the Weibull domain).
Four panels: (a) the histogram density of the exceedances ``y = s - u`` on log-log axes with the
fitted GPD density and a separately fitted exponential (``xi = 0``) density, and the fitted
support end ``-sigma/xi`` as a vertical line; (b) the same on linear axes; (c) QQ plot: fitted
quantiles (GPD and exponential) against empirical quantiles, with ``y = x``; (d) shape stability:
``xi-hat`` re-fitted at several thresholds, with ``xi = 0`` dashed.

Tables: ``pot_exceedances`` (``y``), ``pot_fit`` (one row: ``q, threshold, n_exceed, xi, sigma,
exp_sigma``), ``pot_density`` (``y, gpd, exponential``), ``pot_qq`` (``p, empirical, gpd,
exponential``), ``pot_stability`` (``q, threshold, xi``; rows with NaN ``xi`` had too few
exceedances).
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
from matplotlib.figure import Figure

from figures.plots import frames, style
from figures.plots.spec import FigureSpec, TableNeed

NEEDS = (
    TableNeed("pot_exceedances", ("y",), ("source",)),
    TableNeed("pot_fit", ("q", "threshold", "n_exceed", "xi", "sigma", "exp_sigma"), ("source",)),
    TableNeed("pot_density", ("y", "gpd", "exponential")),
    TableNeed("pot_qq", ("p", "empirical", "gpd", "exponential")),
    TableNeed("pot_stability", ("q", "threshold", "xi"), ("n_exceed",)),
)
_GPD = style.method_color("WeiNCE")
_EXP = style.method_color("InfoNCE")
_BINS = 40


def _fit_row(tables: dict[str, pd.DataFrame]) -> pd.Series:
    fit = tables["pot_fit"]
    return fit.iloc[0]


@style.themed
def render(tables: dict[str, pd.DataFrame], max_points: int = 50_000) -> Figure:
    """Exceedance densities (log-log, linear), QQ plot and threshold stability.

    Args:
        tables: the five ``pot_*`` tables (see the module docstring).
        max_points: at most this many exceedances enter the histograms (evenly spaced in sorted
            order: deterministic).

    Returns:
        The figure (2 x 2 panels).

    Raises:
        ValueError: a missing table or column, or no positive exceedance.
    """
    for need in NEEDS:
        frames.table(tables, need.name, need.columns)
    y = np.sort(tables["pot_exceedances"]["y"].astype(float).to_numpy())
    y = y[np.isfinite(y) & (y > 0)]
    if y.size == 0:
        raise ValueError("tables['pot_exceedances'] has no positive exceedance")
    if y.size > max_points:
        y = y[np.linspace(0, y.size - 1, max_points).astype(int)]
    fit = _fit_row(tables)
    xi, sigma, exp_sigma = float(fit["xi"]), float(fit["sigma"]), float(fit["exp_sigma"])
    end = -sigma / xi if xi < 0 else math.inf
    dens = tables["pot_density"].sort_values("y")
    fig, axes = style.new_figure(2, 2, width=13.0, height=9.5)
    gpd_label = f"GPD fit, ξ̂ = {xi:.3f}, σ̂ = {sigma:.3f}"
    exp_label = f"exponential fit (ξ = 0), σ = {exp_sigma:.3f}"
    for k, ax in enumerate(axes[0]):
        log = k == 0
        lo = max(y.min(), 1e-12)
        bins = np.geomspace(lo, y.max(), _BINS + 1) if log else np.linspace(0, y.max(), _BINS + 1)
        ax.hist(
            y, bins=bins, density=True, color="0.75", edgecolor="white", label=f"exceedances (n = {y.size})"
        )
        d = dens[dens["y"] > 0] if log else dens
        ax.plot(d["y"], d["gpd"], color=_GPD, label=gpd_label)
        ax.plot(d["y"], d["exponential"], color=_EXP, linestyle="--", label=exp_label)
        if math.isfinite(end):
            ax.axvline(end, color=_GPD, linestyle=":", linewidth=1.3, label=f"support end −σ̂/ξ̂ = {end:.3f}")
        if log:
            ax.set_xscale("log")
            ax.set_yscale("log")
            pos = d["gpd"][d["gpd"] > 0]
            if len(pos):
                ax.set_ylim(max(pos.min(), 1e-4 * pos.max()) * 0.5, None)
        style.finish_axes(
            ax,
            title="exceedance density, " + ("log-log" if log else "linear axes"),
            xlabel="exceedance y = s − u",
            ylabel="density",
            legend=not log,
            loc="upper right",
        )
    ax = axes[1, 0]
    qq = tables["pot_qq"]
    ax.plot(qq["empirical"], qq["gpd"], "o", markersize=3.5, color=_GPD, label=f"GPD, ξ̂ = {xi:.3f}")
    ax.plot(
        qq["empirical"],
        qq["exponential"],
        "s",
        markersize=3.5,
        mfc="none",
        color=_EXP,
        label="exponential, ξ = 0",
    )
    top = float(np.nanmax(qq[["empirical", "gpd", "exponential"]].to_numpy()))
    ax.plot([0, top], [0, top], "--", color="black", linewidth=1.2, label="y = x")
    style.finish_axes(
        ax,
        title="QQ plot (p = 0.01 … 0.99)",
        xlabel="empirical quantile of y",
        ylabel="fitted quantile of y",
        loc="upper left",
    )
    ax = axes[1, 1]
    st = tables["pot_stability"].sort_values("threshold")
    ok = st[np.isfinite(st["xi"].astype(float))]
    ax.plot(ok["threshold"], ok["xi"], "o-", color=_GPD, label="ξ̂ at threshold u")
    for _, r in ok.iterrows():
        ax.annotate(
            f"q = {float(r['q']):g}",
            (float(r["threshold"]), float(r["xi"])),
            textcoords="offset points",
            xytext=(4, 6),
            fontsize=8,
            color="0.3",
        )
    ax.margins(x=0.12)
    style.ideal_line(ax, 0.0, label="ξ = 0 (exponential tail)")
    style.finish_axes(
        ax,
        title="shape stability across thresholds",
        xlabel="threshold u (the q-quantile of the scores)",
        ylabel="ξ̂ (GPD shape)",
        loc="best",
    )
    src = f"{fit['source']}; " if "source" in fit.index and isinstance(fit["source"], str) else ""
    fig.suptitle("Peaks over threshold: GPD fit to similarity exceedances")
    style.note(
        fig,
        f"{src}threshold u = {float(fit['threshold']):.4f} (q = {float(fit['q']):g}), "
        f"{int(fit['n_exceed'])} exceedances",
    )
    return fig


FIGURES = (
    FigureSpec(
        id="pot_exceedances",
        title="Peaks over threshold: GPD fit to similarity exceedances",
        claims=("W1",),
        needs=NEEDS,
        render=render,
        produce="similarity scores of a trained encoder: {results}/weince/pot_scores.csv (column 'score'), "
        "written by the real-data W1 run (python -m realdata, not available yet)",
        description="GPD and exponential fits to the top 1 % of negative similarities, QQ plot and shape stability.",
    ),
)
