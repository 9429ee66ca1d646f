"""Nearest-class-mean (NCM) test accuracy over epochs, one curve per beta.

Reproduced in the style of the authors' notebooks (figure N5, "Test Accuracy"): NCM top-1 on
held-out data, by the raw inner product with the un-normalised training class means, in percent,
against the epoch, per beta in {0, 2, 5, 10, 30}; y from 0 (Jiang et al., arXiv 2311.05139, §5.4).
Curves are seed means with a band of one standard deviation. Runs without held-out data (free
features) have no NCM accuracy; their training-set accuracy is not substituted.

Table ``synthetic``: ``method, beta, epoch, ncm_acc`` (a fraction in [0, 1]) (+ ``seed``,
``num_classes`` for the chance line, config columns).
"""

from __future__ import annotations

from typing import Any

import pandas as pd
from matplotlib.figure import Figure

from figures.plots import frames, style
from figures.plots.fig_conditions import curves_by_beta
from figures.plots.spec import FigureSpec, TableNeed

COLUMNS = ("method", "beta", "epoch", "ncm_acc")


def check(tables: dict[str, pd.DataFrame], family: str = "SCL", **_: Any) -> str | None:
    """Reason why there is nothing to draw for ``family``, or None."""
    t = tables.get("synthetic")
    if not frames.has_family(t, family):
        return f"table 'synthetic' holds no {frames.family_name(family)} run"
    if len(frames.finite(frames.family_rows(t, family), "ncm_acc")) == 0:
        return (
            f"no {frames.family_name(family)} run has a finite ncm_acc (needs an encoder with "
            "held-out data: encoder mlp or linear, n_test_per_class > 0)"
        )
    return None


@style.themed
def render(tables: dict[str, pd.DataFrame], family: str = "SCL", where: dict | None = None) -> Figure:
    """NCM test accuracy (%) against the epoch, per beta.

    Args:
        tables: ``{"synthetic": frame}`` with :data:`COLUMNS`.
        family: ``"SCL"`` or ``"UCL"``.
        where: config filters fixing the setting.

    Returns:
        The figure.

    Raises:
        ValueError: bad ``family``, missing columns, or no finite accuracy.
    """
    t = frames.table(tables, "synthetic", COLUMNS)
    rows = frames.finite(frames.family_rows(t, family), "ncm_acc")
    if len(rows) == 0:
        raise ValueError("tables['synthetic'] has no finite ncm_acc for this family")
    rows, setting = frames.pick_setting(rows, where=where)
    rows = rows.assign(ncm_pct=100.0 * rows["ncm_acc"].astype(float))
    fig, axes = style.new_figure(1, 1, width=8.0, height=5.0)
    ax = axes[0, 0]
    curves_by_beta(ax, rows, "ncm_pct", family)
    if "num_classes" in rows.columns and rows["num_classes"].nunique() == 1:
        C = int(rows["num_classes"].iloc[0])
        ax.axhline(
            100.0 / C, color="0.5", linestyle=":", linewidth=1.2, label=f"chance (1/C = {100.0 / C:.3g} %)"
        )
    ax.set_ylim(0, 102)
    style.finish_axes(ax, xlabel="epoch", ylabel="NCM test accuracy (%)", loc="lower right")
    fig.suptitle(f"Test Accuracy (NCM), {frames.family_name(family)}")
    style.note(fig, "seed mean ± std; " + frames.setting_text(rows, setting))
    return fig


FIGURES = tuple(
    FigureSpec(
        id=f"ncm_{fam.lower()}",
        title=f"Test Accuracy (NCM), {frames.family_name(fam)}",
        claims=("S1",) if fam == "SCL" else ("S3",),
        needs=(TableNeed("synthetic", COLUMNS, ("seed", "num_classes", "run_key", "grid")),),
        render=render,
        options={"family": fam},
        check=check,
        produce="python -m synthetic sweep s1_scl_hscl_nc s3_hucl_beta --results {results}/synthetic "
        "(runs with encoder mlp or linear and n_test_per_class > 0)",
        description=f"NCM top-1 test accuracy of {frames.family_name(fam)} per beta over epochs.",
        style_note="N5",
    )
    for fam in ("SCL", "UCL")
)
