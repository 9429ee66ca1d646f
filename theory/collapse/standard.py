"""The standard Neural Collapse metrics NC1 and NC2 (the literature definitions, centred).

Papyan, Han & Donoho (PNAS 2020), Han et al. (ICLR 2022), Galanti, György & Hutter (ICLR 2022),
Zhu et al. (NeurIPS 2021); docs/metrics.md#standard-variant. Notation: :mod:`theory.collapse`.

NC1 and CDNV take raw ``(z, labels)`` or precomputed :class:`~theory.collapse.stats.ClassStats`
(``*_from_stats``); the NC2 functions take class means. The classifier-based NC3 / NC4 are in
:mod:`theory.collapse.classifier`.
"""

from __future__ import annotations

import math

import torch

from theory.collapse._geometry import (
    centred_means,
    gram_etf_distance,
    offdiag,
    symmetrised,
    unit_rows,
    vanishes,
)
from theory.collapse._inputs import EPS64, ArrayLike, batch
from theory.collapse.stats import (
    ClassStats,
    _normalised,
    _require_complete,
    _scaled_stats,
    between_class_covariance_from_stats,
    within_class_covariance_from_stats,
)
from theory.validation import real

__all__ = [
    "nc1",
    "nc1_from_stats",
    "nc1_cdnv",
    "nc1_cdnv_from_stats",
    "nc2_equinorm",
    "nc2_equiangularity",
    "nc2_max_angle",
    "etf_error",
]


def _check_rtol(rtol: float | None) -> float | None:
    return None if rtol is None else real("rtol", rtol, lo=0, hi=1, hi_open=True)


def _nc1_from_cov(sw: torch.Tensor, sb: torch.Tensor, C: int, rtol: float | None, name: str) -> float:
    """Tr(Sigma_W Sigma_B^+)/C with Sigma_B^+ on its top C-1 eigenpairs above ``rtol``."""
    d = sb.shape[0]
    if rtol is None:
        rtol = max(d, C) * EPS64
    sw, sb = symmetrised(sw), symmetrised(sb)  # (callers pass symmetrised matrices: a no-op then)
    evals, evecs = torch.linalg.eigh(sb)  # ascending
    k = min(C - 1, d)
    evals, evecs = evals[d - k :], evecs[:, d - k :]
    lam_max = float(evals[-1])
    if not lam_max > 0:
        raise ValueError(
            f"{name}: the between-class covariance Sigma_B is zero (all class means coincide); "
            "NC1 = Tr(Sigma_W Sigma_B^+)/C needs rank(Sigma_B) >= 1"
        )
    keep = evals > rtol * lam_max
    v, lam = evecs[:, keep], evals[keep]
    quad = torch.einsum("dk,de,ek->k", v, sw, v).clamp_min(0.0)  # v_k^T Sigma_W v_k >= 0
    return float((quad / lam).sum() / C)


def nc1_from_stats(stats: ClassStats, rtol: float | None = None) -> float:
    """NC1 = Tr(Sigma_W Sigma_B^+) / C of precomputed statistics (as :func:`nc1`).

    Args:
        stats: :class:`ClassStats` with a scatter matrix, no missing class, ``C >= 2``.
        rtol: relative eigenvalue cut-off, as :func:`nc1`.

    Returns:
        NC1, a float ``>= 0``.

    Shape:
        ``stats`` of ``(C, d)`` -> float.

    Raises:
        ValueError: ``stats`` without scatter, with a missing class or fewer than 2 classes;
            all class means equal (``Sigma_B = 0``); a bad ``rtol``.
    """
    rtol = _check_rtol(rtol)
    _require_complete(stats, "stats", "nc1")
    return _nc1_stats(stats, rtol, "stats")


def _nc1_stats(stats: ClassStats, rtol: float | None, name: str) -> float:
    stats = _normalised(stats)  # NC1 is scale-invariant: no overflowing or underflowing products
    C, d = stats.means.shape
    if vanishes(stats.means - stats.global_mean, float(torch.linalg.vector_norm(stats.means)), max(C, d)):
        raise ValueError(
            f"{name}: all class means coincide (Sigma_B = 0); NC1 = Tr(Sigma_W Sigma_B^+)/C needs "
            "rank(Sigma_B) >= 1"
        )
    sw = within_class_covariance_from_stats(stats)
    sb = between_class_covariance_from_stats(stats)
    return _nc1_from_cov(sw, sb, stats.num_classes, rtol, name)


