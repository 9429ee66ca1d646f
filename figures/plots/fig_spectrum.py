"""Sorted normalised class-mean spectrum at an early and at the final epoch (the DC picture).

Reproduced in the style of the authors' notebooks (figure N1, "Sorted normalized singular
value"): ``log(sigma_i / sigma_max)`` of the covariance of the C class means against the index
``i = 0..C-2``, one curve per hardness beta in {0, 2, 5, 10, 30}, a dashed line at 0 (an exact
simplex ETF is flat at 0); the authors show epoch 399 and, for SCL, epoch 80 as well. A drop
after index ``r`` means the class means span only ``r`` dimensions: dimensional collapse
(Jiang et al., arXiv 2311.05139, §5 and its notebooks). Curves are seed means with a band of
one standard deviation.

Table ``spectrum`` (one row per run, epoch and index): ``method, beta, epoch, index,
log_ratio`` (+ ``seed`` and the run's config columns, used to pick and print the setting).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd
from matplotlib.figure import Figure

from figures.plots import frames, style
from figures.plots.spec import FigureSpec, TableNeed

SPECTRUM_COLUMNS = ("method", "beta", "epoch", "index", "log_ratio")
#: The authors' y-range of N1.
YLIM = (-35.0, 2.0)


def check(tables: dict[str, pd.DataFrame], family: str = "SCL", **_: Any) -> str | None:
    """Reason why there is nothing to draw for ``family``, or None."""
    if not frames.has_family(tables.get("spectrum"), family):
        return f"table 'spectrum' holds no {frames.family_name(family)} run"
    return None


@style.themed
def render(
    tables: dict[str, pd.DataFrame], family: str = "SCL", where: dict | None = None, early: int | None = None
) -> Figure:
    """Spectra at an early and at the final epoch, one curve per beta.

    Args:
        tables: ``{"spectrum": frame}`` (columns :data:`SPECTRUM_COLUMNS`).
        family: ``"SCL"`` (SCL / HSCL) or ``"UCL"`` (UCL / HUCL).
        where: config filters fixing the setting (default: :func:`figures.plots.frames.pick_setting`).
        early: the early epoch (default: the recorded one nearest 20 % of the last).

    Returns:
        The figure (two panels; one when only one epoch is recorded).

    Raises:
        ValueError: bad ``family`` or missing table / columns.
    """
    spec = frames.table(tables, "spectrum", SPECTRUM_COLUMNS)
    rows, setting = frames.pick_setting(frames.family_rows(spec, family), where=where)
    epochs = sorted(int(e) for e in rows["epoch"].unique())
    last = epochs[-1]
    early = frames.early_epoch(epochs) if early is None else int(early)
    shown = [e for e in (early, last) if e is not None]
    fig, axes = style.new_figure(1, len(shown), width=6.0 * len(shown) + 1.5, height=5.0, sharey=True)
    lowest = 0.0
    for ax, ep in zip(axes[0], shown, strict=True):
        at = rows[rows["epoch"] == ep]
        for b in frames.betas_of(at):
            g = style.aggregate_seeds(at[at["beta"].astype(float) == b], "index", "log_ratio")
            style.seed_band(
                ax,
                g["index"],
                g["mean"],
                g["std"],
                color=style.beta_color(b),
                label=style.beta_label(b, family),
                marker="o",
            )
            if len(g):
                lowest = min(lowest, float(np.nanmin(g["mean"] - g["std"])))
        style.ideal_line(ax, 0.0, label="ETF (flat at 0)")
        style.finish_axes(
            ax,
            title=f"epoch {ep}" + (" (final)" if ep == last else ""),
            xlabel="index i of sorted singular value",
            ylabel="log(σ_i / σ_max)",
            legend=ax is axes[0][-1],
            loc="lower left",
        )
        ax.xaxis.get_major_locator().set_params(integer=True)
    lo = max(YLIM[0], lowest * 1.1 - 0.5) if lowest > YLIM[0] else YLIM[0]
    for ax in axes[0]:
        ax.set_ylim(lo, YLIM[1])
    fig.suptitle(f"Sorted normalized singular value, {frames.family_name(family)}")
    style.note(fig, "class-mean covariance spectrum, seed mean ± std; " + frames.setting_text(rows, setting))
    return fig


_PRODUCE = (
    "python -m synthetic sweep s1_scl_hscl_nc s2_ucl_positives s3_hucl_beta s4_no_normalisation "
    "--set record_means=true --results {results}/synthetic"
)

FIGURES = tuple(
    FigureSpec(
        id=f"spectrum_{fam.lower()}",
        title=f"Sorted normalized singular value, {frames.family_name(fam)}",
        claims=("S1", "S4") if fam == "SCL" else ("S3", "S4"),
        needs=(TableNeed("spectrum", SPECTRUM_COLUMNS, ("seed", "run_key", "grid")),),
        render=render,
        options={"family": fam},
        check=check,
        produce=_PRODUCE,
        description=f"Class-mean spectrum log(σ_i/σ_max) of {frames.family_name(fam)} per beta, early and "
        "final epoch; a drop below 0 means dimensional collapse.",
        style_note="N1",
    )
    for fam in ("SCL", "UCL")
)
