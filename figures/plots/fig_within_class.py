"""Within-class variation over epochs, one curve per beta.

Reproduced in the style of the authors' notebooks (figure N6, "Within-class Variation
Collapse", defined but not rendered in the released notebooks): the mean Euclidean distance of
an embedding to its class mean, ``(1/C) sum_c mean_{i in c} ||z_i - mu_c||``, against the epoch,
per beta in {0, 2, 5, 10, 30}, ideal 0 dashed (Jiang et al., arXiv 2311.05139, §5). Curves are
seed means with a band of one standard deviation; the y-axis is logarithmic when the values span
more than two decades.

Table ``synthetic``: ``method, beta, epoch, within_class_variation`` (+ ``seed``, config columns).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd
from matplotlib.figure import Figure

from figures.plots import frames, style
from figures.plots.fig_conditions import PRODUCE, curves_by_beta
from figures.plots.spec import FigureSpec, TableNeed

COLUMNS = ("method", "beta", "epoch", "within_class_variation")


def check(tables: dict[str, pd.DataFrame], family: str = "SCL", **_: Any) -> str | None:
    """Reason why there is nothing to draw for ``family``, or None."""
    t = tables.get("synthetic")
    if not frames.has_family(t, family):
        return f"table 'synthetic' holds no {frames.family_name(family)} run"
    if len(frames.finite(frames.family_rows(t, family), "within_class_variation")) == 0:
        return "no finite within_class_variation value"
    return None


@style.themed
def render(tables: dict[str, pd.DataFrame], family: str = "SCL", where: dict | None = None) -> Figure:
    """Within-class variation against the epoch, per beta.

    Args:
        tables: ``{"synthetic": frame}`` with :data:`COLUMNS`.
        family: ``"SCL"`` or ``"UCL"``.
        where: config filters fixing the setting.

    Returns:
        The figure.

    Raises:
        ValueError: bad ``family`` or missing columns.
    """
    t = frames.table(tables, "synthetic", COLUMNS)
    rows, setting = frames.pick_setting(frames.family_rows(t, family), where=where)
    rows = frames.finite(rows, "within_class_variation")
    fig, axes = style.new_figure(1, 1, width=8.0, height=5.0)
    ax = axes[0, 0]
    drawn = curves_by_beta(ax, rows, "within_class_variation", family)
    style.ideal_line(ax, 0.0, label="ideal 0")
    v = np.asarray(drawn, dtype=float)
    pos = rows["within_class_variation"].astype(float)
    pos = pos[pos > 0]
    if len(pos) and pos.max() / pos.min() > 100:
        lin = float(max(pos.min(), 1e-8))
        ax.set_yscale("symlog", linthresh=lin)
        ax.set_ylim(bottom=-0.3 * lin)  # keeps the dashed ideal line at 0 visible above the frame
    elif v.size:
        ax.set_ylim(-0.05 * max(float(np.nanmax(v)), 1e-12), None)
    style.finish_axes(ax, xlabel="epoch", ylabel="mean ‖z − μ_c‖ (within-class variation)", loc="best")
    fig.suptitle(f"Within-class Variation Collapse, {frames.family_name(family)}")
    style.note(fig, "seed mean ± std; " + frames.setting_text(rows, setting))
    return fig


FIGURES = tuple(
    FigureSpec(
        id=f"within_class_{fam.lower()}",
        title=f"Within-class Variation Collapse, {frames.family_name(fam)}",
        claims=("S1",) if fam == "SCL" else ("S2", "S3"),
        needs=(TableNeed("synthetic", COLUMNS, ("seed", "run_key", "grid")),),
        render=render,
        options={"family": fam},
        check=check,
        produce=PRODUCE,
        description=f"Mean distance to the class mean of {frames.family_name(fam)} per beta over epochs (ideal 0).",
        style_note="N6",
    )
    for fam in ("SCL", "UCL")
)
