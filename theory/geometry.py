"""Feature normalisation, the simplex ETF and Gram-matrix helpers.

Notation (DESIGN.md): ``z`` embeddings ``(N, d)``; ``C`` (``num_classes``) classes; ``d``
embedding dimension.

References:
    Jiang, Nguyen, Aeron, Ishwar (TMLR 2025), spec/hcl.md §3.1 (simplex ETF, NC) and §5.2
    (the authors' unit-ball projection ``out * min(1, 1/||out||)``).
"""

from __future__ import annotations

import math

import torch
from torch import nn

from theory.options import NORMALIZATIONS
from theory.validation import as_float_tensor, one_of

__all__ = [
    "normalize",
    "Normalize",
    "simplex_etf",
    "etf_gram",
    "gram",
]

#: Norms below this are treated as zero by the sphere projection (the vector is left at 0).
_TINY = 1e-12


def normalize(z: torch.Tensor, normalization: str = "ball") -> torch.Tensor:
    """Project embeddings onto the unit ball or sphere (row-wise).

    Shapes: ``z`` ``(..., d)`` -> ``(..., d)``.

    * ``"none"``: identity.
    * ``"ball"``: ``z / max(1, ||z||)`` -- rescale only rows outside the unit ball; this is the
      authors' ``out * min(1, 1/||out||)`` (spec/hcl.md §5.2, quirk 7).
    * ``"sphere"``: ``z / ||z||``; a zero row stays zero (its gradient is finite), instead of NaN.

    The norm is computed in at least float32 (half-precision inputs are normalised in float32 and
    cast back), so a tiny or zero row never overflows or divides by a rounded-to-zero norm.

    Raises:
        ValueError: unknown ``normalization`` or ``z`` with no feature dimension.
    """
    one_of("normalization", normalization, NORMALIZATIONS)
    if not isinstance(z, torch.Tensor) or z.dim() < 1:
        raise ValueError("z must be a torch tensor with at least one dimension (..., d)")
    if normalization == "none":
        return z
    zf = as_float_tensor(z)
    norm = torch.linalg.vector_norm(zf, dim=-1, keepdim=True)
    if normalization == "ball":
        out = zf / torch.clamp(norm, min=1.0)
    else:
        out = torch.where(norm > _TINY, zf / torch.clamp(norm, min=_TINY), torch.zeros_like(zf))
    return out.to(z.dtype)


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
    """Gram matrix of the normalised simplex ETF: ``C/(C-1) * (I - J/C)``, shape ``(C, C)``.

    ``C = num_classes``. Diagonal 1, off-diagonal ``-1/(C-1)`` (spec/hcl.md §3.1, metrics.md §0).
    """
    C = num_classes
    if not isinstance(C, int) or C < 2:
        raise ValueError(f"num_classes must be an integer >= 2, got {C!r}")
    eye = torch.eye(C, dtype=dtype)
    return C / (C - 1) * (eye - torch.full((C, C), 1.0 / C, dtype=dtype))


def simplex_etf(
    num_classes: int,
    d: int,
    generator: torch.Generator | None = None,
    dtype: torch.dtype = torch.float64,
) -> torch.Tensor:
    """``C = num_classes`` unit vectors in R^d forming a simplex ETF (rows), shape ``(C, d)``.

    ``||v_c|| = 1``, ``sum_c v_c = 0``, ``v_c . v_c' = -1/(C-1)`` for ``c != c'``. Built as the
    centred, rescaled standard basis of R^C, expressed in an orthonormal basis of the
    (C-1)-dimensional subspace orthogonal to the all-ones vector, and embedded in R^d. With a
    ``generator`` the result is multiplied by a Haar-random orthogonal ``d x d`` matrix.

    Raises:
        ValueError: ``num_classes < 2`` or ``d < num_classes - 1`` (no ETF exists).
    """
    C = num_classes
    if not isinstance(C, int) or C < 2:
        raise ValueError(f"num_classes must be an integer >= 2, got {C!r}")
    if not isinstance(d, int) or d < C - 1:
        raise ValueError(
            f"d must be an integer >= num_classes - 1 = {C - 1} for a simplex ETF, got {d!r}"
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


def gram(z: torch.Tensor) -> torch.Tensor:
    """Gram matrix ``z z^T`` of the rows of ``z`` ``(N, d)`` -> ``(N, N)``."""
    if not isinstance(z, torch.Tensor) or z.dim() != 2:
        raise ValueError("z must be a 2-D tensor (N, d)")
    return z @ z.T
