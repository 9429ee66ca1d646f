"""Open problems O1 / O1b: the smallest beta at which NC is beaten, against the number of classes.

docs/open_problems.md (Jiang et al., arXiv 2311.05139). Markers: ``beta_c``, the smallest grid beta
at which the free-embedding search found a configuration below NC by the declared margin (one
series per normalisation; a setting without such a beta is left out and named in the caption).
Lines (when the ``open_hessian`` table is present): the local thresholds at NC, where NC becomes a
saddle on the sphere (smallest eigenvalue of the Riemannian Hessian below 0) and where it stops
being a KKT point of the ball (radial slope of the loss at ``r = 1`` above 0).

Tables ``open_landscape`` (``loss, normalization, num_classes, beta, beats_nc``) and, optional,
``open_hessian`` (``kind, num_classes, beta_saddle, beta_ball``).
"""

from __future__ import annotations

import pandas as pd
from matplotlib.figure import Figure

from figures.plots import frames, style
from figures.plots.spec import FigureSpec, TableNeed

COLUMNS = ("loss", "normalization", "num_classes", "beta", "beats_nc")
HESSIAN = ("kind", "num_classes", "beta_saddle", "beta_ball")
MARKERS = {"sphere": "o", "ball": "s"}


def _beta_c(t: pd.DataFrame) -> tuple[pd.DataFrame, list[str]]:
    """``normalization, num_classes, beta_c`` of the settings where NC was beaten, and the others."""
    h = t[t["loss"] == "HUCL"]
    rows, missing = [], []
    for (norm, C), g in h.groupby(["normalization", "num_classes"], sort=True):
        hits = g[g["beats_nc"].astype(bool)]
        if hits.empty:
            missing.append(f"{norm} C={int(C)}")
        else:
            rows.append({"normalization": norm, "num_classes": int(C), "beta_c": float(hits["beta"].min())})
    return pd.DataFrame(rows, columns=["normalization", "num_classes", "beta_c"]), missing


def check(tables: dict[str, pd.DataFrame]) -> str | None:
    """Why there is nothing to draw: no HUCL row in ``open_landscape``."""
    if (tables["open_landscape"]["loss"] == "HUCL").sum() == 0:
        return "the open_landscape table has no HUCL row"
    return None


@style.themed
def render(tables: dict[str, pd.DataFrame]) -> Figure:
    """beta_c against C (markers) with the local thresholds at NC (lines).

    Args:
        tables: ``{"open_landscape": frame}`` with :data:`COLUMNS`, optionally ``"open_hessian"``
            with :data:`HESSIAN`.

    Returns:
        The figure.

    Raises:
        ValueError: missing columns.
    """
    t = frames.table(tables, "open_landscape", COLUMNS)
    bc, missing = _beta_c(t)
    fig, axes = style.new_figure(1, 1, width=8.0, height=5.2)
    ax = axes[0, 0]
    hz = tables.get("open_hessian")
    if hz is not None and not hz.empty and all(c in hz.columns for c in HESSIAN):
        s = hz[hz["kind"] == "saddle"].sort_values("num_classes")
        b = hz[hz["kind"] == "ball"].sort_values("num_classes")
        ax.plot(s["num_classes"], s["beta_saddle"], "-", color="C0", label="sphere: NC becomes a saddle")
        ax.plot(b["num_classes"], b["beta_ball"], "--", color="C1", label="ball: NC no longer a KKT point")
    for norm, g in bc.groupby("normalization", sort=False):
        ax.plot(
            g["num_classes"],
            g["beta_c"],
            linestyle="none",
            marker=MARKERS.get(str(norm), "^"),
            markersize=9,
            markerfacecolor="none",
            markeredgewidth=1.8,
            color="C0" if norm == "sphere" else "C1",
            label=f"{norm}: search beats NC (β_c on the grid)",
        )
    style.finish_axes(ax, xlabel="number of classes C", ylabel="β", loc="lower right")
    fig.suptitle("HUCL: where NC stops being optimal, against C")
    text = "free embeddings, n = 2 per class, d = C - 1, mean-form ψ, τ = 1; β_c is the first grid β"
    if missing:
        text += f"; not beaten up to β = 100: {', '.join(missing)}"
    style.note(fig, text)
    return fig


FIGURES = (
    FigureSpec(
        id="open_beta_c",
        title="HUCL: where NC stops being optimal, against C",
        claims=("O1", "O1b"),
        needs=(TableNeed("open_landscape", COLUMNS), TableNeed("open_hessian", HESSIAN, required=False)),
        render=render,
        check=check,
        produce="python -m figures --only open_beta_c",
        description="The beta at which a configuration beats NC grows slowly with C and sits just "
        "above the local thresholds of the Hessian (sphere) and the radial slope (ball).",
    ),
)
