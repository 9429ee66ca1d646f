"""The two-view WeiNCE loss (theory.weince.weince_loss) against slow per-anchor loops and closed forms."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from tests.theory.weince.reference import (
    closed_form_loss,
    make_views,
    ref_weince,
    sigmoid,
)
from theory.infonce import info_nce, two_view_candidates
from theory.weince import GateConfig, WeiNCELoss, tlambda_logits, weince_loss

GRID_CORNERS = [(0.0, 5.0, 0.5), (6.0, 20.0, 2.0), (2.0, 10.0, 1.0)]

CASES = [
    # (N, d, gate fields)                         why
    (2, 5, {}),  # N = 2: n_eff = 1 < 2 fallback (median rho0)
    (3, 4, {"q": 0.3}),  # A = 6: rho0 index round(1.5) = 2
    (4, 6, {}),  # A = 8: rho0 index round(1.4) = 1
    (4, 6, {"q": 0.5}),  # A = 8: round(3.5) = 4
    (3, 4, {"q": 0.5}),  # A = 6: round(2.5) = 2 (half to even)
    (42, 8, {"tail_frac": 0.5, "min_tail": 2}),  # k_tail = 41: burn-in 41 // 20 = 2
    (5, 8, {}),  # N <= 5: k_tail = K
    (22, 8, {"tail_frac": 0.25, "min_tail": 2}),  # K = 42: k_tail = round(10.5) = 10
    (24, 8, {"tail_frac": 0.25, "min_tail": 2}),  # K = 46: k_tail = round(11.5) = 12
    (40, 16, {}),  # K = 78: k_tail = 32 (min_tail)
    (40, 16, {"margin": 80.0}),  # lam_AIC strictly inside (0, 1) for some anchors
]


@pytest.mark.parametrize("corner", GRID_CORNERS)
@pytest.mark.parametrize("N,d,kw", CASES)
def test_matches_loop_reference_float64(N, d, kw, corner):
    margin, kr, ka = corner
    gate = GateConfig(**{"margin": margin, "kappa_rho": kr, "kappa_aic": ka, **kw})
    z1, z2 = make_views(N, d, seed=N * 7 + d)
    loss, diag = weince_loss(z1, z2, gate=gate, return_diagnostics=True)
    ref_loss, lam, daics, rhos, rho0, k, n = ref_weince(z1, z2, gate=gate)
    assert loss.dtype == torch.float64
    assert diag.k_tail == k and diag.n_eff == n
    assert abs(loss.item() - ref_loss) < 1e-13  # the authors' algorithm, written as loops
    assert np.allclose(diag.lam.numpy(), lam, rtol=0, atol=1e-12)
    assert np.allclose(diag.dAIC.numpy(), daics, rtol=1e-11, atol=1e-9)
    assert np.allclose(diag.rho.numpy(), rhos, rtol=0, atol=1e-12)
    assert abs(float(diag.rho0) - rho0) < 1e-12
    assert torch.allclose(diag.lam, diag.lam_rho * diag.lam_aic, rtol=0, atol=0)
    if gate.margin == 80.0:
        assert bool(((diag.lam_aic > 0.01) & (diag.lam_aic < 0.99)).any())


# ---------------------------------------------------------------------------------------------
# lambda = 0 reproduces InfoNCE bit for bit
# ---------------------------------------------------------------------------------------------

OFF = GateConfig(margin=math.inf)


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32, torch.float16, torch.bfloat16])
@pytest.mark.parametrize("N", [2, 7, 64])
def test_lambda_zero_is_info_nce_bit_for_bit(dtype, N):
    z1, z2 = make_views(N, 12, seed=N, dtype=torch.float64)
    z1, z2 = z1.to(dtype), z2.to(dtype)
    for tau in (0.5, 0.1):
        ref = info_nce(z1, z2, tau=tau)
        got, diag = weince_loss(z1, z2, tau=tau, gate=OFF, return_diagnostics=True)
        assert torch.equal(diag.lam, torch.zeros_like(diag.lam))
        assert torch.equal(got, ref), (got.item(), ref.item())
        assert got.dtype == (torch.float64 if dtype == torch.float64 else torch.float32)


def test_lambda_zero_gradient_matches_info_nce():
    z1, z2 = make_views(16, 8, seed=2)
    a1, a2 = z1.clone().requires_grad_(), z2.clone().requires_grad_()
    b1, b2 = z1.clone().requires_grad_(), z2.clone().requires_grad_()
    info_nce(a1, a2).backward()
    weince_loss(b1, b2, gate=OFF).backward()
    assert torch.allclose(a1.grad, b1.grad, atol=1e-14, rtol=1e-12)
    assert torch.allclose(a2.grad, b2.grad, atol=1e-14, rtol=1e-12)


# ---------------------------------------------------------------------------------------------
# gradients: no gradient through lambda; closed form with lambda fixed
# ---------------------------------------------------------------------------------------------


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
        return _TLambdaCE.apply(cand, lam, 0.5, 1e-6, None)

    assert torch.autograd.gradcheck(f, (z1.clone().requires_grad_(), z2.clone().requires_grad_()))


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
# edge cases (docs/weince.md#edge-cases)
# ---------------------------------------------------------------------------------------------


def test_n_equal_two_fallback():
    z1, z2 = make_views(2, 3, seed=21)
    loss, diag = weince_loss(z1, z2, return_diagnostics=True)
    assert diag.k_tail == 2 and diag.n_eff == 1
    assert torch.equal(diag.dAIC, torch.zeros(4, dtype=torch.float64))
    rho = sorted(diag.rho.tolist())
    assert float(diag.rho0) == rho[1]  # torch's lower median of 4 values
    assert torch.allclose(diag.lam_aic, torch.full((4,), sigmoid(-2.0), dtype=torch.float64))
    assert bool((diag.lam > 0).all())  # lambda is still applied (not 0)
    assert abs(loss.item() - ref_weince(z1, z2)[0]) < 1e-13


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
@pytest.mark.parametrize("corner", GRID_CORNERS)
def test_full_collapse_gives_log_2n_minus_1(dtype, corner):
    margin, kr, ka = corner
    gate = GateConfig(margin=margin, kappa_rho=kr, kappa_aic=ka)
    N = 8
    e = torch.zeros(N, 5, dtype=dtype)
    e[:, 0] = 1.0
    z1 = e.clone().requires_grad_()
    z2 = (2 * e).clone().requires_grad_()
    loss, diag = weince_loss(z1, z2, gate=gate, return_diagnostics=True)
    assert abs(loss.item() - math.log(2 * N - 1)) < 1e-6
    loss.backward()
    assert torch.isfinite(z1.grad).all() and torch.isfinite(z2.grad).all()
    assert torch.allclose(diag.rho, torch.full_like(diag.rho, 1e-6))
    assert torch.allclose(diag.lam_rho, torch.full_like(diag.lam_rho, 0.5))
    assert torch.allclose(diag.dAIC, torch.zeros_like(diag.dAIC), atol=1e-3)
    ref = ref_weince(z1, z2, gate=gate)
    assert np.allclose(diag.dAIC.double().numpy(), ref[2], atol=1e-9 if dtype == torch.float64 else 1e-4)
    assert torch.allclose(diag.lam, torch.full_like(diag.lam, 0.5 * sigmoid(-ka * margin)), atol=1e-4)


def test_ties_in_the_tail():
    # every anchor's negatives take only two distinct values -> ties everywhere, finite results
    N = 20
    z1 = torch.zeros(N, 3, dtype=torch.float64)
    z1[:, 0] = 1.0
    z1[N // 2 :, 0] = 0.0
    z1[N // 2 :, 1] = 1.0
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
    assert loss.dtype == torch.float32
    for name in ("lam", "lam_rho", "lam_aic", "rho", "rho0", "dAIC"):
        assert getattr(diag, name).dtype == torch.float32, name
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
# validation of the settings (table-driven)
# ---------------------------------------------------------------------------------------------

Z1, Z2 = torch.randn(4, 3), torch.randn(4, 3)

BAD_CALLS = [
    # (call, message fragment)
    (lambda: weince_loss(torch.randn(1, 4), torch.randn(1, 4)), "N >= 2"),
    (lambda: weince_loss(Z1, torch.randn(5, 3)), "same shape"),
    (lambda: weince_loss(Z1[0], Z2[0]), "z1 must be 2-D"),
    (lambda: weince_loss({"z": 1}, Z2), "z1 must be a torch tensor, a numpy array or a sequence"),
    (lambda: weince_loss(Z1, np.array([["a"] * 3] * 4)), "z2 must be a numeric array"),
    (lambda: weince_loss(Z1, Z2, tau=0.0), "tau must be > 0"),
    (lambda: weince_loss(Z1, Z2, tau=-1.0), "tau must be > 0"),
    (lambda: weince_loss(Z1, Z2, gate={"q": 0.2}), "gate must be a GateConfig"),
    (lambda: weince_loss(Z1, Z2, recipe="nope"), "recipe must be one of"),
    (lambda: weince_loss(Z1, Z2, recipe="released"), "needs state"),
]


@pytest.mark.parametrize("call,match", BAD_CALLS, ids=[m for _, m in BAD_CALLS])
def test_bad_arguments_raise_naming_them(call, match):
    with pytest.raises(ValueError, match=match):
        call()


def test_core_recipe_rejects_a_state():
    from theory.weince import WeibullBetaState

    with pytest.raises(ValueError, match="state"):
        weince_loss(Z1, Z2, recipe="core", state=WeibullBetaState())


def test_numpy_views_are_tensors():
    # the input rule of docs/README.md#conventions, as in info_nce: arrays and sequences are
    # accepted (no gradient), and give the tensor's loss bit for bit (the loop reference is
    # compared on tensors above)
    z1, z2 = make_views(8, 5, seed=44)
    want = weince_loss(z1, z2)
    assert torch.equal(weince_loss(z1.numpy(), z2.numpy()), want)
    # nested lists of Python floats become tensors of torch's default dtype (float32)
    assert torch.equal(weince_loss(z1.tolist(), z2.tolist()), weince_loss(z1.float(), z2.float()))
    assert torch.equal(WeiNCELoss()(z1.numpy(), z2), want)
    assert torch.equal(
        tlambda_logits(z1.numpy() @ z2.numpy().T / 10, 0.3), tlambda_logits((z1 @ z2.T) / 10, 0.3)
    )
