"""Rank and spectra of embeddings: effective rank, RankMe, the covariance erank, DirectCLR spectrum.

Roy & Vetterli (EUSIPCO 2007), Garrido et al. (ICML 2023), Jing et al. (ICLR 2022);
spec/metrics.md §3.5 and pitfall 5. Notation: :mod:`theory.collapse`.
"""

from __future__ import annotations

import numpy as np
import torch

from theory.collapse.stats import SPECTRUM_FLOOR, _check_floor, _features, _unit_rows
from theory.validation import real

__all__ = ["RANKME_EPS", "effective_rank", "rankme", "erank_cov", "embedding_spectrum"]

#: Garrido et al. (2023) RankMe epsilon (float32 value of the paper).
RANKME_EPS = 1e-7


def _entropy_exp(p: torch.Tensor) -> float:
    """``exp(-sum_k p_k log p_k)`` with ``0 log 0 = 0``."""
    p = p[p > 0]
    return float(torch.exp(-(p * torch.log(p)).sum()))


def effective_rank(matrix) -> float:
    """Effective rank of Roy & Vetterli (EUSIPCO 2007), from the singular values of ``matrix``.

    ``p_k = sigma_k / sum_j sigma_j``, ``erank = exp(-sum_k p_k log p_k)`` with ``0 log 0 = 0``;
    ``1 <= erank <= rank <= min(rows, cols)``. Standard use: ``matrix = Z`` (embeddings, not
    centred), spec/metrics.md §3.5; also the class-mean matrix M (``C - 1`` at a simplex ETF).
    A zero matrix returns 0.0 (its rank).

    Shapes: ``matrix`` ``(rows, cols)`` -> float.
    """
    a = _features(matrix, "matrix")
    s = torch.linalg.svdvals(a)
    total = s.sum()
    if not float(total) > 0:
        return 0.0
    return _entropy_exp(s / total)


def rankme(z, eps: float = RANKME_EPS) -> float:
    """RankMe of Garrido, Balestriero, Najman & LeCun (ICML 2023).

    ``p_k = sigma_k(Z) / ||sigma(Z)||_1 + eps``, ``RankMe = exp(-sum_{k=1}^{min(N, K)} p_k log p_k)``
    on the singular values of the (uncentred, unsquared) embeddings ``Z`` ``(N, K)``
    (spec/metrics.md §3.5); ``eps = 1e-7`` as in the paper. The paper uses N >> K (about 25 600
    samples); with N < K the value is capped by N. A zero matrix gives p_k = eps.
    Not the covariance variant (that is :func:`erank_cov`).
    """
    eps = real("eps", eps, lo=0, hi=1, hi_open=True)
    zt = _features(z, "z")
    s = torch.linalg.svdvals(zt)
    total = s.sum()
    p = (s / total if float(total) > 0 else torch.zeros_like(s)) + eps
    return _entropy_exp(p)


def erank_cov(z) -> float:
    """Entropy effective rank of the centred covariance eigenvalues (NOT RankMe, NOT erank(Z)).

    ``lambda_k`` = eigenvalues of ``Cov(z)`` (``(d, d)``, centred, np.cov convention; they are
    ``sigma_k(z - mean)^2 / (N - 1)``), ``p_k = lambda_k / sum_j lambda_j``,
    ``exp(-sum_k p_k log p_k)``. This is what e.g. reptrix's ``rankme`` and many "effective rank"
    utilities compute (spec/metrics.md §3.5 and pitfall 5); it differs from :func:`rankme` and
    :func:`effective_rank`. At most ``min(N - 1, d)``. Zero covariance returns 0.0.

    Shapes: ``z`` ``(N, d)``, ``N >= 2`` -> float.
    """
    zt = _features(z, "z", min_rows=2)
    s = torch.linalg.svdvals(zt - zt.mean(dim=0, keepdim=True))
    lam = s**2
    total = lam.sum()
    if not float(total) > 0:
        return 0.0
    return _entropy_exp(lam / total)


def embedding_spectrum(z, normalize: bool = True, floor: float = SPECTRUM_FLOOR) -> np.ndarray:
    """DirectCLR embedding spectrum of Jing, Vincent, LeCun & Tian (ICLR 2022).

    ``z_i <- z_i / ||z_i||`` (if ``normalize``; a zero row stays zero), ``Cov(z)`` ``(d, d)`` over
    **all samples** (np.cov convention, ddof = 1), its singular values sorted descending,
    returned as ``log(max(sigma_k, floor))`` (absolute floor; exact zeros -> ``log(floor)``,
    ``floor=0`` -> -inf). Dimensional collapse shows as a tail at the floor. Differs from
    :func:`class_mean_spectrum`, which uses only the C class means (spec/metrics.md §3.5).

    Shapes: ``z`` ``(N, d)``, ``N >= 2`` -> 1-D float64 numpy array of length ``d``.
    """
    floor = _check_floor(floor)
    zt = _features(z, "z", min_rows=2)
    N, d = zt.shape
    if normalize:
        zt = _unit_rows(zt)
    s = torch.linalg.svdvals(zt - zt.mean(dim=0, keepdim=True)).cpu().numpy()
    sigma = np.zeros(d, dtype=np.float64)
    sigma[: s.shape[0]] = s**2 / (N - 1)
    sigma = np.sort(sigma)[::-1].copy()
    with np.errstate(divide="ignore"):
        return np.log(np.maximum(sigma, floor))
