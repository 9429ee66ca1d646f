"""Slow, obviously-correct references for the WeiNCE tests: per-anchor Python loops in float64.

Written from the algorithm's description (docs/weince.md#the-gate, #the-loss, #the-batch-beta-ema),
independently of theory.weince: nothing here calls the code under test. Settings are read from a
``GateConfig`` (or its defaults) as plain numbers.
"""

from __future__ import annotations

import math

import numpy as np
import torch

from theory.weince import GateConfig

DEFAULT = GateConfig()


def ref_tail_size(K, tail_frac, min_tail):
    k = max(min_tail, round(tail_frac * K))
    k = min(k, K)
    k = max(10, k)
    return min(k, K)


def ref_tail_daic(negs, k, eps):
    """(rho, dAIC, n_eff) of one anchor by explicit loops."""
    T = sorted(negs, reverse=True)[:k]
    rho = max(1.0 - T[0], eps)
    burn = max(1, k // 20)
    n = k - burn
    if n < 2:
        return rho, 0.0, n
    x = [math.log(max(1.0 - t, eps)) for t in T][burn:]
    Fh = [max(r / (k + 1), eps) for r in range(1, k + 1)][burn:]
    xm = sum(x) / n if max(x) > min(x) else x[0]  # exact arithmetic: centred ties are 0
    sses, slopes = [], []
    for y in ([math.log(f) for f in Fh], [math.log(-math.log(f)) for f in Fh]):
        ym = sum(y) / n
        sxy = sum((a - xm) * (b - ym) for a, b in zip(x, y))
        sxx = sum((a - xm) ** 2 for a in x)
        slope = sxy / max(sxx, 1e-12)
        sse = max(sum(((b - ym) - slope * (a - xm)) ** 2 for a, b in zip(x, y)), 1e-12)
        slopes.append(slope)
        sses.append(sse)
    if slopes[0] <= 0:
        sses[0] += 1e6
    if slopes[1] >= 0:
        sses[1] += 1e6
    daic = n * math.log(sses[1] / n) - n * math.log(sses[0] / n)
    return rho, daic, n


def sigmoid(v):
    if v >= 0:
        return 1.0 / (1.0 + math.exp(-v))
    e = math.exp(v)
    return e / (1.0 + e)


def ref_lambda(rhos, daics, n_eff, q, margin, kr, ka, eps):
    A = len(rhos)
    srt = sorted(rhos)
    rho0 = srt[(A - 1) // 2] if n_eff < 2 else srt[round(q * (A - 1))]
    rho0 = max(rho0, eps)
    lam = []
    for r, d in zip(rhos, daics):
        lr = sigmoid(kr * (math.log(rho0) - math.log(max(r, eps))))
        la = sigmoid(ka * (d - margin)) if math.isfinite(margin) else 0.0
        lam.append(lr * la)
    return lam, rho0


def ref_ce(logits):
    m = max(logits)
    return -(logits[0] - m) + math.log(math.fsum(math.exp(v - m) for v in logits))


def tl(s, lam, tau, eps):
    return (1 - lam) * s / tau + lam * (-math.log(1.0 - min(s, 1.0 - eps)))


def cosine_rows(z1, z2):
    """Python list-of-lists cosine similarity matrix of cat(z1, z2), float64."""
    z = np.concatenate([z1.detach().double().cpu().numpy(), z2.detach().double().cpu().numpy()])
    z = z / np.linalg.norm(z, axis=1, keepdims=True)
    A = z.shape[0]
    return [[float(np.dot(z[i], z[j])) for j in range(A)] for i in range(A)]


def two_view_rows(S):
    """[(positive, [negatives in ascending column order])] per anchor."""
    A = len(S)
    N = A // 2
    rows = []
    for i in range(A):
        p = (i + N) % A
        rows.append((S[i][p], [S[i][j] for j in range(A) if j != i and j != p]))
    return rows


def ref_weince(z1, z2, tau=0.5, gate=DEFAULT):
    """(loss, lam, dAIC, rho, rho0, k_tail, n_eff) of the core two-view loss by loops."""
    S = cosine_rows(z1, z2)
    rows = two_view_rows(S)
    A = len(S)
    k = ref_tail_size(A - 2, gate.tail_frac, gate.min_tail)
    rhos, daics = [], []
    for _, negs in rows:
        rho, d, n = ref_tail_daic(negs, k, gate.eps)
        rhos.append(rho)
        daics.append(d)
    lam, rho0 = ref_lambda(rhos, daics, n, gate.q, gate.margin, gate.kappa_rho, gate.kappa_aic, gate.eps)
    loss = (
        sum(
            ref_ce([tl(s, lam[i], tau, gate.eps) for s in [pos, *negs]]) for i, (pos, negs) in enumerate(rows)
        )
        / A
    )
    return loss, lam, daics, rhos, rho0, k, n


def make_views(N, d, seed, dtype=torch.float64, noise=0.6):
    g = torch.Generator().manual_seed(seed)
    base = torch.randn(N, d, generator=g, dtype=dtype)
    z1 = 2.0 * base + noise * torch.randn(N, d, generator=g, dtype=dtype)  # not normalised
    z2 = base + noise * torch.randn(N, d, generator=g, dtype=dtype)
    return z1, z2


def closed_form_loss(z1, z2, lam, tau, eps):
    """WeiNCE written out with autograd, lambda a constant: an independent closed form."""
    z = torch.cat([z1, z2])
    z = z / z.norm(dim=1, keepdim=True)
    A = z.shape[0]
    N = A // 2
    S = z @ z.T
    total = 0.0
    for i in range(A):
        p = (i + N) % A
        cols = [p] + [j for j in range(A) if j not in (i, p)]
        s = S[i, cols]
        st = torch.where(s > 1 - eps, torch.full_like(s, 1 - eps), s)
        logits = (1 - lam[i]) * s / tau + lam[i] * (-torch.log(1 - st))
        total = total + (torch.logsumexp(logits, 0) - logits[0])
    return total / A


def ref_beta_update(negs_flat, beta, eps=1e-6):
    """One step of the batch-beta EMA (numpy.polyfit); (beta, beta_hat, r2), or skipped (< 10 entries)."""
    Kn = len(negs_flat)
    if Kn < 10:
        return beta, float("nan"), float("nan")
    k = min(Kn, max(1024, int(0.05 * Kn)))
    d = sorted(max(1 - s, eps) for s in negs_flat)[:k]
    burn = max(1, k // 20)
    x = np.log(np.array(d))[burn:]
    y = np.log(np.arange(1, k + 1) / (k + 1))[burn:]
    slope, icpt = np.polyfit(x, y, 1)
    r2 = 1 - ((y - slope * x - icpt) ** 2).sum() / ((y - y.mean()) ** 2).sum()
    bh = max(slope, 0.0)
    if r2 >= 0.85 and bh > 0:
        beta = 0.9 * beta + 0.1 * min(max(bh, 0.5), 16.0)
    return beta, bh, r2


def ref_released(z1, z2, beta, tau=0.5, eps=1e-6, M=50):
    """(loss, beta_t) of the released recipe from the EMA value ``beta`` before the call."""
    core = ref_weince(z1, z2, tau)[0]
    rows = two_view_rows(cosine_rows(z1, z2))
    beta, _, _ = ref_beta_update([v for _, ng in rows for v in ng], beta, eps)
    weib = pl = 0.0
    for pos, ng in rows:
        top = sorted(ng, reverse=True)[:M]
        weib += ref_ce([-beta * math.log(1 - min(v, 1 - eps)) for v in [pos, *top]])
        pl += ref_ce([v / tau for v in [pos, *top]])
    A = len(rows)
    return core + 0.5 * weib / A + 0.5 * pl / A, beta


def ref_label_loss(z, labels, tau=0.5, gate=DEFAULT):
    zz = z.detach().double().numpy()
    zz = zz / np.linalg.norm(zz, axis=1, keepdims=True)
    B = zz.shape[0]
    y = labels.tolist()
    S = [[float(np.dot(zz[i], zz[j])) for j in range(B)] for i in range(B)]
    rhos, daics, ns = [], [], []
    eps = gate.eps
    for i in range(B):
        negs = [S[i][j] for j in range(B) if y[j] != y[i]]
        k = ref_tail_size(len(negs), gate.tail_frac, gate.min_tail)
        rho, d, n = ref_tail_daic(negs, k, eps)
        rhos.append(rho)
        daics.append(d)
        ns.append(n)
    lam, _ = ref_lambda(rhos, daics, max(ns), gate.q, gate.margin, gate.kappa_rho, gate.kappa_aic, eps)
    total, pairs = 0.0, 0
    for i in range(B):
        negl = [tl(S[i][j], lam[i], tau, eps) for j in range(B) if y[j] != y[i]]
        for j in range(B):
            if j != i and y[j] == y[i]:
                total += ref_ce([tl(S[i][j], lam[i], tau, eps), *negl])
                pairs += 1
    return total / pairs, lam


def near_tied_views(N, seed, c=0.5, noise=2e-7):
    """float32 views whose similarities all equal c up to a few float32 ulps (near-tied tails)."""
    g = torch.Generator().manual_seed(seed)
    A, d = 2 * N, 2 * N + 1
    eye = torch.eye(d, dtype=torch.float64)
    z = math.sqrt(c) * eye[0] + math.sqrt(1 - c) * eye[1 : A + 1]  # pairwise cosine exactly c
    z = (z + noise * torch.randn(A, d, generator=g, dtype=torch.float64)).float()
    return z[:N], z[N:]
