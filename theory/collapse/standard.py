"""The standard Neural Collapse metrics NC1 and NC2 (the literature definitions, centred).

Papyan, Han & Donoho (PNAS 2020), Han et al. (ICLR 2022), Galanti, György & Hutter (ICLR 2022),
Zhu et al. (NeurIPS 2021); spec/metrics.md §3.1-§3.2. Notation: :mod:`theory.collapse`.
"""

from __future__ import annotations

import math

import torch

from theory.collapse.stats import (
    _EPS64,
    _F64,
    _between_from_means,
    _class_means_input,
    _covariance_from_scatter,
    _features,
    _global_mean,
    _labels,
    _means64,
    _offdiag,
    _unit_rows,
)
from theory.validation import real

__all__ = ["nc1", "nc1_cdnv", "nc2_equinorm", "nc2_equiangularity", "nc2_max_angle", "etf_error"]


def _nc1_from_cov(sw: torch.Tensor, sb: torch.Tensor, C: int, rtol: float | None) -> float:
    """Tr(Sigma_W Sigma_B^+)/C with Sigma_B^+ on its top C-1 eigenpairs above ``rtol``."""
    d = sb.shape[0]
    if rtol is None:
        rtol = max(d, C) * _EPS64
    else:
        rtol = real("rtol", rtol, lo=0, hi=1, hi_open=True)
    sw = (sw + sw.T) / 2
    sb = (sb + sb.T) / 2
    evals, evecs = torch.linalg.eigh(sb)  # ascending
    k = min(C - 1, d)
    evals, evecs = evals[d - k :], evecs[:, d - k :]
    lam_max = float(evals[-1]) if k > 0 else 0.0
    if not lam_max > 0:
        # No between-class spread: the classes are indistinguishable, NC1 is unbounded.
        return math.inf
    keep = evals > rtol * lam_max
    v, lam = evecs[:, keep], evals[keep]
    quad = torch.einsum("dk,de,ek->k", v, sw, v).clamp_min(0.0)  # v_k^T Sigma_W v_k >= 0
    return float((quad / lam).sum() / C)


def nc1(z, labels, num_classes: int | None = None, rtol: float | None = None) -> float:
    """NC1 = Tr(Sigma_W Sigma_B^+) / C, within-class variability collapse ("standard").

    Papyan, Han & Donoho (PNAS 2020), with the Han et al. (ICLR 2022) pseudo-inverse on the top
    ``C - 1`` eigenpairs of Sigma_B (spec/metrics.md §3.1 and pitfall 1). Computed in float64:
    Sigma_W and Sigma_B are symmetrised, Sigma_B is eigendecomposed (``eigh``), its top
    ``min(C-1, d)`` eigenpairs with ``lambda_k > rtol * lambda_max`` are kept (default
    ``rtol = max(d, C) * eps_float64``), and NC1 = (1/C) sum_k (v_k^T Sigma_W v_k) / lambda_k with
    each quadratic form clamped at 0, so the value is never negative. ``mu_G`` is the sample mean.

    If all class means coincide (Sigma_B = 0) NC1 is unbounded and ``inf`` is returned.

    Shapes: ``z`` ``(N, d)``, ``labels`` ``(N,)`` -> float >= 0 (0 at full collapse).

    Raises:
        ValueError: as :func:`class_means`; fewer than 2 classes.
    """
    zt = _features(z, "z")
    y, C = _labels(labels, zt.shape[0], num_classes, zt.device)
    if C < 2:
        raise ValueError(f"nc1 needs at least 2 classes, got C = {C}")
    _, mu = _means64(zt, y, C)
    r = zt - mu[y]
    sw = _covariance_from_scatter(r.T @ r, zt.shape[0])
    sb = _between_from_means(mu, zt.mean(dim=0))
    return _nc1_from_cov(sw, sb, C, rtol)


def _cdnv(mu: torch.Tensor, var: torch.Tensor) -> float:
    C = mu.shape[0]
    iu = torch.triu_indices(C, C, offset=1, device=mu.device)
    dist2 = torch.cdist(mu, mu, compute_mode="donot_use_mm_for_euclid_dist") ** 2
    num = (var[iu[0]] + var[iu[1]]) / 2
    den = dist2[iu[0], iu[1]]
    if bool((den == 0).any()):
        return math.inf
    return float((num / den).mean())


