"""The sampled estimator of the mean / sum psi forms on drawn negatives (autograd Functions).

Used by :func:`theory.hcl.contrastive_loss` with ``estimator="sampled"`` and psi ``"mean"`` or
``"sum"``; docs/hcl.md#sampled-estimator. Notation: ``S`` ``(N, B)`` similarities (for a
reference batch, docs/hcl.md#reference-batches-anchors, the rows of the ``b`` anchors only,
``S = z[anchors] z^T`` ``(b, B)``, whose backward autograd scatters into the anchor rows and the
candidates), ``pair_flat`` ``(P,)`` the flat index of each pair's positive. Two Functions, one
value:

* :class:`_SampledStream` (CPU, float32 / float64): the compiled kernels draw each pair's
  negatives from its stream and sum ``exp((S - M_row) / tau)`` of the drawn columns; nothing of
  size ``(P, K)`` but the drawn columns (2 bytes each);
* :class:`_SampledPsi` (other devices and dtypes): on the materialised draws, ``idx`` ``(P, K)``
  flat indices into ``S`` and ``drawn = S.view(-1)[idx]``, shifted by each pair's own maximum.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import torch
import torch.nn.functional as F

from theory.hcl._expectation import _pair_grad, _weighted_sum

__all__: list[str] = []


def _values(x: torch.Tensor, dtype: torch.dtype, red: Any) -> torch.Tensor:
    """``softplus(x)`` per pair in ``dtype``, or its reduction ``red`` (float64 accumulation)."""
    out = F.softplus(x).to(dtype)
    return out if red is None else _weighted_sum(out, red)


def _backward_once(ctx: Any) -> None:
    """Mark ``ctx``'s backward as run; raise if it ran before (its saved state is used once)."""
    if ctx.used:
        raise RuntimeError(
            "the sampled estimator's backward can run only once (retain_graph is not supported)"
        )
    ctx.used = True


class _SampledPsi(torch.autograd.Function):
    """Per-pair ``softplus(LSE_r((S[i, n_r] - S[i, j]) / tau) + offset)`` on the drawn ``n_r``.

    ``offset = -log K`` for the mean form, ``0`` for the sum form. With ``m_p = max_r S[i, n_r]``
    and ``e_pr = exp((S[i, n_r] - m_p) / tau)`` (all ``<= 1``, one exponential per draw), the value
    is ``softplus((m_p - S[i, j]) / tau + log sum_r e_pr + offset)``; backward scatters
    ``g_p sigmoid(x_p) e_pr / (tau sum_r e_pr)`` onto the drawn entries and ``-g_p sigmoid(x_p) / tau``
    onto the positive (no ``(P, K, d)`` tensor; the drawn values are overwritten in place).
    """

    @staticmethod
    def forward(
        ctx: Any,
        S: torch.Tensor,
        drawn: torch.Tensor,
        idx: torch.Tensor,
        pair_flat: torch.Tensor,
        tau: float,
        offset: float,
        red: Any,
    ) -> torch.Tensor:
        flat = S.detach().reshape(-1)
        e = drawn  # (P, K) drawn similarities S.view(-1)[idx], overwritten in place
        m = e.amax(dim=1)
        e.sub_(m[:, None])
        if tau != 1.0:
            e.mul_(1.0 / tau)
        e.exp_()
        total = e.sum(dim=1)
        x = (m - flat.index_select(0, pair_flat)) / tau + torch.log(total) + offset
        ctx.save_for_backward(e, idx, total, pair_flat, torch.sigmoid(x))
        ctx.tau, ctx.shape, ctx.red, ctx.used = tau, S.shape, red, False
        return _values(x, S.dtype, red)

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx: Any, grad_out: torch.Tensor) -> tuple[torch.Tensor | None, ...]:
        _backward_once(ctx)
        e, idx, total, pair_flat, sig = ctx.saved_tensors
        gp = _pair_grad(grad_out, ctx.red) * sig / ctx.tau
        weights = e.mul_((gp / total)[:, None])  # in place: the saved values are used once
        grad = torch.zeros(ctx.shape[0] * ctx.shape[1], dtype=e.dtype, device=e.device)
        grad.index_add_(0, idx.reshape(-1), weights.reshape(-1))
        grad.index_add_(0, pair_flat, -gp)
        return grad.view(ctx.shape), None, None, None, None, None, None


#: A pair whose drawn sum of ``exp((S - M_row) / tau)`` is below this is summed again with its own
#: largest drawn similarity (its terms underflow against the row's maximum). Above it a term lost
#: to underflow is below 2^-958 of the sum, and ``|log sum| <= 44.4``, so the pair's logit loses at
#: most that many units of its last place to the cancellation with ``(M_row - S[i, j]) / tau``.
STREAM_LEAST = 2.0**-64


#: Leading weights per row hashed to find the rows with equal weights
#: (:func:`theory.hcl._laws.shared_laws`, which then compares whole rows): enough to tell the
#: classes of a batch apart, a fraction of a whole pass.
LAW_HASHED = 64

#: Buffers of finished steps by dtype, reused by the next step (:func:`_take`, :func:`_give`).
_spares: dict[torch.dtype, list[torch.Tensor]] = {}


def _take(numel: int, dtype: torch.dtype) -> torch.Tensor:
    """A 1-D CPU tensor of ``numel`` entries, on the memory of a finished step's buffer if one is large enough.

    The sampled estimator's ``(N, B)`` float64 blocks and ``(P, K)`` columns are large (10 MB and
    14 MB for five stacked runs at C = 50): fresh ones cost their page faults at every step
    (measured: an ``exp`` into a fresh block 2.3 ms, into a reused one 0.6 ms).
    """
    pool = _spares.setdefault(dtype, [])
    for i, buf in enumerate(pool):
        if buf.numel() >= numel:
            return pool.pop(i)[:numel]
    return torch.empty(numel, dtype=dtype)


