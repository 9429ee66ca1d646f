"""Two-view InfoNCE (NT-Xent) and its candidate rows, shared by both papers.

Notation (docs/weince.md#candidate-sets, docs/README.md#notation): ``z1, z2`` ``(N, d)`` the two views; ``A = 2N``
anchors of ``z = cat(z1, z2)``; ``S`` ``(A, A)`` similarities; the positive of row ``i`` is
column ``p(i) = (i + N) mod A``; ``cand`` ``(A, A - 1)`` holds ``[S[i, p(i)], S[i, negatives]]``
with the ``A - 2`` negatives in ascending column order.

:func:`info_nce` is SimCLR's loss (Chen et al. 2020); WeiNCE (:mod:`theory.weince`) builds its
logits on the same :func:`two_view_candidates`, so with ``lambda = 0`` it equals
:func:`info_nce` bit for bit.

Reference batches (docs/hcl.md#reference-batches-anchors): every loss of ``theory`` takes an
optional ``anchors`` argument, the sorted, unique indices of the anchors whose terms are computed
against the whole batch (the rows of ``S`` of those anchors only, ``(b, A)``), normalised as the
whole batch's loss, so that the values over a partition of the anchors add up to the loss of the
batch. :func:`_anchor_index` is the one check of that argument, shared by the losses of both papers.
"""

from __future__ import annotations

import functools
from typing import Any

import torch
import torch.nn.functional as F

from theory.geometry import normalize as _normalize
from theory.options import WEINCE_TAU
from theory.validation import as_float_tensor, as_tensor, check_embeddings, integer_tensor, real

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


def _anchor_index(
    anchors: Any, size: int, device: torch.device, *, check_values: bool = True
) -> torch.Tensor:
    """``anchors`` as a 1-D int64 tensor on ``device``: sorted, unique row indices in ``[0, size)``.

    The type, dtype and shape rules are always checked (no data read); ``check_values`` also
    checks the values (strictly increasing, within range: one host synchronisation for device
    tensors). With ``check_values=False`` invalid values give undefined results.

    Raises:
        ValueError: naming ``anchors``: not integers (bool and floating dtypes rejected), not 1-D,
            empty, not strictly increasing (unsorted or repeated), or out of range.
    """
    t = integer_tensor(as_tensor(anchors, "anchors", device=device), "anchors")
    if t.dim() != 1:
        raise ValueError(f"anchors must be a 1-D tensor of row indices, got shape {tuple(t.shape)}")
    if t.numel() == 0:
        raise ValueError("anchors must hold at least one row index, got an empty tensor")
    if check_values:
        increasing = (t[1:] > t[:-1]).all()
        lo, hi, ok = torch.stack([t.min(), t.max(), increasing.long()]).tolist()  # one host read
        if lo < 0 or hi >= size:
            raise ValueError(
                f"anchors must lie in [0, {size}) (the rows of the batch), got min {lo}, max {hi}"
            )
        if not ok:
            raise ValueError("anchors must be sorted and unique (strictly increasing row indices)")
    return t


def _two_view_embeddings(z1: Any, z2: Any, normalize: bool, check_inputs: bool, scale: float) -> torch.Tensor:
    """``z = cat(z1, z2)`` ``(2N, d)``, checked and (``normalize``) L2-normalised: see :func:`two_view_candidates`."""
    a = as_float_tensor(z1, "z1", allow_meta=not check_inputs)
    b = as_float_tensor(z2, "z2", allow_meta=not check_inputs)
    if a.dim() != 2 or a.shape != b.shape:
        raise ValueError(
            f"z1 and z2 must be 2-D with the same shape (N, d), got {tuple(a.shape)} and {tuple(b.shape)}"
        )
    N = a.shape[0]
    if N < 2:
        raise ValueError(f"need N >= 2 pairs (at least one negative per anchor), got N={N}")
    z = torch.cat([a, b.to(a.device, torch.promote_types(a.dtype, b.dtype))]).to(
        torch.promote_types(a.dtype, b.dtype)
    )
    if check_inputs:
        if normalize:
            if not bool(torch.isfinite(z).all()):
                raise ValueError("z1 and z2 must be finite (found NaN or inf)")
        else:
            check_embeddings(z, "z1/z2", scale=scale)
    if normalize:
        # F.normalize (bit for bit what the WeiNCE label variant uses) for every row whose norm is
        # representable; rows whose norm overflows the dtype are projected overflow-safely instead
        # (theory.geometry.normalize), never turned into zero rows.
        norms = torch.linalg.vector_norm(z.detach(), dim=1, keepdim=True)
        z = torch.where(torch.isinf(norms), _normalize(z, "sphere"), F.normalize(z, dim=1, eps=1e-12))
    return z


