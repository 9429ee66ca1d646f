"""The fused exact-expectation estimator of the mean / sum psi forms (an autograd Function).

Used by :func:`theory.hcl.losses.contrastive_loss` with ``estimator="expectation"``, psi
``"mean"`` or ``"sum"`` and detached tilt weights (the authors' default), spec/hcl.md §2.5.
Notation: ``S`` ``(B, B)`` similarities, ``(rows, cols)`` the ``P`` (anchor, positive) pairs,
``allowed`` ``(B, B)`` bool negatives (``None``: all), ``beta`` scalar or ``(B, 1)``.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

__all__: list[str] = []


class _ExpectedPsi(torch.autograd.Function):
    """Fused exact-expectation InfoNCE (psi ``"mean"`` / ``"sum"``) with detached tilt weights.

    Forward: ``A_i = logsumexp_n(beta S_in)`` and ``B_i = logsumexp_n((beta + 1/tau) S_in)`` over
    the allowed ``n``, ``m_i = B_i - A_i = log E_{q_i} exp(S_in / tau)``, and
    ``L = (1/P) sum_pairs softplus(m_i + shift - S_ij / tau)``.
    Backward (``q`` held fixed): ``dL/dS_in = g_i r_in`` with ``r_i = softmax_n((beta + 1/tau) S_in)``
    and ``g_i = (1/(P tau)) sum_{j in Pos(i)} sigmoid(.)``, minus ``sigmoid(.)/(P tau)`` at the
    pairs. A handful of passes over ``(B, B)``, no ``(B, B)`` softplus and no mask of pairs.
    """

    @staticmethod
    def forward(ctx, S, rows, cols, allowed, beta, tau, shift):  # noqa: D102
        B = S.shape[0]
        scalar_zero_beta = not isinstance(beta, torch.Tensor) and beta == 0.0
        if scalar_zero_beta:
            count = allowed.sum(dim=1).to(S.dtype) if allowed is not None else S.new_full((B,), float(B))
            A = torch.log(count)
            Y = S * (1.0 / tau)
        else:
            Y = S * beta
        if allowed is not None:
            Y.masked_fill_(~allowed, float("-inf"))
        if not scalar_zero_beta:
            A = torch.logsumexp(Y, dim=1)
            Y.add_(S, alpha=1.0 / tau)
        Bv = torch.logsumexp(Y, dim=1)
        Bv = torch.where(torch.isfinite(Bv), Bv, torch.zeros_like(Bv))  # rows without negatives
        arg = (Bv - A)[rows] + shift - S[rows, cols] / tau
        ctx.save_for_backward(Y, Bv, rows, cols, torch.sigmoid(arg))
        ctx.scale = 1.0 / (rows.numel() * tau)
        return F.softplus(arg).sum() / rows.numel()

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, grad_out):  # noqa: D102
        Y, Bv, rows, cols, sig = ctx.saved_tensors
        gp = sig * (grad_out * ctx.scale)
        gm = torch.zeros_like(Bv).index_add_(0, rows, gp)
        grad = (Y - Bv[:, None]).exp_().mul_(gm[:, None])  # Y stays intact (retain_graph)
        grad.index_put_((rows, cols), -gp, accumulate=True)
        return grad, None, None, None, None, None, None
