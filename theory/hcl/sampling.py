"""Hardening functions, tilted negative laws and the two negative-average estimators.

Notation: ``S`` similarity matrix ``(B, B)`` with ``S[i, n] = z_i . z_n``; ``allowed`` boolean
``(B, B)`` mask of the negatives each anchor may draw; ``beta`` hardness; ``tau`` temperature;
``K`` negatives per (anchor, positive) pair.

The tilted law of anchor ``i`` (spec/hcl.md §1.3, §2.2, §2.5):
``q_i(n) = eta(S[i, n]) / sum_{m allowed} eta(S[i, m])`` over its allowed negatives, with the
exponential tilt ``eta(t) = exp(beta * t)`` (Robinson et al. 2021). ``beta = 0`` is the uniform
(SCL / UCL) law.

Two estimators of the per-pair negative average ``E_{n ~ q_i}[g(S[i, n])]``:

* **expectation** (deterministic): the exact weighted average over the batch, computed in log
  space (:func:`log_expected_exp`, :func:`expected_hinge`);
* **sampled** (the authors' Monte Carlo, quirk 4 of spec/hcl.md §8): ``K`` indices drawn with
  replacement from ``q_i`` per pair (:func:`sample_negatives`), by inverse CDF on one flattened,
  row-offset CDF so that a single ``searchsorted`` serves every pair.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from theory.options import HARDENINGS
from theory.validation import one_of, real

__all__ = [
    "hardening",
    "tilted_log_weights",
    "log_expected_exp",
    "expected_hinge",
    "sample_negatives",
]


def hardening(eta: str = "exponential", **params: float) -> Callable[[torch.Tensor], torch.Tensor]:
    """Return a non-negative, non-decreasing hardening function ``eta`` (spec/hcl.md §2.2).

    Families (``eta``, one of :data:`theory.options.HARDENINGS`) and their parameters:
        ``"exponential"``: ``exp(beta * t)`` (param ``beta >= 0``);
        ``"step"``: ``low + (1 - low) * 1[t >= threshold]`` (params ``threshold``, ``low`` in
        ``[0, 1]``; ``low > 0`` keeps ``E[eta] > 0``);
        ``"polynomial"``: ``(t + shift)^power`` for ``t > -shift`` and 0 below (params ``power >= 0``,
        ``shift``; with ``shift > 1`` it is positive on ``[-1, 1]``).

    Raises:
        ValueError: unknown family, an unknown or non-finite parameter, or a parameter that breaks
            monotonicity / non-negativity.
    """
    allowed_params = {"exponential": {"beta"}, "step": {"threshold", "low"}, "polynomial": {"power", "shift"}}
    one_of("eta", eta, HARDENINGS)
    unknown = set(params) - allowed_params[eta]
    if unknown:
        raise ValueError(f"unknown parameter(s) {sorted(unknown)} for eta={eta!r}; expected {sorted(allowed_params[eta])}")
    if eta == "exponential":
        beta = real("beta", params.get("beta", 1.0), lo=0)
        return lambda t: torch.exp(beta * t)
    if eta == "step":
        threshold = real("threshold", params.get("threshold", 0.0))
        low = real("low", params.get("low", 0.1), lo=0, hi=1)
        return lambda t: low + (1.0 - low) * (t >= threshold).to(t.dtype)
    power = real("power", params.get("power", 2.0), lo=0)
    shift = real("shift", params.get("shift", 1.0))
    return lambda t: torch.where(t + shift > 0, torch.clamp(t + shift, min=0.0) ** power, torch.zeros_like(t))


def tilted_log_weights(
    S: torch.Tensor, allowed: torch.Tensor, beta: float | torch.Tensor
) -> torch.Tensor:
    """Log of the exponentially tilted negative law, row-wise.

    ``log q[i, n] = beta S[i, n] - logsumexp_{m allowed} beta S[i, m]`` for allowed ``n``, and
    ``-inf`` elsewhere. Shapes: ``S`` ``(B, B)``, ``allowed`` ``(B, B)`` bool, ``beta`` scalar or
    ``(B,)`` (per anchor) -> ``(B, B)``. Stable for any ``beta`` (log-softmax). Rows with no allowed
    entry return ``-inf`` everywhere (callers must not use them).
    """
    if S.shape != allowed.shape:
        raise ValueError(f"allowed must have the shape of S {tuple(S.shape)}, got {tuple(allowed.shape)}")
    beta_t = torch.as_tensor(beta, dtype=S.dtype, device=S.device)
    if beta_t.dim() > 1 or bool((beta_t < 0).any()) or not bool(torch.isfinite(beta_t).all()):
        raise ValueError(f"beta must be a finite scalar or (B,) tensor >= 0, got {beta}")
    empty = ~allowed.any(dim=1, keepdim=True)
    any_empty = bool(empty.any())
    if beta_t.dim() == 0 and float(beta_t) == 0.0:
        # Uniform law: one pass, no exponentials.
        count = allowed.sum(dim=1, keepdim=True).clamp(min=1).to(S.dtype)
        return torch.where(allowed, -torch.log(count), torch.full_like(S, float("-inf")))
    if beta_t.dim() == 1:
        beta_t = beta_t[:, None]
    logits = (beta_t * S).masked_fill_(~allowed, float("-inf"))
    if not any_empty:  # log_softmax already gives -inf at the masked entries
        return torch.log_softmax(logits, dim=1)
    # Give empty rows a harmless finite row, then mark them -inf again (no NaN anywhere).
    logq = torch.log_softmax(logits.masked_fill_(empty, 0.0), dim=1)
    return logq.masked_fill_(~allowed, float("-inf"))


def log_expected_exp(logq: torch.Tensor, S: torch.Tensor, tau: float) -> torch.Tensor:
    """``m_i = log E_{n ~ q_i}[exp(S[i, n] / tau)]`` by log-sum-exp, shape ``(B,)``.

    Rows whose ``logq`` is all ``-inf`` give ``-inf``.
    """
    return torch.logsumexp(torch.add(logq, S, alpha=1.0 / tau), dim=1)


def expected_hinge(q: torch.Tensor, a: torch.Tensor, c: torch.Tensor) -> torch.Tensor:
    """``E[i, j] = sum_n q[i, n] * max(0, a[i, n] - c[i, j])`` without a ``(B, B, B)`` tensor.

    Sorts each row of ``a`` (over the support of ``q``), forms cumulative sums of ``q`` and ``q a``
    in decreasing order of ``a`` and reads them at the number of entries above each threshold
    (``searchsorted``): ``E = sum_{a > c} q a - c sum_{a > c} q``. O(B^2 log B) time, O(B^2) memory,
    differentiable in ``q``, ``a`` and ``c``.

    Shapes: ``q`` ``(B, B)`` non-negative (zero outside the support), ``a`` ``(B, B)``,
    ``c`` ``(B, J)`` -> ``(B, J)``.
    """
    support = q > 0
    keys = torch.where(support, a, torch.full_like(a, float("-inf"))).detach()
    order = torch.argsort(keys, dim=1, descending=True)
    q_sorted = torch.gather(q, 1, order)
    a_sorted = torch.gather(torch.where(support, a, torch.zeros_like(a)), 1, order)
    zeros = torch.zeros_like(q_sorted[:, :1])
    cum_q = torch.cat([zeros, torch.cumsum(q_sorted, dim=1)], dim=1)
    cum_qa = torch.cat([zeros, torch.cumsum(q_sorted * a_sorted, dim=1)], dim=1)
    ascending = torch.flip(torch.gather(keys, 1, order), dims=[1]).contiguous()
    count = keys.shape[1] - torch.searchsorted(ascending, c.detach().contiguous(), right=True)
    return torch.gather(cum_qa, 1, count) - c * torch.gather(cum_q, 1, count)


def sample_negatives(
    logq: torch.Tensor,
    rows: torch.Tensor,
    num_negatives: int,
    generator: torch.Generator | None = None,
    *,
    flat: bool = False,
) -> torch.Tensor:
    """Draw ``num_negatives`` column indices i.i.d. from ``q_{rows[p]}`` for every pair ``p``.

    Inverse-CDF sampling in float64 on one flattened CDF: row ``i`` of the CDF is offset by ``2 i``,
    so a single 1-D ``searchsorted`` of ``u * total_i + 2 i`` serves all pairs; indices are clamped
    to the last allowed column of the row. Never materialises a ``(P, B)`` or ``(P, K, d)`` tensor.
    Sampling weights carry no gradient.

    Raises ``ValueError`` when a requested row has no allowed column.

    Shapes: ``logq`` ``(B, B)`` (``-inf`` = not allowed), ``rows`` ``(P,)`` long ->
    indices ``(P, num_negatives)`` long: column indices, or with ``flat=True`` indices into
    ``logq.reshape(-1)`` (``rows * B + column``, what a gather from a ``(B, B)`` matrix needs).
    Uniforms come from ``generator`` (its device), so the same generator state gives the same
    indices.
    """
    if num_negatives < 1:
        raise ValueError(f"num_negatives must be >= 1, got {num_negatives}")
    B = logq.shape[1]
    with torch.no_grad():
        q = torch.exp(logq.detach().to(torch.float64))
        cdf = torch.cumsum(q, dim=1)
        offset = 2.0 * torch.arange(logq.shape[0], dtype=torch.float64, device=logq.device)
        flat_cdf = (cdf + offset[:, None]).reshape(-1)
        allowed = q > 0
        if rows.numel() and not bool(allowed.any(dim=1)[rows].all()):
            raise ValueError("logq has a requested row with no allowed column (all -inf): nothing to sample")
        last_allowed = (B - 1) - torch.argmax(torch.flip(allowed, dims=[1]).to(torch.int8), dim=1)
        last_flat = torch.arange(logq.shape[0], device=logq.device) * B + last_allowed
        gen_device = generator.device if generator is not None else logq.device
        u = torch.rand(
            rows.shape[0], num_negatives, generator=generator, dtype=torch.float64, device=gen_device
        ).to(logq.device)
        values = torch.addcmul(offset[rows][:, None], u, cdf[rows, -1][:, None])
        pos = torch.searchsorted(flat_cdf, values, right=True)
        pos = torch.minimum(pos, last_flat[rows][:, None])
        if not flat:
            pos = pos - rows[:, None] * B
    return pos