def _give(*tensors: torch.Tensor) -> None:
    """Return buffers of :func:`_take` whose step is finished (nothing may use them afterwards)."""
    for t in tensors:
        base = t._base if t._base is not None else t
        pool = _spares.setdefault(base.dtype, [])
        pool.append(base)
        del pool[:-3]  # at most three per dtype: an (N, B) table, its exp row, the columns


class _StreamDraws(NamedTuple):
    """What the compiled CPU path needs to draw every pair's negatives from the streams."""

    weights: torch.Tensor  # (N, B) float64 B q: the rows' alias tables are built from them in the kernel
    rows: torch.Tensor  # (P,) int64 anchor row of each pair
    seeds: torch.Tensor  # (P,) int64: the stream seed of each pair (its run's)
    first: torch.Tensor  # (P,) int64: the counter of each pair's first uniform
    K: int
    uniform: torch.Tensor | None  # (N,) bool: rows of runs at beta = 0 (equal rows share a table), or None


class _SampledStream(torch.autograd.Function):
    """:class:`_SampledPsi` on the CPU without any ``(P, K)`` tensor (compiled kernels).

    ``erow = exp((S - M_row) / tau)`` (float64, ``M_row`` the row's largest allowed similarity,
    every allowed term ``<= 1``) is computed once; the forward (:func:`theory.hcl._kernels.stream_forward`)
    draws each pair's ``K`` columns from its stream (rows whose weights are equal, the rows of
    runs at beta = 0 of a class, share one alias table: :mod:`theory.hcl._laws`) and sums their
    ``erow``: the value is
    ``softplus((M_row - S[i, j]) / tau + log total_p + offset)``, and keeps the drawn columns
    (2 bytes each). The backward (:func:`theory.hcl._kernels.stream_backward`) adds each pair's
    ``g_p sigmoid(x_p) / (tau total_p)`` to a row weight ``W`` at those columns: the drawn entries'
    gradient is ``W * erow``, the positive's ``-g_p sigmoid(x_p) / tau``. A pair whose terms
    underflow against the row maximum (sum below :data:`STREAM_LEAST`) is summed with its own
    largest drawn similarity instead, in both passes. Values in float64, returned in ``S``'s dtype.
    """

    @staticmethod
    def forward(
        ctx: Any,
        S: torch.Tensor,
        draws: _StreamDraws,
        erow: torch.Tensor,
        M: torch.Tensor,
        pair_flat: torch.Tensor,
        tau: float,
        offset: float,
        red: Any,
    ) -> torch.Tensor:
        from theory.hcl import _kernels, _laws  # lazy: numba loads only where the CPU kernels run

        B = S.shape[1]
        values = S.detach().reshape(-1)
        erow = erow.view(-1)
        rows = draws.rows
        P, K = rows.shape[0], draws.K
        r = rows.numpy()
        if P > 1 and bool((r[1:] < r[:-1]).any()):  # numpy: the pairs are on the host already
            raise ValueError("the sampled estimator's pairs must come in pair order (rows non-decreasing)")
        shift = M.index_select(0, rows)
        total = torch.empty(P, dtype=torch.float64)
        own = torch.empty(P, dtype=torch.uint8)
        drawn = _take(P * K, torch.uint16 if B <= 2**16 else torch.int32).view(P, K)  # for backward
        w = draws.weights.numpy()
        law = None if draws.uniform is None else _laws.shared_laws(w, draws.uniform.numpy(), LAW_HASHED)
        _kernels.forward(
            w, draws.seeds.numpy().view("uint64"), draws.first.numpy(), rows.numpy(), K, erow.numpy(),
            values.numpy(), 1.0 / tau, STREAM_LEAST, shift.numpy(), total.numpy(), own.numpy(),
            drawn.numpy(), law,
        )  # fmt: skip
        x = (shift - values.index_select(0, pair_flat)).mul_(1.0 / tau).add_(torch.log(total)).add_(offset)
        ctx.save_for_backward(erow, total, own, shift, rows, pair_flat, torch.sigmoid(x), drawn)
        ctx.values = values  # S itself (no copy): read only for the pairs with their own shift
        ctx.tau, ctx.shape, ctx.dtype, ctx.red, ctx.used = tau, S.shape, S.dtype, red, False
        return _values(x, S.dtype, red)

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx: Any, grad_out: torch.Tensor) -> tuple[torch.Tensor | None, ...]:
        from theory.hcl import _kernels  # lazy: numba loads only where the CPU kernels run

        _backward_once(ctx)
        erow, total, own, shift, rows, pair_flat, sig, drawn = ctx.saved_tensors
        gp = _pair_grad(grad_out, ctx.red).to(torch.float64) * sig / ctx.tau
        grad = torch.empty(ctx.shape, dtype=ctx.dtype)
        _kernels.backward(
            drawn.numpy(), rows.numpy(), (gp / total).numpy(), gp.numpy(), pair_flat.numpy(), own.numpy(),
            ctx.values.numpy(), shift.numpy(), 1.0 / ctx.tau, erow.numpy(), grad.numpy(),
        )  # fmt: skip
        _give(erow, drawn)  # used once (ctx.used): the next step may write them
        ctx.values = None
        return grad, None, None, None, None, None, None, None
