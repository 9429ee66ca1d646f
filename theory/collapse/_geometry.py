"""Small linear-algebra helpers shared by the metric modules (private to :mod:`theory.collapse`).

Validated class means, the centre of the NC2/NC3 functions, centring with a working-precision
zero test, unit rows, off-diagonal entries, symmetrisation and the normalised simplex-ETF Gram
matrix ``(I_C - J/C) / sqrt(C - 1)`` (docs/metrics.md#etf-error).

Scale safety (docs/metrics.md#scale): a squared entry of features near ``1e160`` overflows float64
and one near ``1e-170`` underflows, so the metrics never square raw features. They divide by
:func:`pow2_scale` first, a power of two ``s`` with ``max |x| / s`` in ``[1, 2)``: the division is
exact (bit for bit the same metric at ordinary scales), a scale-invariant metric is then computed
on the rescaled features, and a scale-dependent one is multiplied back by ``s`` (or ``s^2``) at the
end, raising ``ValueError`` (:func:`rescaled`) when that value itself is not a finite float64.
"""

from __future__ import annotations

import math

import torch

from theory.collapse._inputs import EPS64, F64, features, vector

__all__ = [
    "pow2_scale",
    "pow2_scale_tensor",
    "rescaled",
    "safe_mean",
    "row_norms",
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


def pow2_scale(*tensors: torch.Tensor) -> float:
    """A power of two ``s`` with ``max |x| / s`` in ``[1, 2)`` over all ``tensors`` (1 if all are 0).

    ``s`` lies in ``[2^-1074, 2^1023]``, so it is a float64 and dividing finite features by it
    is exact (unless a tiny entry becomes subnormal: it is then negligible next to the largest).
    One host read (the largest magnitude).
    """
    top = max((float(t.abs().amax()) for t in tensors if t.numel() > 0), default=0.0)
    if not top > 0:
        return 1.0
    return math.ldexp(1.0, math.frexp(top)[1] - 1)


def pow2_scale_tensor(t: torch.Tensor) -> torch.Tensor:
    """:func:`pow2_scale` of one tensor as a 0-d float64 tensor on its device (no host read)."""
    top = t.detach().abs().amax().to(torch.float64) if t.numel() > 0 else torch.zeros((), dtype=torch.float64)
    one = torch.ones_like(top)
    return torch.where(top > 0, torch.ldexp(one, torch.frexp(top).exponent - 1), one)


def rescaled(
    value: torch.Tensor, scale: float | torch.Tensor, power: int, name: str, what: str
) -> torch.Tensor:
    """``value * scale**power`` (``power`` 1 or 2, one exact multiplication each), or ``ValueError``.

    ``value`` was computed from features divided by ``scale`` (:func:`pow2_scale`); the result is
    the quantity of the original features. It raises, naming ``name``, when that quantity is not
    a finite float64 (``what`` says which); an underflow to 0 is the correctly rounded result.
    """
    out = value
    for _ in range(power):
        out = out * scale
    if not bool(torch.isfinite(out).all()):
        raise ValueError(
            f"{name}: {what} overflows float64 at this scale (the largest |entry| is near {float(scale):.3g}); "
            f"rescale {name}"
        )
    return out


def safe_mean(x: torch.Tensor, name: str, what: str) -> float:
    """The mean of the finite ``x`` without overflow of the sum.

    ``ValueError`` naming ``name`` if the mean itself is not a finite float64 (``what`` says which).
    """
    s = pow2_scale(x)
    return float(rescaled((x / s).mean(), s, 1, name, what))


def row_norms(m: torch.Tensor, name: str) -> torch.Tensor:
    """Euclidean norms of the rows, without overflow or underflow of the squares.

    Each row is divided by its own power of two (:func:`pow2_scale` per row) before squaring and
    the norm multiplied back; ``ValueError`` naming ``name`` if a norm exceeds the float64 range.
    """
    top = m.abs().amax(dim=1, keepdim=True)
    s = torch.where(top > 0, torch.ldexp(torch.ones_like(top), torch.frexp(top).exponent - 1), 1.0)
    norms: torch.Tensor = torch.linalg.vector_norm(m / s, dim=1) * s.squeeze(1)
    if not bool(torch.isfinite(norms).all()):
        raise ValueError(f"{name}: a row norm overflows float64 at this scale; rescale {name}")
    return norms


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
    """Validated class means ``(C, d)``, ``C >= 2``, minus the centre, **divided by a power of two**.

    The centred means ``(mu - mu_G) / s`` with ``s = pow2_scale(mu, mu_G)``: every caller is a
    scale-invariant metric (NC2, the ETF error, NC3), so ``s`` is not returned. Raises
    ``ValueError`` naming ``mu`` when every centred mean is zero to working precision
    (``||M~||_F <= max(C, d) eps (||M||_F + sqrt(C) ||mu_G||)``: the round-off of the centring),
    where ``what`` is undefined.
    """
    m = class_means_input(mu)
    g = global_mean_arg(m, global_mean)
    s = pow2_scale(m, g)
    m, g = m / s, g / s
    c = m - g
    C, d = m.shape
    scale = float(torch.linalg.vector_norm(m)) + C**0.5 * float(torch.linalg.vector_norm(g))
    if vanishes(c, scale, max(C, d)):
        raise ValueError(f"mu: every centred class mean is zero (to working precision); {what} is undefined")
    return c


def unit_rows(m: torch.Tensor) -> torch.Tensor:
    """Rows divided by their norm; an exactly-zero row stays zero (its cosines are 0).

    Scale-safe: each row is first divided by its own power of two (exact), so rows near 1e160 or
    1e-170 (whose squares over- or underflow) give the same unit rows as ordinary ones.
    """
    top = m.abs().amax(dim=1, keepdim=True)
    m = m / torch.where(top > 0, torch.ldexp(torch.ones_like(top), torch.frexp(top).exponent - 1), 1.0)
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
