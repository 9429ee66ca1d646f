"""The per-anchor WeiNCE gate lambda: cap proximity rho and the tail dAIC (every statistic detached).

Erol et al., ICML 2026 (arXiv 2606.00262), spec/weince.md §2.3-§2.6::

    lambda_i = sigmoid(kappa_rho * log(rho0 / rho_i)) * sigmoid(kappa_aic * (dAIC_i - margin))

with ``rho_i = max(1 - max_neg S[i], eps)``, ``rho0`` the ``round(q (A - 1))``-th smallest ``rho``
(round half to even, :func:`theory.weince.tailfit.rho0_index`) and ``dAIC_i`` from the two tail
fits of :func:`theory.weince.tailfit.tail_fits` on the anchor's ``k_tail`` hardest negatives.
The seven gate hyper-parameters (``q, tail_frac, min_tail, margin, kappa_rho, kappa_aic, eps``)
are validated by :func:`_gate_params`.

Implementation notes (speed, spec §3.1 costs): one sort / top-k of width ``k_tail`` per row on the
detached negatives (on CPU float32 a SIMD numpy sort, which returns the same values as
``torch.topk``), the two OLS fits vectorised over anchors with a shared response.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch
from scipy.special import expit

from theory.validation import as_float_tensor, integer, real
from theory.weince._fast import _np_ok
from theory.weince.tailfit import _tail_fits, rho0_index, tail_size

__all__ = ["GateStats", "weince_gate"]


@dataclass(frozen=True)
class _GateParams:
    q: float
    tail_frac: float
    min_tail: int
    margin: float
    kappa_rho: float
    kappa_aic: float
    eps: float


def _gate_params(q, tail_frac, min_tail, margin, kappa_rho, kappa_aic, eps) -> _GateParams:
    return _GateParams(
        q=real("q", q, lo=0.0, hi=1.0),
        tail_frac=real("tail_frac", tail_frac, lo=0.0),
        min_tail=integer("min_tail", min_tail, lo=0),
        margin=real("margin", margin, allow_inf=True),
        kappa_rho=real("kappa_rho", kappa_rho, lo=0.0),
        kappa_aic=real("kappa_aic", kappa_aic, lo=0.0),
        eps=real("eps", eps, lo=0.0, lo_open=True, hi=0.5),
    )


@dataclass
class GateStats:
    """Per-anchor gate statistics (all detached), spec/weince.md §2.3-§2.6.

    Attributes:
        lam: ``(A,)`` lambda_i = lam_rho * lam_aic.
        lam_rho: ``(A,)`` sigmoid(kappa_rho (log rho0 - log rho_i)).
        lam_aic: ``(A,)`` sigmoid(kappa_aic (dAIC_i - margin)).
        rho: ``(A,)`` cap proximity max(1 - hardest negative, eps).
        rho0: 0-d tensor, the batch pivot (already floored at eps).
        dAIC: ``(A,)`` n_eff log(SSE_G / SSE_W) (0 in the n_eff < 2 fallback).
        k_tail: tail size (int; per-anchor ``(A,)`` tensor in the label variant).
        n_eff: points after burn-in (int; per-anchor tensor in the label variant).
    """

    lam: torch.Tensor
    lam_rho: torch.Tensor
    lam_aic: torch.Tensor
    rho: torch.Tensor
    rho0: torch.Tensor
    dAIC: torch.Tensor
    k_tail: int | torch.Tensor
    n_eff: int | torch.Tensor


def _top_desc(neg: torch.Tensor, k: int) -> np.ndarray:
    """The ``k`` largest entries of each row of ``neg`` ``(A, K)``, descending, as float64 numpy."""
    if _np_ok(neg) and neg.dtype == torch.float32:
        # numpy's SIMD sort of the whole row is ~6x faster than torch.topk here (same values)
        return np.sort(neg.numpy(), axis=1)[:, : -k - 1 : -1].astype(np.float64)
    return torch.topk(neg, k, dim=1, largest=True, sorted=True).values.cpu().double().numpy()


def _lambda_from(rho: np.ndarray, rho0: float, dAIC: np.ndarray, p: _GateParams):
    """``(lam, lam_rho, lam_aic)`` float64 numpy (spec §2.6)."""
    lam_rho = expit(p.kappa_rho * (math.log(max(float(rho0), p.eps)) - np.log(np.maximum(rho, p.eps))))
    lam_aic = np.full_like(dAIC, 0.5) if p.kappa_aic == 0.0 else expit(p.kappa_aic * (dAIC - p.margin))
    return lam_rho * lam_aic, lam_rho, lam_aic


def _finish_gate(rho: np.ndarray, dAIC: np.ndarray, fallback: bool, p: _GateParams, like: torch.Tensor,
                 k_tail, n_eff) -> GateStats:
    """Pivot ``rho0`` and lambda from float64 ``rho``, ``dAIC`` ``(A,)``; tensors like ``like``."""
    A = rho.shape[0]
    srt = np.sort(rho)
    if fallback:  # too few tail points everywhere (N = 2): the authors' fallback, lambda still applied (§3.2)
        rho0 = srt[(A - 1) // 2]  # the lower median, as torch.median
    else:
        rho0 = srt[rho0_index(A, p.q)]
    rho0 = max(float(rho0), p.eps)
    lam, lam_rho, lam_aic = _lambda_from(rho, rho0, dAIC, p)

    def back(a):
        return torch.from_numpy(np.ascontiguousarray(a)).to(device=like.device, dtype=like.dtype)

    return GateStats(back(lam), back(lam_rho), back(lam_aic), back(rho),
                     torch.tensor(rho0, dtype=like.dtype, device=like.device), back(dAIC), k_tail, n_eff)


def _gate(neg: torch.Tensor, p: _GateParams) -> GateStats:
    """Gate of the two-view loss: statistics in float64 numpy on the ``(A, k_tail)`` tails."""
    A, K = neg.shape
    k = tail_size(K, p.tail_frac, p.min_tail)
    T = _top_desc(neg, k)
    fits = _tail_fits(T, p.eps)
    rho = np.maximum(1.0 - T[:, 0], p.eps)
    return _finish_gate(rho, fits.dAIC, fits.n_eff < 2, p, neg, k, fits.n_eff)


def weince_gate(
    neg: torch.Tensor,
    *,
    q: float = 0.2,
    tail_frac: float = 0.1,
    min_tail: int = 32,
    margin: float = 2.0,
    kappa_rho: float = 10.0,
    kappa_aic: float = 1.0,
    eps: float = 1e-6,
) -> GateStats:
    """The per-anchor WeiNCE gate lambda from negative similarities (spec/weince.md §2.2-§2.6).

    ``lambda_i = sigmoid(kappa_rho log(rho0/rho_i)) * sigmoid(kappa_aic (dAIC_i - margin))``,
    computed without gradient. ``K = neg.shape[1]`` plays the role of ``2N - 2`` in the tail-size
    rule and ``A = neg.shape[0]`` the anchor count of the ``rho0`` index rule. When fewer than two
    points remain after burn-in (``K <= 2``) the authors' fallback applies: ``dAIC = 0`` and
    ``rho0 = median(rho)`` (torch's lower median), lambda is still applied (§3.2).

    Args:
        neg: ``(A, K)`` negative similarities per anchor (order irrelevant), ``K >= 1``.
        q, tail_frac, min_tail, margin, kappa_rho, kappa_aic, eps: see :func:`weince_loss`.

    Returns:
        :class:`GateStats` (float32 for half inputs; float64 stays float64).
    """
    p = _gate_params(q, tail_frac, min_tail, margin, kappa_rho, kappa_aic, eps)
    if not isinstance(neg, torch.Tensor) or neg.dim() != 2 or neg.shape[0] < 1 or neg.shape[1] < 1:
        raise ValueError(f"neg must be a 2-D tensor (A, K) with A, K >= 1, got {getattr(neg, 'shape', neg)!r}")
    with torch.no_grad():
        return _gate(as_float_tensor(neg.detach(), "neg"), p)


def _label_gate(S: torch.Tensor, negmask: torch.Tensor, K_i: torch.Tensor, p: _GateParams) -> GateStats:
    """Per-anchor gate with anchor-dependent negative counts (spec §2.2-§2.6 per anchor).

    The same code path as the two-view gate: float64 tails, :func:`_tail_fits` once per distinct
    tail size (anchors grouped by ``k_tail,i``), the same pivot and lambda; so with pair-id
    labels the statistics equal those of :func:`weince_loss` exactly.
    """
    B = S.shape[0]
    K_list = K_i.tolist()
    k_of = {K: tail_size(K, p.tail_frac, p.min_tail) for K in set(K_list)}
    k_np = np.array([k_of[K] for K in K_list], dtype=np.int64)
    T = _top_desc(S.masked_fill(~negmask, float("-inf")), int(k_np.max()))  # (B, kmax) float64
    rho = np.maximum(1.0 - T[:, 0], p.eps)
    dAIC = np.zeros(B)
    n_np = np.empty(B, dtype=np.int64)
    for k in np.unique(k_np):
        rows = np.flatnonzero(k_np == k)
        fits = _tail_fits(T[rows, :k], p.eps)  # k <= K_i: only finite (true negative) entries
        dAIC[rows] = fits.dAIC
        n_np[rows] = fits.n_eff
    return _finish_gate(rho, dAIC, bool((n_np < 2).all()), p, S, torch.from_numpy(k_np).to(S.device),
                        torch.from_numpy(n_np).to(S.device))
