"""Final ETF deviation, within-class variation and effective rank against beta, with seed bands.

Summarises the hardness sweeps of Jiang et al. (arXiv 2311.05139, §4-§5): at the final epoch of
every run, the equal-inner-product deviation ``mean |cos(mu_c, mu_c') + 1/(C-1)|`` (ideal 0),
the within-class variation (mean distance to the class mean, ideal 0) and the effective rank of
the class-mean matrix (Roy & Vetterli; ``C - 1`` at a simplex ETF), against beta, one line per
normalisation present, seed mean ± one standard deviation as a band (and error bars).

Table ``synthetic``: ``method, beta, epoch, etf_mean, within_class_variation, effective_rank``
(+ ``normalization``, ``num_classes``, ``seed``, config columns).
"""

from __future__ import annotations

from typing import Any

import pandas as pd
from matplotlib.figure import Figure

from figures.plots import frames, style
from figures.plots.fig_normalization import ORDER
from figures.plots.spec import FigureSpec, TableNeed

COLUMNS = ("method", "beta", "epoch", "etf_mean", "within_class_variation", "effective_rank")
PANELS = (
    ("etf_mean", "ETF deviation", "mean | cos(μ_c, μ_c′) + 1/(C−1) |"),
    ("within_class_variation", "within-class variation", "mean ‖z − μ_c‖"),
    ("effective_rank", "effective rank of the class means", "effective rank of M"),
)
_LINESTYLES = {"ball": "-", "sphere": "--", "none": ":"}


def check(tables: dict[str, pd.DataFrame], family: str = "SCL", **_: Any) -> str | None:
    """Reason why there is nothing to draw for ``family``, or None."""
    t = tables.get("synthetic")
    if not frames.has_family(t, family):
        return f"table 'synthetic' holds no {frames.family_name(family)} run"
    return None


@style.themed
def render(tables: dict[str, pd.DataFrame], family: str = "SCL", where: dict | None = None) -> Figure:
    """Final-epoch metrics against beta, one line per normalisation.

    Args:
        tables: ``{"synthetic": frame}`` with :data:`COLUMNS`.
        family: ``"SCL"`` or ``"UCL"``.
        where: config filters fixing the setting (the normalisation stays free).

    Returns:
        The figure (three panels).

    Raises:
        ValueError: bad ``family`` or missing columns.
    """
    t = frames.table(tables, "synthetic", COLUMNS)
    fam = frames.family_rows(t, family)
    free = ("normalization", "grid", "epochs", "eval_every") if "normalization" in fam.columns else ()
    rows, setting = frames.pick_setting(fam, where=where, exclude=free, maximise=("beta", "normalization"))
    last = frames.final_rows(rows)
    if "normalization" in last.columns:
        present = list(dict.fromkeys(last["normalization"].astype(str)))
        norms = [n for n in ORDER if n in present] + [n for n in present if n not in ORDER]
    else:
        norms = [None]
    fig, axes = style.new_figure(1, 3, width=16.0, height=5.0)
    for ax, (metric, title, ylabel) in zip(axes[0], PANELS, strict=True):
        for norm in norms:
            r = last if norm is None else last[last["normalization"].astype(str) == norm]
            g = style.aggregate_seeds(frames.finite(r, metric), "beta", metric)
            if len(g) == 0:
                continue
            color = (
                style.NORMALIZATION_COLORS.get(norm, "0.3")
                if norm is not None
                else style.method_color("H" + family)
            )
            style.seed_band(
                ax,
                g["beta"],
                g["mean"],
                g["std"],
                color=color,
                marker="o",
                linestyle=_LINESTYLES.get(norm, "-"),
                label=f"normalization = {norm}" if norm is not None else None,
            )
            ax.errorbar(g["beta"], g["mean"], yerr=g["std"], fmt="none", ecolor=color, capsize=3, linewidth=1)
        if (
            metric == "effective_rank"
            and "num_classes" in last.columns
            and last["num_classes"].nunique() == 1
        ):
            C = int(last["num_classes"].iloc[0])
            style.ideal_line(ax, C - 1, label=f"ETF: C − 1 = {C - 1}")
        elif metric != "effective_rank":
            style.ideal_line(ax, 0.0, label="ideal 0")
        ax.set_xscale("symlog", linthresh=1.0)
        betas = frames.betas_of(last)
        ax.set_xticks(betas)
        ax.set_xticklabels([f"{b:g}" for b in betas])
        style.finish_axes(
            ax, title=title, xlabel="β (hardness; 0 = " + family + ")", ylabel=ylabel, loc="best"
        )
    fig.suptitle(f"Final-epoch collapse metrics against β, {frames.family_name(family)}")
    style.note(
        fig,
        "final epoch, seed mean ± std; "
        + frames.setting_text(rows, setting, columns=("encoder", "batch_size", "num_classes", "positives")),
    )
    return fig


FIGURES = tuple(
    FigureSpec(
        id=f"vs_beta_{fam.lower()}",
        title=f"Final-epoch collapse metrics against β, {frames.family_name(fam)}",
        claims=("S1",) if fam == "SCL" else ("S3",),
        needs=(TableNeed("synthetic", COLUMNS, ("normalization", "num_classes", "seed", "run_key", "grid")),),
        render=render,
        options={"family": fam},
        check=check,
        produce="python -m synthetic sweep s1_scl_hscl_nc s3_hucl_beta --results {results}/synthetic",
        description=f"{frames.family_name(fam)}: final ETF deviation, within-class variation and effective "
        "rank against beta, per normalisation.",
    )
    for fam in ("SCL", "UCL")
)
