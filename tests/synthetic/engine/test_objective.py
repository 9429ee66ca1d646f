"""Tests of synthetic/engine/objective.py: the run-batched contrastive loss against theory's, run by run."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import synthetic.engine.objective as objective
from synthetic.engine.objective import batched_contrastive_loss
from theory.hcl import contrastive_loss


def _batch(torch_gen, R=4, B=14, d=5, dtype=torch.float64):
    z = torch.nn.functional.normalize(
        torch.randn(R, B, d, generator=torch_gen(0), dtype=torch.float64), dim=2
    )
    y = torch.randint(0, 3, (R, B), generator=torch_gen(1))
    return z.to(dtype).requires_grad_(), y


@pytest.mark.parametrize("setting", ["supervised", "unsupervised"])
@pytest.mark.parametrize("psi", ["mean", "sum"])
@pytest.mark.parametrize("tau", [1.0, 0.3])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_fused_expectation_matches_contrastive_loss_per_run(setting, psi, tau, dtype, torch_gen):
    z, y = _batch(torch_gen, dtype=dtype)
    beta = torch.tensor([0.0, 1.0, 5.0, 30.0], dtype=dtype)
    got = batched_contrastive_loss(z, y, beta, setting=setting, tau=tau, psi=psi, num_negatives=7)
    ref = torch.stack(
        [
            contrastive_loss(
                z[r], y[r], setting=setting, beta=float(beta[r]), tau=tau, psi=psi, num_negatives=7
            )
            for r in range(4)
        ]
    )
    tol = dict(rtol=1e-5, atol=1e-6) if dtype == torch.float32 else dict(rtol=1e-12, atol=1e-13)
    np.testing.assert_allclose(got.detach().numpy(), ref.detach().numpy(), **tol)
    w = torch.arange(1.0, 5.0, dtype=dtype)  # distinct upstream gradients per run
    (ga,) = torch.autograd.grad((got * w).sum(), z)
    (gb,) = torch.autograd.grad((ref * w).sum(), z)
    np.testing.assert_allclose(ga.numpy(), gb.numpy(), **tol)


@pytest.mark.parametrize(
    "estimator, psi", [("sampled", "mean"), ("sampled", "sum"), ("expectation", "triplet")]
)
def test_per_run_path_uses_each_runs_generator(estimator, psi, torch_gen):
    z, y = _batch(torch_gen, R=3)
    beta = torch.tensor([0.0, 2.0, 10.0], dtype=torch.float64)
    gens = [torch_gen(10 + r) for r in range(3)]
    got = batched_contrastive_loss(
        z,
        y,
        beta,
        setting="unsupervised",
        psi=psi,
        estimator=estimator,
        num_negatives=5,
        margin=0.2,
        generators=gens,
    )
    for r in range(3):
        ref = contrastive_loss(
            z[r],
            y[r],
            setting="unsupervised",
            beta=float(beta[r]),
            psi=psi,
            estimator=estimator,
            num_negatives=5,
            margin=0.2,
            generator=torch_gen(10 + r),
        )
        assert float(got[r].detach()) == pytest.approx(float(ref.detach()), rel=1e-14)
    with pytest.raises(ValueError, match="generators"):
        batched_contrastive_loss(z, y, beta, setting="unsupervised", estimator="sampled", generators=gens[:1])


def test_positive_groups_and_chunks(monkeypatch, torch_gen):
    R, B = 3, 6
    z = torch.randn(R, 2 * B, 3, generator=torch_gen(3), dtype=torch.float64, requires_grad=True)
    y0 = torch.randint(0, 2, (R, B), generator=torch_gen(4))
    y = torch.cat([y0, y0], dim=1)
    ids = torch.arange(B).repeat(R, 2)
    beta = torch.tensor([0.5, 2.0, 0.0], dtype=torch.float64)
    for setting in ("supervised", "unsupervised"):
        whole = batched_contrastive_loss(
            z, y, beta, setting=setting, positive_groups=ids, self_positive=False
        )
        for r in range(R):
            ref = contrastive_loss(
                z[r], y[r], setting=setting, beta=float(beta[r]), positive_groups=ids[r], self_positive=False
            )
            assert float(whole[r]) == pytest.approx(float(ref), rel=1e-12)
        monkeypatch.setattr(objective, "CHUNK_ELEMENTS", 1)  # one run per kernel call
        chunked = batched_contrastive_loss(
            z, y, beta, setting=setting, positive_groups=ids, self_positive=False
        )
        monkeypatch.undo()
        assert torch.equal(whole, chunked)


def test_finite_at_small_tau_large_beta_and_collapse():
    z = torch.zeros(2, 6, 3, dtype=torch.float64)
    z[..., 0] = 1.0  # every embedding identical: similarities exactly 1
    z.requires_grad_()
    y = torch.tensor([[0, 0, 1, 1, 2, 2]] * 2)
    for setting in ("supervised", "unsupervised"):
        for tau in (1.0, 0.01):
            loss = batched_contrastive_loss(
                z, y, torch.tensor([0.0, 1000.0], dtype=torch.float64), setting=setting, tau=tau
            )
            (g,) = torch.autograd.grad(loss.sum(), z)
            assert torch.isfinite(loss).all() and torch.isfinite(g).all()
            np.testing.assert_allclose(loss.detach().numpy(), np.log(2.0), rtol=1e-12)  # log(1 + e^0)


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(setting="self"), "setting"),
        (dict(setting="unsupervised", tau=0.0), "tau"),
        (dict(setting="supervised"), "single-class"),
    ],
)
def test_validation(kwargs, match):
    z = torch.randn(2, 4, 3)
    y = torch.tensor([[0, 0, 1, 1], [2, 2, 2, 2]])
    with pytest.raises(ValueError, match=match):
        batched_contrastive_loss(z, y, torch.zeros(2), **kwargs)
    with pytest.raises(ValueError, match="beta"):
        batched_contrastive_loss(z, y, torch.tensor([1.0, -1.0]), setting="unsupervised")
    with pytest.raises(ValueError, match="labels"):
        batched_contrastive_loss(z, y[:, :3], torch.zeros(2), setting="unsupervised")
