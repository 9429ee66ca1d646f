"""Hardening functions, tilted negative laws and the two negative-average estimators.

Notation (docs/README.md#notation): ``S`` similarities ``(N, B)`` with ``S[i, n] = z_i . z_n`` (one
row per anchor; ``N = B`` for one batch, ``N = R B`` for ``R`` stacked runs, whose rows hold only
the members of their own run); ``allowed`` boolean ``(N, B)`` mask of the negatives each anchor
may draw; ``beta`` hardness; ``tau`` temperature; ``K`` negatives per (anchor, positive) pair.

The tilted law of anchor ``i`` (docs/hcl.md#the-tilted-law; arXiv 2311.05139):
``q_i(n) = eta(S[i, n]) / sum_{m allowed} eta(S[i, m])`` over its allowed negatives, with the
exponential tilt ``eta(t) = exp(beta * t)`` (Robinson et al. 2021). ``beta = 0`` is the uniform
(SCL / UCL) law.

Two estimators of the per-pair negative average ``E_{n ~ q_i}[g(S[i, n])]``
(docs/hcl.md#the-two-estimators):

* **expectation** (deterministic): the exact weighted average over the batch, computed in log
  space (:func:`log_expected_exp`, :func:`expected_hinge`);
* **sampled** (the authors' Monte Carlo): ``K`` indices drawn with replacement from ``q_i`` per
  pair (:func:`sample_negatives`) by Walker's alias method: one float64 uniform per draw, O(1)
  work per draw, after a table per row (on the CPU by the compiled kernels of
  :mod:`theory.hcl._kernels`, elsewhere by tensor operations, bit for bit the same;
  docs/hcl.md#sampled-estimator).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

import torch

from theory.options import HARDENINGS
from theory.validation import as_tensor, check_size, integer, one_of, real

__all__ = [
    "hardening",
    "tilted_log_weights",
    "log_expected_exp",
    "expected_hinge",
    "AliasTable",
    "alias_table",
    "sample_negatives",
    "draw_seed",
    "stream_uniforms",
]


def hardening(eta: str = "exponential", **params: float) -> Callable[[torch.Tensor], torch.Tensor]:
    """Return a non-negative, non-decreasing hardening function ``eta`` (docs/hcl.md#hardening-functions).

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
        raise ValueError(
            f"unknown parameter(s) {sorted(unknown)} for eta={eta!r}; expected {sorted(allowed_params[eta])}"
        )
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


def tilted_log_weights(S: Any, allowed: Any, beta: float | torch.Tensor) -> torch.Tensor:
    """Log of the exponentially tilted negative law, row-wise (docs/hcl.md#the-tilted-law).

    ``log q[i, n] = beta S[i, n] - logsumexp_{m allowed} beta S[i, m]`` for allowed ``n``, and
    ``-inf`` elsewhere. Stable for any ``beta`` finite in ``S``'s dtype (a log-softmax of
    ``beta (S - max_allowed S)``, every logit ``<= 0``). Rows with no allowed entry return
    ``-inf`` everywhere (callers must not use them).

    Args:
        S: similarities ``(N, B)``.
        allowed: bool ``(N, B)``.
        beta: scalar, or ``(N,)`` (one hardness per row).

    Returns:
        ``(N, B)`` log-probabilities.

    Raises:
        ValueError: shapes differ, or ``beta`` is negative, non-finite or of the wrong shape.
    """
    S = as_tensor(S, "S")
    allowed = as_tensor(allowed, "allowed", device=S.device)
    if S.shape != allowed.shape or S.dim() != 2:
        raise ValueError(f"allowed must have the shape of S {tuple(S.shape)}, got {tuple(allowed.shape)}")
    beta_t = torch.as_tensor(beta, dtype=S.dtype, device=S.device)
    if beta_t.dim() > 1 or (beta_t.dim() == 1 and beta_t.shape[0] != S.shape[0]):
        raise ValueError(
            f"beta must be a scalar or an ({S.shape[0]},) tensor, got shape {tuple(beta_t.shape)}"
        )
    if bool((beta_t < 0).any()) or not bool(torch.isfinite(beta_t).all()):
        raise ValueError(f"beta must be finite and >= 0 (a finite {S.dtype} number), got {beta}")
    return _tilted_log_weights(
        S, allowed, float(beta) if beta_t.dim() == 0 and not isinstance(beta, torch.Tensor) else beta_t
    )


def _tilted_log_weights(S: torch.Tensor, allowed: torch.Tensor, beta: float | torch.Tensor) -> torch.Tensor:
    """:func:`tilted_log_weights` without validation and without reading the data on the host.

    ``beta``: a Python float, or a 0-d / ``(N,)`` tensor of ``S``'s dtype and device.
    """
    if isinstance(beta, float) and beta == 0.0:
        # Uniform law: one pass, no exponentials.
        count = allowed.sum(dim=1, keepdim=True).clamp(min=1).to(S.dtype)
        return torch.where(allowed, -torch.log(count), torch.full_like(S, float("-inf")))
    b = beta[:, None] if isinstance(beta, torch.Tensor) and beta.dim() == 1 else beta
    # beta (S - M) with M the largest allowed similarity of the row (the log-softmax is shift
    # invariant, so M is detached): every logit is <= 0, so a large beta gives -inf, never +inf - inf
    M = S.detach().masked_fill(~allowed, float("-inf")).amax(dim=1, keepdim=True)
    M = torch.where(torch.isfinite(M), M, torch.zeros_like(M))
    logits = ((S - M) * b).masked_fill_(~allowed, float("-inf"))
    # Rows with no allowed entry get a harmless finite row, then -inf again (no NaN anywhere).
    empty = ~allowed.any(dim=1, keepdim=True)
    logq = torch.log_softmax(logits.masked_fill_(empty, 0.0), dim=1)
    if logq.requires_grad:
        return logq.masked_fill(~allowed, float("-inf"))
    return logq.masked_fill_(~allowed, float("-inf"))


def log_expected_exp(logq: Any, S: Any, tau: float) -> torch.Tensor:
    """``m_i = log E_{n ~ q_i}[exp(S[i, n] / tau)]`` by log-sum-exp (docs/hcl.md#expectation-estimator).

    Args:
        logq: ``(N, B)`` log-probabilities of the tilted law (``-inf`` = not allowed).
        S: ``(N, B)`` similarities.
        tau: temperature ``> 0``.

    Returns:
        ``(N,)``; rows whose ``logq`` is all ``-inf`` give ``-inf``.
    """
    tau = real("tau", tau, lo=0.0, lo_open=True)
    lq = as_tensor(logq, "logq")
    return torch.logsumexp(torch.add(lq, as_tensor(S, "S", device=lq.device), alpha=1.0 / tau), dim=1)


def expected_hinge(q: Any, a: Any, c: Any) -> torch.Tensor:
    """``E[i, j] = sum_n q[i, n] * max(0, a[i, n] - c[i, j])`` without a ``(B, B, B)`` tensor.

    The triplet form of the expectation estimator (docs/hcl.md#expectation-estimator). Sorts each
    row of ``a`` (over the support of ``q``), forms cumulative sums of ``q`` and ``q a`` in
    decreasing order of ``a`` and reads them at the number of entries above each threshold
    (``searchsorted``): ``E = sum_{a > c} q a - c sum_{a > c} q``. O(B^2 log B) time, O(B^2) memory,
    differentiable in ``q``, ``a`` and ``c``.

    Args:
        q: ``(N, B)`` non-negative weights (zero outside the support).
        a: ``(N, B)`` values.
        c: ``(N, J)`` thresholds.

    Returns:
        ``(N, J)``.
    """
    qt = as_tensor(q, "q")
    at = as_tensor(a, "a", device=qt.device)
    ct = as_tensor(c, "c", device=qt.device)
    support = qt > 0
    keys = torch.where(support, at, torch.full_like(at, float("-inf"))).detach()
    order = torch.argsort(keys, dim=1, descending=True)
    q_sorted = torch.gather(qt, 1, order)
    a_sorted = torch.gather(torch.where(support, at, torch.zeros_like(at)), 1, order)
    zeros = torch.zeros_like(q_sorted[:, :1])
    cum_q = torch.cat([zeros, torch.cumsum(q_sorted, dim=1)], dim=1)
    cum_qa = torch.cat([zeros, torch.cumsum(q_sorted * a_sorted, dim=1)], dim=1)
    ascending = torch.flip(torch.gather(keys, 1, order), dims=[1]).contiguous()
    count = keys.shape[1] - torch.searchsorted(ascending, ct.detach().contiguous(), right=True)
    return torch.gather(cum_qa, 1, count) - ct * torch.gather(cum_q, 1, count)


class AliasTable(NamedTuple):
    """Walker alias tables of the rows of a probability matrix ``q`` ``(N, B)`` (:func:`alias_table`).

    A draw from row ``i`` takes one uniform ``u``, the bucket ``b = floor(u B)`` and the fraction
    ``f = u B - b``; it returns column ``b`` if ``f < prob[i, b]`` and ``alias[i, b]`` otherwise.

    Attributes:
        key: ``(N * B,)`` float64, ``b + prob[i, b]`` at flat position ``i * B + b`` (the draw
            compares ``u B`` with it, which is ``f < prob[i, b]``).
        alias: ``(N * B,)`` flat index ``i * B + alias[i, b]`` of each bucket's alias (int32 when
            ``N B < 2^31``, else int64).
        num_columns: ``B``.
    """

    key: torch.Tensor
    alias: torch.Tensor
    num_columns: int


def alias_table(q: torch.Tensor) -> AliasTable:
    """Walker alias tables (the sweep construction) of every row of ``q``, vectorised over rows.

    With scaled weights ``w = B q``, buckets with ``w < 1`` are *light* (deficit ``1 - w``) and the
    others *heavy* (excess ``w - 1``). Sweeping lights and heavies in column order, each light's
    deficit is filled by the heavy whose cumulative excess interval contains the start of the
    light's cumulative deficit interval; a heavy whose excess runs out before the last light it
    serves is finished becomes light itself, its own deficit filled by the next heavy. Both
    assignments are read off the two cumulative sums with one row-wise ``searchsorted`` (and the
    heavies' leftovers with one scatter-add and a cumulative sum): O(B log B) per row in tensor
    operations (other devices), O(B) per row in the compiled CPU kernel, which searches with a
    walking pointer and gives the same table bit for bit. Every bucket ``b`` then returns itself with probability
    ``prob[b]`` and its alias otherwise, and
    ``(prob[b] + sum_{b': alias(b') = b} (1 - prob[b'])) / B = q[b]`` up to float64 rounding
    (docs/hcl.md#sampled-estimator). Rounding leftovers at the end of a row go to the row's
    largest column, so a column with ``q = 0`` is never drawn.

    Args:
        q: ``(N, B)`` non-negative rows summing to 1 (converted to float64). Rows with no mass give
            tables that must not be drawn from.

    Returns:
        The :class:`AliasTable`.
    """
    return _alias_from_weights(q.detach().to(torch.float64) * q.shape[1])


def _alias_from_weights(w: torch.Tensor) -> AliasTable:
    """:func:`alias_table` from the scaled weights ``w = B q`` ``(N, B)`` float64.

    On the CPU one compiled pass per row (:func:`theory.hcl._kernels.alias_rows`); elsewhere the
    torch construction :func:`_alias_block` on all rows at once. Both perform the same float64
    operations in the same order, so the table is bit for bit the same either way.
    """
    N, B = w.shape
    index_dtype = torch.int32 if N * B < 2**31 else torch.long
    if w.device.type != "cpu":
        key, alias = _alias_block(w)
        return AliasTable(key.view(-1), alias.view(-1).to(index_dtype), B)
    from theory.hcl import _kernels  # lazy: numba loads only where the CPU kernels run

    w = w.detach().contiguous()
    key = torch.empty(N, B, dtype=torch.float64)
    alias = torch.empty(N, B, dtype=index_dtype)
    _kernels.tables(w.numpy(), key.numpy(), alias.numpy())
    return AliasTable(key.view(-1), alias.view(-1), B)


def _alias_block(w: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The alias tables of the rows of the weights ``w`` ``(N, B)`` float64, in torch (any device).

    Returns ``key`` ``(N, B)`` float64 and the flat ``alias`` ``(N, B)`` int64 (offset by the row).

    Lights: the alias is the first column whose cumulative excess exceeds the light's cumulative
    deficit start (a row-wise ``searchsorted``). Heavies: the alias is the next heavy with a
    positive excess (a prefix count, no search), and a heavy keeps ``1 - overshoot``, the deficits
    it serves beyond its own excess. A bucket with ``w = 1`` exactly keeps itself. Selections are
    exact 0/1 arithmetic; every value is finite for rows with mass.
    """
    n, B = w.shape
    device = w.device
    light = w < 1.0
    d = torch.rsub(w, 1.0).clamp_(min=0.0)  # deficits (0 for heavies)
    excess = torch.sub(w, 1.0).clamp_(min=0.0)
    positive = excess > 0
    E = excess.cumsum_(dim=1)  # cumulative excesses
    start = torch.cumsum(d, dim=1).sub_(d)  # cumulative deficit before each column
    col = torch.searchsorted(E, start, right=True)  # for lights: the heavy whose excess covers them
    # For heavies: the next heavy with a positive excess (column of the (k+1)-th positive heavy).
    count = positive.cumsum(dim=1)
    slot = (count - (B + 1)).mul_(positive).add_(B)  # count - 1 for positive heavies, else B (unused)
    nxt = torch.full((n, B + 1), B, dtype=torch.long, device=device)
    nxt.scatter_(1, slot, torch.arange(B, device=device).expand(n, B))
    heavy_alias = torch.gather(nxt, 1, count, out=slot)  # reuses the buffer of slot
    col.sub_(heavy_alias).mul_(light).add_(heavy_alias)  # lights: searched, heavies: next positive
    beyond = col >= B  # the last positive heavy, and rounding leftovers at the end of the sweep
    col.clamp_(max=B - 1)
    # A heavy h keeps 1 - overshoot: (deficits of the lights with alias <= h) - E[h], a prefix sum.
    kept = start.zero_().scatter_add_(1, col, d).cumsum_(dim=1).sub_(E).clamp_(min=0.0).neg_().add_(1.0)
    heavy = ~light
    full = heavy & (beyond | ~positive)  # heavies that keep their whole bucket
    prob = kept.mul_(heavy & ~full).addcmul_(w, light).add_(full)
    fallback = torch.argmax(w, dim=1, keepdim=True)
    col.sub_(fallback).mul_(~beyond).add_(fallback)  # leftovers go to the row's largest column
    rows = torch.arange(0, n * B, B, device=device)[:, None]
    return prob.add_(torch.arange(B, dtype=w.dtype, device=device)), col.add_(rows)


#: Pairs per chunk of the CPU draw: its uniform buffer (1 MiB at K = 256) stays in cache and is
#: reused, instead of a ``(P, K)`` float64 block (page faults dominate otherwise).
DRAW_CHUNK_PAIRS = 512

UniformFill = Callable[[torch.Tensor, int, int], None]

#: SplitMix64's increment and multipliers as int64 bit patterns (:func:`stream_uniforms`).
_GAMMA, _MIX1, _MIX2 = (c - 2**64 for c in (0x9E3779B97F4A7C15, 0xBF58476D1CE4E5B9, 0x94D049BB133111EB))


def _on_kernel(device: torch.device, values: torch.Tensor | None) -> bool:
    """Whether the compiled CPU kernels run: a CPU device and float32 / float64 values.

    The draws here and the sampled estimator in :mod:`theory.hcl._estimators` ask it.
    """
    return device.type == "cpu" and (values is None or values.dtype in (torch.float32, torch.float64))


def draw_seed(generator: torch.Generator | None, device: torch.device | str = "cpu") -> torch.Tensor:
    """One stream seed from ``generator``: a 0-d int64 tensor uniform in ``[0, 2^62)`` (on ``device``).

    The sampled estimator takes one seed per call (per run with a sequence of generators) and
    draws every uniform of the call from :func:`stream_uniforms` of that seed: the generator
    advances by one draw per call, whatever ``P`` and ``K`` are (docs/hcl.md#sampled-estimator).
    """
    gen_device = generator.device if generator is not None else torch.device(device)
    seed = torch.randint(0, 2**62, (), generator=generator, dtype=torch.long, device=gen_device)
    return seed.to(device)


def _shr(z: torch.Tensor, bits: int) -> torch.Tensor:
    """Logical right shift of int64 bit patterns (torch's ``>>`` is arithmetic)."""
    return (z >> bits) & ((1 << (64 - bits)) - 1)


def stream_uniforms(seeds: Any, first: Any, num: int) -> torch.Tensor:
    """``u[p, k]``: uniform number ``first[p] + k`` of the counter-based stream of seed ``seeds[p]``.

    The stream of a seed ``s`` is SplitMix64's (Steele, Lea and Flood 2014): output ``n``
    (0-based) is ``mix(s + (n + 1) gamma)`` in wrapping 64-bit arithmetic, with Vigna's
    ``mix(z)``: ``z ^= z >> 30; z *= 0xBF58476D1CE4E5B9; z ^= z >> 27; z *= 0x94D049BB133111EB;
    z ^= z >> 31`` and ``gamma = 0x9E3779B97F4A7C15``; the uniform is ``(output >> 11) 2^-53`` in
    ``[0, 1)``. Any entry is computed from its counter alone, in integer arithmetic: the same on
    every device and in the compiled CPU kernels, in any order (docs/hcl.md#sampled-estimator).

    Args:
        seeds: ``(P,)`` int64 (the seeds' 64-bit patterns), or a scalar for every row.
        first: ``(P,)`` int64 counter of each row's first uniform.
        num: uniforms per row (``>= 0``).

    Returns:
        ``(P, num)`` float64 on the device of ``first``.

    Raises:
        ValueError: shapes that do not match, or a block that cannot be allocated (naming ``num``).
    """
    num = integer("num", num, lo=0)
    first_t = as_tensor(first, "first").long()
    seeds_t = as_tensor(seeds, "seeds", device=first_t.device).long()
    if first_t.dim() != 1 or seeds_t.shape not in ((), first_t.shape):
        raise ValueError(
            f"first must be (P,) and seeds a scalar or (P,), got {tuple(first_t.shape)} and {tuple(seeds_t.shape)}"
        )
    seeds_t = seeds_t.expand_as(first_t)
    check_size("num", num, 16 * first_t.shape[0] * num, what=f"{first_t.shape[0]} x {num} uniforms",
               device=first_t.device)  # fmt: skip
    n = first_t[:, None] + torch.arange(1, num + 1, device=first_t.device)
    z = n.mul_(_GAMMA).add_(seeds_t[:, None])
    z = (z ^ _shr(z, 30)).mul_(_MIX1)
    z = (z ^ _shr(z, 27)).mul_(_MIX2)
    z = z ^ _shr(z, 31)
    return _shr(z, 11).to(torch.float64).mul_(2.0**-53)


def _stream_fill(seeds: torch.Tensor, first: torch.Tensor) -> UniformFill:
    """A fill of ``buf`` with rows ``c0:c1`` of :func:`stream_uniforms` of ``seeds`` / ``first``."""

    def fill(buf: torch.Tensor, c0: int, c1: int) -> None:
        buf.copy_(stream_uniforms(seeds[c0:c1], first[c0:c1], buf.shape[1]))

    return fill


def _draw_stream(
    table: AliasTable, rows: torch.Tensor, seeds: torch.Tensor, first: torch.Tensor, num_negatives: int
) -> torch.Tensor:
    """The draws of the pairs from their streams: flat indices ``(P, K)`` (int32 or int64).

    On the CPU the compiled :func:`theory.hcl._kernels.stream_draws` (no uniform block); elsewhere
    :func:`stream_uniforms` and :func:`_draw_pairs`. Both give the same indices.
    """
    P, K, B = rows.shape[0], num_negatives, table.num_columns
    if not _on_kernel(rows.device, None):
        return _draw_pairs(table, rows, K, _stream_fill(seeds, first))
    from theory.hcl import _kernels  # lazy: numba loads only where the CPU kernels run

    idx = torch.empty(P, K, dtype=table.alias.dtype)
    _kernels.stream_draws(seeds.numpy().view("uint64"), first.numpy(), rows.numpy(),
                          table.key.numpy(), table.alias.numpy(), B, idx.numpy())  # fmt: skip
    return idx


def _draw_pairs(table: AliasTable, rows: torch.Tensor, num_negatives: int, fill: UniformFill) -> torch.Tensor:
    """Alias draws for every pair from given uniforms: flat indices ``rows[p] * B + column`` ``(P, K)``.

    Per draw: bucket ``b = floor(u B)``, then ``b`` itself if ``u B < b + prob[b]`` (the fraction
    below ``prob[b]``), else its alias: no search. The indices are int32 when ``N B < 2^31`` (half
    the memory traffic of int64; ``index_select`` takes them), else int64. On the CPU the pairs are
    processed in chunks of :data:`DRAW_CHUNK_PAIRS` (one reused uniform buffer) by the compiled
    :func:`theory.hcl._kernels.alias_draws`; elsewhere by a handful of tensor passes over all
    pairs. Both give the same indices bit for bit.
    """
    P, K, B = rows.shape[0], num_negatives, table.num_columns
    device = rows.device
    index_dtype = table.alias.dtype
    idx = torch.empty(P, K, dtype=index_dtype, device=device)
    offsets = (rows * B).to(index_dtype)
    if _on_kernel(device, None):
        from theory.hcl import _kernels  # lazy: numba loads only where the CPU kernels run

        step = max(1, min(P, DRAW_CHUNK_PAIRS))
        u_buf = torch.empty(step, K, dtype=torch.float64)
        key_np, alias_np = table.key.numpy(), table.alias.numpy()
        for c0 in range(0, P, step):
            c1 = min(P, c0 + step)
            u = u_buf[: c1 - c0]
            fill(u, c0, c1)
            _kernels.alias_draws(u.numpy(), offsets[c0:c1].numpy(), key_np, alias_np, B, idx[c0:c1].numpy())
        return idx
    u = torch.empty(P, K, dtype=torch.float64, device=device)
    fill(u, 0, P)
    v = u.mul_(B)  # bucket + fraction (44 bits of fraction at B = 512)
    idx.copy_(v).add_(offsets[:, None])  # floor (v >= 0)
    keep = torch.lt(v, table.key.index_select(0, idx.view(-1)).view(P, K))
    alias = table.alias.index_select(0, idx.view(-1)).view(P, K)
    return idx.sub_(alias).mul_(keep).add_(alias)  # exact integer select: b if keep else alias


def sample_negatives(
    logq: torch.Tensor,
    rows: torch.Tensor,
    num_negatives: int,
    generator: torch.Generator | None = None,
    *,
    flat: bool = False,
    uniforms: torch.Tensor | None = None,
) -> torch.Tensor:
    """Draw ``num_negatives`` column indices i.i.d. from ``q_{rows[p]}`` for every pair ``p``.

    Walker's alias method (:func:`alias_table`) on ``q = exp(logq)`` in float64: one uniform per
    draw and O(1) work per draw (docs/hcl.md#sampled-estimator). The uniforms: one seed
    :func:`draw_seed` from ``generator`` (the generator advances by one draw), then
    :func:`stream_uniforms` of that seed, uniforms ``p K .. p K + K - 1`` for pair ``p`` (the
    sampled estimator's contract: the same generator state gives the draws of
    ``contrastive_loss`` on the same law); or a caller's own ``uniforms``. The law of every draw is
    ``q_{rows[p]}`` up to the 2^-44 resolution of the bucket fractions at ``B <= 512`` (a total
    variation below 1e-10 per row). Never materialises a ``(P, B)`` or ``(P, K, d)`` tensor;
    sampling weights carry no gradient.

    Args:
        logq: ``(N, B)`` log-probabilities (``-inf`` = not allowed), rows summing to 1.
        rows: ``(P,)`` long row index of each pair.
        num_negatives: ``K >= 1``.
        generator: ``torch.Generator`` of the seed (``None``: torch's default generator).
        flat: return indices into ``logq.reshape(-1)`` (``rows * B + column``, what a gather from
            an ``(N, B)`` matrix needs) instead of column indices.
        uniforms: optional ``(P, K)`` float64 uniforms in ``[0, 1)`` to use instead of the stream
            (not modified; ``generator`` is then not used).

    Returns:
        ``(P, K)`` long indices.

    Raises:
        ValueError: ``num_negatives < 1``, a requested row with no allowed column, ``uniforms`` of
            the wrong shape, or ``(P, K)`` draws that cannot be allocated (naming
            ``num_negatives``, with the memory they need).
    """
    K = integer("num_negatives", num_negatives, lo=1)
    logq = as_tensor(logq, "logq")
    rows = as_tensor(rows, "rows", device=logq.device).long()
    if logq.dim() != 2 or rows.dim() != 1:
        raise ValueError(
            f"logq must be (N, B) and rows (P,), got {tuple(logq.shape)} and {tuple(rows.shape)}"
        )
    P = rows.shape[0]
    check_size(
        "num_negatives",
        K,
        24 * P * K,
        what=f"{P} pairs x {K} draws: int64 indices and float64 uniforms",
        device=logq.device,
    )
    with torch.no_grad():
        q = torch.exp(logq.detach().to(torch.float64))
        if rows.numel() and not bool((q.sum(dim=1)[rows] > 0).all()):
            raise ValueError("logq has a requested row with no allowed column (all -inf): nothing to sample")
        table = alias_table(q)
        if uniforms is None:
            seeds = draw_seed(generator, logq.device).expand(P)
            first = torch.arange(P, device=logq.device) * K
            idx = _draw_stream(table, rows, seeds, first, K).long()
        else:
            u = as_tensor(uniforms, "uniforms", device=logq.device).to(torch.float64)
            if u.shape != (rows.shape[0], K):
                raise ValueError(f"uniforms must have shape ({rows.shape[0]}, {K}), got {tuple(u.shape)}")
            idx = _draw_pairs(table, rows, K, _given_uniforms(u)).long()
        if not flat:
            idx = idx - rows[:, None] * logq.shape[1]
    return idx


def _given_uniforms(u: torch.Tensor) -> UniformFill:
    """A fill that copies rows ``c0:c1`` of the given uniforms ``u`` ``(P, K)``."""

    def fill(buf: torch.Tensor, c0: int, c1: int) -> None:
        buf.copy_(u[c0:c1])

    return fill
