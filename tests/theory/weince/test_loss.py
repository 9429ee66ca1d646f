"""Tests of the WeiNCE loss and its gate (theory.weince) against slow per-anchor Python loops (spec/weince.md §2-§3)."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from theory.infonce import info_nce, two_view_candidates
from theory.weince import (
    tail_aic_fit,
    WeibullBetaState,
    WeiNCELoss,
    rho0_index,
    tail_fits,
    tail_size,
    tlambda_logits,
    weince_gate,
    weince_label_loss,
    weince_loss,
)

GRID_CORNERS = [(0.0, 5.0, 0.5), (6.0, 20.0, 2.0), (2.0, 10.0, 1.0)]


# ---------------------------------------------------------------------------------------------
# slow references (plain Python, float64)
# ---------------------------------------------------------------------------------------------


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


def ref_weince(z1, z2, *, tau=0.5, q=0.2, tail_frac=0.1, min_tail=32, margin=2.0, kappa_rho=10.0,
               kappa_aic=1.0, eps=1e-6):
    z = np.concatenate([z1.detach().double().numpy(), z2.detach().double().numpy()])
    z = z / np.linalg.norm(z, axis=1, keepdims=True)
    A = z.shape[0]
    N = A // 2
    S = [[float(np.dot(z[i], z[j])) for j in range(A)] for i in range(A)]
    K = A - 2
    k = ref_tail_size(K, tail_frac, min_tail)
    rows, rhos, daics = [], [], []
    for i in range(A):
        p = (i + N) % A
        negs = [S[i][j] for j in range(A) if j != i and j != p]
        rows.append([S[i][p]] + negs)
        rho, d, n = ref_tail_daic(negs, k, eps)
        rhos.append(rho)
        daics.append(d)
    lam, rho0 = ref_lambda(rhos, daics, n, q, margin, kappa_rho, kappa_aic, eps)
    loss = sum(ref_ce([tl(s, lam[i], tau, eps) for s in rows[i]]) for i in range(A)) / A
    return loss, lam, daics, rhos, rho0, k, n


def make_views(N, d, seed, dtype=torch.float64, noise=0.6):
    g = torch.Generator().manual_seed(seed)
    base = torch.randn(N, d, generator=g, dtype=dtype)
    z1 = 2.0 * base + noise * torch.randn(N, d, generator=g, dtype=dtype)  # not normalised
    z2 = base + noise * torch.randn(N, d, generator=g, dtype=dtype)
    return z1, z2


# ---------------------------------------------------------------------------------------------
# rounding rules
# ---------------------------------------------------------------------------------------------


def test_tail_size_and_rho0_index_rules():
    assert tail_size(510) == 51 and tail_size(126) == 32 and tail_size(14) == 14
    assert tail_size(2) == 2
    assert tail_size(42, 0.25, 2) == 10  # round(10.5) = 10 (half to even)
    assert tail_size(46, 0.25, 2) == 12  # round(11.5) = 12
    assert rho0_index(512, 0.2) == 102
    assert rho0_index(8, 0.2) == 1  # round(1.4)
    assert rho0_index(6, 0.5) == 2 and rho0_index(8, 0.5) == 4  # round(2.5) = 2, round(3.5) = 4
    for bad in [dict(num_negatives=0), dict(num_negatives=5, tail_frac=-0.1), dict(num_negatives=5, min_tail=-1)]:
        with pytest.raises(ValueError):
            tail_size(**bad)
    with pytest.raises(ValueError, match="q"):
        rho0_index(8, 1.5)


# ---------------------------------------------------------------------------------------------
# the loss against the loop reference
# ---------------------------------------------------------------------------------------------


CASES = [
    # (N, d, kwargs)                            why
    (2, 5, {}),                                 # N = 2: n_eff = 1 < 2 fallback (median rho0)
    (3, 4, {"q": 0.3}),                         # A = 6: rho0 index round(1.5) = 2
    (4, 6, {}),                                 # A = 8: rho0 index round(1.4) = 1
    (4, 6, {"q": 0.5}),                         # A = 8: round(3.5) = 4
    (3, 4, {"q": 0.5}),                         # A = 6: round(2.5) = 2 (half to even)
    (42, 8, {"tail_frac": 0.5, "min_tail": 2}),   # k_tail = 41: burn-in 41 // 20 = 2
    (5, 8, {}),                                 # N <= 5: k_tail = K
    (22, 8, {"tail_frac": 0.25, "min_tail": 2}),  # K = 42: k_tail = round(10.5) = 10
    (24, 8, {"tail_frac": 0.25, "min_tail": 2}),  # K = 46: k_tail = round(11.5) = 12
    (40, 16, {}),                               # K = 78: k_tail = 32 (min_tail)
    (40, 16, {"margin": 80.0}),                 # lam_AIC strictly inside (0, 1) for some anchors
]


@pytest.mark.parametrize("corner", GRID_CORNERS)
@pytest.mark.parametrize("N,d,kw", CASES)
def test_matches_loop_reference_float64(N, d, kw, corner):
    margin, kr, ka = corner
    kw = {"margin": margin, "kappa_rho": kr, "kappa_aic": ka, **kw}
    z1, z2 = make_views(N, d, seed=N * 7 + d)
    loss, diag = weince_loss(z1, z2, return_diagnostics=True, **kw)
    ref_loss, lam, daics, rhos, rho0, k, n = ref_weince(z1, z2, **kw)
    assert loss.dtype == torch.float64
    assert diag.k_tail == k and diag.n_eff == n
    assert abs(loss.item() - ref_loss) < 1e-10
    assert np.allclose(diag.lam.numpy(), lam, rtol=0, atol=1e-10)
    assert np.allclose(diag.dAIC.numpy(), daics, rtol=1e-11, atol=1e-9)
    assert np.allclose(diag.rho.numpy(), rhos, rtol=0, atol=1e-12)
    assert abs(float(diag.rho0) - rho0) < 1e-12
    assert torch.allclose(diag.lam, diag.lam_rho * diag.lam_aic, rtol=0, atol=0)
    if kw["margin"] == 80.0:
        assert bool(((diag.lam_aic > 0.01) & (diag.lam_aic < 0.99)).any())


def test_gate_matches_evt_tail_aic_fit():
    z1, z2 = make_views(64, 16, seed=3)
    _, diag = weince_loss(z1, z2, return_diagnostics=True)
    z = F.normalize(torch.cat([z1, z2]), dim=1)
    S = (z @ z.T).numpy()
    A, N = 128, 64
    for i in range(0, A, 17):
        negs = np.delete(S[i], sorted({i, (i + N) % A}))
        fit = tail_aic_fit(negs)
        assert fit.k_tail == diag.k_tail and fit.n_eff == diag.n_eff
        assert abs(fit.dAIC - float(diag.dAIC[i])) < 1e-9
        assert abs(fit.rho - float(diag.rho[i])) < 1e-12


def test_weince_gate_public_function_matches_loss_diagnostics():
    z1, z2 = make_views(16, 8, seed=11)
    _, diag = weince_loss(z1, z2, return_diagnostics=True, margin=0.0, kappa_rho=5.0, kappa_aic=0.5)
    z = F.normalize(torch.cat([z1, z2]), dim=1)
    S = z @ z.T
    A, N = 32, 16
    neg = torch.stack([torch.cat([S[i, :min(i, (i + N) % A)], S[i, min(i, (i + N) % A) + 1:max(i, (i + N) % A)],
                                  S[i, max(i, (i + N) % A) + 1:]]) for i in range(A)])
    st = weince_gate(neg[:, torch.randperm(A - 2)], margin=0.0, kappa_rho=5.0, kappa_aic=0.5)  # order-free
    assert torch.allclose(st.lam, diag.lam, atol=1e-12, rtol=0)


@pytest.mark.parametrize("beta", [0.7, 4.0])
def test_gate_on_exact_power_law_tails(beta):
    # shortfalls on the exact Weibull quantile line: log F = beta log delta, SSE_W ~ 0
    A, K = 12, 60
    k = tail_size(K)
    r = np.arange(1, k + 1) / (k + 1)
    rows = []
    rng = np.random.default_rng(0)
    for i in range(A):
        tail = 1.0 - (0.3 + 0.05 * i) * r ** (1.0 / beta)
        rest = rng.uniform(-0.5, tail.min() - 1e-3, K - k)
        rows.append(rng.permutation(np.concatenate([tail, rest])))
    neg = torch.tensor(np.array(rows))
    st = weince_gate(neg, margin=0.0)
    rhos, daics = [], []
    for row in rows:
        rho, d, n = ref_tail_daic(list(row), k, 1e-6)
        rhos.append(rho)
        daics.append(d)
    lam, rho0 = ref_lambda(rhos, daics, n, 0.2, 0.0, 10.0, 1.0, 1e-6)
    assert np.allclose(st.dAIC.numpy(), daics, rtol=1e-9, atol=1e-6)
    assert np.allclose(st.lam.numpy(), lam, atol=1e-10, rtol=0)
    assert float(st.dAIC.min()) > 100  # the Weibull line fits (almost) perfectly


# ---------------------------------------------------------------------------------------------
# lambda = 0 reproduces InfoNCE bit for bit
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32, torch.float16, torch.bfloat16])
@pytest.mark.parametrize("N", [2, 7, 64])
def test_lambda_zero_is_info_nce_bit_for_bit(dtype, N):
    z1, z2 = make_views(N, 12, seed=N, dtype=torch.float64)
    z1, z2 = z1.to(dtype), z2.to(dtype)
    for tau in (0.5, 0.1):
        ref = info_nce(z1, z2, tau=tau)
        got, diag = weince_loss(z1, z2, tau=tau, margin=float("inf"), return_diagnostics=True)
        assert torch.equal(diag.lam, torch.zeros_like(diag.lam))
        assert torch.equal(got, ref), (got.item(), ref.item())
        assert got.dtype == (torch.float64 if dtype == torch.float64 else torch.float32)


def test_lambda_zero_gradient_matches_info_nce():
    z1, z2 = make_views(16, 8, seed=2)
    a1, a2 = z1.clone().requires_grad_(), z2.clone().requires_grad_()
    b1, b2 = z1.clone().requires_grad_(), z2.clone().requires_grad_()
    info_nce(a1, a2).backward()
    weince_loss(b1, b2, margin=float("inf")).backward()
    assert torch.allclose(a1.grad, b1.grad, atol=1e-14, rtol=1e-12)
    assert torch.allclose(a2.grad, b2.grad, atol=1e-14, rtol=1e-12)


# ---------------------------------------------------------------------------------------------
# gradients: no gradient through lambda; closed form with lambda fixed
# ---------------------------------------------------------------------------------------------


def closed_form_loss(z1, z2, lam, tau, eps):
    """WeiNCE written out with autograd, lambda a constant: an independent closed form (§2.7)."""
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


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
@pytest.mark.parametrize("N,tau", [(3, 0.5), (20, 0.5), (33, 0.1)])
def test_gradient_matches_closed_form_with_lambda_fixed(dtype, N, tau):
    z1, z2 = make_views(N, 10, seed=100 + N, dtype=dtype)
    a1, a2 = z1.clone().requires_grad_(), z2.clone().requires_grad_()
    loss, diag = weince_loss(a1, a2, tau=tau, return_diagnostics=True)
    loss.backward()
    for t in (diag.lam, diag.lam_rho, diag.lam_aic, diag.rho, diag.rho0, diag.dAIC):
        assert not t.requires_grad and t.grad_fn is None
    b1, b2 = z1.clone().requires_grad_(), z2.clone().requires_grad_()
    ref = closed_form_loss(b1, b2, diag.lam.clone(), tau, 1e-6)
    ref.backward()
    tol = dict(atol=1e-12, rtol=1e-10) if dtype == torch.float64 else dict(atol=2e-6, rtol=1e-4)
    assert torch.allclose(loss, ref.to(loss.dtype), **tol)
    assert torch.allclose(a1.grad, b1.grad, **tol)
    assert torch.allclose(a2.grad, b2.grad, **tol)


def test_gradient_with_clamp_active_and_gradcheck():
    # duplicate pairs: positives with s = 1 (clamped Weibit branch, zero branch gradient)
    z1, z2 = make_views(6, 5, seed=5)
    z2 = z2.clone()
    z2[:3] = 3.0 * z1[:3]
    a1, a2 = z1.clone().requires_grad_(), z2.clone().requires_grad_()
    loss, diag = weince_loss(a1, a2, return_diagnostics=True)
    loss.backward()
    b1, b2 = z1.clone().requires_grad_(), z2.clone().requires_grad_()
    closed_form_loss(b1, b2, diag.lam, 0.5, 1e-6).backward()
    assert torch.isfinite(loss) and torch.isfinite(a1.grad).all()
    assert torch.allclose(a1.grad, b1.grad, atol=1e-10, rtol=1e-8)
    assert torch.allclose(a2.grad, b2.grad, atol=1e-10, rtol=1e-8)
    # gradcheck of the fused function with lambda frozen (generic inputs)
    z1, z2 = make_views(4, 3, seed=6)
    lam = weince_loss(z1, z2, return_diagnostics=True)[1].lam

    def f(x1, x2):
        from theory.weince.logits import _TLambdaCE

        _, cand = two_view_candidates(x1, x2)
        return _TLambdaCE.apply(cand, lam, 0.5, 1e-6)

    assert torch.autograd.gradcheck(f, (z1.clone().requires_grad_(), z2.clone().requires_grad_()))


def test_tlambda_logits_closed_form():
    s = torch.tensor([[-0.3, 0.2, 0.9, 1.0]], dtype=torch.float64)
    lam = torch.tensor([[0.25]], dtype=torch.float64)
    got = tlambda_logits(s, lam, 0.5, 1e-6)
    want = [0.75 * v / 0.5 + 0.25 * (-math.log(1 - min(v, 1 - 1e-6))) for v in s[0].tolist()]
    assert np.allclose(got[0].numpy(), want, rtol=0, atol=1e-14)
    assert torch.equal(tlambda_logits(s, 0.0, 0.5), s / 0.5)
    with pytest.raises(ValueError, match="tau"):
        tlambda_logits(s, lam, 0.0)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_tlambda_logits_half_precision_near_cap(dtype):
    # in half precision 1 - 1e-6 rounds to 1: the shortfall branch must be computed in float32
    s = torch.tensor([[0.5, 0.9, 0.999, 0.9999, 0.99995, 1.0]], dtype=dtype).requires_grad_()
    lam = torch.tensor([[0.3]], dtype=dtype)
    got = tlambda_logits(s, lam, 0.5)
    want = tlambda_logits(s.detach().float(), lam.float(), 0.5)
    assert got.dtype == torch.float32 and torch.isfinite(got).all()
    assert torch.equal(got.detach(), want)
    lam64 = float(lam)
    cap32 = float(np.float32(1 - 1e-6))  # the clamp 1 - eps as float32 represents it
    for v, g in zip(s[0].tolist(), got[0].tolist()):  # float64 closed form of the rounded inputs
        want64 = (1 - lam64) * v / 0.5 + lam64 * (-math.log(1.0 - min(v, cap32)))
        assert abs(g - want64) < 1e-5 * max(1.0, abs(g))
    got.sum().backward()
    assert s.grad.dtype == dtype and torch.isfinite(s.grad.float()).all()


def test_tail_fits_public_function():
    rng = np.random.default_rng(5)
    rows = np.sort(np.tanh(rng.normal(0.2, 0.4, (6, 40))), axis=1)[:, ::-1]
    fits = tail_fits(torch.tensor(rows.copy(), dtype=torch.float32), eps=1e-6)
    assert (fits.k_tail, fits.burn, fits.n_eff) == (40, 2, 38)
    for i in range(6):
        _, d, _ = ref_tail_daic(list(rows[i].astype(np.float32).astype(np.float64)), 40, 1e-6)
        assert abs(fits.dAIC[i] - d) < 1e-8
    assert tail_fits(rows[:, :2]).n_eff == 1 and np.all(tail_fits(rows[:, :2]).dAIC == 0)
    with pytest.raises(ValueError, match="descending"):
        tail_fits(rows[:, ::-1])
    with pytest.raises(ValueError, match="2-D"):
        tail_fits(rows[0])
    with pytest.raises(ValueError, match="finite"):
        tail_fits(np.full((2, 3), np.nan))
    with pytest.raises(ValueError, match="eps"):
        tail_fits(rows, eps=0.0)


# ---------------------------------------------------------------------------------------------
# permutation equivariance
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_permuting_the_batch_permutes_lambda(dtype):
    N = 30
    z1, z2 = make_views(N, 12, seed=9, dtype=dtype)
    g = torch.Generator().manual_seed(1)
    pi = torch.randperm(N, generator=g)
    l0, d0 = weince_loss(z1, z2, return_diagnostics=True)
    l1, d1 = weince_loss(z1[pi], z2[pi], return_diagnostics=True)
    perm2 = torch.cat([pi, pi + N])
    tol = 1e-12 if dtype == torch.float64 else 1e-5
    assert torch.allclose(d1.lam, d0.lam[perm2], atol=tol, rtol=0)
    assert torch.allclose(d1.dAIC, d0.dAIC[perm2], atol=tol * 1e3, rtol=0)
    assert abs(float(d1.rho0) - float(d0.rho0)) < tol
    assert abs(l1.item() - l0.item()) < tol * 10


# ---------------------------------------------------------------------------------------------
# edge cases (§3.2)
# ---------------------------------------------------------------------------------------------


def test_n_equal_one_raises_and_validation():
    z = torch.randn(1, 4)
    with pytest.raises(ValueError, match="N"):
        weince_loss(z, z)
    z1, z2 = torch.randn(4, 3), torch.randn(4, 3)
    with pytest.raises(ValueError):
        weince_loss(z1, torch.randn(5, 3))
    for bad in [dict(tau=0.0), dict(tau=-1.0), dict(q=1.5), dict(q=-0.1), dict(tail_frac=-1.0),
                dict(min_tail=-2), dict(kappa_rho=-1.0), dict(kappa_aic=float("nan")), dict(eps=0.0),
                dict(recipe="nope"), dict(recipe="released")]:
        with pytest.raises(ValueError):
            weince_loss(z1, z2, **bad)


def test_n_equal_two_fallback():
    z1, z2 = make_views(2, 3, seed=21)
    loss, diag = weince_loss(z1, z2, return_diagnostics=True, margin=2.0, kappa_aic=1.0)
    assert diag.k_tail == 2 and diag.n_eff == 1
    assert torch.equal(diag.dAIC, torch.zeros(4, dtype=torch.float64))
    rho = sorted(diag.rho.tolist())
    assert float(diag.rho0) == rho[1]  # torch's lower median of 4 values
    assert torch.allclose(diag.lam_aic, torch.full((4,), sigmoid(-2.0), dtype=torch.float64))
    assert bool((diag.lam > 0).all())  # lambda is still applied (not 0)


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
@pytest.mark.parametrize("corner", GRID_CORNERS)
def test_full_collapse_gives_log_2n_minus_1(dtype, corner):
    margin, kr, ka = corner
    N = 8
    e = torch.zeros(N, 5, dtype=dtype)
    e[:, 0] = 1.0
    z1 = e.clone().requires_grad_()
    z2 = (2 * e).clone().requires_grad_()
    loss, diag = weince_loss(z1, z2, margin=margin, kappa_rho=kr, kappa_aic=ka, return_diagnostics=True)
    assert abs(loss.item() - math.log(2 * N - 1)) < 1e-6
    loss.backward()
    assert torch.isfinite(z1.grad).all() and torch.isfinite(z2.grad).all()
    assert torch.allclose(diag.rho, torch.full_like(diag.rho, 1e-6))
    assert torch.allclose(diag.lam_rho, torch.full_like(diag.lam_rho, 0.5))
    assert torch.allclose(diag.dAIC, torch.zeros_like(diag.dAIC), atol=1e-3)
    ref = ref_weince(z1, z2, margin=margin, kappa_rho=kr, kappa_aic=ka)
    assert np.allclose(diag.dAIC.double().numpy(), ref[2], atol=1e-9 if dtype == torch.float64 else 1e-4)
    assert torch.allclose(diag.lam, torch.full_like(diag.lam, 0.5 * sigmoid(-ka * margin)), atol=1e-4)


def test_ties_in_the_tail():
    # every anchor's negatives take only two distinct values -> ties everywhere, finite results
    N = 20
    z1 = torch.zeros(N, 3, dtype=torch.float64)
    z1[:, 0] = 1.0
    z1[N // 2:, 0] = 0.0
    z1[N // 2:, 1] = 1.0
    z2 = z1.clone()
    loss, diag = weince_loss(z1, z2, return_diagnostics=True)
    ref = ref_weince(z1, z2)
    assert torch.isfinite(loss) and abs(loss.item() - ref[0]) < 1e-10
    assert np.allclose(diag.lam.numpy(), ref[1], atol=1e-10)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_half_precision_computed_in_float32(dtype):
    z1, z2 = make_views(32, 16, seed=4, dtype=torch.float32)
    h1, h2 = z1.to(dtype).requires_grad_(), z2.to(dtype).requires_grad_()
    loss, diag = weince_loss(h1, h2, return_diagnostics=True)
    ref = weince_loss(h1.detach().float(), h2.detach().float())
    assert loss.dtype == torch.float32 and diag.lam.dtype == torch.float32
    assert torch.equal(loss, ref)
    loss.backward()
    assert h1.grad.dtype == dtype and torch.isfinite(h1.grad.float()).all()


def test_near_cap_similarities_stay_finite():
    z1, z2 = make_views(16, 8, seed=8, noise=1e-7)
    z1 = z1.float()
    z2 = (0.5 * z1).clone()  # cosine = 1 up to round-off, possibly > 1
    a1, a2 = z1.clone().requires_grad_(), z2.clone().requires_grad_()
    loss = weince_loss(a1, a2, tau=0.01)
    loss.backward()
    assert torch.isfinite(loss) and torch.isfinite(a1.grad).all() and torch.isfinite(a2.grad).all()


# ---------------------------------------------------------------------------------------------
# the released recipe (§2.8)
# ---------------------------------------------------------------------------------------------


def ref_beta_update(negs_flat, beta, eps=1e-6):
    Kn = len(negs_flat)
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


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_released_recipe_matches_reference(dtype):
    N = 30
    z1, z2 = make_views(N, 8, seed=12, dtype=dtype)
    tol = 1e-10 if dtype == torch.float64 else 2e-5
    state = WeibullBetaState()
    loss, diag = weince_loss(z1, z2, recipe="released", state=state, return_diagnostics=True)
    core, _ = weince_loss(z1, z2, return_diagnostics=True)
    z = F.normalize(torch.cat([z1, z2]).double(), dim=1)
    S = (z @ z.T).tolist()
    A = 2 * N
    rows = []
    for i in range(A):
        p = (i + N) % A
        rows.append((S[i][p], [S[i][j] for j in range(A) if j not in (i, p)]))
    beta, bh, r2 = ref_beta_update([v for _, ng in rows for v in ng], 4.0)
    assert abs(state.beta - beta) < tol and abs(diag.beta_t - beta) < tol
    assert abs(state.last_beta_hat - bh) < 1e3 * tol and abs(state.last_r2 - r2) < 1e2 * tol
    weib = pl = 0.0
    for pos, ng in rows:
        top = sorted(ng, reverse=True)[:50]
        weib += ref_ce([-beta * math.log(1 - min(v, 1 - 1e-6)) for v in [pos] + top])
        pl += ref_ce([v / 0.5 for v in [pos] + top])
    want = core.item() + 0.5 * weib / A + 0.5 * pl / A
    assert abs(loss.item() - want) < tol
    # a second call continues the EMA from the state, no globals
    beta2, _, _ = ref_beta_update([v for _, ng in rows for v in ng], beta)
    weince_loss(z1, z2, recipe="released", state=state)
    assert abs(state.beta - beta2) < tol and state.steps == 2
    fixed = WeibullBetaState(auto=False)
    weince_loss(z1, z2, recipe="released", state=fixed)
    assert fixed.beta == 4.0


def test_released_recipe_gradients_finite_and_module():
    z1, z2 = make_views(8, 4, seed=13, dtype=torch.float32)
    mod = WeiNCELoss(recipe="released", tau=0.5)
    a1 = z1.clone().requires_grad_()
    loss = mod(a1, z2)
    loss.backward()
    assert torch.isfinite(a1.grad).all() and mod.state.steps == 1
    with pytest.raises(ValueError):
        WeiNCELoss(recipe="core", temperature=0.5)
    with pytest.raises(ValueError):
        WeibullBetaState(beta=-1.0)


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_torch_only_branch_matches_numpy_branch(dtype, monkeypatch):
    import theory.weince._fast as W

    z1, z2 = make_views(40, 8, seed=14, dtype=dtype)
    results = []
    for fast in (True, False):
        monkeypatch.setattr(W, "_NUMPY_FAST", fast)
        a1, a2 = z1.clone().requires_grad_(), z2.clone().requires_grad_()
        state = WeibullBetaState()
        loss, diag = weince_loss(a1, a2, recipe="released", state=state, return_diagnostics=True)
        loss.backward()
        results.append((loss.detach(), diag.lam, state.beta, a1.grad, a2.grad))
    tol = dict(atol=1e-12, rtol=1e-10) if dtype == torch.float64 else dict(atol=1e-6, rtol=1e-5)
    (l0, lam0, b0, g10, g20), (l1, lam1, b1, g11, g21) = results
    assert torch.allclose(l0, l1, **tol) and torch.allclose(lam0, lam1, **tol)
    assert abs(b0 - b1) < 1e-9
    assert torch.allclose(g10, g11, **tol) and torch.allclose(g20, g21, **tol)


# ---------------------------------------------------------------------------------------------
# the label-positive variant
# ---------------------------------------------------------------------------------------------


def ref_label_loss(z, labels, *, tau=0.5, q=0.2, tail_frac=0.1, min_tail=32, margin=2.0, kappa_rho=10.0,
                   kappa_aic=1.0, eps=1e-6):
    zz = z.detach().double().numpy()
    zz = zz / np.linalg.norm(zz, axis=1, keepdims=True)
    B = zz.shape[0]
    y = labels.tolist()
    S = [[float(np.dot(zz[i], zz[j])) for j in range(B)] for i in range(B)]
    rhos, daics, ns = [], [], []
    for i in range(B):
        negs = [S[i][j] for j in range(B) if y[j] != y[i]]
        k = ref_tail_size(len(negs), tail_frac, min_tail)
        rho, d, n = ref_tail_daic(negs, k, eps)
        rhos.append(rho)
        daics.append(d)
        ns.append(n)
    lam, _ = ref_lambda(rhos, daics, max(ns), q, margin, kappa_rho, kappa_aic, eps)
    total, pairs = 0.0, 0
    for i in range(B):
        negl = [tl(S[i][j], lam[i], tau, eps) for j in range(B) if y[j] != y[i]]
        for j in range(B):
            if j != i and y[j] == y[i]:
                total += ref_ce([tl(S[i][j], lam[i], tau, eps)] + negl)
                pairs += 1
    return total / pairs, lam


@pytest.mark.parametrize("corner", GRID_CORNERS)
def test_label_variant_matches_loop_with_unequal_classes(corner):
    margin, kr, ka = corner
    g = torch.Generator().manual_seed(3)
    labels = torch.tensor([0] * 9 + [1] * 5 + [2] * 20 + [3] * 2 + [4] * 1)  # K_i differ per anchor
    z = torch.randn(len(labels), 6, generator=g, dtype=torch.float64) + 1.5 * torch.randn(5, 6, generator=g, dtype=torch.float64)[labels]
    loss, diag = weince_label_loss(z, labels, margin=margin, kappa_rho=kr, kappa_aic=ka, tail_frac=0.3, min_tail=4,
                                   return_diagnostics=True)
    ref, lam = ref_label_loss(z, labels, margin=margin, kappa_rho=kr, kappa_aic=ka, tail_frac=0.3, min_tail=4)
    assert abs(loss.item() - ref) < 1e-10
    assert np.allclose(diag.lam.numpy(), lam, atol=1e-10, rtol=0)
    assert len(set(diag.k_tail.tolist())) > 1


def test_label_variant_equals_two_view_core():
    N = 12
    z1, z2 = make_views(N, 7, seed=30)
    labels = torch.cat([torch.arange(N), torch.arange(N)])
    for kw in ({}, {"margin": 0.0, "kappa_rho": 5.0, "kappa_aic": 0.5}):
        a, da = weince_loss(z1, z2, return_diagnostics=True, **kw)
        b, db = weince_label_loss(torch.cat([z1, z2]), labels, return_diagnostics=True, **kw)
        assert abs(a.item() - b.item()) < 1e-12
        assert torch.allclose(da.lam, db.lam, atol=1e-12, rtol=0)
    # and the N = 2 fallback
    z1, z2 = make_views(2, 3, seed=31)
    a = weince_loss(z1, z2)
    b = weince_label_loss(torch.cat([z1, z2]), torch.tensor([0, 1, 0, 1]))
    assert abs(a.item() - b.item()) < 1e-12


def near_tied_views(N, seed, c=0.5, noise=2e-7):
    """float32 views whose similarities all equal c up to a few float32 ulps (near-tied tails)."""
    g = torch.Generator().manual_seed(seed)
    A, d = 2 * N, 2 * N + 1
    eye = torch.eye(d, dtype=torch.float64)
    z = math.sqrt(c) * eye[0] + math.sqrt(1 - c) * eye[1:A + 1]  # pairwise cosine exactly c
    z = (z + noise * torch.randn(A, d, generator=g, dtype=torch.float64)).float()
    return z[:N], z[N:]


@pytest.mark.parametrize("seed", [0, 4])
def test_label_variant_equals_core_on_near_tied_float32_tails(seed):
    # tails spread over a few float32 ulps: a float32 fit would flip slope signs (+1e6 penalties)
    N = 40
    z1, z2 = near_tied_views(N, seed)
    labels = torch.cat([torch.arange(N), torch.arange(N)])
    _, cand = two_view_candidates(z1, z2)
    neg = cand[:, 1:].double().numpy()
    k = tail_size(2 * N - 2)
    spread = np.ptp(np.sort(neg, axis=1)[:, -k:], axis=1)
    assert spread.max() < 2e-6 and spread.min() > 0
    ref = [ref_tail_daic(list(row), k, 1e-6)[1] for row in neg]  # float64 loops on the same values
    for kw in ({}, {"margin": 0.0, "kappa_aic": 2.0}):
        a, da = weince_loss(z1, z2, return_diagnostics=True, **kw)
        b, db = weince_label_loss(torch.cat([z1, z2]), labels, return_diagnostics=True, **kw)
        assert np.allclose(da.dAIC.double().numpy(), ref, rtol=1e-5, atol=1e-3)
        assert torch.equal(da.lam, db.lam) and torch.equal(da.dAIC, db.dAIC) and torch.equal(da.rho, db.rho)
        assert abs(a.item() - b.item()) < 4e-6  # float32 round-off of the two cross-entropies


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_label_variant_lambda_zero_is_label_infonce(dtype):
    g = torch.Generator().manual_seed(4)
    labels = torch.tensor([0, 0, 0, 1, 1, 2, 2, 2, 2, 3])
    z = torch.randn(10, 5, generator=g, dtype=dtype)
    got = weince_label_loss(z, labels, tau=0.2, margin=float("inf"))
    zn = F.normalize(z.double(), dim=1)
    total, pairs = 0.0, 0
    for i in range(10):
        for j in range(10):
            if j != i and labels[j] == labels[i]:
                cands = [float(zn[i] @ zn[j]) / 0.2] + [float(zn[i] @ zn[k]) / 0.2 for k in range(10) if labels[k] != labels[i]]
                total += ref_ce(cands)
                pairs += 1
    tol = 1e-12 if dtype == torch.float64 else 1e-5
    assert abs(got.item() - total / pairs) < tol
    z = z.clone().requires_grad_()
    weince_label_loss(z, labels).backward()
    assert torch.isfinite(z.grad).all()


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32, torch.float16])
def test_label_variant_collapse_and_half(dtype):
    labels = torch.tensor([0, 0, 1, 1, 2, 2, 2])
    z = torch.zeros(7, 4, dtype=dtype)
    z[:, 1] = 1.0
    z = z.requires_grad_()
    loss, diag = weince_label_loss(z, labels, return_diagnostics=True)
    # all similarities equal: each pair's CE is log(1 + K_i), averaged over pairs
    want = (4 * math.log(1 + 5) + 6 * math.log(1 + 4)) / 10
    assert abs(loss.item() - want) < 1e-5 and loss.dtype != torch.float16
    loss.backward()
    assert torch.isfinite(z.grad.float()).all()
    assert torch.allclose(diag.lam_rho.double(), torch.full((7,), 0.5, dtype=torch.float64))


def test_label_variant_errors():
    z = torch.randn(4, 3)
    with pytest.raises(ValueError, match="single class"):
        weince_label_loss(z, torch.zeros(4, dtype=torch.long))
    with pytest.raises(ValueError, match="pair"):
        weince_label_loss(z, torch.arange(4))
    with pytest.raises(ValueError, match="labels"):
        weince_label_loss(z, torch.zeros(3, dtype=torch.long))
    with pytest.raises(ValueError, match="integers"):
        weince_label_loss(z, torch.zeros(4))
