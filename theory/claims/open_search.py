"""The computations behind the open problems O1, O1b, O1c: their scales, criteria and result rows.

docs/open_problems.md. The searches themselves are :func:`theory.hcl.landscape.search` (O1, O1c:
free embeddings, L-BFGS from many starts) and :mod:`theory.hcl.nc_hessian` (O1b: the Hessian at
NC). This module fixes what is searched at each scale (:data:`SCALES`), the criteria (declared
here, before any run, and never tuned after), and turns the results into plain rows
(:func:`landscape_rows`, :func:`hessian_rows`) that the judges of :mod:`theory.claims.checks_open`
and the figures read.

Criteria:

* :data:`FOUND_MARGIN` (1e-6, relative): a configuration *beats NC* when ``(L_NC - L_best) / L_NC``
  exceeds it. A configuration's loss is an upper bound on the infimum whatever the optimiser did,
  so the margin only has to exceed the error of one float64 evaluation (about 1e-15 relative for
  these sums of ``B^2`` terms): 1e-6 is nine orders of magnitude above it, so that a FOUND can
  never come from rounding, at the price of missing gains below 1e-6 (a saddle just past its
  threshold: the gain grows like the square of the negative curvature).
* :data:`CONTROL_TOL` (1e-10, relative): the controls (SCL, HSCL, UCL, where NC is proven
  optimal) fail if a configuration is below NC by more than this (four orders above rounding);
  they must also *reach* NC within :data:`REACH_TOL` (1e-8), or the search is too weak to be
  trusted.
* :data:`SADDLE_MARGIN` (1e-8): NC is a saddle when the smallest eigenvalue of the Riemannian
  Hessian (rotations removed) is below ``-SADDLE_MARGIN``; the entries are O(1) and exact to
  about 1e-15.
* :data:`AGREE_TOL` (1e-9): sympy and autograd agree on a curvature, slope or threshold.
"""

from __future__ import annotations

import contextlib
import functools
import math
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import torch

from theory.hcl import nc_hessian
from theory.hcl.landscape import SEARCH_NORMALIZATIONS, SMOOTH_PSI_FORMS, search

__all__ = [
    "FOUND_MARGIN",
    "CONTROL_TOL",
    "REACH_TOL",
    "SADDLE_MARGIN",
    "AGREE_TOL",
    "BETA_MAX",
    "OpenScale",
    "SCALES",
    "scale_of",
    "landscape_rows",
    "hessian_rows",
]

FOUND_MARGIN = 1e-6
CONTROL_TOL = 1e-10
REACH_TOL = 1e-8
SADDLE_MARGIN = 1e-8
AGREE_TOL = 1e-9
#: The largest beta searched.
BETA_MAX = 100.0


@dataclass(frozen=True)
class OpenScale:
    """What the open-problem searches cover at one scale.

    Attributes:
        classes: the values of ``C`` of the landscape search (O1, O1c), ``d = C - 1 + extra_d``.
        n: samples per class.
        betas: the ascending beta grid of the beta_c scan (up to :data:`BETA_MAX`).
        bracket_betas: the betas at which every (C, n) is searched for the bracket (O1c).
        control_betas: HSCL betas of the controls (SCL and UCL at beta = 0 too).
        restarts: starts per search; max_iter: L-BFGS iterations.
        normalizations: ``"sphere"`` and / or ``"ball"``; psis: ``"mean"`` and / or ``"sum"``.
        hessian_classes: the values of ``C`` of the Hessian at NC (O1b, ``n = 2``).
        hessian_betas: the ascending grid of the saddle scan (then bisection).
        sympy_classes: the values of ``C`` of the exact (sympy) split curvature.
        hessian_control_betas: the HSCL betas of the Hessian controls.
        extra_d: ``d - (C - 1)`` of the landscape search.
    """

    classes: tuple[int, ...]
    n: tuple[int, ...]
    betas: tuple[float, ...]
    bracket_betas: tuple[float, ...]
    control_betas: tuple[float, ...]
    restarts: int
    max_iter: int
    normalizations: tuple[str, ...]
    psis: tuple[str, ...]
    hessian_classes: tuple[int, ...]
    hessian_betas: tuple[float, ...]
    sympy_classes: tuple[int, ...]
    hessian_control_betas: tuple[float, ...] = (1.0, 5.0, 30.0, 100.0)
    extra_d: int = 0


