"""Data builders and slow Python-loop references shared by the collapse metric tests.

The references are written from the definitions in docs/metrics.md with Python loops (and numpy
only for small linear algebra); they never call theory.collapse.
"""

import math

import numpy as np
import scipy.linalg
import torch

from theory.collapse import SPECTRUM_FLOOR

LOG_FLOOR = math.log(SPECTRUM_FLOOR)


def _collapsed(mu, reps):
    """Every class mean repeated ``reps`` times, labels interleaved (balanced, collapsed)."""
    C = mu.shape[0]
    z = mu.repeat(reps, 1) if isinstance(mu, torch.Tensor) else np.tile(mu, (reps, 1))
    labels = np.tile(np.arange(C), reps)
    return z, labels


def _noisy_classes(rng, C, d, n_per, scale=3.0, noise=1.0, unbalanced=False):
    centres = rng.standard_normal((C, d)) * scale
    counts = [n_per + (7 * c if unbalanced else 0) for c in range(C)]
    labels = np.concatenate([np.full(n, c) for c, n in enumerate(counts)])
    z = centres[labels] + noise * rng.standard_normal((labels.size, d))
    perm = rng.permutation(labels.size)
    return z[perm], labels[perm]


# Slow, obviously-correct references (Python loops)


def ref_class_means(z, labels, C):
    out = []
    for c in range(C):
        rows = [z[i] for i in range(len(labels)) if labels[i] == c]
        out.append(np.sum(rows, axis=0) / len(rows))
    return np.array(out)


def ref_paper_conditions(mu):
    C = len(mu)
    norms = [math.sqrt(sum(x * x for x in m)) for m in mu]
    unit = sum(abs(n - 1) for n in norms) / C
    mean = [sum(mu[c][k] for c in range(C)) / C for k in range(len(mu[0]))]
    zero = math.sqrt(sum(x * x for x in mean))
    devs = []
    for a in range(C):
        for b in range(C):
            if a != b:
                cos = sum(x * y for x, y in zip(mu[a], mu[b])) / (norms[a] * norms[b])
                devs.append(abs(cos + 1 / (C - 1)))
    return {"unit_norm": unit, "zero_sum": zero, "etf_mean": sum(devs) / len(devs), "etf_max": max(devs)}


def ref_within_class_variation(z, labels, C):
    total = 0.0
    for c in range(C):
        rows = [z[i] for i in range(len(labels)) if labels[i] == c]
        m = np.sum(rows, axis=0) / len(rows)
        total += sum(math.sqrt(sum((a - b) ** 2 for a, b in zip(r, m))) for r in rows) / len(rows)
    return total / C


def ref_nc1_pinv(z, labels, C):
    """tr(Sigma_W pinv(Sigma_B)) / C with numpy/scipy pseudo-inverses (well-conditioned cases)."""
    N, d = z.shape
    mu = ref_class_means(z, labels, C)
    g = z.mean(axis=0)
    sw = np.zeros((d, d))
    for i in range(N):
        r = z[i] - mu[labels[i]]
        sw += np.outer(r, r)
    sw /= N
    sb = sum(np.outer(m - g, m - g) for m in mu) / C
    v1 = np.trace(sw @ np.linalg.pinv(sb, rcond=1e-10, hermitian=True)) / C
    v2 = np.trace(sw @ scipy.linalg.pinv(sb, atol=0, rtol=1e-10)) / C
    return v1, v2, sw, sb


def ref_ncm(train_z, train_labels, test_z, test_labels, C, similarity, k):
    mu = ref_class_means(train_z, train_labels, C)
    correct = 0
    for x, y in zip(test_z, test_labels):
        if similarity == "dot":
            scores = [float(np.dot(x, m)) for m in mu]
        else:
            scores = [-math.sqrt(sum((a - b) ** 2 for a, b in zip(x, m))) for m in mu]
        # stable sort by decreasing score: ties keep the lower class index first
        order = sorted(range(C), key=lambda c: -scores[c])
        correct += y in order[:k]
    return correct / len(test_labels)


def ref_class_stats(z, labels, C):
    """counts, means (NaN rows for empty classes), within-class sums of squares, pooled scatter."""
    z = np.asarray(z, dtype=np.float64)
    d = z.shape[1]
    counts = [0] * C
    sums = [[0.0] * d for _ in range(C)]
    for i, y in enumerate(labels):
        counts[y] += 1
        for k in range(d):
            sums[y][k] += z[i, k]
    means = np.full((C, d), np.nan)
    for c in range(C):
        if counts[c]:
            means[c] = [s / counts[c] for s in sums[c]]
    ss = np.zeros(C)
    scatter = np.zeros((d, d))
    for i, y in enumerate(labels):
        r = z[i] - means[y]
        ss[y] += sum(x * x for x in r)
        for a in range(d):
            for b in range(d):
                scatter[a, b] += r[a] * r[b]
    return np.array(counts), means, ss, scatter


def ref_nc3(W, mu, g):
    """|| W/||W||_F - (mu - g)/||mu - g||_F ||_F^2 with loops."""
    C, d = len(mu), len(mu[0])
    c = [[mu[i][k] - g[k] for k in range(d)] for i in range(C)]
    nw = math.sqrt(sum(W[i][k] ** 2 for i in range(C) for k in range(d)))
    nm = math.sqrt(sum(c[i][k] ** 2 for i in range(C) for k in range(d)))
    return sum((W[i][k] / nw - c[i][k] / nm) ** 2 for i in range(C) for k in range(d))


def ref_nc3_zhu(W, mu, g):
    """|| W M~^T / ||W M~^T||_F - (I - J/C)/sqrt(C-1) ||_F with loops."""
    C, d = len(mu), len(mu[0])
    c = [[mu[i][k] - g[k] for k in range(d)] for i in range(C)]
    G = [[sum(W[a][k] * c[b][k] for k in range(d)) for b in range(C)] for a in range(C)]
    fro = math.sqrt(sum(G[a][b] ** 2 for a in range(C) for b in range(C)))
    tot = 0.0
    for a in range(C):
        for b in range(C):
            target = ((1.0 if a == b else 0.0) - 1.0 / C) / math.sqrt(C - 1)
            tot += (G[a][b] / fro - target) ** 2
    return math.sqrt(tot)


def ref_nc4(W, b, z, mu):
    """Fraction of rows where argmax_c (w_c.z + b_c) == argmin_c ||z - mu_c|| (first index on ties)."""
    C = len(mu)
    agree = 0
    for x in z:
        scores = [sum(wk * xk for wk, xk in zip(W[c], x)) + b[c] for c in range(C)]
        dists = [math.sqrt(sum((xk - mk) ** 2 for xk, mk in zip(x, mu[c]))) for c in range(C)]
        clf = max(range(C), key=lambda c: (scores[c], -c))
        ncc = min(range(C), key=lambda c: (dists[c], c))
        agree += clf == ncc
    return agree / len(z)


#: Extreme feature scales for the scale-safety tests (docs/metrics.md#scale): powers of two, so
#: ``z * s`` is exact and every metric of it follows from the loop references of ``z`` (equal for
#: a scale-invariant metric, times ``s`` or ``s^2`` otherwise); at each one the squares of the
#: entries over- or underflow float64 (|entry| near 1e-301, 2.6e-169, 3.5e159 and 1e301).
SCALES = (2.0**-1000, 2.0**-560, 2.0**530, 2.0**1000)