def nc1_cdnv(z, labels, num_classes: int | None = None) -> float:
    """Class-distance normalised variance (CDNV), Galanti, György & Hutter (ICLR 2022).

    ``mean over pairs c < c' of (sigma_c^2 + sigma_c'^2) / (2 ||mu_c - mu_c'||^2)`` with
    ``sigma_c^2 = (1/n_c) sum_{i in c} ||z_i - mu_c||^2`` (spec/metrics.md §3.1). ``inf`` if two
    class means coincide. Shapes: ``(N, d)``, ``(N,)`` -> float >= 0.
    """
    zt = _features(z, "z")
    y, C = _labels(labels, zt.shape[0], num_classes, zt.device)
    if C < 2:
        raise ValueError(f"nc1_cdnv needs at least 2 classes, got C = {C}")
    counts, mu = _means64(zt, y, C)
    sq = ((zt - mu[y]) ** 2).sum(dim=1)
    var = torch.zeros(C, dtype=_F64, device=zt.device).index_add_(0, y, sq) / counts.to(_F64)
    return _cdnv(mu, var)


def _centred(mu, global_mean) -> torch.Tensor:
    m = _class_means_input(mu)
    return m - _global_mean(m, global_mean)


def nc2_equinorm(mu, global_mean=None) -> float:
    """NC2 equinorm: coefficient of variation of the centred class-mean norms ("standard").

    ``Std_c(||mu_c - mu_G||) / Avg_c(||mu_c - mu_G||)`` with the sample std (ddof = 1, as
    ``torch.std`` in Papyan et al.'s code), Papyan, Han & Donoho (PNAS 2020), spec/metrics.md
    §3.2. Ideal 0.

    Args:
        mu: class means ``(C, d)``, ``C >= 2``.
        global_mean: ``mu_G`` ``(d,)``; default the mean of the class means (equal to the sample
            mean only for balanced classes, pitfall 3). Pass ``z.mean(0)`` for the Papyan one.

    Raises:
        ValueError: bad shapes, or all centred norms zero (the ratio is undefined).
    """
    c = _centred(mu, global_mean)
    norms = torch.linalg.vector_norm(c, dim=1)
    avg = norms.mean()
    if not float(avg) > 0:
        raise ValueError("mu: every centred class mean is zero; the equinorm ratio is undefined")
    return float(norms.std(correction=1) / avg)


def _centred_cosines(mu, global_mean) -> torch.Tensor:
    c = _centred(mu, global_mean)
    u = _unit_rows(c)
    return u @ u.T


def nc2_equiangularity(mu, global_mean=None) -> float:
    """NC2 equiangularity: ``Std_{c != c'} cos(mu~_c, mu~_c')`` of centred means ("standard").

    Sample std (ddof = 1) over the ``C(C-1)`` ordered off-diagonal cosines of the centred class
    means; Papyan, Han & Donoho (PNAS 2020), spec/metrics.md §3.2. Ideal 0. ``global_mean`` as
    in :func:`nc2_equinorm`. A centred mean that is exactly zero has cosine 0 (convention).
    """
    cos = _centred_cosines(mu, global_mean)
    return float(_offdiag(cos).std(correction=1))


def nc2_max_angle(mu, global_mean=None) -> float:
    """NC2 maximal angle: ``Avg_{c != c'} |cos(mu~_c, mu~_c') + 1/(C-1)|`` ("standard").

    The Papyan/Han code's "coherence" (spec/metrics.md §3.2); the centred counterpart of
    :func:`paper_conditions`' ``etf_mean``. Ideal 0. ``global_mean`` as in :func:`nc2_equinorm`.
    """
    cos = _centred_cosines(mu, global_mean)
    C = cos.shape[0]
    return float(_offdiag(cos + 1.0 / (C - 1)).abs().mean())


def etf_error(mu, global_mean=None) -> float:
    """Single-number ETF error of the centred class means ("standard"), Zhu et al. (NeurIPS 2021).

    ``|| M~ M~^T / ||M~ M~^T||_F - (I_C - J/C) / sqrt(C - 1) ||_F`` (``compute_ETF`` of
    tding1/Neural-Collapse, spec/metrics.md §3.2); 0 exactly at a (scaled, rotated, shifted)
    simplex ETF, at most 2. Pass classifier weights ``W`` ``(C, d)`` as ``mu`` with
    ``global_mean = 0`` for the classifier version. ``global_mean`` as in :func:`nc2_equinorm`.

    Raises:
        ValueError: bad shapes or all centred means zero.
    """
    c = _centred(mu, global_mean)
    C = c.shape[0]
    g = c @ c.T
    fro = torch.linalg.matrix_norm(g)
    if not float(fro) > 0:
        raise ValueError("mu: every centred class mean is zero; the ETF error is undefined")
    eye = torch.eye(C, dtype=_F64, device=c.device)
    target = (eye - 1.0 / C) / math.sqrt(C - 1)
    return float(torch.linalg.matrix_norm(g / fro - target))
