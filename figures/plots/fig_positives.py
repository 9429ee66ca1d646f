"""UCL with label positives vs additive-noise positives.

Jiang et al. (arXiv 2311.05139, §3.5 and §4) prove that UCL attains Neural Collapse when the two
views of a positive pair are conditionally independent given the class (label positives); with
positives made by adding noise to the anchor that assumption fails and NC need not happen. This
figure shows both kinds of positives over epochs: the equal-inner-product deviation
``mean |cos(mu_c, mu_c') + 1/(C-1)|`` and the within-class variation (ideal 0 for both), one line
per kind of positives and beta, seed mean ± std.

Table ``synthetic``: ``method, beta, epoch, positives, etf_mean, within_class_variation``.
"""

from __future__ import annotations

from typing import Any

import pandas as pd
import seaborn as sns
from matplotlib.figure import Figure

from figures.plots import frames, style
from figures.plots.spec import FigureSpec, TableNeed
from theory.options import POSITIVES

COLUMNS = ("method", "beta", "epoch", "positives", "etf_mean", "within_class_variation")
_STYLE = {"label": "-", "noise": "--"}
_COLORS = {"label": sns.color_palette("colorblind")[2], "noise": style.sns.color_palette("colorblind")[1]}


def check(tables: dict[str, pd.DataFrame], **_: Any) -> str | None:
    """Reason why there is nothing to draw, or None."""
    t = tables.get("synthetic")
    if not frames.has_family(t, "UCL"):
        return "table 'synthetic' holds no UCL / HUCL run"
    return None


@style.themed
def render(
    tables: dict[str, pd.DataFrame], where: dict | None = None, betas: tuple[float, ...] | None = (0.0,)
) -> Figure:
    """ETF deviation and within-class variation over epochs, label vs noise positives.

    Args:
        tables: ``{"synthetic": frame}`` with :data:`COLUMNS`.
        where: config filters fixing the setting (``positives`` stays free).
        betas: the betas drawn (default UCL only, beta = 0; None: every beta present). When
            none of them is present every beta is drawn.

    Returns:
        The figure (two panels).

    Raises:
        ValueError: missing columns.
    """
    t = frames.table(tables, "synthetic", COLUMNS)
    fam = frames.family_rows(t, "UCL")
    if betas is not None:
        chosen = fam[fam["beta"].astype(float).isin([float(b) for b in betas])]
        fam = chosen if len(chosen) else fam
    rows, setting = frames.pick_setting(
        fam, where=where, exclude=("positives", "grid", "noise_std"), maximise=("positives", "beta")
    )
    fig, axes = style.new_figure(1, 2, width=14.0, height=5.0)
    panels = (
        ("etf_mean", "equal inner product condition", "mean | cos(μ_c, μ_c′) + 1/(C−1) |"),
        ("within_class_variation", "within-class variation", "mean ‖z − μ_c‖"),
    )
    kinds = [k for k in POSITIVES if k in set(rows["positives"].astype(str))]
    kinds += sorted(set(rows["positives"].astype(str)) - set(kinds))
    for ax, (metric, title, ylabel) in zip(axes[0], panels, strict=True):
        for kind in kinds:
            r = frames.finite(rows[rows["positives"].astype(str) == kind], metric)
            for b in frames.betas_of(r):
                g = style.aggregate_seeds(r[r["beta"].astype(float) == b], "epoch", metric)
                color = style.beta_color(b) if len(frames.betas_of(rows)) > 1 else _COLORS.get(kind, "0.3")
                style.seed_band(
                    ax,
                    g["epoch"],
                    g["mean"],
                    g["std"],
                    color=color,
                    linestyle=_STYLE.get(kind, "-."),
                    label=f"{kind} positives, {style.beta_label(b, 'UCL')}",
                )
        style.ideal_line(ax, 0.0, label="ideal 0")
        style.finish_axes(ax, title=title, xlabel="epoch", ylabel=ylabel, loc="best")
    fig.suptitle("UCL: label positives vs additive-noise positives")
    style.note(fig, "seed mean ± std; " + frames.setting_text(rows, setting))
    return fig


FIGURES = (
    FigureSpec(
        id="ucl_positives",
        title="UCL: label positives vs additive-noise positives",
        claims=("S2",),
        needs=(TableNeed("synthetic", COLUMNS, ("seed", "noise_std", "run_key", "grid")),),
        render=render,
        check=check,
        produce="python -m synthetic sweep s2_ucl_positives --results {results}/synthetic",
        description="UCL reaches NC with conditionally independent (label) positives, not with noise positives.",
    ),
)