def nc1(z: ArrayLike, labels: ArrayLike, num_classes: int | None = None, rtol: float | None = None) -> float:
    """NC1 = Tr(Sigma_W Sigma_B^+) / C, within-class variability collapse ("standard").

    Papyan, Han & Donoho (PNAS 2020), with the Han et al. (ICLR 2022) pseudo-inverse on the top
    ``C - 1`` eigenpairs of Sigma_B (docs/metrics.md#nc1 and pitfall 1). Computed in float64:
    Sigma_W and Sigma_B are symmetrised, Sigma_B is eigendecomposed (``eigh``), its top
    ``min(C-1, d)`` eigenpairs with ``lambda_k > rtol * lambda_max`` are kept (default
    ``rtol = max(d, C) * eps_float64``), and NC1 = (1/C) sum_k (v_k^T Sigma_W v_k) / lambda_k with
    each quadratic form clamped at 0, so the value is never negative. ``mu_G`` is the sample mean.

    Args:
        z: features ``(N, d)``.
        labels: integer labels ``(N,)`` (see :func:`class_stats` for ``num_classes``).
        num_classes: ``C``, or ``None`` for the compact relabelling of the present labels.
        rtol: relative cut-off in ``[0, 1)`` on the eigenvalues of Sigma_B.

    Returns:
        NC1, a float ``>= 0`` (0 at full collapse).

    Shape:
        ``z`` ``(N, d)``, ``labels`` ``(N,)`` -> float.

    Raises:
        ValueError: as :func:`class_stats`; fewer than 2 classes; a missing class; all class means
            equal (Sigma_B = 0, NC1 undefined); a bad ``rtol``.
    """
    rtol = _check_rtol(rtol)
    zt, y, C, classes = batch(z, labels, num_classes)
    st, _ = _scaled_stats(zt, y, C, classes, covariance=True)  # of z / s: scale-safe
    _require_complete(st, "labels", "nc1")
    return _nc1_stats(st, rtol, "z")


def _cdnv(stats: ClassStats) -> float:
    st = _normalised(stats)  # CDNV is scale-invariant: no overflowing squared distances
    mu, var = st.means, st.class_variances
    C = mu.shape[0]
    iu = torch.triu_indices(C, C, offset=1, device=mu.device)
    dist2 = torch.cdist(mu, mu, compute_mode="donot_use_mm_for_euclid_dist") ** 2
    num = (var[iu[0]] + var[iu[1]]) / 2
    den = dist2[iu[0], iu[1]]
    if bool((den == 0).any()):
        return math.inf
    return float((num / den).mean())


def nc1_cdnv_from_stats(stats: ClassStats) -> float:
    """CDNV of precomputed statistics (as :func:`nc1_cdnv`; the scatter matrix is not needed).

    Args:
        stats: :class:`ClassStats` without missing class, ``C >= 2``.

    Returns:
        CDNV, a float ``>= 0`` (``inf`` if two class means coincide).

    Shape:
        ``stats`` of ``(C, d)`` -> float.

    Raises:
        ValueError: a missing class or fewer than 2 classes.
    """
    _require_complete(stats, "stats", "nc1_cdnv")
    return _cdnv(stats)


def nc1_cdnv(z: ArrayLike, labels: ArrayLike, num_classes: int | None = None) -> float:
    """Class-distance normalised variance (CDNV), Galanti, György & Hutter (ICLR 2022).

    ``mean over pairs c < c' of (sigma_c^2 + sigma_c'^2) / (2 ||mu_c - mu_c'||^2)`` with
    ``sigma_c^2 = (1/n_c) sum_{i in c} ||z_i - mu_c||^2`` (docs/metrics.md#cdnv). ``inf`` if two
    class means coincide.

    Args:
        z: features ``(N, d)``.
        labels: integer labels ``(N,)``.
        num_classes: ``C`` or ``None`` (as :func:`class_stats`).

    Returns:
        CDNV, a float ``>= 0``.

    Shape:
        ``z`` ``(N, d)``, ``labels`` ``(N,)`` -> float.

    Raises:
        ValueError: as :func:`class_stats`; fewer than 2 classes; a missing class.
    """
    zt, y, C, classes = batch(z, labels, num_classes)
    st, _ = _scaled_stats(zt, y, C, classes, covariance=False)  # of z / s: scale-safe
    _require_complete(st, "labels", "nc1_cdnv")
    return _cdnv(st)


