"""Rank and spectra of embeddings: effective rank, RankMe, the covariance erank, DirectCLR spectrum.

Roy & Vetterli (EUSIPCO 2007), Garrido et al. (ICML 2023), Jing et al. (ICLR 2022);
docs/metrics.md#rank-and-spectra and docs/metrics.md#pitfalls (5). Notation: :mod:`theory.collapse`.

The ranks are scale-invariant and computed on the input divided by a power of two
(docs/metrics.md#scale): ``effective_rank(1e308 * I_3)`` is 3, as for ``I_3``.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt
import torch

from theory.collapse._geometry import pow2_scale, rescaled, unit_rows
from theory.collapse._inputs import ArrayLike, features
from theory.collapse.stats import SPECTRUM_FLOOR, _check_floor
from theory.validation import real

__all__ = ["RANKME_EPS", "effective_rank", "rankme", "erank_cov", "embedding_spectrum"]

#: Garrido et al. (2023) RankMe epsilon (float32 value of the paper).
RANKME_EPS = 1e-7


def _entropy_exp(p: torch.Tensor) -> float:
    """``exp(-sum_k p_k log p_k)`` with ``0 log 0 = 0``."""
    p = p[p > 0]
    return float(torch.exp(-(p * torch.log(p)).sum()))


def effective_rank(matrix: ArrayLike) -> float:
    """Effective rank of Roy & Vetterli (EUSIPCO 2007), from the singular values of ``matrix``.

    ``p_k = sigma_k / sum_j sigma_j``, ``erank = exp(-sum_k p_k log p_k)`` with ``0 log 0 = 0``;
    ``1 <= erank <= rank <= min(rows, cols)``. Standard use: ``matrix = Z`` (embeddings, not
    centred), docs/metrics.md#effective-rank; also the class-mean matrix M (``C - 1`` at a
    simplex ETF). A zero matrix returns 0.0 (its rank).

    Args:
        matrix: any real matrix ``(rows, cols)``.

    Returns:
        The effective rank, a float.

    Shape:
        ``matrix`` ``(rows, cols)`` -> float.

    Raises:
        ValueError: not 2-D, NaN/inf, bool/complex dtype.
    """
    a = features(matrix, "matrix")
    s = torch.linalg.svdvals(a / pow2_scale(a))  # scale-invariant: no overflowing sum of sigma
    total = s.sum()
    if not float(total) > 0:
        return 0.0
    return _entropy_exp(s / total)


def rankme(z: ArrayLike, eps: float = RANKME_EPS) -> float:
    """RankMe of Garrido, Balestriero, Najman & LeCun (ICML 2023).

    ``p_k = sigma_k(Z) / ||sigma(Z)||_1 + eps``, ``RankMe = exp(-sum_{k=1}^{min(N, K)} p_k log p_k)``
    on the singular values of the (uncentred, unsquared) embeddings ``Z`` ``(N, K)``
    (docs/metrics.md#rankme); ``eps = 1e-7`` as in the paper. The paper uses N >> K (about
    25 600 samples); with N < K the value is capped by N. A zero matrix gives p_k = eps.
    Not the covariance variant (that is :func:`erank_cov`).

    Args:
        z: embeddings ``(N, K)``.
        eps: the additive epsilon, in ``[0, 1)``.

    Returns:
        RankMe, a float.

    Shape:
        ``z`` ``(N, K)`` -> float.

    Raises:
        ValueError: not 2-D, NaN/inf, bad ``eps``.
    """
    eps = real("eps", eps, lo=0, hi=1, hi_open=True)
    zt = features(z, "z")
    s = torch.linalg.svdvals(zt / pow2_scale(zt))  # scale-invariant: no overflowing sum of sigma
    total = s.sum()
    p = (s / total if float(total) > 0 else torch.zeros_like(s)) + eps
    return _entropy_exp(p)


def erank_cov(z: ArrayLike) -> float:
    """Entropy effective rank of the centred covariance eigenvalues (NOT RankMe, NOT erank(Z)).

    ``lambda_k`` = eigenvalues of ``Cov(z)`` (``(d, d)``, centred, np.cov convention; they are
    ``sigma_k(z - mean)^2 / (N - 1)``), ``p_k = lambda_k / sum_j lambda_j``,
    ``exp(-sum_k p_k log p_k)``. This is what e.g. reptrix's ``rankme`` and many "effective rank"
    utilities compute (docs/metrics.md#erank_cov and pitfall 5; Roy & Vetterli 2007 applied to
    the covariance); it differs from :func:`rankme` and :func:`effective_rank`. At most
    ``min(N - 1, d)``. Zero covariance returns 0.0.

    Args:
        z: features ``(N, d)``, ``N >= 2``.

    Returns:
        The covariance effective rank, a float.

    Shape:
        ``z`` ``(N, d)`` -> float.

    Raises:
        ValueError: not 2-D, fewer than 2 rows, NaN/inf.
    """
    zt = features(z, "z", min_rows=2)
    zt = zt / pow2_scale(zt)  # scale-invariant: no overflowing square
    s = torch.linalg.svdvals(zt - zt.mean(dim=0, keepdim=True))
    lam = s**2
    total = lam.sum()
    if not float(total) > 0:
        return 0.0
    return _entropy_exp(lam / total)


def embedding_spectrum(
    z: ArrayLike, normalize: bool = True, floor: float = SPECTRUM_FLOOR
) -> npt.NDArray[np.float64]:
    """DirectCLR embedding spectrum of Jing, Vincent, LeCun & Tian (ICLR 2022).

    ``z_i <- z_i / ||z_i||`` (if ``normalize``; a zero row stays zero), ``Cov(z)`` ``(d, d)`` over
    **all samples** (np.cov convention, ddof = 1), its singular values sorted descending,
    returned as ``log(max(sigma_k, floor))`` (absolute floor; exact zeros -> ``log(floor)``,
    ``floor=0`` -> -inf). Dimensional collapse shows as a tail at the floor. Differs from
    :func:`class_mean_spectrum`, which uses only the C class means
    (docs/metrics.md#embedding-spectrum).

    Args:
        z: embeddings ``(N, d)``, ``N >= 2``.
        normalize: divide each row by its norm first (DirectCLR).
        floor: absolute floor in ``[0, 1)``.

    Returns:
        1-D float64 numpy array of length ``d``.

    Shape:
        ``z`` ``(N, d)`` -> ``(d,)``.

    Raises:
        ValueError: not 2-D, fewer than 2 rows, NaN/inf, bad ``floor``; with ``normalize=False``
            a ``sigma_k`` beyond the float64 range (naming ``z``).
    """
    floor = _check_floor(floor)
    zt = features(z, "z", min_rows=2)
    N, d = zt.shape
    scale = 1.0
    if normalize:
        zt = unit_rows(zt)  # scale-safe
    else:  # absolute values: computed on z / scale, then times scale^2 (raises if out of range)
        scale = pow2_scale(zt)
        zt = zt / scale
    s = torch.linalg.svdvals(zt - zt.mean(dim=0, keepdim=True)).cpu().numpy()
    sigma = np.zeros(d, dtype=np.float64)
    sigma[: s.shape[0]] = s**2 / (N - 1)
    sigma = np.sort(sigma)[::-1].copy()
    if scale != 1.0:
        sigma = rescaled(torch.from_numpy(sigma), scale, 2, "z", "the embedding spectrum").numpy()
    with np.errstate(divide="ignore"):
        out: npt.NDArray[np.float64] = np.log(np.maximum(sigma, floor))
    return out
