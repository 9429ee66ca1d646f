"""The per-anchor WeiNCE gate lambda: cap proximity rho and the tail dAIC (every statistic detached).

Erol et al., ICML 2026 (arXiv 2606.00262), the WeiNCE gate; ``docs/weince.md#the-gate``::

    lambda_i = sigmoid(kappa_rho * log(rho0 / rho_i)) * sigmoid(kappa_aic * (dAIC_i - margin))

with ``rho_i = max(1 - max_neg S[i], eps)``, ``rho0`` the ``round(q (A - 1))``-th smallest ``rho``
(round half to even, :func:`theory.weince.tailfit.rho0_index`) and ``dAIC_i`` from the two tail
fits on the anchor's ``k_tail`` hardest negatives. The seven hyper-parameters are a
:class:`theory.weince.config.GateConfig`.

Two code paths with the same results (to float64 round-off; tests compare them):

* **device path** (any device; the only one off the CPU): ``torch.topk`` of width ``k_tail`` per
  row, the fits in float64 on the tensors' device (:func:`theory.weince.tailfit._tail_fits_torch`),
  the pivot and the sigmoids in torch. No ``.item()``, ``.cpu()``, ``.numpy()`` or Python
  conversion of a tensor: nothing waits for the device.
* **CPU fast path** (CPU tensors while :data:`theory.weince._fast._NUMPY_FAST` is on): numpy's SIMD
  sort returns the same tail values as ``torch.topk`` several times faster, and the fits run in
  numpy float64 (:func:`theory.weince.tailfit._tail_fits`).

Every statistic is computed in float64 whatever the input dtype (float16/bfloat16/float32) and
returned in the dtype the loss computes in (float32 for half and float32 inputs, float64 for
float64).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from scipy.special import expit

from theory.validation import as_float_tensor
from theory.weince._fast import _np_ok
from theory.weince.config import DEFAULT_GATE, GateConfig
from theory.weince.tailfit import _tail_fits, _tail_fits_torch, _tail_size, rho0_index

__all__ = ["GateStats", "weince_gate"]

#: Maps the float64 ``rho`` ``(b,)`` of the anchors a call computes to the float64 ``rho`` of every
#: anchor of the batch (the pool of the pivot ``rho0``), for a call on a subset of the anchors.
RhoPool = Callable[[torch.Tensor], torch.Tensor]


@dataclass
class GateStats:
    """Per-anchor gate statistics of one batch (all detached, on the input's device).

    ``docs/weince.md#the-gate``, steps 3-8.

    Attributes:
        lam: ``(A,)`` ``lambda_i = lam_rho * lam_aic``.
        lam_rho: ``(A,)`` ``sigmoid(kappa_rho (log rho0 - log rho_i))``.
        lam_aic: ``(A,)`` ``sigmoid(kappa_aic (dAIC_i - margin))``.
        rho: ``(A,)`` cap proximity ``max(1 - hardest negative, eps)``.
        rho0: 0-d tensor, the batch pivot (already floored at ``eps``).
        dAIC: ``(A,)`` ``n_eff log(SSE_G / SSE_W)`` (0 in the ``n_eff < 2`` fallback).
        k_tail: tail size (an int; an ``(A,)`` tensor in the label variant).
        n_eff: points after burn-in (an int; an ``(A,)`` tensor in the label variant).
    """

    lam: torch.Tensor
    lam_rho: torch.Tensor
    lam_aic: torch.Tensor
    rho: torch.Tensor
    rho0: torch.Tensor
    dAIC: torch.Tensor
    k_tail: int | torch.Tensor
    n_eff: int | torch.Tensor


# --------------------------------------------------------------------------------------------
# the pivot and the sigmoids, in numpy (CPU fast path) and torch (device path)
# --------------------------------------------------------------------------------------------


def _finish_np(
    T: np.ndarray,
    dAIC: np.ndarray,
    fallback: bool,
    gate: GateConfig,
    like: torch.Tensor,
    k_tail: int | torch.Tensor,
    n_eff: int | torch.Tensor,
    pool: RhoPool | None = None,
) -> GateStats:
    """Cap proximity, pivot and lambda (steps 3, 7, 8) from descending tails ``T`` and ``dAIC``.

    float64 numpy, written into one buffer that becomes one tensor like ``like`` (the per-call
    cost of the CPU fast path is mostly numpy's per-call overhead, so the steps use ``out=``).
    ``pool``: the pivot is taken over ``pool(rho)`` (every anchor of the batch) instead of ``rho``.
    """
    A = T.shape[0]
    buf = np.empty(5 * A + 1)
    lam, lam_rho, lam_aic, rho, dA = (
        buf[:A],
        buf[A : 2 * A],
        buf[2 * A : 3 * A],
        buf[3 * A : 4 * A],
        buf[4 * A : 5 * A],
    )
    np.subtract(1.0, T[:, 0], out=rho)
    np.maximum(rho, gate.eps, out=rho)
    dA[:] = dAIC
    every = rho if pool is None else pool(torch.from_numpy(rho.copy())).to("cpu", torch.float64).numpy()
    n = every.shape[0]
    # too few tail points everywhere (N = 2): the authors' fallback, the lower median (torch.median)
    j = (n - 1) // 2 if fallback else round(gate.q * (n - 1))  # rho0_index, validated in GateConfig
    rho0 = max(float(np.partition(every, j)[j]), gate.eps)
    buf[-1] = rho0
    np.log(rho, out=lam_rho)
    np.subtract(math.log(rho0), lam_rho, out=lam_rho)
    lam_rho *= gate.kappa_rho
    expit(lam_rho, out=lam_rho)
    if gate.kappa_aic == 0.0:
        lam_aic.fill(0.5)
    else:
        np.subtract(dA, gate.margin, out=lam_aic)
        lam_aic *= gate.kappa_aic
        expit(lam_aic, out=lam_aic)
    np.multiply(lam_rho, lam_aic, out=lam)
    t = torch.from_numpy(buf).to(device=like.device, dtype=like.dtype)
    return GateStats(
        t[:A], t[A : 2 * A], t[2 * A : 3 * A], t[3 * A : 4 * A], t[-1], t[4 * A : 5 * A], k_tail, n_eff
    )


def _finish_torch(
    rho: torch.Tensor,
    dAIC: torch.Tensor,
    fallback: bool,
    gate: GateConfig,
    dtype: torch.dtype,
    k_tail: int | torch.Tensor,
    n_eff: int | torch.Tensor,
    pool: RhoPool | None = None,
) -> GateStats:
    """:func:`_finish_np` in torch on ``rho``'s device (float64 in, ``dtype`` out), no sync."""
    every = rho if pool is None else pool(rho)
    A = every.shape[0]
    srt = torch.sort(every).values
    rho0 = torch.clamp(srt[(A - 1) // 2] if fallback else srt[rho0_index(A, gate.q)], min=gate.eps)
    lam_rho = torch.sigmoid(gate.kappa_rho * (torch.log(rho0) - torch.log(torch.clamp(rho, min=gate.eps))))
    if gate.kappa_aic == 0.0:
        lam_aic = torch.full_like(dAIC, 0.5)
    else:
        lam_aic = torch.sigmoid(gate.kappa_aic * (dAIC - gate.margin))
    lam = lam_rho * lam_aic
    return GateStats(
        lam.to(dtype),
        lam_rho.to(dtype),
        lam_aic.to(dtype),
        rho.to(dtype),
        rho0.to(dtype),
        dAIC.to(dtype),
        k_tail,
        n_eff,
    )


# --------------------------------------------------------------------------------------------
# the two-view gate
# --------------------------------------------------------------------------------------------


def _sort_rows_np(neg: torch.Tensor) -> np.ndarray:
    """Every row of a detached CPU ``neg`` ``(A, K)`` sorted in ascending order (numpy).

    numpy's SIMD sort of whole rows is several times faster than ``torch.topk`` of width
    ``k_tail`` and gives the same values; the loss shares the sorted rows between the gate, the
    batch-beta fit and the top-M terms of the released recipe.
    """
    return np.sort(neg.numpy(), axis=1)


def _gate_sorted_np(
    srt: np.ndarray, gate: GateConfig, like: torch.Tensor, pool: RhoPool | None = None
) -> GateStats:
    """Gate from rows sorted in ascending order (CPU fast path); tensors like ``like``."""
    K = srt.shape[1]
    k = _tail_size(K, gate.tail_frac, gate.min_tail)
    T = srt[:, K - k :][:, ::-1]  # (A, k) descending: a view, the fits read it in float64
    fits = _tail_fits(T, gate.eps)
    return _finish_np(T, fits.dAIC, fits.n_eff < 2, gate, like, k, fits.n_eff, pool)


def _gate(neg: torch.Tensor, gate: GateConfig, pool: RhoPool | None = None) -> GateStats:
    """Gate of the two-view loss on detached float32/float64 negatives ``(A, K)`` (no validation).

    ``pool``: the rows are some of the batch's anchors, and ``pool(rho)`` returns the float64
    ``rho`` of all of them, over which the pivot ``rho0`` is taken (default: these rows are all).
    """
    if _np_ok(neg):
        return _gate_sorted_np(_sort_rows_np(neg), gate, neg, pool)
    k = _tail_size(neg.shape[1], gate.tail_frac, gate.min_tail)
    T64 = torch.topk(neg, k, dim=1, largest=True, sorted=True).values.double()
    dAIC, n_eff = _tail_fits_torch(T64, gate.eps)
    rho = torch.clamp(torch.rsub(T64[:, 0], 1.0), min=gate.eps)
    return _finish_torch(rho, dAIC, n_eff < 2, gate, neg.dtype, k, n_eff, pool)


def weince_gate(neg: Any, *, gate: GateConfig = DEFAULT_GATE) -> GateStats:
    """The per-anchor WeiNCE gate lambda from negative similarities, without gradient.

    ``lambda_i = sigmoid(kappa_rho log(rho0/rho_i)) * sigmoid(kappa_aic (dAIC_i - margin))``
    (arXiv 2606.00262, the WeiNCE gate; ``docs/weince.md#the-gate``). ``K = neg.shape[1]`` plays the role of
    ``2N - 2`` in the tail-size rule and ``A = neg.shape[0]`` the anchor count of the pivot rule.
    When fewer than two points remain after burn-in (``K <= 2``) the authors' fallback applies:
    ``dAIC = 0`` and ``rho0 = median(rho)`` (the lower median), and lambda is still applied
    (``docs/weince.md#edge-cases``). Runs on ``neg``'s device.

    Args:
        neg: negative similarities per anchor (order irrelevant), any real floating dtype: a
            tensor, a numpy array or a nested sequence (docs/README.md#conventions).
        gate: the gate hyper-parameters.

    Returns:
        :class:`GateStats`, float32 for float16/bfloat16/float32 input, float64 for float64.

    Shape:
        ``neg`` ``(A, K)`` with ``A, K >= 1`` -> every per-anchor statistic ``(A,)``.

    Raises:
        ValueError: ``neg`` is not a 2-D tensor with ``A, K >= 1``, or ``gate`` is not a
            :class:`GateConfig`.
    """
    if not isinstance(gate, GateConfig):
        raise ValueError(f"gate must be a GateConfig, got {type(gate).__name__}")
    neg = as_float_tensor(neg, "neg")  # tensors, numpy arrays, sequences (docs/README.md#conventions)
    if neg.dim() != 2 or neg.shape[0] < 1 or neg.shape[1] < 1:
        raise ValueError(f"neg must be 2-D (A, K) with A, K >= 1, got shape {tuple(neg.shape)}")
    with torch.no_grad():
        return _gate(neg.detach(), gate)


# --------------------------------------------------------------------------------------------
# the label-positive gate (anchor-dependent negative counts)
# --------------------------------------------------------------------------------------------


def _label_gate(S: torch.Tensor, negmask: torch.Tensor, K_list: list[int], gate: GateConfig) -> GateStats:
    """Per-anchor gate with anchor-dependent negative counts ``K_list`` (host ints, one per row).

    The same kernels as the two-view gate: float64 tails, the tail fits once per distinct tail
    size (anchors grouped by ``k_tail,i``), the same pivot and lambda; so with pair-id labels the
    statistics equal those of the two-view gate exactly (on either path).
    """
    B = S.shape[0]
    k_of = {K: _tail_size(K, gate.tail_frac, gate.min_tail) for K in set(K_list)}
    k_host = np.array([k_of[K] for K in K_list], dtype=np.int64)
    kmax = int(k_host.max())
    masked = S.masked_fill(~negmask, float("-inf"))
    groups = [(int(k), np.flatnonzero(k_host == k)) for k in np.unique(k_host)]
    n_host = np.empty(B, dtype=np.int64)
    for k, rows in groups:
        n_host[rows] = k - max(1, k // 20)
    fallback = bool((n_host < 2).all())
    k_t = torch.from_numpy(k_host).to(S.device)
    n_t = torch.from_numpy(n_host).to(S.device)
    if _np_ok(S):
        T = _sort_rows_np(masked)[:, : -kmax - 1 : -1]  # (B, kmax) descending
        dAIC = np.zeros(B)
        for k, rows in groups:
            dAIC[rows] = _tail_fits(T[rows, :k], gate.eps).dAIC  # k <= K_i: only true negatives
        return _finish_np(T, dAIC, fallback, gate, S, k_t, n_t)
    T64 = torch.topk(masked, kmax, dim=1, largest=True, sorted=True).values.double()
    dAIC_t = torch.zeros(B, dtype=torch.float64, device=S.device)
    for k, rows in groups:
        idx = torch.from_numpy(rows).to(S.device)
        dAIC_t[idx] = _tail_fits_torch(T64[idx, :k], gate.eps)[0]
    rho = torch.clamp(torch.rsub(T64[:, 0], 1.0), min=gate.eps)
    return _finish_torch(rho, dAIC_t, fallback, gate, S.dtype, k_t, n_t)
