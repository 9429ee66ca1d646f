"""T_lambda logits of WeiNCE: the softmax coordinate ``s / tau`` blended with the Weibull shortfall.

Erol et al., ICML 2026 (arXiv 2606.00262), the T_lambda family; ``docs/weince.md#the-t-lambda-logits``::

    T_lambda(s) = (1 - lambda) s / tau + lambda (-log(1 - min(s, 1 - eps)))

:func:`tlambda_logits` is the differentiable closed form (used by the label-positive loss and the
link-selection likelihood); :class:`_TLambdaCE` fuses the logits with the cross-entropy of the
two-view loss, with the closed-form backward
``d logit / d s = (1 - lambda)/tau + lambda/(1 - s) * [s <= 1 - eps]`` (lambda held fixed).
Torch operations only, on every device (on the CPU they run on torch's intra-op threads, which
numpy's single-threaded ``log`` / ``exp`` did not), with no host synchronisation in the forward
or the backward pass.
``tau`` defaults to :data:`theory.options.WEINCE_TAU`.
"""

from __future__ import annotations

import functools
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch.autograd.function import once_differentiable

from theory.options import WEINCE_TAU
from theory.validation import as_float_tensor, real
from theory.weince.config import DEFAULT_GATE

__all__ = ["tlambda_logits"]


def tlambda_logits(
    s: Any, lam: torch.Tensor | float, tau: float = WEINCE_TAU, eps: float = DEFAULT_GATE.eps
) -> torch.Tensor:
    """Closed-form T_lambda logits, differentiable in ``s`` (``docs/weince.md#the-t-lambda-logits``).

    ``l = (1 - lam) * (s / tau) + lam * (-log1p(-min(s, 1 - eps)))`` (arXiv 2606.00262). With
    ``lam = 0`` this is ``s / tau`` bit for bit. float16/bfloat16 ``s`` is computed (and returned)
    in float32: in float16 ``1 - eps`` rounds to 1 and the shortfall branch would be
    ``-log(0) = inf``; float64 stays float64.

    Args:
        s: similarities (cosines, ``<= 1``).
        lam: the blend weight, a number or a tensor broadcastable against ``s`` (e.g. ``(A, 1)``).
        tau: temperature of the linear branch, ``> 0``.
        eps: clamp of ``s`` in the shortfall branch, in ``(0, 0.5]``.

    Returns:
        The logits, float32 or float64.

    Shape:
        ``s`` ``(..., M)``, ``lam`` scalar or broadcastable -> ``(..., M)``.

    Raises:
        ValueError: ``s`` not convertible to a tensor (the input rule of
            docs/README.md#conventions: tensors, numpy arrays, sequences), bad ``tau`` or ``eps``.
    """
    tau = real("tau", tau, lo=0.0, lo_open=True)
    eps = real("eps", eps, lo=0.0, lo_open=True, hi=0.5)
    st = as_float_tensor(s, "s")
    lam = torch.as_tensor(lam, dtype=st.dtype, device=st.device)
    W = -torch.log1p(-torch.clamp(st, max=1.0 - eps))
    out: torch.Tensor = (1 - lam) * (st / tau) + lam * W
    return out


@functools.lru_cache(maxsize=16)
def _cap(eps: float, dtype: torch.dtype) -> float:
    """``1 - eps`` as the floating ``dtype`` rounds it (the clamp ``min(s, 1 - eps)`` uses)."""
    if dtype == torch.float32:
        return float(np.float32(1.0 - eps))
    return 1.0 - eps


class _TLambdaCE(torch.autograd.Function):
    """Fused ``mean_i CE(T_lambda(cand_i), 0)`` with the closed-form backward (lambda fixed).

    ``total``: divide the sum over the rows by ``total`` instead of taking their mean (the rows
    of a subset of the anchors of a batch of ``total`` anchors; docs/hcl.md#reference-batches-anchors).

    Forward: ``u = 1 - min(cand, 1 - eps)``, ``logits = lerp(cand / tau, -log u, lam)``, then
    ``log_softmax`` and the target 0; when a gradient is wanted ``P - onehot_0`` (``P`` the softmax,
    ``exp(log_softmax)``) is formed here, in the buffer of the log-probabilities. Backward, from the
    saved ``u`` and ``P - onehot_0``: ``grad = (P - onehot_0) * D`` with
    ``D = ((1 - lam)/tau + lam / u [cand <= 1 - eps]) * g / A``, written into the buffer of ``D``.
    ``clamped`` says
    whether some entry exceeds ``1 - eps`` (the CPU fast path knows it from the sorted rows); None
    (the device path) masks unconditionally. The ``(A, A - 1)`` buffers are reused in place
    wherever their values are not needed again (on the CPU a fresh buffer of that size costs as
    much as the arithmetic in it): three in the forward pass, one in the backward pass; nothing
    saved for the backward pass is modified, so ``retain_graph`` works.
    """

    @staticmethod
    def forward(
        ctx: Any,
        cand: torch.Tensor,
        lam: torch.Tensor,
        tau: float,
        eps: float,
        clamped: bool | None,
        total: int | None = None,
    ) -> torch.Tensor:
        lam_c = lam[:, None]
        logits = cand / tau  # the very op info_nce uses -> identical bits when lam == 0
        if clamped is None or clamped:
            u = torch.rsub(torch.clamp(cand, max=_cap(eps, cand.dtype)), 1.0)
        else:  # no entry above 1 - eps (the CPU fast path knows it): the clamp is the identity
            u = torch.rsub(cand, 1.0)
        W = torch.log(u).neg_()
        # (1 - lam) s / tau + lam W in one pass, in place; lerp(q, W, 0) is exactly q
        logits.lerp_(W, lam_c)
        logp = torch.log_softmax(logits, dim=1, out=W)  # W is not needed again: its buffer
        target = torch.zeros(cand.shape[0], dtype=torch.long, device=cand.device)
        if total is None:
            loss = F.nll_loss(logp, target)
        else:
            loss = F.nll_loss(logp, target, reduction="sum") / total
        if ctx.needs_input_grad[0]:  # P - onehot_0 = d loss / d logits (times A / g), for the backward pass
            P = logp.exp_()
            P[:, 0] -= 1
        ctx.save_for_backward(cand, lam_c, logp, u)
        ctx.total = cand.shape[0] if total is None else total
        ctx.tau = tau
        ctx.cap = _cap(eps, cand.dtype)
        ctx.clamped = clamped
        return loss

    @staticmethod
    @once_differentiable
    def backward(ctx: Any, g: torch.Tensor) -> tuple[torch.Tensor, None, None, None, None, None]:
        cand, lam_c, P, u = ctx.saved_tensors  # P: the softmax minus onehot_0 (the forward pass)
        scale = g / ctx.total
        alpha = (1 - lam_c) * (scale / ctx.tau)
        # d loss / d logits = (softmax - onehot_0) * g / A;  d logits / d s = (1 - lam)/tau + lam / u
        D = torch.div(lam_c * scale, u).add_(alpha)
        if ctx.clamped is None or ctx.clamped:  # the clamp's branch has zero slope above 1 - eps
            D = torch.where(cand > ctx.cap, alpha, D)
        return D.mul_(P), None, None, None, None, None  # (P - onehot_0) D, in the buffer of D
