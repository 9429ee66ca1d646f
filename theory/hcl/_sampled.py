"""The sampled estimator of the mean / sum psi forms on drawn negatives (an autograd Function).

Used by :func:`theory.hcl.contrastive_loss` with ``estimator="sampled"`` and psi ``"mean"`` or
``"sum"``; docs/hcl.md#sampled-estimator. Notation: ``S`` ``(N, B)`` similarities (for a
reference batch, docs/hcl.md#reference-batches-anchors, the rows of the ``b`` anchors only,
``S = z[anchors] z^T`` ``(b, B)``, whose backward autograd scatters into the anchor rows and the
candidates), ``idx`` ``(P, K)`` flat indices into ``S`` of the drawn negatives of each pair,
``drawn = S.view(-1)[idx]`` (gathered with the draw), ``pair_flat`` ``(P,)`` the flat index of
each pair's positive.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F

from theory.hcl._expectation import _pair_grad, _weighted_sum
from theory.hcl.sampling import _on_kernel

__all__: list[str] = []


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
        ctx.tau = tau
        ctx.shape = S.shape
        ctx.used = False
        ctx.red = red
        return F.softplus(x) if red is None else _weighted_sum(F.softplus(x), red)

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx: Any, grad_out: torch.Tensor) -> tuple[torch.Tensor | None, ...]:
        if ctx.used:
            raise RuntimeError(
                "the sampled estimator's backward can run only once (retain_graph is not supported)"
            )
        ctx.used = True
        e, idx, total, pair_flat, sig = ctx.saved_tensors
        gp = _pair_grad(grad_out, ctx.red) * sig / ctx.tau
        weights = e.mul_((gp / total)[:, None])  # in place: the saved values are used once
        grad = torch.zeros(ctx.shape[0] * ctx.shape[1], dtype=e.dtype, device=e.device)
        if _on_kernel(grad.device, grad):
            from theory.hcl import _kernels  # lazy: numba loads only where the CPU kernels run

            # index_add_'s sequential sum, in the same order (bit for bit), at a third of its time
            _kernels.scatter_add(grad.numpy(), idx.reshape(-1).numpy(), weights.reshape(-1).numpy())
        else:
            grad.index_add_(0, idx.reshape(-1), weights.reshape(-1))
        grad.index_add_(0, pair_flat, -gp)
        return grad.view(ctx.shape), None, None, None, None, None, None
