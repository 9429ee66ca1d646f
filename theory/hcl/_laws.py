"""Rows with equal weights: one alias table for all of them (the sampled estimator's CPU path).

docs/hcl.md#sampled-estimator. A run at beta = 0 draws uniformly among each anchor's allowed
negatives, so the weights of all anchors of a class (SCL) or of all anchors (UCL) are equal bit
for bit, and so are their alias tables: :func:`theory.hcl._kernels.stream_forward` builds one per
law (:func:`shared_laws`) instead of one per row.
"""

from __future__ import annotations

import numpy as np

from theory.hcl._kernels import _GAMMA, _MIX1, _compiled

__all__ = ["shared_laws"]


@_compiled
def shared_laws(w: np.ndarray, candidate: np.ndarray, hashed: int) -> np.ndarray:  # pragma: no cover
    """``law[r]``: the first row whose weights equal row ``r``'s bit for bit (``r`` itself if none).

    ``w`` ``(N, B)`` float64, C-contiguous. Only ``candidate`` rows are compared (the others keep
    their own law). Rows are grouped by a hash of the bits of their first ``hashed`` weights and
    each group's rows are compared in full with the group's earlier distinct rows, so a law is
    shared only by equal rows, whatever the hash gives (a collision costs a comparison).
    """
    N, B = w.shape
    law = np.arange(N)
    cand = np.flatnonzero(candidate)
    h = np.empty(cand.shape[0], np.uint64)
    m = min(hashed, B)
    for i in range(cand.shape[0]):
        x = w[cand[i]].view(np.uint64)
        acc = np.uint64(0)
        for b in range(m):  # a sum of products: vectorised; collisions only cost comparisons
            acc += (x[b] + np.uint64(b) * _GAMMA) * _MIX1
        h[i] = acc ^ (acc >> np.uint64(31))
    by = np.argsort(h, kind="mergesort")  # stable: within a hash, in row order
    reps = np.empty(cand.shape[0], np.int64)
    i = 0
    while i < by.shape[0]:
        e = i
        while e < by.shape[0] and h[by[e]] == h[by[i]]:
            e += 1
        nrep = 0
        for k in range(i, e):
            r = cand[by[k]]
            y = w[r].view(np.uint64)
            for t in range(nrep):
                x = w[reps[t]].view(np.uint64)
                diff = np.uint64(0)
                for b in range(B):  # no early exit: vectorised
                    diff |= x[b] ^ y[b]
                if diff == 0:
                    law[r] = reps[t]
                    break
            if law[r] == r:
                reps[nrep] = r
                nrep += 1
        i = e
    return law