def nc2_equinorm(mu: ArrayLike, global_mean: ArrayLike | float | None = None) -> float:
    """NC2 equinorm: coefficient of variation of the centred class-mean norms ("standard").

    ``Std_c(||mu_c - mu_G||) / Avg_c(||mu_c - mu_G||)`` with the sample std (ddof = 1, as
    ``torch.std`` in Papyan et al.'s code), Papyan, Han & Donoho (PNAS 2020),
    docs/metrics.md#nc2-equinorm. Ideal 0. For the classifier rows pass ``W`` with
    ``global_mean=0``.

    Args:
        mu: class means ``(C, d)``, ``C >= 2``.
        global_mean: ``mu_G`` ``(d,)`` or a scalar; default the **mean of the class means**
            (equal to the sample mean only for balanced classes, docs/metrics.md#pitfalls 3).
            Pass ``ClassStats.global_mean`` (or ``z.mean(0)``) for Papyan's sample mean.

    Returns:
        The coefficient of variation, a float ``>= 0``.

    Shape:
        ``mu`` ``(C, d)`` -> float.

    Raises:
        ValueError: bad shapes, NaN/inf, fewer than 2 classes, or all centred norms zero (the
            ratio is undefined).
    """
    norms = torch.linalg.vector_norm(centred_means(mu, global_mean, "the equinorm ratio"), dim=1)
    return float(norms.std(correction=1) / norms.mean())


def _centred_cosines(mu: object, global_mean: object, what: str) -> torch.Tensor:
    u = unit_rows(centred_means(mu, global_mean, what))
    return u @ u.T


def nc2_equiangularity(mu: ArrayLike, global_mean: ArrayLike | float | None = None) -> float:
    """NC2 equiangularity: ``Std_{c != c'} cos(mu~_c, mu~_c')`` of centred means ("standard").

    Sample std (ddof = 1) over the ``C(C-1)`` ordered off-diagonal cosines of the centred class
    means; Papyan, Han & Donoho (PNAS 2020), docs/metrics.md#nc2-equiangularity. Ideal 0. A
    centred mean that is exactly zero has cosine 0 (convention).

    Args:
        mu: class means ``(C, d)``, ``C >= 2``.
        global_mean: centre, as in :func:`nc2_equinorm` (default the mean of the class means).

    Returns:
        The standard deviation, a float ``>= 0``.

    Shape:
        ``mu`` ``(C, d)`` -> float.

    Raises:
        ValueError: bad shapes, NaN/inf, fewer than 2 classes, all centred means zero.
    """
    return float(offdiag(_centred_cosines(mu, global_mean, "equiangularity")).std(correction=1))


def nc2_max_angle(mu: ArrayLike, global_mean: ArrayLike | float | None = None) -> float:
    """NC2 maximal angle: ``Avg_{c != c'} |cos(mu~_c, mu~_c') + 1/(C-1)|`` ("standard").

    The Papyan/Han code's "coherence" (Papyan, Han & Donoho, PNAS 2020;
    docs/metrics.md#nc2-maximal-angle); the centred counterpart of :func:`paper_conditions`'
    ``etf_mean``. Ideal 0 (reachable only when ``d >= C - 1``).

    Args:
        mu: class means ``(C, d)``, ``C >= 2``.
        global_mean: centre, as in :func:`nc2_equinorm` (default the mean of the class means).

    Returns:
        The mean absolute deviation, a float ``>= 0``.

    Shape:
        ``mu`` ``(C, d)`` -> float.

    Raises:
        ValueError: bad shapes, NaN/inf, fewer than 2 classes, all centred means zero.
    """
    cos = _centred_cosines(mu, global_mean, "the maximal-angle measure")
    C = cos.shape[0]
    return float(offdiag(cos + 1.0 / (C - 1)).abs().mean())


def etf_error(mu: ArrayLike, global_mean: ArrayLike | float | None = None) -> float:
    """Single-number ETF error of the centred class means ("standard"), Zhu et al. (NeurIPS 2021).

    ``|| M~ M~^T / ||M~ M~^T||_F - (I_C - J/C) / sqrt(C - 1) ||_F`` (``compute_ETF`` of
    tding1/Neural-Collapse, docs/metrics.md#etf-error); 0 exactly at a (scaled, rotated,
    shifted) simplex ETF, at most 2. Pass classifier weights ``W`` ``(C, d)`` as ``mu`` with
    ``global_mean=0`` for the classifier version.

    Args:
        mu: class means ``(C, d)``, ``C >= 2``.
        global_mean: centre, as in :func:`nc2_equinorm` (default the mean of the class means).

    Returns:
        The ETF error, a float in ``[0, 2]``.

    Shape:
        ``mu`` ``(C, d)`` -> float.

    Raises:
        ValueError: bad shapes, NaN/inf, fewer than 2 classes, or all centred means zero.
    """
    c = centred_means(mu, global_mean, "the ETF error")
    return gram_etf_distance(c @ c.T, "mu", "M~ M~^T")
