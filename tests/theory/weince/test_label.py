"""The label-positive variant (theory.weince.weince_label_loss) against loops and the two-view loss."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from tests.theory.weince.reference import (
    make_views,
    near_tied_views,
    ref_ce,
    ref_label_loss,
    ref_tail_daic,
)
from theory.infonce import two_view_candidates
from theory.weince import GateConfig, tail_size, weince_label_loss, weince_loss

GRID_CORNERS = [(0.0, 5.0, 0.5), (6.0, 20.0, 2.0), (2.0, 10.0, 1.0)]


@pytest.mark.parametrize("corner", GRID_CORNERS)
def test_label_variant_matches_loop_with_unequal_classes(corner):
    margin, kr, ka = corner
    gate = GateConfig(margin=margin, kappa_rho=kr, kappa_aic=ka, tail_frac=0.3, min_tail=4)
    g = torch.Generator().manual_seed(3)
    labels = torch.tensor([0] * 9 + [1] * 5 + [2] * 20 + [3] * 2 + [4] * 1)  # K_i differ per anchor
    z = (
        torch.randn(len(labels), 6, generator=g, dtype=torch.float64)
        + 1.5 * torch.randn(5, 6, generator=g, dtype=torch.float64)[labels]
    )
    loss, diag = weince_label_loss(z, labels, gate=gate, return_diagnostics=True)
    ref, lam = ref_label_loss(z, labels, gate=gate)
    assert abs(loss.item() - ref) < 1e-12
    assert np.allclose(diag.lam.numpy(), lam, atol=1e-12, rtol=0)
    assert len(set(diag.k_tail.tolist())) > 1


def test_label_variant_equals_two_view_core():
    N = 12
    z1, z2 = make_views(N, 7, seed=30)
    labels = torch.cat([torch.arange(N), torch.arange(N)])
    for gate in (GateConfig(), GateConfig(margin=0.0, kappa_rho=5.0, kappa_aic=0.5)):
        a, da = weince_loss(z1, z2, gate=gate, return_diagnostics=True)
        b, db = weince_label_loss(torch.cat([z1, z2]), labels, gate=gate, return_diagnostics=True)
        assert abs(a.item() - b.item()) < 1e-12
        assert torch.allclose(da.lam, db.lam, atol=1e-12, rtol=0)
    # and the N = 2 fallback
    z1, z2 = make_views(2, 3, seed=31)
    a = weince_loss(z1, z2)
    b = weince_label_loss(torch.cat([z1, z2]), torch.tensor([0, 1, 0, 1]))
    assert abs(a.item() - b.item()) < 1e-12


@pytest.mark.parametrize("fast", [True, False])
@pytest.mark.parametrize("seed", [0, 4])
def test_label_variant_equals_core_on_near_tied_float32_tails(seed, fast, monkeypatch):
    # tails spread over a few float32 ulps: a float32 fit would flip slope signs (+1e6 penalties)
    import theory.weince._fast as W

    monkeypatch.setattr(W, "_NUMPY_FAST", fast)
    N = 40
    z1, z2 = near_tied_views(N, seed)
    labels = torch.cat([torch.arange(N), torch.arange(N)])
    _, cand = two_view_candidates(z1, z2)
    neg = cand[:, 1:].double().numpy()
    k = tail_size(2 * N - 2)
    spread = np.ptp(np.sort(neg, axis=1)[:, -k:], axis=1)
    assert spread.max() < 2e-6 and spread.min() > 0
    ref = [ref_tail_daic(list(row), k, 1e-6)[1] for row in neg]  # float64 loops on the same values
    for gate in (GateConfig(), GateConfig(margin=0.0, kappa_aic=2.0)):
        a, da = weince_loss(z1, z2, gate=gate, return_diagnostics=True)
        b, db = weince_label_loss(torch.cat([z1, z2]), labels, gate=gate, return_diagnostics=True)
        assert np.allclose(da.dAIC.double().numpy(), ref, rtol=1e-5, atol=1e-3)
        assert torch.equal(da.lam, db.lam) and torch.equal(da.dAIC, db.dAIC) and torch.equal(da.rho, db.rho)
        assert abs(a.item() - b.item()) < 4e-6  # float32 round-off of the two cross-entropies


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_label_variant_lambda_zero_is_label_infonce(dtype):
    g = torch.Generator().manual_seed(4)
    labels = torch.tensor([0, 0, 0, 1, 1, 2, 2, 2, 2, 3])
    z = torch.randn(10, 5, generator=g, dtype=dtype)
    got = weince_label_loss(z, labels, tau=0.2, gate=GateConfig(margin=math.inf))
    zn = F.normalize(z.double(), dim=1)
    total, pairs = 0.0, 0
    for i in range(10):
        for j in range(10):
            if j != i and labels[j] == labels[i]:
                cands = [float(zn[i] @ zn[j]) / 0.2] + [
                    float(zn[i] @ zn[k]) / 0.2 for k in range(10) if labels[k] != labels[i]
                ]
                total += ref_ce(cands)
                pairs += 1
    tol = 1e-12 if dtype == torch.float64 else 1e-5
    assert abs(got.item() - total / pairs) < tol
    z = z.clone().requires_grad_()
    weince_label_loss(z, labels).backward()
    assert torch.isfinite(z.grad).all()


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32, torch.float16, torch.bfloat16])
def test_label_variant_collapse_and_half(dtype):
    labels = torch.tensor([0, 0, 1, 1, 2, 2, 2])
    z = torch.zeros(7, 4, dtype=dtype)
    z[:, 1] = 1.0
    z = z.requires_grad_()
    loss, diag = weince_label_loss(z, labels, return_diagnostics=True)
    # all similarities equal: each pair's CE is log(1 + K_i), averaged over pairs
    want = (4 * math.log(1 + 5) + 6 * math.log(1 + 4)) / 10
    assert abs(loss.item() - want) < 1e-5
    assert loss.dtype == (torch.float64 if dtype == torch.float64 else torch.float32)
    assert diag.lam.dtype == loss.dtype
    loss.backward()
    assert torch.isfinite(z.grad.float()).all()
    assert torch.allclose(diag.lam_rho.double(), torch.full((7,), 0.5, dtype=torch.float64))


@pytest.mark.parametrize(
    "z,labels,match",
    [
        (torch.randn(4, 3), torch.zeros(4, dtype=torch.long), "single class"),
        (torch.randn(4, 3), torch.arange(4), "pair"),
        (torch.randn(4, 3), torch.zeros(3, dtype=torch.long), "labels must have shape"),
        (torch.randn(4, 3), torch.zeros(4), "integers"),
        (torch.randn(4), torch.zeros(4, dtype=torch.long), r"z must be 2-D \(B, d\), got shape \(4,\)"),
        ({"z": 1}, torch.zeros(4, dtype=torch.long), "z must be a torch tensor, a numpy array or a sequence"),
        (np.array([["a", "b"]] * 4), np.zeros(4, dtype=int), "z must be a numeric array"),
        (torch.randn(4, 3), np.zeros(4), "labels must be integers"),
    ],
)
def test_label_variant_errors(z, labels, match):
    with pytest.raises(ValueError, match=match):
        weince_label_loss(z, labels)


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_label_variant_takes_numpy_arrays_and_sequences(dtype):
    # the input rule of docs/README.md#conventions: a numpy array (or a nested list) is a tensor;
    # the value is the loop reference's, as for the tensor (the issue: "must be a 2-D tensor (B,
    # d), got (12, 5)" for an array)
    rng = np.random.default_rng(12)
    labels = np.arange(12) % 3
    z = (rng.standard_normal((12, 5)) + 2.0 * rng.standard_normal((3, 5))[labels]).astype(dtype)
    ref, _ = ref_label_loss(
        torch.from_numpy(z.astype(np.float64)), torch.from_numpy(labels), gate=GateConfig()
    )
    tol = 1e-12 if dtype == np.float64 else 1e-5
    for zz, ll in ((z, labels), (z.tolist(), labels.tolist()), (z, torch.from_numpy(labels))):
        got = weince_label_loss(zz, ll)  # lists of Python floats: torch's default dtype, float32
        assert got.dtype == (
            torch.float64 if dtype == np.float64 and not isinstance(zz, list) else torch.float32
        )
        assert abs(got.item() - ref) < (1e-5 if isinstance(zz, list) else tol)
    assert torch.equal(
        weince_label_loss(z, labels), weince_label_loss(torch.from_numpy(z), torch.from_numpy(labels))
    )
