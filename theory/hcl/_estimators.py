"""The per-pair estimators and the reductions behind :func:`theory.hcl.contrastive_loss`.

docs/hcl.md#the-two-estimators, docs/hcl.md#reductions, docs/hcl.md#the-batched-kernel. Notation:
``z3`` ``(R, B, d)``, ``N = R B`` anchor rows, the ``P`` pairs as flat anchor rows ``rows`` and flat
positions ``pair_flat = row * B + column``, ``blocked`` the flat positions of the excluded negatives.
With a reference batch (docs/hcl.md#reference-batches-anchors; ``R = 1``) the anchor rows are
those of ``anchors`` only: ``S = z[anchors] z^T`` ``(b, B)``, ``rows`` index into the ``b``
selected anchors, and the pairs are the selected anchors' pairs (:class:`_Selection`).
Everything here takes validated inputs (the checks are in :mod:`theory.hcl.losses`).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from typing import TYPE_CHECKING, NamedTuple

import torch
import torch.nn.functional as F

from theory.hcl._expectation import _ExpectedPsi, _weighted_sum
from theory.hcl._sampled import _SampledPsi
from theory.hcl.psi import _apply_psi
from theory.hcl.sampling import (
    UniformFill,
    _alias_from_weights,
    _draw_pairs,
    _given_uniforms,
    _tilted_log_weights,
    _uniform_fill,
    draw_uniforms,
    expected_hinge,
)
from theory.validation import check_size

if TYPE_CHECKING:
    from theory.hcl._options import _Options

__all__: list[str] = []

#: The sampled estimator's randomness: one generator for all runs, one per run, or torch's default.
Generators = torch.Generator | Sequence[torch.Generator] | None


def _allowed(blocked: torch.Tensor | None, N: int, B: int, device: torch.device) -> torch.Tensor:
    """Dense ``(N, B)`` mask of the allowed negatives (for the non-fused paths)."""
    allowed = torch.ones(N * B, dtype=torch.bool, device=device)
    if blocked is not None:
        allowed[blocked] = False
    return allowed.view(N, B)


class _Selection(NamedTuple):
    """The anchors of a reference-batch call and where their pairs sit in the whole batch's pair order."""

    anchors: torch.Tensor  # (b,) sorted, unique rows of the batch
    pairs: torch.Tensor  # (p,) indices of the selected anchors' pairs in the pair order of the batch
    num_pairs: int  # P, the pair count of the whole batch


def _per_pair(
    opts: _Options,
    z3: torch.Tensor,
    rows: torch.Tensor,
    pair_flat: torch.Tensor,
    blocked: torch.Tensor | None,
    n_allowed: torch.Tensor,
    beta_f: float | None,
    beta_t: torch.Tensor | None,
    npos: torch.Tensor,
    generator: Generators,
    red: _Reduction | None,
    selection: _Selection | None = None,
) -> torch.Tensor:
    """The reduced loss ``(R,)`` (or the ``(P,)`` per-pair values ``ell_ij`` when ``red`` is None).

    The fused estimators apply the reduction inside their autograd Function (one node). With a
    ``selection`` every argument describes the selected anchors' rows and pairs only (see the
    module docstring); the sampled estimator still draws the uniforms of all ``P`` pairs.
    """
    R, B, _ = z3.shape
    N = R * B if selection is None else selection.anchors.shape[0]
    anchors = None if selection is None else selection.anchors
    tau, psi = opts.tau, opts.psi
    shift = math.log(opts.num_negatives) if psi == "sum" else 0.0
    if opts.estimator == "expectation" and psi != "triplet" and opts.detach_weights:
        count = n_allowed.to(z3.dtype) if beta_f == 0.0 else None
        beta_arg: float | torch.Tensor = beta_f if beta_f is not None else beta_t[:, None]  # type: ignore[index]
        out: torch.Tensor = _ExpectedPsi.apply(
            z3, rows, pair_flat, blocked, beta_arg, tau, shift, count, red, anchors
        )
        return out
    if anchors is None:
        S = torch.bmm(z3, z3.transpose(1, 2)).view(N, B)
    else:  # the anchors' rows only: autograd scatters dS into the anchor rows and the candidates
        S = z3[0].index_select(0, anchors) @ z3[0].T
    beta_w: float | torch.Tensor = beta_f if beta_f is not None else beta_t  # type: ignore[assignment]
    s_pos = S.reshape(-1).index_select(0, pair_flat)
    if opts.estimator == "expectation":
        allowed = _allowed(blocked, N, B, z3.device)
        logq = _tilted_log_weights(S.detach() if opts.detach_weights else S, allowed, beta_w)
        if psi == "triplet":
            a = S / tau
            E = expected_hinge(torch.exp(logq), a, a - opts.margin)  # E[i, j]: threshold of pair (i, j)
            return _reduce(E.reshape(-1).index_select(0, pair_flat), red)
        # weights differentiated too: m_i = M_i / tau + LSE_n(log q_in + (S_in - M_i) / tau), M_i detached
        M = S.detach().masked_fill(~allowed, float("-inf")).amax(dim=1, keepdim=True)
        M = torch.where(torch.isfinite(M), M, torch.zeros_like(M))
        lse = torch.logsumexp(logq + (S - M) / tau, dim=1)
        x = (M.view(-1).index_select(0, rows) - s_pos) / tau + lse.index_select(0, rows) + shift
        return _reduce(F.softplus(x), red)
    K = opts.num_negatives
    P, P_all = rows.shape[0], rows.shape[0] if selection is None else selection.num_pairs
    check_size(
        "num_negatives",
        K,
        K * (8 * P_all + P * (8 + 2 * z3.element_size())),
        what=f"{P} pairs x {K} draws: float64 uniforms, indices, values and their gradient",
        device=z3.device,
    )
    if selection is None:
        fill = _uniforms(K, generator, npos, R, B, z3.device)
    else:
        fill = _selected_uniforms(K, generator, selection, z3.device)
    with torch.no_grad():
        # The tilted law in float64: B softmax(beta (S - M)) over the allowed columns (M the row's
        # largest allowed similarity, so beta (S - M) <= 0 cannot overflow to +inf at any finite
        # beta), the weights of the tables.
        logits = S.detach().to(torch.float64, copy=True)
        if blocked is not None:
            logits.view(-1).index_fill_(0, blocked, float("-inf"))
        M = logits.amax(dim=1, keepdim=True)
        logits.sub_(torch.where(torch.isfinite(M), M, torch.zeros_like(M)))
        logits.mul_(beta_w if isinstance(beta_w, float) else beta_w[:, None])
        if blocked is not None:  # -inf * 0 = NaN where beta = 0: the excluded columns again
            logits.view(-1).index_fill_(0, blocked, float("-inf"))
        w = torch.softmax(logits, dim=1).mul_(B)
        idx, drawn = _draw_pairs(_alias_from_weights(w), rows, K, fill, S.detach().reshape(-1))
    if psi != "triplet":
        offset = -math.log(K) if psi == "mean" else 0.0
        values: torch.Tensor = _SampledPsi.apply(S, drawn, idx, pair_flat, tau, offset, red)
        return values
    t = S.reshape(-1).index_select(0, idx.view(-1)).view(idx.shape) - s_pos[:, None]  # no (P, K, d) tensor
    return _reduce(_apply_psi(t, psi, tau, opts.margin), red)


