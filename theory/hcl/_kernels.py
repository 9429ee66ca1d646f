"""Compiled CPU kernels of the sampled estimator (numba): alias tables, draws, gather, scatter.

docs/hcl.md#sampled-estimator. The CPU path of :mod:`theory.hcl.sampling` and
:mod:`theory.hcl._sampled`: each kernel performs the float64 (or exact integer) operations of the
torch construction it replaces, in the same order, so its results are bit for bit those of the
torch path, which other devices run (tests/theory/hcl/test_sampling.py compares both with plain
Python loops). One pass per row or pair instead of tens of tensor operations and ``(P, K)``
temporaries. Serial loops only (no ``parallel=True``): numba's thread pool is never started, so
nothing here competes with torch's threads or breaks in a forked process. Compiled on first use
and cached on disk (``cache=True``: about a second, a fraction of that from the cache).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar, cast

import numba
import numpy as np

__all__ = ["alias_rows", "alias_draws", "scatter_add"]

_F = TypeVar("_F", bound=Callable[..., Any])


def _compiled(fn: _F) -> _F:
    """``fn`` compiled by numba in nopython mode (cached on disk, releasing the GIL)."""
    return cast(_F, numba.njit(cache=True, nogil=True)(fn))


@_compiled
def alias_rows(w: np.ndarray, key: np.ndarray, alias: np.ndarray) -> None:  # pragma: no cover
    """Walker alias tables of the rows of the scaled weights ``w = B q`` ``(n, B)`` float64 (the sweep).

    Writes ``key[i, b] = b + prob[i, b]`` (float64) and ``alias[i, b] = i B + alias column`` (the
    flat index). Per row, the float64 steps of ``theory.hcl.sampling._alias_block``: deficits
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
    wi = np.empty(B)  # local copies: the compiler cannot tell the caller's arrays apart
    E = np.empty(B)
    start = np.empty(B)
    acc = np.empty(B)
    kk = np.empty(B)
    col = np.empty(B, np.int64)
    nxt = np.empty(B + 1, np.int64)
    EH = np.empty(B + 1)  # E at the heavies with a positive excess, then +inf
    for i in range(n):
        wi[:] = w[i]
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
        base = i * B
        for b in range(B):
            x = wi[b]
            run += acc[b]
            cb = col[b]
            beyond = cb >= B
            full = beyond or not x - 1.0 > 0.0
            kept = 1.0 if full else 1.0 - max(run - E[b], 0.0)
            kk[b] = (x if x < 1.0 else kept) + b
            col[b] = base + (top if beyond else cb)
        key[i, :] = kk
        alias[i, :] = col


@_compiled
def alias_draws(
    u: np.ndarray,
    offsets: np.ndarray,
    key: np.ndarray,
    alias: np.ndarray,
    B: int,
    values: np.ndarray,
    idx: np.ndarray,
    out: np.ndarray,
) -> None:  # pragma: no cover
    """Alias draws of a chunk of pairs and the drawn values.

    ``v = u[p, k] B``, bucket ``f = offsets[p] + floor(v)``, then ``f`` itself if ``v < key[f]``,
    else ``alias[f]``: ``idx[p, k]``; ``out[p, k] = values[idx[p, k]]``. The select is arithmetic
    (a branch on the keep test is unpredictable on tilted tables) and each pair's draws go through
    a local buffer first: written straight into ``idx``, which may share memory with ``alias`` as
    far as the compiler knows, every store would wait for the loads before it (about 4x slower).
    """
    m, K = u.shape
    drawn = np.empty(K, np.int64)
    got = np.empty(K, values.dtype)
    for p in range(m):
        o = np.int64(offsets[p])
        kr = key[o : o + B]
        ar = alias[o : o + B]
        up = u[p]
        for k in range(K):
            v = up[k] * B
            b = np.int64(v)
            a = np.int64(ar[b])
            drawn[k] = a + np.int64(v < kr[b]) * (b + o - a)
        for k in range(K):
            got[k] = values[drawn[k]]
        idx[p, :] = drawn
        out[p, :] = got


@_compiled
def scatter_add(grad: np.ndarray, idx: np.ndarray, weights: np.ndarray) -> None:  # pragma: no cover
    """``grad[idx[t]] += weights[t]`` for ``t`` in order (``torch.Tensor.index_add_`` on the CPU)."""
    for t in range(idx.shape[0]):
        grad[idx[t]] += weights[t]
