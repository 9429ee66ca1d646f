"""Two-view InfoNCE (NT-Xent) and its candidate rows, shared by both papers.

Notation (spec/weince.md §2.1, DESIGN.md): ``z1, z2`` ``(N, d)`` the two views; ``A = 2N``
anchors of ``z = cat(z1, z2)``; ``S`` ``(A, A)`` similarities; the positive of row ``i`` is
column ``p(i) = (i + N) mod A``; ``cand`` ``(A, A - 1)`` holds ``[S[i, p(i)], S[i, negatives]]``
with the ``A - 2`` negatives in ascending column order.

:func:`info_nce` is SimCLR's loss (Chen et al. 2020); WeiNCE (:mod:`theory.weince`) builds its
logits on the same :func:`two_view_candidates`, so with ``lambda = 0`` it equals
:func:`info_nce` bit for bit.
"""

from __future__ import annotations

import functools

import torch
import torch.nn.functional as F

from theory.options import WEINCE_TAU
from theory.validation import as_float_tensor, real

__all__ = ["two_view_candidates", "info_nce"]


@functools.lru_cache(maxsize=32)
def _candidate_index(N: int, device: torch.device) -> torch.Tensor:
    """Column index ``(2N, 2N-1)``: positive ``(i+N) mod 2N`` first, then negatives ascending."""
    A = 2 * N
    i = torch.arange(A, device=device)[:, None]
    p = (i + N) % A
    lo, hi = torch.minimum(i, p), torch.maximum(i, p)
    r = torch.arange(A - 2, device=device)[None, :]
    c = r + (r >= lo).long()
    c = c + (c >= hi).long()
    return torch.cat([p, c], dim=1)


def two_view_candidates(
    z1: torch.Tensor, z2: torch.Tensor, *, normalize: bool = True
) -> tuple[torch.Tensor, torch.Tensor]:
    """Similarities and per-anchor candidate rows of the two-view (NT-Xent) problem.

    ``z = cat(z1, z2)`` (``2N`` anchors), L2-normalised row-wise when ``normalize`` (cosine
    similarity), ``S = z z^T``. Row ``i`` of ``cand`` is ``[S[i, p(i)], S[i, negatives]]`` with
    ``p(i) = (i + N) mod 2N`` and the ``2N - 2`` negatives (all but ``i`` and ``p(i)``) in
    ascending column order (spec/weince.md §2.1). Computed in float32 for half inputs.

    Shapes: ``z1, z2`` ``(N, d)`` -> ``S`` ``(2N, 2N)``, ``cand`` ``(2N, 2N - 1)``.
    """
    if not isinstance(z1, torch.Tensor) or not isinstance(z2, torch.Tensor):
        raise ValueError("z1 and z2 must be torch tensors")
    if z1.dim() != 2 or z1.shape != z2.shape:
        raise ValueError(
            f"z1 and z2 must be 2-D with the same shape (N, d), got {tuple(z1.shape)} and {tuple(z2.shape)}"
        )
    N = z1.shape[0]
    if N < 2:
        raise ValueError(f"need N >= 2 pairs (at least one negative per anchor), got N={N}")
    z = as_float_tensor(torch.cat([z1, z2]))
    if normalize:
        z = F.normalize(z, dim=1, eps=1e-12)
    S = z @ z.T
    return S, torch.gather(S, 1, _candidate_index(N, z.device))


def info_nce(z1: torch.Tensor, z2: torch.Tensor, tau: float = WEINCE_TAU, *, normalize: bool = True) -> torch.Tensor:
    """Two-view InfoNCE / NT-Xent (SimCLR, Chen et al. 2020).

    ``L = mean_i -log( exp(S[i,p(i)]/tau) / sum_{k != i} exp(S[i,k]/tau) )`` over the ``2N``
    anchors of ``cat(z1, z2)``, cosine similarities when ``normalize``. Shapes ``(N, d)`` each ->
    scalar. Equal, bit for bit, to WeiNCE with ``lambda = 0`` (both use
    :func:`two_view_candidates`). ``tau`` defaults to :data:`theory.options.WEINCE_TAU`.
    """
    tau = real("tau", tau, lo=0.0, lo_open=True)
    _, cand = two_view_candidates(z1, z2, normalize=normalize)
    target = torch.zeros(cand.shape[0], dtype=torch.long, device=cand.device)
    return F.cross_entropy(cand / tau, target)
