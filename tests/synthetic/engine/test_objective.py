"""Tests of synthetic/engine/objective.py: one step's R losses equal the theory losses run by run."""

from __future__ import annotations

import math

import pytest
import torch

from synthetic.engine.config import RunConfig
from synthetic.engine.data import make_data, noise_like, run_generators
from synthetic.engine.models import build_model, stack_models
from synthetic.engine.objective import step_losses
from theory.hcl import contrastive_loss
from theory.infonce import info_nce

BASE = dict(num_classes=3, n_per_class=4, encoder="mlp", input_dim=5, hidden=6, dtype="float64")


def _stack(configs):
    gens = [run_generators(c.seed) for c in configs]
    datas = [make_data(c) for c in configs]
    model = stack_models([build_model(c, generator=g["init"]) for c, g in zip(configs, gens, strict=True)])
    X = torch.stack([d.x_train for d in datas])
    Y = torch.stack([d.y_train for d in datas])
    idx = torch.arange(configs[0].num_train).repeat(len(configs), 1)
    return model, X, Y, idx


@pytest.mark.parametrize(
    "estimator, psi",
    [("expectation", "mean"), ("expectation", "sum"), ("sampled", "mean"), ("expectation", "triplet")],
)
def test_label_positives_equal_the_theory_loss_run_by_run(estimator, psi):
    configs = [
        RunConfig(**BASE, method="SCL", estimator=estimator, psi=psi, num_negatives=5),
        RunConfig(**BASE, method="HSCL", beta=3.0, estimator=estimator, psi=psi, num_negatives=5, seed=1),
        RunConfig(**BASE, method="HUCL", beta=10.0, estimator=estimator, psi=psi, num_negatives=5, seed=2),
    ]
    model, X, Y, idx = _stack(configs)
    gens = [torch.Generator().manual_seed(100 + r) for r in range(3)]
    betas = torch.tensor([c.beta for c in configs], dtype=torch.float64)
    got = step_losses(configs, model, X, Y, idx, gens, betas, y_pool=Y, pool_inputs=X)
    for r, c in enumerate(configs):
        ref = contrastive_loss(
            model.run(r, X[r]),
            Y[r],
            setting=c.setting,
            beta=c.beta,
            psi=psi,
            estimator=estimator,
            num_negatives=5,
            generator=torch.Generator().manual_seed(100 + r),
        )
        assert float(got[r].detach()) == pytest.approx(float(ref.detach()), rel=1e-12, abs=1e-14)
    # every run's parameters get exactly its own loss's gradient
    got.sum().backward()
    assert all(p.grad is not None and torch.isfinite(p.grad).all() for p in model.parameters())


def test_noise_positives_are_the_noisy_copy_and_inactive_runs_draw_nothing():
    configs = [
        RunConfig(**BASE, method="UCL", positives="noise", noise_std=0.2),
        RunConfig(**BASE, method="HSCL", beta=2.0, positives="noise", noise_std=0.2, seed=1),
    ]
    model, X, Y, idx = _stack(configs)
    gens = [torch.Generator().manual_seed(7), torch.Generator().manual_seed(8)]
    betas = torch.tensor([c.beta for c in configs], dtype=torch.float64)
    got = step_losses(configs, model, X, Y, idx, gens, betas, y_pool=Y, pool_inputs=X, active=[False, True])
    assert got.shape == (1,)
    assert torch.equal(gens[0].get_state(), torch.Generator().manual_seed(7).get_state())  # drew nothing
    B = idx.shape[1]
    noise = noise_like((B, 5), 0.2, generator=torch.Generator().manual_seed(8), dtype=torch.float64)
    z = torch.cat([model.run(1, X[1]), model.run(1, X[1], noise)])
    ref = contrastive_loss(
        z,
        torch.cat([Y[1], Y[1]]),
        setting="supervised",
        beta=2.0,
        positive_groups=torch.arange(B).repeat(2),
        self_positive=False,
    )
    assert float(got[0].detach()) == pytest.approx(float(ref.detach()), rel=1e-12)


def test_two_view_methods_call_their_loss_per_run():
    configs = [RunConfig(**BASE, method="InfoNCE", tau=0.5, positives="noise", noise_std=0.1)]
    model, X, Y, idx = _stack(configs)
    got = step_losses(
        configs, model, X, Y, idx, [torch.Generator().manual_seed(3)], torch.zeros(1), y_pool=Y, pool_inputs=X
    )
    noise = noise_like(
        (idx.shape[1], 5), 0.1, generator=torch.Generator().manual_seed(3), dtype=torch.float64
    )
    ref = info_nce(model.run(0, X[0]), model.run(0, X[0], noise), tau=0.5)
    assert float(got[0].detach()) == pytest.approx(float(ref.detach()), rel=1e-12)


def test_collapsed_embeddings_at_small_tau_and_large_beta_stay_finite():
    configs = [
        RunConfig(**{**BASE, "encoder": "free"}, method=m, beta=b, tau=0.01)
        for m, b in (("SCL", 0.0), ("HUCL", 1000.0))
    ]
    model, _, Y, idx = _stack(configs)
    with torch.no_grad():
        for p in model.parameters():
            p.zero_()
            p[..., 0] = 1.0  # every embedding identical: similarities exactly 1
    betas = torch.tensor([0.0, 1000.0], dtype=torch.float64)
    got = step_losses(configs, model, idx, Y, idx, [None, None], betas, y_pool=Y, pool_inputs=None)
    got.sum().backward()
    assert torch.isfinite(got).all() and all(torch.isfinite(p.grad).all() for p in model.parameters())
    assert float(got[1].detach()) == pytest.approx(
        math.log(2.0), rel=1e-12
    )  # log(1 + e^0): the negatives tie
