"""The tail-size rules and the two least-squares tail fits of WeiNCE: pure numerics.

Erol et al., ICML 2026 (arXiv 2606.00262), the gate as released by the authors;
``docs/weince.md#the-gate`` (steps 1-7). Used by both the gate of the loss
(:mod:`theory.weince.gate`) and the extreme-value diagnostics (:mod:`theory.weince.tails`), which
therefore never depend on the loss.

Notation: ``K`` (``num_negatives``) negatives per anchor, ``A`` anchors, ``k_tail`` tail size,
``burn = max(1, k_tail // 20)`` burn-in, ``n_eff = k_tail - burn``; shortfall
``delta = max(1 - s, eps)``; within-tail rank ECDF ``F = r / (k_tail + 1)``; Weibull line
``log F = a + beta log delta`` versus the Gumbel-fast proxy ``log(-log F) = b - kappa log delta``.

Two implementations of the fits, which agree to float64 round-off: :func:`_tail_fits` (numpy,
used by :func:`tail_fits`, the diagnostics and the CPU fast path of the gate) and
:func:`_tail_fits_torch` (torch, on the tensors' device, no host synchronisation: the gate on GPU).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from theory.validation import integer, real
from theory.weince._inputs import as_float64
from theory.weince.config import DEFAULT_GATE

__all__ = ["tail_size", "rho0_index", "TailFits", "tail_fits"]

#: Floors of the authors' least-squares fits (``docs/weince.md#the-gate``, step 5): denominator, SSE, and the sanity penalty.
_DEN_FLOOR = 1e-12
_SSE_FLOOR = 1e-12
_PENALTY = 1e6


# --------------------------------------------------------------------------------------------
# the rounding rules (steps 1 and 7)
# --------------------------------------------------------------------------------------------


def tail_size(
    num_negatives: int, tail_frac: float = DEFAULT_GATE.tail_frac, min_tail: int = DEFAULT_GATE.min_tail
) -> int:
    """Tail size ``k_tail`` for ``K = num_negatives`` negatives, in the authors' exact order.

    ``k = max(min_tail, round(tail_frac K)); k = min(k, K); k = max(10, k); k = min(k, K)`` with
    Python's ``round`` (round half to even); ``docs/weince.md#the-gate``, step 1. Examples:
    K=510 -> 51, K=126 -> 32, K=14 -> 14. The defaults are those of
    :class:`theory.weince.config.GateConfig`.

    Args:
        num_negatives: ``K >= 1``.
        tail_frac: tail fraction ``>= 0``.
        min_tail: minimal tail size ``>= 0``.

    Returns:
        ``k_tail`` in ``[1, K]``.

    Raises:
        ValueError: ``num_negatives < 1``, ``tail_frac < 0`` or ``min_tail < 0``.
    """
    K = integer("num_negatives", num_negatives, lo=1)
    return _tail_size(K, real("tail_frac", tail_frac, lo=0.0), integer("min_tail", min_tail, lo=0))


@functools.lru_cache(maxsize=256)
def _tail_size(K: int, tail_frac: float, min_tail: int) -> int:
    """:func:`tail_size` on validated arguments (cached: the loss asks once per batch)."""
    k = max(min_tail, round(tail_frac * K))
    k = min(k, K)
    k = max(10, k)
    return min(k, K)


def rho0_index(A: int, q: float = DEFAULT_GATE.q) -> int:
    """Index of the pivot ``rho0`` in ``sort(rho)`` over ``A`` anchors: ``round(q (A - 1))``.

    Python ``round`` (half to even), ``docs/weince.md#the-gate``, step 7: A=512 -> 102,
    A=8 -> round(1.4) = 1.

    Args:
        A: number of anchors ``>= 1``.
        q: quantile in ``[0, 1]``.

    Returns:
        The zero-based index into ``sort(rho)``.

    Raises:
        ValueError: ``A < 1`` or ``q`` outside ``[0, 1]``.
    """
    A = integer("A", A, lo=1)
    q = real("q", q, lo=0.0, hi=1.0)
    return round(q * (A - 1))


# --------------------------------------------------------------------------------------------
# the tail fits (steps 2-6)
# --------------------------------------------------------------------------------------------


@functools.lru_cache(maxsize=64)
def _centred_responses(k: int, burn: int, eps: float) -> tuple[np.ndarray, np.ndarray]:
    """Shared responses of the tail fits: ``Y`` ``(n_eff, 2)`` and ``Syy`` ``(2,)``, float64.

    ``Y`` holds the centred ``y_W = log F`` and ``y_G = log(-log F)`` of the within-tail ECDF
    ``F = max(r / (k + 1), eps)`` at ranks ``r > burn`` (step 4); ``Syy = sum Y^2`` per column.
    A pure function of ``(k, burn, eps)`` (numpy float64 on the host, whatever the input device),
    cached because every batch of a run uses the same vectors; the arrays are read-only.
    """
    F_hat = np.maximum(np.arange(1, k + 1, dtype=np.float64) / (k + 1), eps)[burn:]
    yW = np.log(F_hat)
    Y = np.stack([yW, np.log(-yW)], axis=1)
    Y = Y - Y.mean(axis=0, keepdims=True)
    syy = np.einsum("ij,ij->j", Y, Y)
    Y.setflags(write=False)
    syy.setflags(write=False)
    return Y, syy


@dataclass(frozen=True)
class TailFits:
    """The two least-squares tail fits for ``A`` anchors with one ``k_tail`` (``docs/weince.md#the-gate``).

    Attributes:
        k_tail: tail size; ``burn = max(1, k_tail // 20)``; ``n_eff = k_tail - burn``.
        slope: ``(A, 2)`` OLS slopes ``(slope_W, slope_G)`` of ``y_W``, ``y_G`` on ``x = log delta``
            (NaN when ``n_eff < 2``; slope_W is the anchor-wise beta_hat_i, unused by the gate).
        sse_raw: ``(A, 2)`` residual sums of squares (before the floor and the penalties).
        sse: ``(A, 2)`` ``max(sse_raw, 1e-12)``, ``+1e6`` where ``slope_W <= 0`` (column 0) or
            ``slope_G >= 0`` (column 1).
        syy: ``(2,)`` total sums of squares of the centred responses.
        dAIC: ``(A,)`` ``n_eff log(SSE_G / SSE_W)`` (0 when ``n_eff < 2``: the authors' fallback).
    """

    k_tail: int
    burn: int
    n_eff: int
    slope: np.ndarray
    sse_raw: np.ndarray
    sse: np.ndarray
    syy: np.ndarray
    dAIC: np.ndarray


#: The signs that turn both sanity penalties into ``sign * slope <= 0`` (W: slope <= 0, G: slope >= 0).
_PENALTY_SIGN = np.array([1.0, -1.0])


def _tail_fits(T: np.ndarray, eps: float) -> TailFits:
    """Vectorised steps 3-6 on descending tails ``T`` ``(A, k)`` (no validation).

    ``T`` may be float32 or float64 and any view (e.g. the reversed top columns of sorted rows);
    the fits run in float64. The numpy implementation of the tail fits: used by the CPU fast
    path of the two-view and label-positive gates (:mod:`theory.weince.gate`),
    :func:`tail_fits` and :func:`theory.weince.tails.tail_aic_fit`.
    """
    A, k = T.shape
    burn = max(1, k // 20)
    n = k - burn
    if n < 2:
        nan = np.full((A, 2), np.nan)
        return TailFits(k, burn, n, nan, nan.copy(), nan.copy(), np.full(2, np.nan), np.zeros(A))
    xc = np.subtract(1.0, T[:, burn:], dtype=np.float64)  # (A, n) ascending shortfalls
    np.maximum(xc, eps, out=xc)
    np.log(xc, out=xc)  # x = log delta, centred next
    tied = xc[:, 0] == xc[:, -1]
    xc -= xc.sum(axis=1, keepdims=True) / n
    # all tail points tied: centred x is exactly 0 (a rounded mean would leave ulp noise whose
    # sign decides the +1e6 penalties); both slopes are then 0 and both SSEs penalised
    if tied.any():
        xc[tied] = 0.0
    sxx = np.einsum("ij,ij->i", xc, xc)
    Y, syy = _centred_responses(k, burn, eps)  # (n, 2), (2,)
    sxy = xc @ Y  # (A, 2)
    slope = sxy / np.maximum(sxx, _DEN_FLOOR)[:, None]  # (A, 2): (slope_W, slope_G)
    # SSE = sum (yc - b xc)^2 = Syy - 2 b Sxy + b^2 Sxx (the unfloored Sxx: with a near-tied tail
    # Sxx < 1e-12 and b is not the least-squares slope); rows where this expansion could lose
    # digits to cancellation (SSE < 1e-6 Syy) are recomputed from explicit residuals
    sse_raw = syy[None, :] + slope * (slope * sxx[:, None] - 2.0 * sxy)
    low = sse_raw < 1e-6 * syy
    if low.any():
        redo = np.flatnonzero(low.any(axis=1))
        resid = Y.T[None, :, :] - slope[redo, :, None] * xc[redo, None, :]
        sse_raw[redo] = np.einsum("ijk,ijk->ij", resid, resid)
    sse = np.maximum(sse_raw, _SSE_FLOOR)
    sse += np.where(slope * _PENALTY_SIGN <= 0, _PENALTY, 0.0)
    dAIC = n * np.log(sse[:, 1] / sse[:, 0])
    return TailFits(k, burn, n, slope, sse_raw, sse, syy, dAIC)


@functools.lru_cache(maxsize=64)
def _centred_responses_torch(
    k: int, burn: int, eps: float, device: torch.device
) -> tuple[torch.Tensor, torch.Tensor]:
    """:func:`_centred_responses` as float64 tensors on ``device`` (copied once per device)."""
    Y, syy = _centred_responses(k, burn, eps)
    return torch.from_numpy(Y.copy()).to(device), torch.from_numpy(syy.copy()).to(device)


def _tail_fits_torch(T: torch.Tensor, eps: float) -> tuple[torch.Tensor, int]:
    """``(dAIC, n_eff)`` of descending float64 tails ``T`` ``(A, k)``, on ``T``'s device.

    The same steps as :func:`_tail_fits`, written with torch operations only (no host
    synchronisation, no data-dependent control flow), so that the gate runs on the GPU. The
    residual sums of squares are summed explicitly (no ``Syy - 2 b Sxy + b^2 Sxx`` expansion, which
    would need a data-dependent fix-up); both forms agree to float64 round-off.
    """
    A, k = T.shape
    burn = max(1, k // 20)
    n = k - burn
    if n < 2:
        return torch.zeros(A, dtype=torch.float64, device=T.device), n
    x = torch.log(torch.clamp(torch.rsub(T[:, burn:], 1.0), min=eps))  # (A, n) ascending
    xc = x - x.mean(dim=1, keepdim=True)
    xc = xc.masked_fill(x[:, :1] == x[:, -1:], 0.0)  # tied tails: centred x exactly 0
    sxx = (xc * xc).sum(dim=1)
    Y, _ = _centred_responses_torch(k, burn, eps, T.device)  # (n, 2)
    sxy = xc @ Y  # (A, 2)
    slope = sxy / torch.clamp(sxx, min=_DEN_FLOOR)[:, None]
    resid = Y.T[None, :, :] - slope[:, :, None] * xc[:, None, :]  # (A, 2, n)
    sse = torch.clamp((resid * resid).sum(dim=2), min=_SSE_FLOOR)
    pen_W = (slope[:, 0] <= 0).to(T.dtype) * _PENALTY
    pen_G = (slope[:, 1] >= 0).to(T.dtype) * _PENALTY
    dAIC = n * (torch.log((sse[:, 1] + pen_G) / n) - torch.log((sse[:, 0] + pen_W) / n))
    return dAIC, n


def tail_fits(tails: Any, eps: float = DEFAULT_GATE.eps) -> TailFits:
    """Weibull-line versus Gumbel-fast least-squares "AIC" of per-anchor tails.

    For each row ``T_i`` (the ``k`` largest negatives, descending): ``x = log max(1 - T_i, eps)``,
    burn-in ``max(1, k // 20)``, OLS of ``y_W = log F`` and ``y_G = log(-log F)`` (``F = r/(k+1)``)
    on ``x``; ``dAIC_i = n_eff log(SSE_G / SSE_W)`` with the authors' floors and +1e6 penalties
    (``docs/weince.md#the-gate``, steps 3-6). Computed in float64 whatever the input dtype (the
    slope signs decide the penalties). Input rule of the EVT tools (``docs/weince.md#inputs``).

    Args:
        tails: ``(A, k)`` array or tensor, each row sorted in descending order, finite.
        eps: shortfall floor in ``(0, 0.5]``.

    Returns:
        :class:`TailFits`.

    Shape:
        ``tails`` ``(A, k)`` -> ``slope``, ``sse`` ``(A, 2)``, ``dAIC`` ``(A,)``.

    Raises:
        ValueError: not 2-D, empty, non-finite, a meta tensor, or a row not in descending order;
            bad ``eps``.
    """
    eps = real("eps", eps, lo=0.0, lo_open=True, hi=0.5)
    T = as_float64("tails", tails, ndim=2)
    if np.any(np.diff(T, axis=1) > 0):
        raise ValueError("tails must be sorted in descending order along each row")
    return _tail_fits(T, eps)