def _candidate_rows(z: torch.Tensor, anchors: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The rows of ``(S, cand)`` of the validated ``anchors`` only: ``(b, 2N)`` and ``(b, 2N - 1)``."""
    S = z.index_select(0, anchors) @ z.T
    cols = _candidate_index(z.shape[0] // 2, z.device).index_select(0, anchors)
    return S, torch.gather(S, 1, cols)


def two_view_candidates(
    z1: Any,
    z2: Any,
    *,
    normalize: bool = True,
    check_inputs: bool = True,
    scale: float = 1.0,
    anchors: Any = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Similarities and per-anchor candidate rows of the two-view (NT-Xent) problem.

    ``z = cat(z1, z2)`` (``2N`` anchors), L2-normalised row-wise when ``normalize`` (cosine
    similarity; ``F.normalize``, with the overflow-safe :func:`theory.geometry.normalize` for rows
    whose norm overflows the dtype), ``S = z z^T``. Row ``i``
    of ``cand`` is ``[S[i, p(i)], S[i, negatives]]`` with ``p(i) = (i + N) mod 2N`` and the
    ``2N - 2`` negatives (all but ``i`` and ``p(i)``) in ascending column order
    (docs/weince.md#candidate-sets). Computed in float32 for half inputs.

    Args:
        z1: first views ``(N, d)`` (tensor or numpy array, docs/README.md#conventions).
        z2: second views ``(N, d)``.
        normalize: cosine similarities (unit-sphere rows).
        check_inputs: reject NaN / inf in the views, and views whose similarities (times
            ``scale``) overflow when ``normalize=False`` (one host synchronisation); also check
            the values of ``anchors``.
        scale: the factor a loss applies to the similarities (``1 / tau``), for that check.
        anchors: optional sorted, unique indices ``(b,)`` into the ``2N`` anchors: only their
            rows are formed, ``S[anchors]`` against every column (docs/hcl.md#reference-batches-anchors).

    Returns:
        ``(S, cand)``.

    Shape:
        ``z1, z2`` ``(N, d)`` -> ``S`` ``(2N, 2N)``, ``cand`` ``(2N, 2N - 1)``; with ``anchors``
        ``(b,)``: ``S`` ``(b, 2N)``, ``cand`` ``(b, 2N - 1)``.

    Raises:
        ValueError: shapes differ, ``N < 2``, (``check_inputs``) non-finite or too large views, or
            invalid ``anchors``.
    """
    z = _two_view_embeddings(z1, z2, normalize, check_inputs, scale)
    if anchors is not None:
        return _candidate_rows(z, _anchor_index(anchors, z.shape[0], z.device, check_values=check_inputs))
    N = z.shape[0] // 2
    S = z @ z.T
    return S, torch.gather(S, 1, _candidate_index(N, z.device))


def info_nce(
    z1: Any,
    z2: Any,
    tau: float = WEINCE_TAU,
    *,
    anchors: Any = None,
    normalize: bool = True,
    check_inputs: bool = True,
) -> torch.Tensor:
    """Two-view InfoNCE / NT-Xent (SimCLR, Chen et al. 2020).

    ``L = mean_i -log( exp(S[i,p(i)]/tau) / sum_{k != i} exp(S[i,k]/tau) )`` over the ``2N`` anchors
    of ``cat(z1, z2)``, cosine similarities when ``normalize`` (docs/weince.md#infonce-as-a-choice-model).
    Equal, bit for bit, to WeiNCE with ``lambda = 0`` (both use :func:`two_view_candidates`).

    With ``anchors`` (docs/hcl.md#reference-batches-anchors) only the terms of those anchors are
    computed, each against every candidate of the whole batch, and their sum is divided by the
    ``2N`` of the whole batch: the values over a partition of the ``2N`` anchors add up to the
    loss (values and gradients). A process of a multi-GPU run passes the gathered views and the
    indices of its own anchors.

    Args:
        z1: first views ``(N, d)``.
        z2: second views ``(N, d)``.
        tau: temperature ``> 0`` (default :data:`theory.options.WEINCE_TAU`).
        anchors: optional sorted, unique indices ``(b,)`` into the ``2N`` anchors of
            ``cat(z1, z2)`` (row ``i < N`` is ``z1[i]``, row ``N + i`` is ``z2[i]``).
        normalize: cosine similarities.
        check_inputs: reject NaN / inf (and overflowing similarities without ``normalize``), and
            check the values of ``anchors``.

    Returns:
        The scalar loss (with ``anchors``, the selected anchors' part of it).

    Shape:
        ``(N, d)`` each, ``anchors`` ``(b,)`` -> ``()``.

    Raises:
        ValueError: ``tau <= 0``, mismatched shapes, ``N < 2``, non-finite or too large views, or
            invalid ``anchors`` (not integers, not 1-D, empty, unsorted, repeated, out of range).
    """
    tau = real("tau", tau, lo=0.0, lo_open=True)
    _, cand = two_view_candidates(
        z1, z2, normalize=normalize, check_inputs=check_inputs, scale=1.0 / tau, anchors=anchors
    )
    target = torch.zeros(cand.shape[0], dtype=torch.long, device=cand.device)
    if anchors is None:
        return F.cross_entropy(cand / tau, target)
    A = cand.shape[1] + 1  # 2N, the anchors of the whole batch
    return F.cross_entropy(cand / tau, target, reduction="sum") / A
