"""The three Neural-Collapse conditions of the class means over epochs.

Reproduced in the style of the authors' notebooks (figures N2-N4): "Unit-norm condition"
``(1/C) sum_c | ||mu_c|| - 1 |``, "Zero-sum condition" ``||(1/C) sum_c mu_c||`` and "Equal
inner product condition" ``mean_{c != c'} |cos(mu_c, mu_c') + 1/(C-1)|`` (uncentred class
means), against the epoch, one curve per beta in {0, 2, 5, 10, 30}, the ideal value 0 dashed;
the authors' y-ranges ([-0.05, 0.9], [-0.05, 1.05], [-0.05, 1.25]) are used when the data fit
in them (Jiang et al., arXiv 2311.05139, §5; the metrics of its notebooks). Curves are seed
means with a band of one standard deviation.

Table ``synthetic``: ``method, beta, epoch, unit_norm, zero_sum, etf_mean`` (+ ``seed`` and
config columns).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd
from matplotlib.axes import Axes
from matplotlib.figure import Figure

from figures.plots import frames, style
from figures.plots.spec import FigureSpec, TableNeed

PANELS = (
    ("unit_norm", "Unit-norm condition", "mean | ‖μ_c‖ − 1 |", (-0.05, 0.9)),
    ("zero_sum", "Zero-sum condition", "‖ mean_c μ_c ‖", (-0.05, 1.05)),
    ("etf_mean", "Equal inner product condition", "mean | cos(μ_c, μ_c′) + 1/(C−1) |", (-0.05, 1.25)),
)
COLUMNS = ("method", "beta", "epoch", "unit_norm", "zero_sum", "etf_mean")


def check(tables: dict[str, pd.DataFrame], family: str = "SCL", **_: Any) -> str | None:
    """Reason why there is nothing to draw for ``family``, or None."""
    if not frames.has_family(tables.get("synthetic"), family):
        return f"table 'synthetic' holds no {frames.family_name(family)} run"
    return None


def curves_by_beta(
    ax: Axes, rows: pd.DataFrame, metric: str, family: str | None, x: str = "epoch"
) -> list[float]:
    """Draw one seed-band curve of ``metric`` against ``x`` per beta; return the values drawn."""
    drawn: list[float] = []
    for b in frames.betas_of(rows):
        g = style.aggregate_seeds(rows[rows["beta"].astype(float) == b], x, metric)
        if len(g) == 0:
            continue
        style.seed_band(
            ax, g[x], g["mean"], g["std"], color=style.beta_color(b), label=style.beta_label(b, family)
        )
        drawn += list(g["mean"] + g["std"]) + list(g["mean"] - g["std"])
    return drawn


def authors_ylim(ax: Axes, drawn: list[float], ylim: tuple[float, float]) -> None:
    """Use the authors' y-range when every drawn value fits in it."""
    v = np.asarray(drawn, dtype=float)
    v = v[np.isfinite(v)]
    if v.size and ylim[0] <= v.min() and v.max() <= ylim[1]:
        ax.set_ylim(*ylim)


@style.themed
def render(tables: dict[str, pd.DataFrame], family: str = "SCL", where: dict | None = None) -> Figure:
    """Unit-norm, zero-sum and equal-inner-product conditions against the epoch, per beta.

    Args:
        tables: ``{"synthetic": frame}`` with :data:`COLUMNS`.
        family: ``"SCL"`` or ``"UCL"``.
        where: config filters fixing the setting.

    Returns:
        The figure (three panels).

    Raises:
        ValueError: bad ``family`` or missing columns.
    """
    t = frames.table(tables, "synthetic", COLUMNS)
    rows, setting = frames.pick_setting(frames.family_rows(t, family), where=where)
    fig, axes = style.new_figure(1, 3, width=16.0, height=5.0)
    for k, (ax, (metric, title, ylabel, ylim)) in enumerate(zip(axes[0], PANELS, strict=True)):
        drawn = curves_by_beta(ax, frames.finite(rows, metric), metric, family)
        style.ideal_line(ax, 0.0, label="ideal 0")
        authors_ylim(ax, drawn, ylim)
        style.finish_axes(ax, title=title, xlabel="epoch", ylabel=ylabel, legend=k == 0, loc="upper right")
    fig.suptitle(f"Neural-Collapse conditions over training, {frames.family_name(family)}")
    style.note(fig, "uncentred class means, seed mean ± std; " + frames.setting_text(rows, setting))
    return fig


PRODUCE = (
    "python -m synthetic sweep s1_scl_hscl_nc s2_ucl_positives s3_hucl_beta --results {results}/synthetic"
)

FIGURES = tuple(
    FigureSpec(
        id=f"conditions_{fam.lower()}",
        title=f"Neural-Collapse conditions over training, {frames.family_name(fam)}",
        claims=("S1",) if fam == "SCL" else ("S2", "S3"),
        needs=(TableNeed("synthetic", COLUMNS, ("seed", "run_key", "grid")),),
        render=render,
        options={"family": fam},
        check=check,
        produce=PRODUCE,
        description=f"Unit-norm, zero-sum and equal-inner-product conditions of {frames.family_name(fam)} "
        "per beta over epochs (ideal 0).",
        style_note="N2-N4",
    )
    for fam in ("SCL", "UCL")
)
