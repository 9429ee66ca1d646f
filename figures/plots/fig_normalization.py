"""No normalisation vs unit ball vs unit sphere: spectra and ETF deviation side by side.

The Neural- vs Dimensional-Collapse picture of Jiang et al. (arXiv 2311.05139, §4-§5): with the
embeddings normalised (ball or sphere) SCL/HSCL reach Neural Collapse, a flat class-mean
spectrum; without normalisation the class means drift into a low-dimensional subspace (the
spectrum drops) and the equal-inner-product condition is not met. One column per normalisation
present in the results (a grid without ball runs renders without that column): top row the
sorted normalised class-mean spectrum ``log(sigma_i / sigma_max)`` at the final epoch (when
the ``spectrum`` table exists), bottom row the equal-inner-product (ETF) deviation
``mean |cos(mu_c, mu_c') + 1/(C-1)|`` over epochs; one curve per beta, seed mean ± std, the ideal
values dashed. The panels are reproduced in the style of the authors' notebooks (N1, N4).

Tables: ``synthetic`` (``method, beta, epoch, normalization, etf_mean``) and optionally
``spectrum`` (``method, beta, epoch, index, log_ratio, normalization``).
"""

from __future__ import annotations

from typing import Any

import pandas as pd
from matplotlib.figure import Figure

from figures.plots import frames, style
from figures.plots.fig_conditions import curves_by_beta
from figures.plots.spec import FigureSpec, TableNeed
from theory.options import NORMALIZATIONS

COLUMNS = ("method", "beta", "epoch", "normalization", "etf_mean")
ORDER = NORMALIZATIONS
_FREE = ("normalization", "grid", "epochs", "eval_every")


def check(tables: dict[str, pd.DataFrame], family: str = "SCL", **_: Any) -> str | None:
    """Reason why there is nothing to draw for ``family``, or None."""
    t = tables.get("synthetic")
    if not frames.has_family(t, family):
        return f"table 'synthetic' holds no {frames.family_name(family)} run"
    return None


def _norms(rows: pd.DataFrame) -> list[str]:
    present = set(rows["normalization"].astype(str))
    return [n for n in ORDER if n in present] + sorted(present - set(ORDER))


@style.themed
def render(tables: dict[str, pd.DataFrame], family: str = "SCL", where: dict | None = None) -> Figure:
    """Spectra (top, if available) and ETF deviation (bottom) per normalisation, per beta.

    Args:
        tables: ``{"synthetic": frame, "spectrum": frame (optional)}``.
        family: ``"SCL"`` or ``"UCL"``.
        where: config filters fixing the setting (the normalisation stays free).

    Returns:
        The figure: one column per normalisation present.

    Raises:
        ValueError: bad ``family`` or missing columns.
    """
    t = frames.table(tables, "synthetic", COLUMNS)
    rows, setting = frames.pick_setting(
        frames.family_rows(t, family), where=where, exclude=_FREE, maximise=("normalization", "beta")
    )
    norms = _norms(rows)
    spec = tables.get("spectrum")
    if (
        spec is not None
        and len(spec)
        and "normalization" in spec.columns
        and "run_key" in spec.columns
        and "run_key" in rows.columns
    ):
        spec = spec[spec["run_key"].isin(set(rows["run_key"]))]
    else:
        spec = None
    has_spec = spec is not None and len(spec) > 0
    nrows = 2 if has_spec else 1
    fig, axes = style.new_figure(nrows, len(norms), width=5.0 * len(norms) + 1.5, height=4.3 * nrows)
    for j, norm in enumerate(norms):
        r = rows[rows["normalization"].astype(str) == norm]
        epochs = int(r["epoch"].max())
        head = f"normalization = {norm} ({epochs} epochs)"
        if spec is not None and has_spec:
            ax = axes[0, j]
            s = spec[spec["normalization"].astype(str) == norm]
            s = s[s["epoch"] == s.groupby("run_key")["epoch"].transform("max")]
            for b in frames.betas_of(s):
                g = style.aggregate_seeds(s[s["beta"].astype(float) == b], "index", "log_ratio")
                style.seed_band(
                    ax,
                    g["index"],
                    g["mean"],
                    g["std"],
                    color=style.beta_color(b),
                    label=style.beta_label(b, family),
                    marker="o",
                )
            style.ideal_line(ax, 0.0, label="ETF (flat at 0)")
            style.finish_axes(
                ax,
                title=f"{head}\nspectrum at the final epoch",
                xlabel="index i of sorted singular value",
                ylabel="log(σ_i / σ_max)",
                legend=j == len(norms) - 1,
                loc="lower left",
            )
        ax = axes[nrows - 1, j]
        curves_by_beta(ax, frames.finite(r, "etf_mean"), "etf_mean", family)
        style.ideal_line(ax, 0.0, label="ideal 0")
        style.finish_axes(
            ax,
            title=("equal inner product condition" if has_spec else f"{head}\nequal inner product condition"),
            xlabel="epoch",
            ylabel="mean | cos(μ_c, μ_c′) + 1/(C−1) |",
            legend=(j == len(norms) - 1) and not has_spec,
            loc="upper right",
        )
    if has_spec:
        ymin = min(a.get_ylim()[0] for a in axes[0])
        for a in axes[0]:
            a.set_ylim(max(ymin, -35.0), 2.0)
    ymax = max(a.get_ylim()[1] for a in axes[nrows - 1])
    for a in axes[nrows - 1]:
        a.set_ylim(-0.02 * ymax, ymax)
    fig.suptitle(f"Neural vs Dimensional Collapse: none vs ball vs sphere, {frames.family_name(family)}")
    style.note(
        fig,
        "seed mean ± std; "
        + frames.setting_text(rows, setting, columns=("encoder", "batch_size", "num_classes")),
    )
    return fig


FIGURES = tuple(
    FigureSpec(
        id=f"normalization_{fam.lower()}",
        title=f"Neural vs Dimensional Collapse: none vs ball vs sphere, {frames.family_name(fam)}",
        claims=("S4", "S1") if fam == "SCL" else ("S4", "S3"),
        needs=(
            TableNeed("synthetic", COLUMNS, ("seed", "run_key", "grid")),
            TableNeed(
                "spectrum",
                (),
                ("method", "beta", "epoch", "index", "log_ratio", "normalization"),
                required=False,
            ),
        ),
        render=render,
        options={"family": fam},
        check=check,
        produce="python -m synthetic sweep s1_scl_hscl_nc s3_hucl_beta s4_no_normalisation "
        "--set record_means=true --results {results}/synthetic",
        description=f"{frames.family_name(fam)}: class-mean spectrum and ETF deviation without "
        "normalisation, on the unit ball and on the unit sphere.",
        style_note="N1, N4 (panels)",
    )
    for fam in ("SCL", "UCL")
)