def _uniforms(
    K: int, generator: Generators, npos: torch.Tensor, R: int, B: int, device: torch.device
) -> UniformFill:
    """The source of the sampled estimator's ``(P, K)`` float64 uniforms, in pair order."""
    if generator is None or isinstance(generator, torch.Generator):
        return _uniform_fill(generator, device)
    gens = list(generator)
    if len(gens) != R or not all(isinstance(g, torch.Generator) for g in gens):
        raise ValueError(
            f"generator must be a torch.Generator or a sequence of R = {R} of them, got {generator!r}"
        )
    counts = [int(c) for c in npos.view(R, B).sum(dim=1).tolist()]
    if device.type != "cpu" or any(g.device.type != "cpu" for g in gens):
        u = torch.cat([draw_uniforms(c, K, g, device) for c, g in zip(counts, gens, strict=True)])
        return _given_uniforms(u)
    for c in counts:  # the size check of draw_uniforms, without the (P, K) block
        check_size("num_negatives", K, 8 * c * K, what=f"{c} pairs x {K} float64 uniforms", device=device)
    ends = list(itertools.accumulate(counts))

    def fill(buf: torch.Tensor, c0: int, c1: int) -> None:
        # Rows c0..c1 of the pair order, run by run from each run's generator: consecutive fills
        # of a CPU generator give the numbers of one torch.rand((P_r, K)) (no (P, K) block).
        for r, end in enumerate(ends):
            lo, hi = max(c0, end - counts[r]), min(c1, end)
            if lo < hi:
                buf[lo - c0 : hi - c0].uniform_(generator=gens[r])

    return fill


def _selected_uniforms(
    K: int, generator: Generators, selection: _Selection, device: torch.device
) -> UniformFill:
    """The rows of the selected pairs among the ``(P, K)`` uniforms of all pairs of the batch.

    All ``P K`` uniforms are drawn, in pair order, as the call on the whole batch draws them, so
    the selected pairs get the very draws of the full call and the generator ends in the same state.
    """
    gen = generator
    if generator is not None and not isinstance(generator, torch.Generator):
        gens = list(generator)
        if len(gens) != 1 or not isinstance(gens[0], torch.Generator):
            raise ValueError(
                f"generator must be a torch.Generator or a sequence of R = 1 of them, got {generator!r}"
            )
        gen = gens[0]
    u = draw_uniforms(selection.num_pairs, K, gen, device)  # type: ignore[arg-type]
    return _given_uniforms(u.index_select(0, selection.pairs))


class _Reduction(NamedTuple):
    """Per-pair weights of a reduction: the loss of run ``r`` is ``sum_{p in r} weight_p ell_p``."""

    run: torch.Tensor  # (P,) run of each pair
    weight: torch.Tensor  # (P,) float64
    num_runs: int


def _reduction(
    reduction: str, rows: torch.Tensor, npos: torch.Tensor, R: int, B: int, dtype: torch.dtype
) -> _Reduction | None:
    """The weights of ``reduction`` (docs/hcl.md#reductions); ``None`` for ``"none"``."""
    if reduction == "none":
        return None
    run = rows // B
    per_run = npos.view(R, B)
    if reduction == "sum":
        weight = torch.ones(rows.shape[0], dtype=torch.float64, device=rows.device)
    elif reduction == "mean":
        weight = (1.0 / per_run.sum(dim=1).to(torch.float64)).index_select(0, run)
    else:  # anchor_mean: 1 / (positives of the anchor * anchors of the run with a positive)
        anchors = (per_run > 0).sum(dim=1).to(torch.float64)
        weight = 1.0 / (npos.index_select(0, rows).to(torch.float64) * anchors.index_select(0, run))
    return _Reduction(run, weight, R)


def _reduce(values: torch.Tensor, red: _Reduction | None) -> torch.Tensor:
    """``sum_{p in r} weight_p ell_p`` per run, accumulated in float64; the values for ``None``."""
    if red is None:
        return values
    return _weighted_sum(values, red)