_GRID = (0.0, 0.25, 0.5, 0.75, 1.0, 1.5, 2.0, 3.0, 5.0, 10.0, 20.0, 30.0, 50.0, 100.0)
_BRACKET = (0.0, 1.0, 2.0, 5.0, 10.0, 30.0, 100.0)

#: The scales: ``quick`` (``--quick``), ``full`` (the default) and ``large`` (``--large``).
SCALES: dict[str, OpenScale] = {
    "quick": OpenScale(
        classes=(3,),
        n=(2,),
        betas=(0.0, 0.5, 1.0, 2.0, 10.0, 100.0),
        bracket_betas=(0.0, 1.0, 100.0),
        control_betas=(1.0,),
        restarts=4,
        max_iter=100,
        normalizations=SEARCH_NORMALIZATIONS,
        psis=("mean",),
        hessian_classes=(3, 4),
        hessian_betas=_GRID,
        sympy_classes=(3,),
    ),
    "full": OpenScale(
        classes=(3, 4, 6, 8),
        n=(2,),
        betas=_GRID,
        bracket_betas=_BRACKET,
        control_betas=(10.0,),
        restarts=6,
        max_iter=150,
        normalizations=SEARCH_NORMALIZATIONS,
        psis=("mean",),
        hessian_classes=(3, 4, 5, 6, 8, 10),
        hessian_betas=_GRID,
        sympy_classes=(3,),
    ),
    "large": OpenScale(
        classes=(3, 4, 5, 6, 8, 10, 12, 15, 20),
        n=(2, 4),
        betas=_GRID,
        bracket_betas=_BRACKET,
        control_betas=(1.0, 5.0, 10.0, 30.0, 100.0),
        restarts=16,
        max_iter=1000,
        normalizations=SEARCH_NORMALIZATIONS,
        psis=SMOOTH_PSI_FORMS,
        hessian_classes=tuple(range(3, 21)),
        hessian_betas=_GRID,
        sympy_classes=(3, 4),
        hessian_control_betas=_GRID[1:],
    ),
}


@contextlib.contextmanager
def _one_thread() -> Iterator[None]:
    """Run torch on one thread inside the block (the thread count is restored after).

    The tensors are tiny: on a shared 2-core machine a second thread made the quick searches
    about 9 times slower (measured: 18.6 s against 2.1 s).
    """
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def scale_of(quick: bool, large: bool) -> OpenScale:
    """The scale of ``python -m theory`` (``--large`` wins over ``--quick``)."""
    return SCALES["large" if large else ("quick" if quick else "full")]


def _row(
    kind: str, setting: str, beta: float, C: int, n: int, norm: str, psi: str, sc: OpenScale, seed: int
) -> dict[str, Any]:
    r = search(
        C,
        n,
        beta,
        setting=setting,
        normalization=norm,
        psi=psi,
        d=C - 1 + sc.extra_d,
        restarts=sc.restarts,
        seed=seed,
        max_iter=sc.max_iter,
    )
    return {
        "loss": kind,
        "setting": setting,
        "normalization": norm,
        "psi": psi,
        "num_classes": C,
        "n": n,
        "d": C - 1 + sc.extra_d,
        "beta": float(beta),
        "best": r.best,
        "nc": r.nc,
        "nc_loss": r.nc_loss,
        "bound": r.bound,
        "gain": r.gain,
        "beats_nc": r.gain > FOUND_MARGIN,
        "restarts": len(r.values),
        "iterations": r.iterations,
        **r.geometry,
    }


@functools.lru_cache(maxsize=4)
def landscape_rows(scale: str, seed: int = 0) -> tuple[dict[str, Any], ...]:
    """One row per search of O1 / O1c at ``scale`` (a :data:`SCALES` key), in a fixed order.

    Per (normalisation, psi, C, n): HUCL on the beta grid, ascending, until the first beta that
    beats NC (beta_c), then at the bracket betas above it; the controls SCL and UCL (beta 0) and
    HSCL at the control betas. Columns: ``loss`` (SCL/HSCL/UCL/HUCL), ``setting``,
    ``normalization``, ``psi``, ``num_classes``, ``n``, ``d``, ``beta``, ``best``, ``nc`` (closed
    form), ``nc_loss`` (the loss at the NC batch), ``bound``, ``gain``, ``beats_nc``,
    ``restarts``, ``iterations`` and the geometry of :func:`theory.hcl.landscape.geometry`.
    Cached on the positional ``(scale, seed)``: the judges and the figures share one computation
    (call it with both arguments positional).
    """
    sc = SCALES[scale]
    rows: list[dict[str, Any]] = []
    with _one_thread():
        _landscape(sc, seed, rows)
    return tuple(rows)


