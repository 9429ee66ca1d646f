"""The fused exact-expectation estimator of the mean / sum psi forms (an autograd Function).

Used by :func:`theory.hcl.contrastive_loss` with ``estimator="expectation"``, psi ``"mean"`` or
``"sum"`` and detached tilt weights (the authors' default); docs/hcl.md#expectation-estimator and
docs/hcl.md#the-batched-kernel. Notation: ``z`` ``(R, B, d)`` (``R`` runs), ``N = R B`` anchor
rows, ``S`` ``(N, B)`` the similarities of each anchor with the members of its own run, the
``P`` pairs as flat anchor rows ``pair_row`` and flat positions ``pair_flat = row * B + column``,
``blocked`` the flat positions of the excluded negatives; ``red`` the reduction's per-pair weights
(applied inside, so the Function returns the ``(R,)`` losses), or ``None`` for per-pair values.
With ``anchors`` (a reference batch, ``R = 1``; docs/hcl.md#reference-batches-anchors) the rows
are those of the ``b`` anchors only: ``S = z[anchors] z^T`` ``(b, B)`` and ``pair_row``,
``pair_flat``, ``blocked`` index that ``(b, B)`` matrix.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F

__all__: list[str] = []


def _weighted_sum(values: torch.Tensor, red: Any) -> torch.Tensor:
    """Per-run ``sum_p weight_p values_p`` (a ``theory.hcl.losses._Reduction``), in float64."""
    v = values.to(torch.float64)
    if red.num_runs == 1:
        return torch.dot(v, red.weight).view(1).to(values.dtype)
    total = torch.zeros(red.num_runs, dtype=torch.float64, device=values.device)
    return total.index_add_(0, red.run, v.mul_(red.weight)).to(values.dtype)


def _pair_grad(grad_out: torch.Tensor, red: Any) -> torch.Tensor:
    """The gradient of each pair's value from that of the reduced loss (or per pair, ``red=None``).

    A new tensor (the callers scale it in place).
    """
    if red is None:
        return grad_out.clone()
    run: torch.Tensor = red.run
    weight: torch.Tensor = red.weight
    return (grad_out.to(torch.float64).index_select(0, run) * weight).to(grad_out.dtype)


class _ExpectedPsi(torch.autograd.Function):
    """Per-pair values of the exact-expectation InfoNCE (psi ``"mean"`` / ``"sum"``), detached tilt.

    Forward, with ``M_i`` the largest allowed similarity of row ``i`` and ``D = S - M`` (<= 0):
    ``a_i = sum_n exp(beta D_in)`` and ``b_i = sum_n exp((beta + 1/tau) D_in)`` over the allowed
    ``n`` (both in ``[1, B]``), so ``m_i = log E_{q_i} exp(S_in / tau) = M_i / tau + log b_i - log a_i``
    and the value of pair ``p = (i, j)`` is ``softplus((M_i - S_ij) / tau + log b_i - log a_i + shift)``.
    Every exponent is ``<= 0`` and no two large numbers are subtracted (no cancellation at large
    ``beta`` or small ``tau``). With ``beta = 0`` (a Python float) ``a_i`` is the number of allowed
    negatives and one exponential pass is saved.

    Backward (``q`` held fixed): ``dL/dS_in = c_i r_in - sum_{p = (i, n)} g_p``, with
    ``g_p = grad_p sigmoid(x_p) / tau``, ``c_i = sum_{p in row i} g_p`` and
    ``r_i = softmax_n((beta + 1/tau) S_in)``, then ``dL/dz = (G + G^T) z`` per run. With
    ``anchors`` ``a``, ``S = z_a z^T`` and ``G`` is ``(b, B)``: the anchor rows receive ``G z``
    (scattered to rows ``a``) and every member, as a candidate, ``G^T z_a``.
    """

    @staticmethod
    def forward(
        ctx: Any,
        z: torch.Tensor,
        pair_row: torch.Tensor,
        pair_flat: torch.Tensor,
        blocked: torch.Tensor | None,
        beta: float | torch.Tensor,
        tau: float,
        shift: float,
        count: torch.Tensor | None,
        red: Any,
        anchors: torch.Tensor | None = None,
    ) -> torch.Tensor:
        R, B, _ = z.shape
        if anchors is None:
            S = torch.bmm(z, z.transpose(1, 2)).view(R * B, B)
        else:
            S = torch.mm(z[0].index_select(0, anchors), z[0].T)
        s_pos = S.view(-1).index_select(0, pair_flat)
        if blocked is not None:
            S.view(-1).index_fill_(0, blocked, float("-inf"))
        M = S.amax(dim=1, keepdim=True)
        # a row without any allowed column has no pair (its max is -inf, never read): shift it by 0
        # so that it stays finite; a NaN (non-finite input) is left to propagate
        M.masked_fill_(M == float("-inf"), 0.0)
        D = S.sub_(M)
        c = beta + 1.0 / tau
        if count is not None:  # beta == 0: a_i = number of allowed negatives
            log_a = torch.log(count)
        else:
            T1 = torch.mul(D, beta).exp_()
            if blocked is not None and isinstance(beta, torch.Tensor):  # 0 * (-inf) = NaN where beta = 0
                T1.view(-1).index_fill_(0, blocked, 0.0)
            log_a = torch.log(T1.sum(dim=1))
        T = D.mul_(c).exp_() if not (isinstance(c, float) and c == 1.0) else D.exp_()
        b = T.sum(dim=1)
        row_term = torch.log(b).sub_(log_a)  # log b_i - log a_i (+ shift): no large numbers
        if shift:
            row_term.add_(shift)
        x = M.view(-1).index_select(0, pair_row).sub_(s_pos)  # M_i - S_ij, exact when close
        if tau != 1.0:
            x.div_(tau)
        x.add_(row_term.index_select(0, pair_row))
        b.clamp_(min=1.0)  # b >= 1 wherever a column is allowed (the max gives exp(0)); 0 only for empty rows
        scaled_sigmoid = torch.sigmoid(x)
        if tau != 1.0:
            scaled_sigmoid.div_(tau)
        ctx.save_for_backward(z, T, b, pair_row, pair_flat, scaled_sigmoid)
        ctx.red = red
        ctx.anchors = anchors
        values = F.softplus(x)
        return values if red is None else _weighted_sum(values, red)

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx: Any, grad_out: torch.Tensor) -> tuple[torch.Tensor | None, ...]:
        z, T, b_safe, pair_row, pair_flat, scaled_sigmoid = ctx.saved_tensors
        R, B, _ = z.shape
        gp = _pair_grad(grad_out, ctx.red).mul_(scaled_sigmoid)
        gm = torch.zeros_like(b_safe).index_add_(0, pair_row, gp)
        G = T * (gm / b_safe)[:, None]
        G.view(-1).index_add_(0, pair_flat, -gp)
        anchors = ctx.anchors
        if anchors is None:
            G3 = G.view(R, B, B)
            dz = torch.bmm(G3 + G3.transpose(1, 2), z)
        else:  # S = z_a z^T: dz = G^T z_a (every member as a candidate) + G z on the anchor rows
            z2 = z[0]
            dz2 = torch.mm(G.T, z2.index_select(0, anchors))
            dz = dz2.index_add_(0, anchors, torch.mm(G, z2)).view(R, B, -1)
        return dz, None, None, None, None, None, None, None, None, None
