"""Compiled CPU kernels of the sampled estimator (numba): alias tables, stream draws, forward, backward.

docs/hcl.md#sampled-estimator. The CPU path of :mod:`theory.hcl.sampling` and
:mod:`theory.hcl._sampled`:

* :func:`alias_rows` performs the float64 operations of the torch table construction
  (``theory.hcl.sampling._alias_block``, which other devices run) in the same order: the same
  table bit for bit;
* :func:`alias_draws` draws from given uniforms, :func:`stream_draws` from the counter-based
  streams (:func:`theory.hcl.sampling.stream_uniforms`, integer arithmetic: the same uniforms
  as torch computes), both the indices of the tensor path bit for bit;
* :func:`stream_forward` / :func:`stream_backward` are the sampled mean / sum forms without a
  ``(P, K)`` float tensor: per row its alias table (:func:`alias_rows`, into a buffer that stays
  in cache, never stored; one per law where rows share theirs, :mod:`theory.hcl._laws`), then
  per pair of the row the draws, the sum of the precomputed ``exp((S - M) / tau)`` of the drawn
  columns, and the columns (2 bytes each) for the backward,
  which adds every pair's coefficient into a row weight and writes the gradient row by row. Their
  sums are those of the tensor path up to float64 rounding (tests/theory/hcl/test_stream.py).

One pass per row or pair instead of tens of tensor operations and ``(P, K)`` temporaries. No
``parallel=True`` (numba's own thread pool would compete with torch's and is not fork-safe):
:func:`tables`, :func:`forward` and :func:`backward` run the kernels as one more parallel region
of torch's own OpenMP team (:mod:`theory.hcl._team`; C callbacks whose threads claim chunks of
rows from a shared counter, so the results are those of one thread bit for bit), and
serially on the calling thread where there is no such team. Compiled on first use and cached on
disk (``cache=True``: seconds, a fraction of that from the cache).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar, cast

import numba
import numpy as np
from llvmlite import ir
from numba import types
from numba.extending import intrinsic

from theory.hcl import _team

__all__ = [
    "alias_rows",
    "alias_draws",
    "stream_forward",
    "stream_backward",
    "stream_draws",
    "tables",
    "forward",
    "backward",
]

_F = TypeVar("_F", bound=Callable[..., Any])


def _compiled(fn: _F) -> _F:
    """``fn`` compiled by numba in nopython mode (cached on disk, releasing the GIL)."""
    return cast(_F, numba.njit(cache=True, nogil=True)(fn))


@_compiled
def alias_rows(w: np.ndarray, key: np.ndarray, alias: np.ndarray, row0: int) -> None:  # pragma: no cover
    """Walker alias tables of the rows of the scaled weights ``w = B q`` ``(n, B)`` float64 (the sweep).

    Writes ``key[i, b] = b + prob[i, b]`` (float64) and ``alias[i, b] = (row0 + i) B + alias
    column`` (the flat index, ``row0`` the table row of ``w[0]``). Per row, the float64 steps of ``theory.hcl.sampling._alias_block``: deficits
    ``d = max(1 - w, 0)`` and excesses ``max(w - 1, 0)``, their running sums ``E`` (the cumulative
    excess) and ``start = cumsum(d) - d``; a light's alias is the first column with ``E > start``
    (``searchsorted(..., right=True)``; here a pointer walks the list of the heavies with a
    positive excess, the only columns where ``E`` grows, so the first such heavy with
    ``E > start`` is that column, found in fewer and more predictable steps), a heavy's the next
    heavy with a positive excess; a heavy keeps ``1 - max(0, (deficits of the lights up to its
    column) - E)``, the whole bucket if it has no positive excess or no heavy after it; aliases past
    the end go to the row's first largest column.
    """
    n, B = w.shape
    E = np.empty(B)
    start = np.empty(B)
    acc = np.empty(B)
    col = np.empty(B, np.int64)
    nxt = np.empty(B + 1, np.int64)
    EH = np.empty(B + 1)  # E at the heavies with a positive excess, then +inf
    for i in range(n):
        wi = w[i]
        e = 0.0
        c = 0.0
        top = 0
        best = wi[0]
        npos = 0
        for b in range(B):  # running sums; the columns of the heavies with a positive excess
            x = wi[b]
            d = max(1.0 - x, 0.0)
            e += max(x - 1.0, 0.0)
            c += d
            E[b] = e
            start[b] = c - d
            acc[b] = 0.0
            bigger = x > best  # the first largest column (NaN never compares larger)
            top = b if bigger else top
            best = x if bigger else best
            nxt[npos] = b
            EH[npos] = e
            npos += int(x - 1.0 > 0.0)
        for k in range(npos, B + 1):
            nxt[k] = B
        EH[npos] = np.inf
        h = 0  # the number of positive heavies with E <= start[b] (start is nearly non-decreasing)
        count = 0
        for b in range(B):
            x = wi[b]
            count += int(x - 1.0 > 0.0)
            s = start[b]
            while h > 0 and EH[h - 1] > s:
                h -= 1
            while EH[h] <= s:
                h += 1
            cb = nxt[h] if x < 1.0 else nxt[count]
            col[b] = cb
            acc[min(cb, B - 1)] += max(1.0 - x, 0.0)
        run = 0.0
        base = (row0 + i) * B
        ki = key[i]
        ai = alias[i]
        for b in range(B):  # selects, not branches: which case applies is unpredictable on tilted rows
            x = wi[b]
            run += acc[b]
            cb = col[b]
            beyond = cb >= B
            full = beyond | (not x - 1.0 > 0.0)
            over = run - E[b]
            kept = 1.0 - (over if over > 0.0 else 0.0)
            kept = 1.0 if full else kept
            ki[b] = (x if x < 1.0 else kept) + b
            ai[b] = base + (top if beyond else cb)


@_compiled
def alias_draws(
    u: np.ndarray, offsets: np.ndarray, key: np.ndarray, alias: np.ndarray, B: int, idx: np.ndarray
) -> None:  # pragma: no cover
    """Alias draws of a chunk of pairs from given uniforms ``u`` ``(m, K)``: the flat indices ``idx``.

    Pair ``p`` draws from the table row at flat offset ``offsets[p]`` with the bucket values
    ``u[p, k] B`` (:func:`_select`), the draws of :func:`stream_draws` from other uniforms.
    """
    m, K = u.shape
    v = np.empty(K)
    cols = np.empty(K, np.int64)
    two = np.empty(2, np.int64)
    for p in range(m):
        o = np.int64(offsets[p])
        for k in range(K):
            v[k] = u[p, k] * B
        _select(v, key[o : o + B], alias[o : o + B], o, cols, two)
        for k in range(K):
            idx[p, k] = o + cols[k]


#: SplitMix64's increment and multipliers (Steele, Lea, Flood 2014; the constants of Vigna's splitmix64.c).
_GAMMA = np.uint64(0x9E3779B97F4A7C15)
_MIX1 = np.uint64(0xBF58476D1CE4E5B9)
_MIX2 = np.uint64(0x94D049BB133111EB)


@_compiled
def _stream_buckets(seed: np.uint64, first: np.int64, B: int, v: np.ndarray) -> None:  # pragma: no cover
    """``v[k] = u_{first + k} B``: SplitMix64 outputs ``first + k`` of ``seed`` as uniforms, times ``B``.

    Output ``n`` (0-based) is ``mix(seed + (n + 1) gamma)`` (uint64, wrapping); its uniform is
    ``(output >> 11) 2^-53`` and ``(output >> 11) (2^-53 B)`` is the same single rounding of that
    times ``B`` (``2^-53 B`` is exact).
    """
    scale = 2.0**-53 * B
    z0 = seed + (np.uint64(first) + np.uint64(1)) * _GAMMA
    for k in range(v.shape[0]):
        z = z0 + np.uint64(k) * _GAMMA
        z = (z ^ (z >> np.uint64(30))) * _MIX1
        z = (z ^ (z >> np.uint64(27))) * _MIX2
        z = z ^ (z >> np.uint64(31))
        v[k] = float(np.int64(z >> np.uint64(11))) * scale


@_compiled
def _select(
    v: np.ndarray, kr: np.ndarray, ar: np.ndarray, o: np.int64, cols: np.ndarray, two: np.ndarray
) -> None:  # pragma: no cover
    """``cols[k]`` = the drawn column of bucket value ``v[k]`` in the row table ``kr`` / ``ar`` at flat offset ``o``.

    Bucket ``b = floor(v[k])`` keeps column ``b`` if ``v[k] < kr[b]``, else its alias. The two
    candidates go into the two-entry int64 buffer ``two`` (the caller's, reused for every pair)
    indexed by the comparison: written as a select, the compiler loads the alias behind a branch,
    which tilted rows mispredict (measured on random tables: 1.9 ns per draw this way, 6.8-7.0 ns
    as a select).
    """
    for k in range(v.shape[0]):
        x = v[k]
        b = np.uint64(x)
        two[0] = np.int64(ar[b]) - o
        two[1] = np.int64(b)
        cols[k] = two[np.uint64(x < kr[b])]


@_compiled
def stream_forward(
    w: np.ndarray,
    seeds: np.ndarray,
    first: np.ndarray,
    K: int,
    erow: np.ndarray,
    values: np.ndarray,
    inv_tau: float,
    least: float,
    shift: np.ndarray,
    total: np.ndarray,
    own: np.ndarray,
    drawn: np.ndarray,
    order: np.ndarray,
    law: np.ndarray,
    start: np.ndarray,
    j0: int,
    j1: int,
) -> int:  # pragma: no cover
    """The sampled forward of the pairs of rows ``order[j0 .. j1 - 1]``: ``shift``, ``total``, columns.

    Row by row in that order (the pairs of row ``r`` are ``start[r] .. start[r + 1] - 1``, in pair
    order): the row's alias table from its weights ``w[r]`` (:func:`alias_rows`, into a local
    buffer that stays in cache; rows without pairs build none, and a row whose ``law`` is that of
    the table in the buffer, i.e. whose weights equal those of the row it was built from bit for
    bit (:func:`theory.hcl._laws.shared_laws`), builds none either: ``order`` puts such rows next
    to each other), then for each pair ``p`` of the row ``K`` columns drawn with the uniforms
    ``first[p] .. first[p] + K - 1`` of the stream ``seeds[p]`` (:func:`_stream_buckets`; the
    draw of :func:`_select`, reading the bucket's two candidates side by side with the comparison
    as the index between them), their ``erow[r B + c] = exp((S[r, c] - M_r) / tau)``
    (precomputed, ``M_r`` the row's largest allowed similarity, every term ``<= 1``) summed into
    ``total[p]``, ``shift[p] = M_r`` as given on entry, the columns into ``drawn[p, k]`` (for the
    backward). A pair whose sum is below ``least``
    (every draw far below the row's maximum: the terms underflow) is summed again with its own
    largest drawn value ``m``: ``shift[p] = m``, ``total[p] = sum exp((S - m) / tau)`` from
    ``values`` (the flat similarities, float32 or float64), ``own[p] = 1``. Returns the number of
    such pairs.
    """
    B = w.shape[1]
    v = np.empty(K)
    kr = np.empty((1, B))
    # choice[2 b] = the alias column of bucket b, choice[2 b + 1] = b: a draw indexes it with its
    # comparison (a select of the two would be compiled to a branch, mispredicted on tilted rows)
    pairs = np.empty((B, 2), np.int64)
    for b in range(B):
        pairs[b, 1] = b
    choice = pairs.reshape(2 * B).view(np.uint64)
    key = kr[0]
    count = 0
    built = -1  # the law of the table in the buffer
    for j in range(j0, j1):
        r = order[j]
        p, end = start[r], start[r + 1]
        if p == end:
            continue
        if law[r] != built:
            alias_rows(w[r : r + 1], kr, pairs.T[0:1], 0)  # the row's columns, not flat indices
            built = law[r]
        o = r * B
        er = erow[o : o + B]
        vr = values[o : o + B]
        while p < end:
            _stream_buckets(np.uint64(seeds[p]), np.int64(first[p]), B, v)
            acc = 0.0
            dp = drawn[p]
            for k in range(K):  # the draw of _select, its erow summed and its column kept
                x = v[k]
                u = np.uint64(x)
                c = choice[np.uint64(2) * u + np.uint64(x < key[u])]
                acc += er[c]
                dp[k] = c
            own[p] = 0
            if not acc >= least:
                m = -np.inf
                for k in range(K):
                    m = max(m, vr[dp[k]])
                acc = 0.0
                for k in range(K):
                    acc += np.exp((vr[dp[k]] - m) * inv_tau)
                shift[p] = m
                own[p] = 1
                count += 1
            total[p] = acc
            p += 1
    return count


@_compiled
def stream_backward(
    drawn: np.ndarray,
    rows: np.ndarray,
    coef: np.ndarray,
    gpos: np.ndarray,
    pos: np.ndarray,
    own: np.ndarray,
    values: np.ndarray,
    shift: np.ndarray,
    inv_tau: float,
    erow: np.ndarray,
    grad: np.ndarray,
    r0: int,
    r1: int,
) -> None:  # pragma: no cover
    """The sampled backward on the columns :func:`stream_forward` drew: rows ``r0 .. r1 - 1`` of ``grad`` ``(N, B)``.

    Row by row (``rows`` non-decreasing: pairs in pair order): a row weight ``W`` collects
    ``coef[p]`` (``g_p sigmoid(x_p) / (tau total_p)``) for every draw ``c`` of each pair ``p`` of
    the row, and the row's gradient is ``W * erow`` (``erow = exp((S - M_row) / tau)``); a pair
    summed with its own shift (``own[p]``) adds ``coef[p] exp((S - shift[p]) / tau)`` directly
    (its ``erow`` terms underflow); each pair's positive, flat index ``pos[p]``, gets
    ``-gpos[p]``. Rows without pairs get 0. ``grad`` may be float32 or float64 (written once).
    """
    P, K = drawn.shape
    B = grad.shape[1]
    W = np.empty(B)
    D = np.empty(B)
    p = np.searchsorted(rows, r0)
    for r in range(r0, r1):
        o = r * B
        W[:] = 0.0
        direct = False
        q = p
        while q < P and rows[q] == r:
            c = coef[q]
            dq = drawn[q]
            if own[q] == 0:
                for k in range(K):
                    W[dq[k]] += c
            else:
                if not direct:
                    D[:] = 0.0
                    direct = True
                vr = values[o : o + B]
                m = shift[q]
                for k in range(K):
                    D[dq[k]] += c * np.exp((vr[dq[k]] - m) * inv_tau)
            q += 1
        er = erow[o : o + B]
        if direct:
            for j in range(B):
                W[j] = W[j] * er[j] + D[j]
        else:
            for j in range(B):
                W[j] *= er[j]
        for t in range(p, q):
            W[pos[t] - o] -= gpos[t]
        grad[r, :] = W
        p = q


@_compiled
def stream_draws(
    seeds: np.ndarray,
    first: np.ndarray,
    rows: np.ndarray,
    key: np.ndarray,
    alias: np.ndarray,
    B: int,
    idx: np.ndarray,
) -> None:  # pragma: no cover
    """``idx[p, k]``: the flat index of draw ``k`` of pair ``p`` (the draws of :func:`stream_forward`)."""
    P, K = idx.shape
    v = np.empty(K)
    cols = np.empty(K, np.int64)
    two = np.empty(2, np.int64)
    for p in range(P):
        o = np.int64(rows[p]) * B
        _stream_buckets(np.uint64(seeds[p]), np.int64(first[p]), B, v)
        _select(v, key[o : o + B], alias[o : o + B], o, cols, two)
        for k in range(K):
            idx[p, k] = o + cols[k]


# ---------------------------------------------------------------------------------------------
# The kernels on torch's OpenMP team (theory.hcl._team): every thread runs the worker, claiming
# chunks from a counter in the argument block (params[0]) until none is left.

#: Rows per claimed chunk (tables, forward, backward).
ROW_CHUNK = 8


def _pointer_intrinsic(typingctx: Any, address: Any) -> Any:  # pragma: no cover
    """The ``void *`` at the integer ``address`` (an array's ``ctypes.data`` in the argument block)."""
    sig = types.voidptr(types.int64)

    def codegen(context: Any, builder: Any, signature: Any, args: Any) -> Any:
        return builder.inttoptr(args[0], context.get_value_type(types.voidptr))

    return sig, codegen


def _fetch_add_intrinsic(typingctx: Any, block: Any, index: Any, value: Any) -> Any:  # pragma: no cover
    """Atomically add ``value`` to the int64 ``block[index]``; return its value before."""
    sig = types.int64(types.voidptr, types.int64, types.int64)

    def codegen(context: Any, builder: Any, signature: Any, args: Any) -> Any:
        base = builder.bitcast(args[0], ir.IntType(64).as_pointer())
        return builder.atomic_rmw("add", builder.gep(base, [args[1]]), args[2], "monotonic")

    return sig, codegen


#: Typed ``_pointer(address) -> void *`` and ``_fetch_add(block, index, value) -> int64`` in compiled code.
_pointer: Any = intrinsic(_pointer_intrinsic)
_fetch_add: Any = intrinsic(_fetch_add_intrinsic)


def _worker(fn: Callable[[Any], None]) -> Any:
    """``fn(block)`` compiled as a C callback ``void (void *)`` (cached on disk); its ``.address``."""
    return numba.cfunc(types.void(types.voidptr), cache=True)(fn)  # nopython, no GIL taken


@_worker
def _tables_worker(block: Any) -> None:  # pragma: no cover
    """:func:`alias_rows` by chunks of rows. Block: counter, w, key, alias (int32), n, B."""
    a = numba.carray(block, 6, np.int64)
    n, B = a[4], a[5]
    w = numba.carray(_pointer(a[1]), (n, B), np.float64)
    key = numba.carray(_pointer(a[2]), (n, B), np.float64)
    alias = numba.carray(_pointer(a[3]), (n, B), np.int32)
    while True:
        r0 = _fetch_add(block, 0, ROW_CHUNK)
        if r0 >= n:
            break
        r1 = min(n, r0 + ROW_CHUNK)
        alias_rows(w[r0:r1], key[r0:r1], alias[r0:r1], r0)


@_worker
def _forward_worker(block: Any) -> None:  # pragma: no cover
    """:func:`stream_forward` by chunks of ``order``; the pairs with their own shift counted in ``block[1]``.

    Block: counter, count, w, seeds, first, order, law, start, erow, values, shift, total, own,
    drawn (uint16), P, K, N, B, float32 values (0 / 1), inv_tau and least (their float64 bits).
    """
    a = numba.carray(block, 21, np.int64)
    f = numba.carray(block, 21, np.float64)
    P, K, N, B = a[14], a[15], a[16], a[17]
    w = numba.carray(_pointer(a[2]), (N, B), np.float64)
    seeds = numba.carray(_pointer(a[3]), P, np.uint64)
    first = numba.carray(_pointer(a[4]), P, np.int64)
    order = numba.carray(_pointer(a[5]), N, np.int64)
    law = numba.carray(_pointer(a[6]), N, np.int64)
    start = numba.carray(_pointer(a[7]), N + 1, np.int64)
    erow = numba.carray(_pointer(a[8]), N * B, np.float64)
    v64 = numba.carray(_pointer(a[9]), N * B, np.float64)
    v32 = numba.carray(_pointer(a[9]), N * B, np.float32)
    shift = numba.carray(_pointer(a[10]), P, np.float64)
    total = numba.carray(_pointer(a[11]), P, np.float64)
    own = numba.carray(_pointer(a[12]), P, np.uint8)
    drawn = numba.carray(_pointer(a[13]), (P, K), np.uint16)
    inv_tau, least = f[19], f[20]
    while True:
        j0 = _fetch_add(block, 0, ROW_CHUNK)
        if j0 >= N:
            break
        j1 = min(N, j0 + ROW_CHUNK)
        if a[18]:  # the same call on the float32 or the float64 view of the values
            c = stream_forward(w, seeds, first, K, erow, v32, inv_tau, least, shift, total, own, drawn,
                               order, law, start, j0, j1)  # fmt: skip
        else:
            c = stream_forward(w, seeds, first, K, erow, v64, inv_tau, least, shift, total, own, drawn,
                               order, law, start, j0, j1)  # fmt: skip
        _fetch_add(block, 1, c)


@_worker
def _backward_worker(block: Any) -> None:  # pragma: no cover
    """:func:`stream_backward` by chunks of rows.

    Block: counter, drawn (uint16), rows, coef, gpos, pos, own, values, shift, erow, grad (values
    and grad of one dtype), P, K, N, B, float32 (0 / 1), inv_tau (its float64 bits).
    """
    a = numba.carray(block, 17, np.int64)
    f = numba.carray(block, 17, np.float64)
    P, K, N, B = a[11], a[12], a[13], a[14]
    drawn = numba.carray(_pointer(a[1]), (P, K), np.uint16)
    rows = numba.carray(_pointer(a[2]), P, np.int64)
    coef = numba.carray(_pointer(a[3]), P, np.float64)
    gpos = numba.carray(_pointer(a[4]), P, np.float64)
    pos = numba.carray(_pointer(a[5]), P, np.int64)
    own = numba.carray(_pointer(a[6]), P, np.uint8)
    shift = numba.carray(_pointer(a[8]), P, np.float64)
    erow = numba.carray(_pointer(a[9]), N * B, np.float64)
    inv_tau = f[16]
    while True:
        r0 = _fetch_add(block, 0, ROW_CHUNK)
        if r0 >= N:
            break
        r1 = min(N, r0 + ROW_CHUNK)
        if a[15]:
            v32 = numba.carray(_pointer(a[7]), N * B, np.float32)
            g32 = numba.carray(_pointer(a[10]), (N, B), np.float32)
            stream_backward(drawn, rows, coef, gpos, pos, own, v32, shift, inv_tau, erow, g32, r0, r1)
        else:
            v64 = numba.carray(_pointer(a[7]), N * B, np.float64)
            g64 = numba.carray(_pointer(a[10]), (N, B), np.float64)
            stream_backward(drawn, rows, coef, gpos, pos, own, v64, shift, inv_tau, erow, g64, r0, r1)


def _bits(x: float) -> int:
    """The float64 bits of ``x`` as an int64 (a float in the argument block)."""
    return int(np.float64(x).view(np.int64))


def _addr(*arrays: np.ndarray) -> list[int]:
    """The data addresses of C-contiguous arrays (the workers read them through raw pointers)."""
    for arr in arrays:
        if not arr.flags.c_contiguous:
            raise ValueError(f"the kernels' arrays must be C-contiguous, got strides {arr.strides}")
    return [arr.ctypes.data for arr in arrays]


def tables(w: np.ndarray, key: np.ndarray, alias: np.ndarray) -> None:
    """:func:`alias_rows` of all rows, on torch's team when there is one (else on this thread)."""
    n, B = w.shape
    if alias.dtype == np.int32 and n > ROW_CHUNK:
        block = np.array([0, *_addr(w, key, alias), n, B], np.int64)
        if _team.run(_tables_worker.address, block):
            return
    alias_rows(w, key, alias, 0)


def forward(
    w: np.ndarray, seeds: np.ndarray, first: np.ndarray, rows: np.ndarray, K: int, erow: np.ndarray,
    values: np.ndarray, inv_tau: float, least: float, shift: np.ndarray, total: np.ndarray,
    own: np.ndarray, drawn: np.ndarray, law: np.ndarray | None = None,
) -> int:  # fmt: skip
    """:func:`stream_forward` of all rows, on torch's team when there is one; the fallback count.

    ``rows`` (non-decreasing) is each pair's row; ``law`` (optional,
    :func:`theory.hcl._laws.shared_laws`) the row
    whose weights each row's equal bit for bit: rows of one law are drawn from one table, built once.
    """
    (N, B), P = w.shape, rows.shape[0]
    start = np.searchsorted(rows, np.arange(N + 1))
    if law is None:
        law = order = np.arange(N)
    else:
        order = np.argsort(law, kind="stable")
    if drawn.dtype == np.uint16 and N > ROW_CHUNK:
        block = np.array(
            [0, 0, *_addr(w, seeds, first, order, law, start, erow, values, shift, total, own, drawn),
             P, K, N, B, int(values.dtype == np.float32), _bits(inv_tau), _bits(least)],
            np.int64,
        )  # fmt: skip
        if _team.run(_forward_worker.address, block):
            return int(block[1])
    return int(stream_forward(w, seeds, first, K, erow, values, inv_tau, least, shift, total, own, drawn,
                              order, law, start, 0, N))  # fmt: skip


def backward(
    drawn: np.ndarray, rows: np.ndarray, coef: np.ndarray, gpos: np.ndarray, pos: np.ndarray,
    own: np.ndarray, values: np.ndarray, shift: np.ndarray, inv_tau: float, erow: np.ndarray,
    grad: np.ndarray,
) -> None:  # fmt: skip
    """:func:`stream_backward` of all rows, on torch's team when there is one."""
    (P, K), (N, B) = drawn.shape, grad.shape
    if drawn.dtype == np.uint16 and values.dtype == grad.dtype and N > ROW_CHUNK:
        block = np.array(
            [0, *_addr(drawn, rows, coef, gpos, pos, own, values, shift, erow, grad),
             P, K, N, B, int(grad.dtype == np.float32), _bits(inv_tau)],
            np.int64,
        )  # fmt: skip
        if _team.run(_backward_worker.address, block):
            return
    stream_backward(drawn, rows, coef, gpos, pos, own, values, shift, inv_tau, erow, grad, 0, N)
