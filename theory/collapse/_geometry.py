"""Small linear-algebra helpers shared by the metric modules (private to :mod:`theory.collapse`).

Validated class means, the centre of the NC2/NC3 functions, centring with a working-precision
zero test, unit rows, off-diagonal entries, symmetrisation and the normalised simplex-ETF Gram
matrix ``(I_C - J/C) / sqrt(C - 1)`` (docs/metrics.md#etf-error).
"""

from __future__ import annotations

import math

import torch

from theory.collapse._inputs import EPS64, F64, features, vector

__all__ = [
    "symmetrised",
    "class_means_input",
    "global_mean_arg",
    "vanishes",
    "centred_means",
    "unit_rows",
    "offdiag",
    "etf_target",
    "gram_etf_distance",
]


def symmetrised(m: torch.Tensor) -> torch.Tensor:
    """``(m + m^T) / 2``: exactly symmetric (and the identity on an exactly symmetric ``m``)."""
    return (m + m.T) / 2


def class_means_input(mu: object, name: str = "mu", min_classes: int = 2) -> torch.Tensor:
    """Validated class means ``(C, d)`` float64 with ``C >= min_classes``."""
    t = features(mu, name)
    if t.shape[0] < min_classes:
        raise ValueError(f"{name} needs at least {min_classes} classes (rows), got shape {tuple(t.shape)}")
    return t


def global_mean_arg(mu: torch.Tensor, global_mean: object) -> torch.Tensor:
    """The centre of the NC2/NC3 functions: the given ``(d,)`` vector (a scalar broadcasts).

    Default (``None``): the mean of the class means.
    """
    if global_mean is None:
        return mu.mean(dim=0)
    return vector(global_mean, "global_mean", mu.shape[1], mu.device)


def vanishes(x: torch.Tensor, scale: float, n: int) -> bool:
    """``||x||_F <= n * eps_float64 * scale``: zero to working precision (exact zero included)."""
    return not float(torch.linalg.vector_norm(x)) > n * EPS64 * scale


def centred_means(mu: object, global_mean: object, what: str) -> torch.Tensor:
    """Validated class means ``(C, d)``, ``C >= 2``, minus the centre (:func:`global_mean_arg`).

    Raises ``ValueError`` naming ``mu`` when every centred mean is zero to working precision
    (``||M~||_F <= max(C, d) eps (||M||_F + sqrt(C) ||mu_G||)``: the round-off of the centring),
    where ``what`` is undefined.
    """
    m = class_means_input(mu)
    g = global_mean_arg(m, global_mean)
    c = m - g
    C, d = m.shape
    scale = float(torch.linalg.vector_norm(m)) + C**0.5 * float(torch.linalg.vector_norm(g))
    if vanishes(c, scale, max(C, d)):
        raise ValueError(f"mu: every centred class mean is zero (to working precision); {what} is undefined")
    return c


def unit_rows(m: torch.Tensor) -> torch.Tensor:
    """Rows divided by their norm; an exactly-zero row stays zero (its cosines are 0)."""
    norms = torch.linalg.vector_norm(m, dim=1, keepdim=True)
    return m / torch.where(norms > 0, norms, torch.ones_like(norms))


def offdiag(a: torch.Tensor) -> torch.Tensor:
    """The off-diagonal entries of a square matrix, flattened."""
    C = a.shape[0]
    return a[~torch.eye(C, dtype=torch.bool, device=a.device)]


def etf_target(C: int, device: torch.device) -> torch.Tensor:
    """``(I_C - J/C) / sqrt(C - 1)``, the Frobenius-normalised simplex-ETF Gram matrix."""
    eye = torch.eye(C, dtype=F64, device=device)
    return (eye - 1.0 / C) / math.sqrt(C - 1)


def gram_etf_distance(g: torch.Tensor, name: str, what: str) -> float:
    """``|| g / ||g||_F - (I - J/C)/sqrt(C-1) ||_F``; ValueError naming ``name`` if ``g = 0``."""
    fro = torch.linalg.matrix_norm(g)
    if not float(fro) > 0:
        raise ValueError(f"{name}: {what} is zero; the ETF error is undefined")
    return float(torch.linalg.matrix_norm(g / fro - etf_target(g.shape[0], g.device)))
