"""The near-NC-initialisation study: drift away from Neural Collapse when training starts at NC.

Jiang et al. (arXiv 2311.05139, §5.6): a model trained to NC is trained further with SCL, HSCL,
UCL and HUCL; SCL/HSCL keep NC while HUCL at beta = 10, 30 drifts away into Dimensional
Collapse. One column per method present: top, the equal-inner-product deviation
``mean |cos(mu_c, mu_c') + 1/(C-1)|`` over the continued training (0 at NC, dashed); bottom, the
smallest normalised class-mean singular value ``log(sigma_min / sigma_max)`` (0 at an ETF, very
negative in DC), when recorded. One line per beta, seed mean ± std.

The runs are recognised by the config column ``init`` equal to ``"nc"`` (the run starts from a
stored Neural-Collapse state; ``epoch = 0`` is that state). Table ``synthetic``: ``method, beta,
epoch, init, etf_mean`` (+ ``spectrum_min``, ``seed``).
"""

from __future__ import annotations

from typing import Any

import pandas as pd
from matplotlib.figure import Figure

from figures.plots import frames, style
from figures.plots.fig_conditions import curves_by_beta
from figures.plots.spec import FigureSpec, TableNeed
from theory.options import HCL_METHODS

COLUMNS = ("method", "beta", "epoch", "init", "etf_mean")
METHODS = HCL_METHODS
NC_INIT = "nc"


def _nc_rows(t: pd.DataFrame) -> pd.DataFrame:
    return t[t["init"].astype(str) == NC_INIT]


def check(tables: dict[str, pd.DataFrame], **_: Any) -> str | None:
    """Reason why there is nothing to draw, or None."""
    t = tables.get("synthetic")
    if t is None or "init" not in t.columns:
        return "table 'synthetic' has no 'init' column (no near-NC-initialisation runs)"
    if len(_nc_rows(t)) == 0:
        return f"no run of table 'synthetic' has init = '{NC_INIT}'"
    return None


@style.themed
def render(tables: dict[str, pd.DataFrame], where: dict | None = None) -> Figure:
    """Drift from NC per method and beta after a Neural-Collapse initialisation.

    Args:
        tables: ``{"synthetic": frame}`` with :data:`COLUMNS`.
        where: config filters fixing the setting.

    Returns:
        The figure: one column per method, one or two rows.

    Raises:
        ValueError: missing columns or no run with ``init = "nc"``.
    """
    t = frames.table(tables, "synthetic", COLUMNS)
    nc = _nc_rows(t)
    if len(nc) == 0:
        raise ValueError(f"tables['synthetic'] has no run with init = {NC_INIT!r}")
    rows, setting = frames.pick_setting(nc, where=where, exclude=("grid",), maximise=("method", "beta"))
    methods = [m for m in METHODS if m in set(rows["method"].astype(str))]
    has_spec = "spectrum_min" in rows.columns and len(frames.finite(rows, "spectrum_min")) > 0
    nr = 2 if has_spec else 1
    fig, axes = style.new_figure(
        nr, len(methods), width=4.3 * len(methods) + 1.0, height=4.2 * nr, sharey="row"
    )
    for j, m in enumerate(methods):
        r = rows[rows["method"].astype(str) == m]
        fam = "SCL" if m in ("SCL", "HSCL") else "UCL"
        curves_by_beta(axes[0, j], frames.finite(r, "etf_mean"), "etf_mean", fam)
        style.ideal_line(axes[0, j], 0.0, label="NC (0)")
        style.finish_axes(
            axes[0, j],
            title=m,
            xlabel="epoch after the NC initialisation",
            ylabel="mean | cos(μ_c, μ_c′) + 1/(C−1) |",
            loc="best",
        )
        if has_spec:
            curves_by_beta(axes[1, j], frames.finite(r, "spectrum_min"), "spectrum_min", fam)
            style.ideal_line(axes[1, j], 0.0, label="ETF (0)")
            style.finish_axes(
                axes[1, j],
                xlabel="epoch after the NC initialisation",
                ylabel="log(σ_min / σ_max)",
                loc="best",
            )
    fig.suptitle("Near-NC initialisation: drift from Neural Collapse")
    style.note(fig, "seed mean ± std; " + frames.setting_text(rows, setting))
    return fig


FIGURES = (
    FigureSpec(
        id="near_nc_init",
        title="Near-NC initialisation: drift from Neural Collapse",
        claims=("R4",),
        needs=(TableNeed("synthetic", COLUMNS, ("spectrum_min", "seed", "grid")),),
        render=render,
        check=check,
        produce="python -m synthetic sweep r4_near_nc --results {results}/synthetic "
        '(runs with init = "nc"; this grid is not shipped yet)',
        description="Training continued from a Neural-Collapse state with each method and beta.",
    ),
)
