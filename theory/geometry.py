"""Feature normalisation, the simplex ETF and Gram-matrix helpers.

Notation (docs/README.md#notation): ``z`` embeddings ``(N, d)``; ``C`` (``num_classes``) classes;
``d`` embedding dimension.

References:
    Jiang, Nguyen, Aeron, Ishwar, TMLR 2025 (arXiv 2311.05139): the simplex ETF and Neural
    Collapse (docs/hcl.md#simplex-etf-and-neural-collapse) and the authors' unit-ball projection
    ``out * min(1, 1/||out||)`` (docs/hcl.md#latent-classes-and-the-encoder).
"""

from __future__ import annotations

import math
from typing import Any

import torch
from torch import nn

from theory.options import NORMALIZATIONS
from theory.validation import as_float_tensor, check_size, floating_dtype, integer, one_of

__all__ = [
    "normalize",
    "Normalize",
    "simplex_etf",
    "etf_gram",
    "gram",
]


def normalize(z: Any, normalization: str = "ball") -> torch.Tensor:
    """Project embeddings onto the unit ball or sphere (row-wise).

    * ``"none"``: identity (integer inputs are still promoted to floating point).
    * ``"ball"``: ``z / max(1, ||z||)`` -- rescale only rows outside the unit ball; this is the
      authors' ``out * min(1, 1/||out||)`` (docs/hcl.md#latent-classes-and-the-encoder).
    * ``"sphere"``: ``z / ||z||``.

    Numerics (docs/hcl.md#numerical-safeguards):

    * the norm is computed without overflow or underflow: each row is first divided by its largest
      absolute entry (a constant for autograd, so the gradient is that of ``z / ||z||``), so a
      float32 row with entries near ``1e20`` or ``1e-30`` is normalised correctly;
    * a row holding NaN or inf stays non-finite (``"sphere"`` gives a NaN row, ``"ball"`` leaves it
      as it is): never a plausible-looking zero row, and the losses then reject it; an exact-zero
      row stays zero under ``"sphere"`` (with a zero, finite gradient);
    * integer and bool inputs are promoted to the default floating dtype and the result stays
      floating; float16/bfloat16 rows are normalised in float32 and cast back; numpy arrays are
      accepted (docs/README.md#conventions); a meta tensor gives a meta result (nothing is read).

    Args:
        z: embeddings ``(..., d)``.
        normalization: one of :data:`theory.options.NORMALIZATIONS`.

    Returns:
        The normalised rows, same shape.

    Shape:
        ``(..., d)`` -> ``(..., d)``.

    Raises:
        ValueError: unknown ``normalization``, ``z`` with no feature dimension, or an input the
            rule of :func:`theory.validation.as_tensor` rejects.
    """
    one_of("normalization", normalization, NORMALIZATIONS)
    zf = as_float_tensor(z, allow_meta=True)  # reads no values: meta tensors pass (shape only)
    if zf.dim() < 1:
        raise ValueError(f"z must have at least one dimension (..., d), got shape {tuple(zf.shape)}")
    half = isinstance(z, torch.Tensor) and z.dtype in (torch.float16, torch.bfloat16)
    if normalization == "none":
        return z if half else zf
    out_dtype = z.dtype if half else zf.dtype
    # Scale each row by its largest absolute entry (detached: the result does not depend on it).
    amax = zf.detach().abs().amax(dim=-1, keepdim=True)
    zero = amax == 0
    scaled = zf / torch.where(zero, torch.ones_like(amax), amax)  # |entries| <= 1, NaN/inf -> NaN
    norm_s = torch.linalg.vector_norm(scaled, dim=-1, keepdim=True)  # in [1, sqrt(d)] (NaN rows: NaN)
    if normalization == "ball":
        outside = amax * norm_s.detach() > 1.0  # ||z|| > 1 (False for NaN rows, which stay NaN)
        out = torch.where(outside, scaled / torch.where(outside, norm_s, torch.ones_like(norm_s)), zf)
    else:
        out = torch.where(
            zero, torch.zeros_like(zf), scaled / torch.where(zero, torch.ones_like(norm_s), norm_s)
        )
    return out.to(out_dtype)


class Normalize(nn.Module):
    """``nn.Module`` wrapper of :func:`normalize` for use at the end of an encoder."""

    def __init__(self, normalization: str = "ball") -> None:
        super().__init__()
        self.normalization = one_of("normalization", normalization, NORMALIZATIONS)

    def forward(self, z: torch.Tensor) -> torch.Tensor:  # noqa: D102
        return normalize(z, self.normalization)

    def extra_repr(self) -> str:  # noqa: D102
        return f"normalization={self.normalization!r}"