def _landscape(sc: OpenScale, seed: int, rows: list[dict[str, Any]]) -> None:
    for norm in sc.normalizations:
        for psi in sc.psis:
            for C in sc.classes:
                for n in sc.n:
                    found = False
                    for beta in sc.betas:
                        if found and beta not in sc.bracket_betas:
                            continue
                        rows.append(_row("HUCL", "unsupervised", beta, C, n, norm, psi, sc, seed))
                        found = found or bool(rows[-1]["beats_nc"])
                    rows.append(_row("SCL", "supervised", 0.0, C, n, norm, psi, sc, seed))
                    rows.append(_row("UCL", "unsupervised", 0.0, C, n, norm, psi, sc, seed))
                    for beta in sc.control_betas:
                        rows.append(_row("HSCL", "supervised", beta, C, n, norm, psi, sc, seed))


@functools.lru_cache(maxsize=4)
def hessian_rows(scale: str) -> tuple[dict[str, Any], ...]:
    """The Hessian at NC (O1b), ``n = 2``, sphere, mean psi, per C and loss (cached).

    Rows: ``kind="eigen"`` (``loss``, ``num_classes``, ``beta``, ``min_eigenvalue``,
    ``grad_tangent``, ``rotation_residual``, ``rotation_dim``, ``radial``) for SCL and UCL at
    beta 0, HSCL at the control betas and HUCL on the grid up to its saddle; ``kind="saddle"``
    (``num_classes``, ``beta_saddle`` to 1/4096 of its grid interval, NaN when none up to
    :data:`BETA_MAX`); ``kind="ball"``
    (``num_classes``, ``beta_ball``: the root of the ball's radial slope, by bisection on the
    autograd slope, and ``beta_ball_sympy`` from the closed form).
    """
    sc = SCALES[scale]
    rows: list[dict[str, Any]] = []
    with _one_thread():
        _hessians(sc, rows)
    return tuple(rows)


def _hessians(sc: OpenScale, rows: list[dict[str, Any]]) -> None:
    def eigen(loss: str, setting: str, C: int, beta: float) -> None:
        h = nc_hessian.hessian_at_nc(setting, C, 2, beta)
        rows.append(
            {
                "kind": "eigen",
                "loss": loss,
                "num_classes": C,
                "beta": float(beta),
                "min_eigenvalue": h.min_eigenvalue,
                "grad_tangent": h.grad_tangent,
                "rotation_residual": h.rotation_residual,
                "rotation_dim": h.rotation_dim,
                "radial": h.radial,
            }
        )

    for C in sc.hessian_classes:
        eigen("SCL", "supervised", C, 0.0)
        eigen("UCL", "unsupervised", C, 0.0)
        for beta in sc.hessian_control_betas:
            eigen("HSCL", "supervised", C, beta)
        b_saddle = math.nan
        for beta in sc.hessian_betas[1:]:
            eigen("HUCL", "unsupervised", C, beta)
            if rows[-1]["min_eigenvalue"] < -SADDLE_MARGIN:
                b_saddle, _ = nc_hessian.saddle_beta(
                    "unsupervised",
                    C,
                    2,
                    tuple(b for b in sc.hessian_betas if b <= beta),
                    margin=SADDLE_MARGIN,
                    bisections=12,
                )
                break
        rows.append({"kind": "saddle", "num_classes": C, "beta_saddle": b_saddle})
        rows.append(
            {
                "kind": "ball",
                "num_classes": C,
                "beta_ball": _radial_root(C),
                "beta_ball_sympy": (
                    math.nan
                    if math.isnan(_radial_root(C))
                    else nc_hessian.radial_beta_expr(C, guess=_radial_root(C))
                ),
            }
        )


@functools.lru_cache(maxsize=64)
def _radial_root(C: int) -> float:
    """The beta at which the ball's radial slope at NC changes sign (bisection on autograd), NaN if none."""
    lo, hi = 0.0, BETA_MAX
    if nc_hessian.radial_slope(C, 2, lo) > 0 or nc_hessian.radial_slope(C, 2, hi) <= 0:
        return math.nan
    for _ in range(60):
        mid = 0.5 * (lo + hi)
        lo, hi = (mid, hi) if nc_hessian.radial_slope(C, 2, mid) <= 0 else (lo, mid)
    return 0.5 * (lo + hi)
