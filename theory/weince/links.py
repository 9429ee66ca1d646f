"""Link selection in the nested T_lambda family: likelihood of the observed winners, LRT at lambda = 0.

Erol et al., ICML 2026 (arXiv 2606.00262), spec/weince.md §1.5 (our derived proposal, not the
paper's values). Each candidate row holds the positive's similarity in column 0 and its negatives
after it; the T_lambda logits are :func:`theory.weince.logits.tlambda_logits`
``(1 - lam) s / tau + lam (-log(1 - min(s, 1 - eps)))`` (spec §1.4). ``tau`` defaults to
:data:`theory.options.WEINCE_TAU`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
import pandas as pd
import torch
from scipy import optimize, stats

from theory.infonce import two_view_candidates
from theory.options import WEINCE_TAU
from theory.validation import integer, real
from theory.weince.logits import tlambda_logits

__all__ = [
    "tlambda_loglik",
    "candidates_from_similarity",
    "two_view_link_candidates",
    "LinkSelection",
    "link_select",
]


def _cand_list(cand) -> list[np.ndarray]:
    items = cand if isinstance(cand, (list, tuple)) else [cand]
    out = []
    for a in items:
        if isinstance(a, torch.Tensor):
            a = a.detach().cpu().double().numpy()
        a = np.asarray(a, dtype=np.float64)
        if a.ndim != 2 or a.shape[1] < 2 or a.shape[0] < 1:
            raise ValueError(f"candidate arrays must be 2-D (M, C) with C >= 2 (positive at column 0), got {a.shape}")
        if not np.all(np.isfinite(a)):
            raise ValueError("candidate similarities must be finite")
        out.append(a)
    if not out:
        raise ValueError("cand must contain at least one array")
    return out


def _loglik_arrays(arrs, lam, tau, eps) -> float:
    """``sum_i log softmax(T_lambda logits of row i)_0`` over float64 tensors ``(M, C)``.

    The logits are :func:`theory.weince.logits.tlambda_logits` (the loss's own formula, §2.7).
    """
    total = 0.0
    for a in arrs:
        l = tlambda_logits(a, lam, tau, eps)
        total += float((l[:, 0] - torch.logsumexp(l, dim=1)).sum())
    return total


def tlambda_loglik(cand, lam: float, tau: float = WEINCE_TAU, eps: float = 1e-6) -> float:
    """Log-likelihood of the observed winners (column 0) under the T_lambda link (spec §1.5).

    ``sum_i log softmax_j((1 - lam) s_ij / tau + lam (-log(1 - min(s_ij, 1 - eps))))_0``.
    Shapes: ``cand`` ``(M, C)`` or a list of such arrays (positive first in every row).
    """
    lam = real("lam", lam, lo=0.0, hi=1.0)
    tau = real("tau", tau, lo=0.0, lo_open=True)
    eps = real("eps", eps, lo=0.0, lo_open=True, hi=0.5)
    arrs = [torch.from_numpy(a) for a in _cand_list(cand)]
    return _loglik_arrays(arrs, lam, tau, eps)


def candidates_from_similarity(S, positives, negatives=None) -> np.ndarray:
    """Candidate rows ``[S[i, pos_i], S[i, negatives of i]]`` from a frozen similarity matrix.

    Args:
        S: ``(A, B)`` similarities of anchors to a bank.
        positives: ``(A,)`` column index of each anchor's positive.
        negatives: optional ``(A, B)`` boolean mask of allowed negatives with the same count per
            row; default: every column except the positive (and except column ``i`` when
            ``S`` is square, i.e. the anchor itself).

    Returns:
        ``(A, 1 + K)`` with the positive in column 0 and negatives in ascending column order.
    """
    if isinstance(S, torch.Tensor):
        S = S.detach().cpu().double().numpy()
    S = np.asarray(S, dtype=np.float64)
    if S.ndim != 2:
        raise ValueError(f"S must be 2-D, got shape {S.shape}")
    A, B = S.shape
    pos = np.asarray(positives).reshape(-1)
    if pos.shape != (A,) or not np.issubdtype(pos.dtype, np.integer) or pos.min() < 0 or pos.max() >= B:
        raise ValueError(f"positives must be ({A},) integer column indices in [0, {B}), got {positives!r}")
    if negatives is None:
        mask = np.ones((A, B), dtype=bool)
        mask[np.arange(A), pos] = False
        if A == B:
            mask[np.arange(A), np.arange(A)] = False
    else:
        mask = np.asarray(negatives, dtype=bool)
        if mask.shape != (A, B):
            raise ValueError(f"negatives must have shape {(A, B)}, got {mask.shape}")
        if np.any(mask[np.arange(A), pos]):
            raise ValueError("negatives must not contain the positive")
    counts = mask.sum(axis=1)
    if counts.min() != counts.max() or counts.min() < 1:
        raise ValueError(f"every anchor needs the same number (>= 1) of negatives, got counts {np.unique(counts)}")
    neg = S[mask].reshape(A, int(counts[0]))
    return np.concatenate([S[np.arange(A), pos][:, None], neg], axis=1)


def two_view_link_candidates(z1, z2) -> np.ndarray:
    """Candidate rows of frozen two-view embeddings for :func:`link_select`.

    The NT-Xent candidate set of :func:`theory.infonce.two_view_candidates` (cosine similarities,
    positive ``(i + N) mod 2N`` in column 0, the ``2N - 2`` negatives after it), as float64 numpy.
    Shapes: ``z1, z2`` ``(N, d)`` -> ``(2N, 2N - 1)``.
    """
    with torch.no_grad():
        _, cand = two_view_candidates(torch.as_tensor(z1), torch.as_tensor(z2))
    return cand.double().cpu().numpy()


@dataclass(frozen=True)
class LinkSelection:
    """Result of :func:`link_select` (ours, spec §1.5 [derived proposal]; not the paper's values).

    ``lr_stat = 2 (loglik - loglik0)``; ``p_chi2`` from chi2(1); ``p_boundary`` from the
    ``0.5 chi2(0) + 0.5 chi2(1)`` mixture (Self & Liang 1987) because lambda = 0 lies on the
    boundary of [0, 1]. Both are nominal: in-batch candidate rows share items and are not
    independent. ``profile`` has columns ``lam, loglik, tau``.
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
    profile: pd.DataFrame = field(repr=False)


def link_select(
    cand,
    *,
    tau: float | None = WEINCE_TAU,
    eps: float = 1e-6,
    n_grid: int = 51,
    tau_bounds: tuple[float, float] = (0.01, 10.0),
    xatol: float = 1e-7,
) -> LinkSelection:
    """Maximum-likelihood ``lambda_hat`` in the nested T_lambda family + LRT against lambda = 0.

    Treats each row's positive (column 0) as the observed winner among its candidates (spec §1.5):
    ``lambda_hat = argmax_{lam in [0,1]} l(lam, tau)`` on a grid of ``n_grid`` points refined by a
    bounded 1-D optimiser (scipy ``minimize_scalar``, method "bounded") on the bracket around the
    best grid point. ``tau=None`` profiles tau too (bounded search on ``log tau`` within
    ``tau_bounds`` for every lambda; at lambda = 1 tau is not identified).

    Args:
        cand: ``(M, C)`` candidate similarities (positive in column 0) or a list of such arrays
            (e.g. one per frozen batch; widths may differ).
        tau: fixed temperature of the linear branch, or None to fit it.
    """
    eps = real("eps", eps, lo=0.0, lo_open=True, hi=0.5)
    n_grid = integer("n_grid", n_grid, lo=3)
    arrs = [torch.from_numpy(a) for a in _cand_list(cand)]
    n_rows = sum(a.shape[0] for a in arrs)
    if tau is not None:
        tau = real("tau", tau, lo=0.0, lo_open=True)
    else:
        lo_t, hi_t = (real("tau_bounds[0]", tau_bounds[0], lo=0.0, lo_open=True), real("tau_bounds[1]", tau_bounds[1]))
        if not lo_t < hi_t:
            raise ValueError(f"tau_bounds must be increasing, got {tau_bounds}")

    def best_tau(lam: float) -> tuple[float, float]:
        if tau is not None:
            return tau, _loglik_arrays(arrs, lam, tau, eps)
        r = optimize.minimize_scalar(
            lambda lt: -_loglik_arrays(arrs, lam, math.exp(lt), eps),
            bounds=(math.log(lo_t), math.log(hi_t)), method="bounded", options={"xatol": 1e-6},
        )
        return math.exp(r.x), -float(r.fun)

    grid = np.linspace(0.0, 1.0, n_grid)
    prof = [best_tau(float(l)) for l in grid]
    lls = np.array([p[1] for p in prof])
    j = int(np.argmax(lls))
    lo_l, hi_l = grid[max(j - 1, 0)], grid[min(j + 1, n_grid - 1)]
    r = optimize.minimize_scalar(lambda l: -best_tau(l)[1], bounds=(lo_l, hi_l), method="bounded",
                                 options={"xatol": xatol})
    lam_hat, ll_hat = float(r.x), -float(r.fun)
    if lls[j] >= ll_hat:  # the grid point (possibly an end point 0 or 1) is at least as good
        lam_hat, ll_hat = float(grid[j]), float(lls[j])
    tau_hat = best_tau(lam_hat)[0]
    tau0, ll0 = prof[0]
    stat = max(2.0 * (ll_hat - ll0), 0.0)
    p_chi2 = float(stats.chi2.sf(stat, 1))
    p_boundary = 0.5 * p_chi2 if stat > 0 else 1.0
    profile = pd.DataFrame({"lam": grid, "loglik": lls, "tau": [p[0] for p in prof]})
    return LinkSelection(lam_hat, tau_hat, ll_hat, ll0, tau0, stat, p_chi2, p_boundary, n_rows, profile)