def etf_gram(num_classes: int, dtype: torch.dtype = torch.float64) -> torch.Tensor:
    """Gram matrix of the normalised simplex ETF: ``C/(C-1) * (I - J/C)`` (``C = num_classes``).

    Diagonal 1, off-diagonal ``-1/(C-1)`` (docs/hcl.md#simplex-etf-and-neural-collapse).

    Args:
        num_classes: ``C >= 2`` (Python or numpy integer).
        dtype: a floating dtype.

    Returns:
        The ``(C, C)`` Gram matrix.

    Raises:
        ValueError: ``num_classes`` is not an integer ``>= 2``, ``dtype`` is not floating, or the
            ``(C, C)`` matrix cannot be allocated (:func:`theory.validation.check_size`).
    """
    C = integer("num_classes", num_classes, lo=2)
    dtype = floating_dtype(dtype)
    itemsize = torch.empty((), dtype=dtype).element_size()
    check_size(
        "num_classes", C, C * C * (3 * 8 + itemsize), what=f"({C}, {C}) float64 work matrices and the result"
    )
    eye = torch.eye(C, dtype=torch.float64)
    return (C / (C - 1) * (eye - torch.full((C, C), 1.0 / C, dtype=torch.float64))).to(dtype)


def simplex_etf(
    num_classes: int,
    d: int,
    generator: torch.Generator | None = None,
    dtype: torch.dtype = torch.float64,
) -> torch.Tensor:
    """``C = num_classes`` unit vectors in R^d forming a simplex ETF (rows).

    ``||v_c|| = 1``, ``sum_c v_c = 0``, ``v_c . v_c' = -1/(C-1)`` for ``c != c'``
    (docs/hcl.md#simplex-etf-and-neural-collapse). Built as the centred, rescaled standard basis of
    R^C, expressed in an orthonormal basis of the (C-1)-dimensional subspace orthogonal to the
    all-ones vector, and embedded in R^d; computed in float64 and cast to ``dtype``. With a
    ``generator`` the result is multiplied by a Haar-random orthogonal ``d x d`` matrix.

    Args:
        num_classes: ``C >= 2`` (Python or numpy integer).
        d: embedding dimension ``>= C - 1`` (Python or numpy integer).
        generator: optional CPU ``torch.Generator`` for the random rotation.
        dtype: a floating dtype (integer dtypes are rejected: an ETF has irrational entries).

    Returns:
        The ``(C, d)`` vertices.

    Raises:
        ValueError: ``num_classes < 2``, ``d < num_classes - 1`` (no ETF exists), a non-integer
            size, a non-floating ``dtype``, or sizes whose float64 work matrices (``(C, C)``,
            ``(C, d)`` and, with a ``generator``, ``(d, d)``) cannot be allocated.
    """
    C = integer("num_classes", num_classes, lo=2)
    d = integer("d", d)
    if d < C - 1:
        raise ValueError(f"d must be an integer >= num_classes - 1 = {C - 1} for a simplex ETF, got {d!r}")
    dtype = floating_dtype(dtype)
    rotation = 3 * d * d if generator is not None else 0  # randn, Q and R of the Haar rotation
    check_size(
        "(num_classes, d)",
        (C, d),
        8 * (3 * C * C + 2 * C * d + rotation),
        what="float64 work matrices (C, C), (C, d)" + (" and (d, d)" if generator is not None else ""),
    )
    # Orthonormal basis of 1^perp in R^C: Helmert-style via QR of the centred identity.
    centred = torch.eye(C, dtype=torch.float64) - 1.0 / C
    q, _ = torch.linalg.qr(centred)  # first C-1 columns span 1^perp
    basis = q[:, : C - 1]
    # Coordinates of the centred basis vectors e_c - 1/C in that basis, scaled to unit norm.
    coords = centred @ basis * math.sqrt(C / (C - 1))  # (C, C-1)
    v = torch.zeros(C, d, dtype=torch.float64)
    v[:, : C - 1] = coords
    if generator is not None:
        g = torch.randn(d, d, generator=generator, dtype=torch.float64)
        rot, r = torch.linalg.qr(g)
        rot = rot * torch.sign(torch.diagonal(r))  # Haar measure
        v = v @ rot
    return v.to(dtype)


def gram(z: Any) -> torch.Tensor:
    """Gram matrix ``z z^T`` of the rows of ``z``.

    Args:
        z: ``(N, d)`` embeddings (the input rule of docs/README.md#conventions).

    Returns:
        ``(N, N)`` inner products.

    Raises:
        ValueError: ``z`` is not 2-D.
    """
    zf = as_float_tensor(z)
    if zf.dim() != 2:
        raise ValueError(f"z must be a 2-D tensor (N, d), got shape {tuple(zf.shape)}")
    return zf @ zf.T
