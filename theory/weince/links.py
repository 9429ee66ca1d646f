"""Link selection in the nested T_lambda family: likelihood of the observed winners, LRT at lambda = 0.

Erol et al., ICML 2026 (arXiv 2606.00262), the nested link family; the procedure is the
project's own (``docs/weince.md#link-selection``), not the paper's. Each candidate row holds the
positive's similarity in column 0 and its negatives after it; the T_lambda logits are
:func:`theory.weince.logits.tlambda_logits` ``(1 - lam) s / tau + lam (-log(1 - min(s, 1 - eps)))``.
``tau`` defaults to :data:`theory.options.WEINCE_TAU`. Input rule of the EVT tools
(``docs/weince.md#inputs``).

Identification: when the profile log-likelihood is flat over ``lambda in [0, 1]`` (its range
below ``flat_tol`` times ``max(1, |loglik|)``), or every candidate row is constant, lambda is not
identified: :func:`link_select` reports ``identified=False`` and ``lam_hat = NaN``
(``docs/weince.md#link-selection``).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd
import torch
from scipy import optimize, stats

from theory.infonce import two_view_candidates
from theory.options import WEINCE_TAU
from theory.validation import check_size, integer, real
from theory.weince._inputs import as_float64, as_index_array, as_mask
from theory.weince.config import DEFAULT_GATE
from theory.weince.logits import tlambda_logits

__all__ = [
    "tlambda_loglik",
    "candidates_from_similarity",
    "two_view_link_candidates",
    "LinkSelection",
    "link_select",
]


#: Bytes of :func:`link_select` per grid point: the grid, its log-likelihoods, the profile table
#: (three float64 columns) and the Python ``(tau, loglik)`` pair of each point (about 112 bytes).
_GRID_POINT_BYTES = 160


def _tau_bounds(tau_bounds: Any) -> tuple[float, float]:
    """``tau_bounds`` as ``(low, high)`` with ``0 < low < high`` finite; errors name ``tau_bounds``."""
    try:
        pair = tuple(tau_bounds)
    except TypeError:
        pair = ()
    if len(pair) != 2:
        raise ValueError(f"tau_bounds must be a pair (low, high) of temperatures, got {tau_bounds!r}")
    lo_t = real("tau_bounds[0]", pair[0], lo=0.0, lo_open=True)
    hi_t = real("tau_bounds[1]", pair[1])
    if not lo_t < hi_t:
        raise ValueError(f"tau_bounds must be increasing (low < high), got {tau_bounds!r}")
    return lo_t, hi_t


def _cand_list(cand: Any) -> list[np.ndarray]:
    items = list(cand) if isinstance(cand, (list, tuple)) else [cand]
    if not items:
        raise ValueError("cand must contain at least one array")
    out = []
    for j, a in enumerate(items):
        name = "cand" if len(items) == 1 and not isinstance(cand, (list, tuple)) else f"cand[{j}]"
        arr = as_float64(name, a)
        if arr.ndim != 2 or arr.shape[1] < 2:
            raise ValueError(
                f"{name}: candidate arrays must be 2-D (M, C) with C >= 2 (positive at column 0), "
                f"got shape {arr.shape}"
            )
        out.append(arr)
    return out


def _loglik_arrays(arrs: Sequence[torch.Tensor], lam: float, tau: float, eps: float) -> float:
    """``sum_i log softmax(T_lambda logits of row i)_0`` over float64 tensors ``(M, C)``.

    The logits are :func:`theory.weince.logits.tlambda_logits` (the loss's own formula).
    """
    total = 0.0
    for a in arrs:
        l = tlambda_logits(a, lam, tau, eps)
        total += float((l[:, 0] - torch.logsumexp(l, dim=1)).sum())
    return total


def tlambda_loglik(cand: Any, lam: float, tau: float = WEINCE_TAU, eps: float = DEFAULT_GATE.eps) -> float:
    """Log-likelihood of the observed winners (column 0) under the T_lambda link.

    ``sum_i log softmax_j((1 - lam) s_ij / tau + lam (-log(1 - min(s_ij, 1 - eps))))_0``
    (``docs/weince.md#link-selection``).

    Args:
        cand: ``(M, C)`` candidate similarities (positive first in every row), or a list of such
            arrays (widths may differ); arrays or tensors.
        lam: the blend weight in ``[0, 1]``.
        tau: temperature of the linear branch, ``> 0``.
        eps: clamp of the shortfall branch, in ``(0, 0.5]``.

    Returns:
        The total log-likelihood (``<= 0``).

    Raises:
        ValueError: bad arrays or settings.
    """
    lam = real("lam", lam, lo=0.0, hi=1.0)
    tau = real("tau", tau, lo=0.0, lo_open=True)
    eps = real("eps", eps, lo=0.0, lo_open=True, hi=0.5)
    arrs = [torch.from_numpy(a) for a in _cand_list(cand)]
    return _loglik_arrays(arrs, lam, tau, eps)


def candidates_from_similarity(S: Any, positives: Any, negatives: Any = None) -> np.ndarray:
    """Candidate rows ``[S[i, pos_i], S[i, negatives of i]]`` from a frozen similarity matrix.

    Args:
        S: ``(A, B)`` similarities of anchors to a bank.
        positives: ``(A,)`` column index of each anchor's positive.
        negatives: optional ``(A, B)`` boolean mask of allowed negatives with the same count per
            row; default: every column except the positive (and except column ``i`` when
            ``S`` is square, i.e. the anchor itself).

    Returns:
        ``(A, 1 + K)`` with the positive in column 0 and negatives in ascending column order.

    Raises:
        ValueError: non-finite or non-2-D ``S``, bad ``positives`` / ``negatives``.
    """
    S = as_float64("S", S, ndim=2)
    A, B = S.shape
    pos = as_index_array("positives", positives)
    if pos.shape != (A,) or pos.min() < 0 or pos.max() >= B:
        raise ValueError(f"positives must be ({A},) integer column indices in [0, {B}), got {positives!r}")
    if negatives is None:
        mask = np.ones((A, B), dtype=bool)
        mask[np.arange(A), pos] = False
        if A == B:
            mask[np.arange(A), np.arange(A)] = False
    else:
        mask = as_mask("negatives", negatives)
        if mask.shape != (A, B):
            raise ValueError(f"negatives must have shape {(A, B)}, got {mask.shape}")
        if np.any(mask[np.arange(A), pos]):
            raise ValueError("negatives must not contain the positive")
    counts = mask.sum(axis=1)
    if counts.min() != counts.max() or counts.min() < 1:
        raise ValueError(
            f"every anchor needs the same number (>= 1) of negatives, got counts {np.unique(counts)}"
        )
    neg = S[mask].reshape(A, int(counts[0]))
    return np.concatenate([S[np.arange(A), pos][:, None], neg], axis=1)


def two_view_link_candidates(z1: Any, z2: Any) -> np.ndarray:
    """Candidate rows of frozen two-view embeddings for :func:`link_select`.

    The NT-Xent candidate set of :func:`theory.infonce.two_view_candidates` (cosine similarities,
    positive ``(i + N) mod 2N`` in column 0, the ``2N - 2`` negatives after it), in float64.

    Args:
        z1: ``(N, d)`` first views (array or tensor).
        z2: ``(N, d)`` second views.

    Returns:
        ``(2N, 2N - 1)`` float64 numpy.

    Raises:
        ValueError: non-finite inputs, shape mismatch, ``N < 2``.
    """
    a1 = torch.from_numpy(as_float64("z1", z1, ndim=2))
    a2 = torch.from_numpy(as_float64("z2", z2, ndim=2))
    with torch.no_grad():
        _, cand = two_view_candidates(a1, a2)
    return cand.numpy()


@dataclass(frozen=True)
class LinkSelection:
    """Result of :func:`link_select` (the project's procedure, not the paper's values).

    ``docs/weince.md#link-selection``.

    Attributes:
        lam_hat: the maximum-likelihood lambda in ``[0, 1]``; NaN when not identified.
        tau_hat: the temperature at ``lam_hat`` (the fixed ``tau`` when it was not fitted; NaN
            when fitted and not identified).
        loglik: the maximised log-likelihood (the flat value when not identified).
        loglik0: the log-likelihood at ``lambda = 0`` (softmax).
        tau0_hat: the temperature at ``lambda = 0``.
        lr_stat: ``2 (loglik - loglik0) >= 0`` (0 when not identified).
        p_chi2: ``P(chi2_1 > lr_stat)`` (1 when not identified).
        p_boundary: the ``0.5 chi2_0 + 0.5 chi2_1`` mixture p-value (Self and Liang 1987), because
            ``lambda = 0`` lies on the boundary of ``[0, 1]`` (1 when ``lr_stat = 0``). Both
            p-values are nominal: in-batch candidate rows share items and are not independent.
        n_rows: number of candidate rows.
        identified: False when the profile log-likelihood is flat over ``[0, 1]`` (range at most
            ``flat_tol max(1, |loglik|)``) or every row is constant: no lambda is preferred.
        loglik_range: ``max - min`` of the profile log-likelihood over the grid.
        profile: columns ``lam, loglik, tau`` over the grid.
    """

    lam_hat: float
    tau_hat: float
    loglik: float
    loglik0: float
    tau0_hat: float
    lr_stat: float
    p_chi2: float
    p_boundary: float
    n_rows: int
    identified: bool
    loglik_range: float
    profile: pd.DataFrame = field(repr=False)


def link_select(
    cand: Any,
    *,
    tau: float | None = WEINCE_TAU,
    eps: float = DEFAULT_GATE.eps,
    n_grid: int = 51,
    tau_bounds: tuple[float, float] = (0.01, 10.0),
    xatol: float = 1e-7,
    flat_tol: float = 1e-9,
) -> LinkSelection:
    """Maximum-likelihood ``lambda_hat`` in the nested T_lambda family + LRT against lambda = 0.

    Treats each row's positive (column 0) as the observed winner among its candidates
    (``docs/weince.md#link-selection``): ``lambda_hat = argmax_{lam in [0,1]} l(lam, tau)`` on a grid
    of ``n_grid`` points refined by a bounded 1-D optimiser (scipy ``minimize_scalar``, method
    "bounded") on the bracket around the best grid point. ``tau=None`` profiles tau too (bounded
    search on ``log tau`` within ``tau_bounds`` for every lambda; at lambda = 1 tau is not
    identified).

    **Identification rule.** lambda is *not identified* when every candidate row is constant
    (each row's logits are equal for every lambda), or when the profile log-likelihood over the
    grid varies by at most ``flat_tol * max(1, |max loglik|)`` (a flat likelihood: for instance
    rows whose candidates have equal ``-log(1 - s) - s / tau``). Then ``identified=False``,
    ``lam_hat = NaN``, ``lr_stat = 0`` and both p-values are 1 (no evidence either way).

    Args:
        cand: ``(M, C)`` candidate similarities (positive in column 0) or a list of such arrays
            (e.g. one per frozen batch; widths may differ).
        tau: fixed temperature of the linear branch, or None to fit it.
        eps: clamp of the shortfall branch, in ``(0, 0.5]``.
        n_grid: grid points over ``[0, 1]`` (``>= 3``; each costs one profile likelihood and
            about :data:`_GRID_POINT_BYTES` bytes of the profile table).
        tau_bounds: search interval ``(low, high)`` of ``tau`` when it is fitted, ``0 < low < high``
            (checked whether or not ``tau`` is fitted).
        xatol: absolute tolerance of the bounded lambda search.
        flat_tol: relative flatness tolerance of the identification rule, ``>= 0``.

    Returns:
        :class:`LinkSelection`.

    Raises:
        ValueError: bad arrays (non-finite, not 2-D, fewer than 2 columns) or settings, each naming
            its argument (``tau_bounds`` that is not a pair ``0 < low < high``; an ``n_grid``
            whose profile table cannot be allocated, with the memory it needs).
    """
    eps = real("eps", eps, lo=0.0, lo_open=True, hi=0.5)
    n_grid = integer("n_grid", n_grid, lo=3)
    check_size("n_grid", n_grid, n_grid * _GRID_POINT_BYTES, what="the grid and its profile table")
    flat_tol = real("flat_tol", flat_tol, lo=0.0)
    xatol = real("xatol", xatol, lo=0.0, lo_open=True)
    lo_t, hi_t = _tau_bounds(tau_bounds)
    np_arrs = _cand_list(cand)
    arrs = [torch.from_numpy(a) for a in np_arrs]
    n_rows = sum(a.shape[0] for a in arrs)
    if tau is not None:
        tau = real("tau", tau, lo=0.0, lo_open=True)

    def best_tau(lam: float) -> tuple[float, float]:
        if tau is not None:
            return tau, _loglik_arrays(arrs, lam, tau, eps)
        r = optimize.minimize_scalar(
            lambda lt: -_loglik_arrays(arrs, lam, math.exp(lt), eps),
            bounds=(math.log(lo_t), math.log(hi_t)),
            method="bounded",
            options={"xatol": 1e-6},
        )
        return math.exp(r.x), -float(r.fun)

    grid = np.linspace(0.0, 1.0, n_grid)
    prof = [best_tau(float(l)) for l in grid]
    lls = np.array([p[1] for p in prof])
    profile = pd.DataFrame({"lam": grid, "loglik": lls, "tau": [p[0] for p in prof]})
    tau0, ll0 = prof[0]
    ll_range = float(lls.max() - lls.min())
    constant_rows = all(bool(np.all(a == a[:, :1])) for a in np_arrs)
    if constant_rows or ll_range <= flat_tol * max(1.0, abs(float(lls.max()))):
        nan = float("nan")
        tau_hat = nan if tau is None else tau
        return LinkSelection(
            nan, tau_hat, float(lls.max()), ll0, tau0, 0.0, 1.0, 1.0, n_rows, False, ll_range, profile
        )
    j = int(np.argmax(lls))
    lo_l, hi_l = grid[max(j - 1, 0)], grid[min(j + 1, n_grid - 1)]
    r = optimize.minimize_scalar(
        lambda l: -best_tau(l)[1], bounds=(lo_l, hi_l), method="bounded", options={"xatol": xatol}
    )
    lam_hat, ll_hat = float(r.x), -float(r.fun)
    if lls[j] >= ll_hat:  # the grid point (possibly an end point 0 or 1) is at least as good
        lam_hat, ll_hat = float(grid[j]), float(lls[j])
    tau_hat = best_tau(lam_hat)[0]
    stat = max(2.0 * (ll_hat - ll0), 0.0)
    p_chi2 = float(stats.chi2.sf(stat, 1))
    p_boundary = 0.5 * p_chi2 if stat > 0 else 1.0
    return LinkSelection(
        lam_hat, tau_hat, ll_hat, ll0, tau0, stat, p_chi2, p_boundary, n_rows, True, ll_range, profile
    )
