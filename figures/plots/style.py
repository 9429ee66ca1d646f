"""One look for every figure of the project: theme, colours, seed bands, ideal lines, saving.

Every renderer in :mod:`figures` builds a :class:`matplotlib.figure.Figure` (never ``pyplot``, so
no global figure state) inside :func:`themed`, which applies the project's seaborn theme for the
duration of the call only. The conventions:

* **colours**: one colour per hardness ``beta`` (:func:`beta_color`: beta = 0, the SCL / UCL
  baseline, is dark grey; beta in {2, 5, 10, 30} run through a fixed ramp) and one per method
  (:func:`method_color`: SCL/HSCL, UCL/HUCL, InfoNCE/WeiNCE);
* **seed bands** (:func:`seed_band`): the mean over seeds as a line and mean +- one sample
  standard deviation (ddof = 1) as a shaded band; the legend says "mean ± std over n seeds";
* **ideal values** (:func:`ideal_line`): a dashed black line, labelled in the legend;
* axes always labelled, legends always present when more than one curve is drawn
  (:func:`finish_axes` checks both).

The pipeline saves figures (:func:`figures.pipeline.render.save_figure`, ``<id>.png`` at :data:`DPI`
and ``<id>.pdf``, atomically) in this theme; the figure modules never write files.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import matplotlib

matplotlib.use("Agg", force=False)  # no display needed; harmless when a backend is already set

import matplotlib as mpl
import numpy as np
import pandas as pd
import seaborn as sns
from matplotlib.axes import Axes
from matplotlib.figure import Figure

__all__ = [
    "BETAS",
    "DPI",
    "THEME",
    "themed",
    "new_figure",
    "beta_color",
    "beta_label",
    "method_color",
    "METHOD_COLORS",
    "NORMALIZATION_COLORS",
    "seed_band",
    "aggregate_seeds",
    "ideal_line",
    "finish_axes",
    "note",
    "figure_text",
]

#: The hardness values of the papers' sweeps (arXiv 2311.05139, §5: beta in {0, 2, 5, 10, 30}).
BETAS = (0.0, 2.0, 5.0, 10.0, 30.0)
#: Resolution of the PNG files.
DPI = 150

_RC = {
    "figure.dpi": 100,
    "savefig.dpi": DPI,
    "figure.autolayout": False,
    "axes.titlesize": 12,
    "axes.labelsize": 11,
    "legend.fontsize": 9,
    "legend.title_fontsize": 9,
    "legend.framealpha": 0.85,
    "xtick.labelsize": 9,
    "ytick.labelsize": 9,
    "lines.linewidth": 1.8,
    "pdf.fonttype": 42,  # embed TrueType: text stays text in the PDF
    "svg.fonttype": "none",
    "image.cmap": "rocket",
}
#: The rc parameters of the project's theme: seaborn "whitegrid" + "notebook" context, plus _RC.
THEME: dict[Any, Any] = {**sns.axes_style("whitegrid"), **sns.plotting_context("notebook"), **_RC}

_BETA_RAMP = sns.color_palette("flare", 4)  # beta = 2, 5, 10, 30 (light to dark)
_BETA_FIXED = {2.0: _BETA_RAMP[0], 5.0: _BETA_RAMP[1], 10.0: _BETA_RAMP[2], 30.0: _BETA_RAMP[3]}
_BASE_GREY = (0.25, 0.25, 0.25)

_CB = sns.color_palette("colorblind", 10)
#: One colour per method: blues for the supervised family, oranges for the unsupervised one
#: (the hard version is the stronger shade), grey for InfoNCE and purple for WeiNCE.
METHOD_COLORS: dict[str, tuple[float, float, float]] = {
    "SCL": _CB[9],
    "HSCL": _CB[0],
    "UCL": _CB[1],
    "HUCL": _CB[3],
    "InfoNCE": _CB[7],
    "WeiNCE": _CB[4],
}
#: One colour per feature normalisation (none / unit ball / unit sphere).
NORMALIZATION_COLORS: dict[str, tuple[float, float, float]] = {
    "none": _CB[5],
    "ball": _CB[2],
    "sphere": _CB[4],
}


def themed(fn: Callable[..., Figure]) -> Callable[..., Figure]:
    """Decorator: run a renderer inside the project theme (``matplotlib.rc_context(THEME)``).

    The theme is applied only while the renderer builds its figure, so rendering never changes
    global matplotlib state and gives the same figure whatever the caller configured.
    """

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Figure:
        with mpl.rc_context(THEME):
            return fn(*args, **kwargs)

    return wrapper


def new_figure(
    nrows: int = 1, ncols: int = 1, *, width: float = 8.0, height: float = 5.0, **subplot_kw: Any
) -> tuple[Figure, np.ndarray]:
    """A figure with an ``(nrows, ncols)`` array of axes (the authors' panels are 8 x 5 inches).

    Args:
        nrows: rows of panels (>= 1).
        ncols: columns of panels (>= 1).
        width: total width in inches.
        height: total height in inches.
        **subplot_kw: passed to :meth:`Figure.subplots` (e.g. ``sharey=True``).

    Returns:
        ``(fig, axes)`` with ``axes`` always a 2-D numpy array of :class:`Axes`.

    Raises:
        ValueError: non-positive sizes.
    """
    for name, v in (("nrows", nrows), ("ncols", ncols)):
        if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < 1:
            raise ValueError(f"{name} must be a positive integer, got {v!r}")
    for label, size in (("width", width), ("height", height)):
        if not (isinstance(size, (int, float)) and size > 0):
            raise ValueError(f"{label} must be a positive number, got {size!r}")
    fig = Figure(figsize=(width, height), layout="constrained")
    axes = fig.subplots(nrows, ncols, squeeze=False, **subplot_kw)
    return fig, axes


def _as_beta(beta: Any) -> float:
    try:
        b = float(beta)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"beta must be a number, got {beta!r}") from exc
    if not math.isfinite(b) or b < 0:
        raise ValueError(f"beta must be a finite number >= 0, got {beta!r}")
    return b + 0.0  # -0.0 -> 0.0


def beta_color(beta: Any) -> tuple[float, float, float]:
    """The colour of hardness ``beta``: dark grey for 0, a fixed ramp for 2, 5, 10, 30.

    Other values are placed on the same ramp by ``log(1 + beta)`` so that colours stay ordered.

    Raises:
        ValueError: ``beta`` negative or not a number.
    """
    b = _as_beta(beta)
    if b == 0.0:
        return _BASE_GREY
    if b in _BETA_FIXED:
        return tuple(_BETA_FIXED[b])  # type: ignore[return-value]
    cmap = sns.color_palette("flare", as_cmap=True)
    t = min(1.0, max(0.0, math.log1p(b) / math.log1p(30.0)))
    r, g, bl, _ = cmap(0.15 + 0.85 * t)
    return (r, g, bl)


def beta_label(beta: Any, family: str | None = None) -> str:
    """Legend label of a hardness value: ``"β = 0 (SCL)"``, ``"β = 5 (HSCL)"``, ``"β = 5"``.

    Args:
        beta: the hardness (>= 0).
        family: ``"SCL"`` (supervised: SCL / HSCL), ``"UCL"`` (unsupervised: UCL / HUCL) or None.

    Raises:
        ValueError: bad ``beta`` or unknown ``family``.
    """
    b = _as_beta(beta)
    text = f"β = {b:g}"
    if family is None:
        return text
    if family not in ("SCL", "UCL"):
        raise ValueError(f"family must be 'SCL', 'UCL' or None, got {family!r}")
    method = family if b == 0 else "H" + family
    return f"{text} ({method})"


def method_color(method: str) -> tuple[float, float, float]:
    """The colour of a method (SCL, HSCL, UCL, HUCL, InfoNCE, WeiNCE).

    Raises:
        ValueError: unknown method.
    """
    if method not in METHOD_COLORS:
        raise ValueError(f"method must be one of {list(METHOD_COLORS)}, got {method!r}")
    return tuple(METHOD_COLORS[method])  # type: ignore[return-value]


def aggregate_seeds(
    frame: pd.DataFrame, x: str, y: str, *, by: Sequence[str] = (), seed: str = "seed"
) -> pd.DataFrame:
    """Mean, sample std (ddof = 1) and count of ``y`` over seeds at each ``x`` (and group).

    Args:
        frame: tidy table with columns ``x``, ``y`` and ``by`` (``seed`` is not required: every row
            at one ``x`` counts as one replicate).
        x: the abscissa column (e.g. ``epoch``, ``beta``).
        y: the value column; non-finite values are dropped.
        by: further grouping columns (e.g. ``beta``).
        seed: the replicate column (only used to count distinct seeds when present).

    Returns:
        Columns ``by..., x, mean, std, n`` sorted by ``by`` then ``x`` (``std`` is 0 for n = 1).

    Raises:
        ValueError: a named column is missing.
    """
    by = list(by)
    for c in [x, y, *by]:
        if c not in frame.columns:
            raise ValueError(f"column {c!r} not in the table (columns: {list(frame.columns)})")
    d = frame[[*by, x, y] + ([seed] if seed in frame.columns and seed not in (x, *by) else [])].copy()
    d[y] = pd.to_numeric(d[y], errors="coerce")
    d = d[np.isfinite(d[y].to_numpy(dtype=float))]
    if len(d) == 0:
        return pd.DataFrame(columns=[*by, x, "mean", "std", "n"])
    g = d.groupby([*by, x], sort=True, dropna=False)[y]
    out = g.agg(mean="mean", std=lambda s: float(s.std(ddof=1)) if len(s) > 1 else 0.0, n="count")
    return out.reset_index()


def seed_band(
    ax: Axes,
    x: Iterable[float],
    mean: Iterable[float],
    std: Iterable[float] | None = None,
    *,
    color: Any = None,
    label: str | None = None,
    alpha: float = 0.2,
    marker: str | None = None,
    linestyle: str = "-",
    zorder: float = 2,
) -> None:
    """Draw a seed-aggregated curve: the mean as a line, mean +- std as a shaded band.

    Args:
        ax: target axes.
        x: abscissae ``(n,)``.
        mean: seed means ``(n,)``.
        std: seed standard deviations ``(n,)`` or None (no band).
        color: line and band colour.
        label: legend label of the line.
        alpha: band opacity.
        marker: optional marker of the line.
        linestyle: line style.
        zorder: drawing order.

    Raises:
        ValueError: arrays of different lengths.
    """
    xv = np.asarray(list(x), dtype=float)
    mv = np.asarray(list(mean), dtype=float)
    if xv.shape != mv.shape:
        raise ValueError(f"x and mean must have the same length, got {xv.shape} and {mv.shape}")
    (line,) = ax.plot(
        xv, mv, color=color, label=label, marker=marker, linestyle=linestyle, markersize=4, zorder=zorder
    )
    if std is not None:
        sv = np.asarray(list(std), dtype=float)
        if sv.shape != mv.shape:
            raise ValueError(f"std and mean must have the same length, got {sv.shape} and {mv.shape}")
        sv = np.where(np.isfinite(sv), sv, 0.0)
        if np.any(sv > 0):
            ax.fill_between(
                xv, mv - sv, mv + sv, color=line.get_color(), alpha=alpha, linewidth=0, zorder=zorder - 0.5
            )


def ideal_line(
    ax: Axes, value: float, *, label: str = "ideal", orientation: str = "h", color: Any = "black"
) -> None:
    """The ideal value of a quantity as a dashed line (horizontal by default).

    Args:
        ax: target axes.
        value: the ideal value (finite).
        label: legend label (e.g. ``"ideal 0"``, ``"L* = 0.2846"``).
        orientation: ``"h"`` (horizontal, y = value) or ``"v"`` (vertical, x = value).
        color: line colour.

    Raises:
        ValueError: non-finite value or unknown orientation.
    """
    v = float(value)
    if not math.isfinite(v):
        raise ValueError(f"value must be finite, got {value!r}")
    if orientation == "h":
        ax.axhline(v, color=color, linestyle="--", linewidth=1.3, label=label, zorder=3)
    elif orientation == "v":
        ax.axvline(v, color=color, linestyle="--", linewidth=1.3, label=label, zorder=3)
    else:
        raise ValueError(f"orientation must be 'h' or 'v', got {orientation!r}")


def finish_axes(
    ax: Axes,
    *,
    title: str | None = None,
    xlabel: str,
    ylabel: str,
    legend: bool = True,
    legend_title: str | None = None,
    loc: str = "best",
    outside: bool = False,
) -> None:
    """Title, axis labels and legend of a panel (the labels are mandatory).

    Args:
        ax: the panel.
        title: panel title.
        xlabel: x-axis label (non-empty).
        ylabel: y-axis label (non-empty).
        legend: draw a legend when the panel has labelled artists.
        legend_title: legend title.
        loc: legend location (``"best"`` avoids covering data where it can).
        outside: put the legend to the right of the panel, outside the data area.

    Raises:
        ValueError: an empty axis label.
    """
    if not xlabel or not ylabel:
        raise ValueError(f"xlabel and ylabel must be non-empty, got {xlabel!r} and {ylabel!r}")
    if title:
        ax.set_title(title)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    if legend:
        handles, _labels = ax.get_legend_handles_labels()
        if handles:
            if outside:
                ax.legend(title=legend_title, loc="upper left", bbox_to_anchor=(1.02, 1.0), borderaxespad=0.0)
            else:
                ax.legend(title=legend_title, loc=loc)  # type: ignore[call-overload]


def note(fig: Figure, text: str) -> None:
    """A small grey caption at the bottom of the figure, wrapped to the figure's width.

    The caption names the setting the figure shows.
    """
    if text:
        import textwrap

        width = max(40, int(fig.get_figwidth() * 17))
        fig.supxlabel("\n".join(textwrap.wrap(text, width)), fontsize=8, color="0.35")


def figure_text(fig: Figure) -> dict[str, list[str]]:
    """Titles and axis labels of a figure (for tests and the report): suptitle, titles, x/y labels."""
    sup_artist = getattr(fig, "_suptitle", None)  # matplotlib keeps the suptitle private
    sup = sup_artist.get_text() if sup_artist is not None else ""
    axes = [a for a in fig.axes if a.get_label() != "<colorbar>"]
    return {
        "suptitle": [sup] if sup else [],
        "titles": [a.get_title() for a in axes if a.get_title()],
        "xlabels": [a.get_xlabel() for a in axes if a.get_xlabel()],
        "ylabels": [a.get_ylabel() for a in axes if a.get_ylabel()],
    }
