"""The gate (theory.weince.gate, tailfit) and the T_lambda logits against loops and closed forms."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from tests.theory.weince.reference import make_views, ref_lambda, ref_tail_daic
from theory.weince import (
    GateConfig,
    rho0_index,
    tail_aic_fit,
    tail_fits,
    tail_size,
    tlambda_logits,
    weince_gate,
    weince_loss,
)

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


@pytest.mark.parametrize(
    "kwargs,match",
    [
        (dict(num_negatives=0), "num_negatives"),
        (dict(num_negatives=5, tail_frac=-0.1), "tail_frac"),
        (dict(num_negatives=5, min_tail=-1), "min_tail"),
    ],
)
def test_tail_size_validation(kwargs, match):
    with pytest.raises(ValueError, match=match):
        tail_size(**kwargs)


def test_rho0_index_validation():
    with pytest.raises(ValueError, match="q"):
        rho0_index(8, 1.5)


# ---------------------------------------------------------------------------------------------
# the public gate function
# ---------------------------------------------------------------------------------------------


def _negatives(z1, z2):
    z = F.normalize(torch.cat([z1, z2]), dim=1)
    S = z @ z.T
    A = S.shape[0]
    N = A // 2
    keep = [[j for j in range(A) if j not in (i, (i + N) % A)] for i in range(A)]
    return torch.stack([S[i, keep[i]] for i in range(A)])


def test_weince_gate_public_function_matches_loss_diagnostics():
    gate = GateConfig(margin=0.0, kappa_rho=5.0, kappa_aic=0.5)
    z1, z2 = make_views(16, 8, seed=11)
    _, diag = weince_loss(z1, z2, gate=gate, return_diagnostics=True)
    neg = _negatives(z1, z2)
    perm = torch.randperm(neg.shape[1], generator=torch.Generator().manual_seed(0))
    st = weince_gate(neg[:, perm], gate=gate)  # the order of the negatives is irrelevant
    assert torch.allclose(st.lam, diag.lam, atol=1e-12, rtol=0)


def test_gate_matches_evt_tail_aic_fit():
    z1, z2 = make_views(64, 16, seed=3)
    _, diag = weince_loss(z1, z2, return_diagnostics=True)
    neg = _negatives(z1, z2).numpy()
    for i in range(0, 128, 17):
        fit = tail_aic_fit(neg[i])
        assert fit.k_tail == diag.k_tail and fit.n_eff == diag.n_eff
        assert abs(fit.dAIC - float(diag.dAIC[i])) < 1e-9
        assert abs(fit.rho - float(diag.rho[i])) < 1e-12


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
    st = weince_gate(neg, gate=GateConfig(margin=0.0))
    rhos, daics = [], []
    for row in rows:
        rho, d, n = ref_tail_daic(list(row), k, 1e-6)
        rhos.append(rho)
        daics.append(d)
    lam, _ = ref_lambda(rhos, daics, n, 0.2, 0.0, 10.0, 1.0, 1e-6)
    assert np.allclose(st.dAIC.numpy(), daics, rtol=1e-9, atol=1e-6)
    assert np.allclose(st.lam.numpy(), lam, atol=1e-10, rtol=0)
    assert float(st.dAIC.min()) > 100  # the Weibull line fits (almost) perfectly


@pytest.mark.parametrize(
    "neg,match",
    [
        (torch.zeros(3), "2-D"),
        (torch.zeros(0, 4), "A, K >= 1"),
        ({"x": 1}, "neg must be a torch tensor, a numpy array or a sequence"),
    ],
)
def test_weince_gate_validation(neg, match):
    with pytest.raises(ValueError, match=match):
        weince_gate(neg)
    with pytest.raises(ValueError, match="gate must be a GateConfig"):
        weince_gate(torch.zeros(3, 4), gate=None)


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
# T_lambda logits
# ---------------------------------------------------------------------------------------------


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


def test_weince_gate_takes_numpy_arrays():
    z1, z2 = make_views(10, 4, seed=45)
    neg = _negatives(z1, z2)
    a, b = weince_gate(neg), weince_gate(neg.numpy())
    assert torch.equal(a.lam, b.lam) and torch.equal(a.dAIC, b.dAIC) and torch.equal(a.rho0, b.rho0)
    with pytest.raises(ValueError, match=r"neg must be 2-D \(A, K\)"):
        weince_gate(neg.numpy()[0])
