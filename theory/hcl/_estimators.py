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

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING, NamedTuple

import torch
import torch.nn.functional as F

from theory.hcl._expectation import _ExpectedPsi, _weighted_sum
from theory.hcl._sampled import _give, _SampledPsi, _SampledStream, _StreamDraws, _take
from theory.hcl.psi import _apply_psi
from theory.hcl.sampling import (
    _alias_from_weights,
    _draw_stream,
    _on_kernel,
    _tilted_log_weights,
    draw_seed,
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
    module docstring); the sampled estimator's selected pairs keep the stream counters of their
    place among all ``P`` pairs of the batch (:func:`_streams`), so they draw what the full call draws.
    On the CPU the sampled mean / sum forms run the compiled kernels without a ``(P, K)`` float
    tensor (:class:`theory.hcl._sampled._SampledStream`); elsewhere, and for the triplet form, the
    draws are materialised (:class:`theory.hcl._sampled._SampledPsi`).
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
    P = rows.shape[0]
    fused = psi != "triplet" and _on_kernel(z3.device, S)
    check_size(
        "num_negatives",
        K,
        K * (16 + 4 * P) if fused else K * P * (24 + 2 * z3.element_size()),
        what=f"{P} pairs x {K} draws: the drawn columns" if fused
        else f"{P} pairs x {K} draws: float64 uniforms, indices, values and their gradient",
        device=z3.device,
    )  # fmt: skip
    seeds, first = _streams(K, generator, rows, npos, R, B, z3.device, selection)
    with torch.no_grad():
        # The tilted law in float64: B softmax(beta (S - M)) over the allowed columns (M the row's
        # largest allowed similarity, so beta (S - M) <= 0 cannot overflow to +inf at any finite
        # beta), the weights of the tables.
        if fused:  # on the memory of a finished step's block (no page faults)
            logits = _take(N * B, torch.float64).view(N, B).copy_(S.detach())
        else:
            logits = S.detach().to(torch.float64, copy=True)
        if blocked is not None:
            logits.view(-1).index_fill_(0, blocked, float("-inf"))
        M = logits.amax(dim=1, keepdim=True)
        M.masked_fill_(M == float("-inf"), 0.0)  # a row without allowed negatives: its shift is 0
        logits.sub_(M)
        # exp((S - M) / tau): every allowed term <= 1, the excluded ones 0 (the fused path's sums)
        erow = None
        if fused:
            erow = _take(N * B, torch.float64).view(N, B)
            if tau == 1.0:
                torch.exp(logits, out=erow)
            else:
                torch.mul(logits, 1.0 / tau, out=erow).exp_()
        logits.mul_(beta_w if isinstance(beta_w, float) else beta_w[:, None])
        zero = beta_w == 0  # rows drawing uniformly among their allowed negatives
        zero_beta = bool(zero.any()) if isinstance(zero, torch.Tensor) else zero
        if blocked is not None and zero_beta:  # -inf * 0 = NaN: the excluded columns again
            logits.view(-1).index_fill_(0, blocked, float("-inf"))
        # B softmax: the largest allowed logit is 0, so exp cannot overflow and the row sum is >= 1
        w = logits.exp_()
        w.mul_(w.sum(dim=1, keepdim=True).reciprocal_().mul_(B))
        if not fused:
            idx = _draw_stream(_alias_from_weights(w), rows, seeds, first, K)
    offset = -math.log(K) if psi == "mean" else 0.0
    if fused:  # the kernel builds each row's alias table from w where it draws that row's pairs
        # the rows at beta = 0 (per-row beta): rows with equal weights share their alias table
        uniform = None
        if zero_beta:
            uniform = zero if isinstance(zero, torch.Tensor) else torch.ones(N, dtype=torch.bool)
        draws = _StreamDraws(w, rows, seeds, first, K, uniform)
        fast: torch.Tensor = _SampledStream.apply(S, draws, erow, M.view(-1), pair_flat, tau, offset, red)
        del draws, w
        _give(logits)  # the weights: used by the forward only
        return fast
    if psi != "triplet":
        drawn = S.detach().reshape(-1).index_select(0, idx.view(-1)).view(idx.shape)
        values: torch.Tensor = _SampledPsi.apply(S, drawn, idx, pair_flat, tau, offset, red)
        return values
    t = S.reshape(-1).index_select(0, idx.view(-1)).view(idx.shape) - s_pos[:, None]  # no (P, K, d) tensor
    return _reduce(_apply_psi(t, psi, tau, opts.margin), red)


def _streams(
    K: int,
    generator: Generators,
    rows: torch.Tensor,
    npos: torch.Tensor,
    R: int,
    B: int,
    device: torch.device,
    selection: _Selection | None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """The stream seed and first counter of every pair ``(P,)`` int64 (docs/hcl.md#sampled-estimator).

    One generator (or torch's default): one seed, pair ``p`` of the batch's pair order uses the
    uniforms ``p K .. p K + K - 1``. A sequence of ``R`` generators: one seed per run, the pairs
    of run ``r`` counted from 0 within the run (run ``r`` equals the separate call with
    ``generator[r]``; this reads the per-run pair counts on the host). With a selection the
    selected pairs keep the counters of their place in the whole batch.
    """
    P = rows.shape[0]
    if generator is None or isinstance(generator, torch.Generator):
        seeds = draw_seed(generator, device).repeat(P)
        place = torch.arange(P, device=device) if selection is None else selection.pairs
        return seeds, place * K
    gens = list(generator)
    if len(gens) != R or not all(isinstance(g, torch.Generator) for g in gens):
        raise ValueError(
            f"generator must be a torch.Generator or a sequence of R = {R} of them, got {generator!r}"
        )
    if selection is not None:  # R = 1
        return draw_seed(gens[0], device).repeat(P), selection.pairs * K
    if R == 1:  # the run's pairs are all P pairs
        return draw_seed(gens[0], device).repeat(P), torch.arange(0, P * K, K, device=device)
    run_seeds = torch.stack([draw_seed(g, device) for g in gens])
    counts = npos.view(R, B).sum(dim=1)
    start = torch.cumsum(counts, dim=0) - counts  # the first pair of each run
    run = rows // B
    return run_seeds.index_select(0, run), (torch.arange(P, device=device) - start.index_select(0, run)) * K


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
