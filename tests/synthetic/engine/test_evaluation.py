"""Tests of synthetic/engine/evaluation.py: the collision fraction and the optimum of a run."""

from __future__ import annotations

import math

import pytest
import torch

from synthetic.engine.evaluation import collision_fraction, optimum
from theory.geometry import simplex_etf
from theory.hcl import collision_probability


@pytest.mark.parametrize("beta", [0.0, 2.0, 10.0, 30.0])
def test_collision_fraction_at_an_etf_is_q_beta(beta):
    C, n = 8, 5
    y = torch.arange(C).repeat_interleave(n)
    z = simplex_etf(C, C - 1).double()[y]
    assert collision_fraction(z, y, beta) == pytest.approx(collision_probability(C, beta), rel=1e-12)


def test_collision_fraction_matches_a_loop(torch_gen):
    z = torch.nn.functional.normalize(torch.randn(23, 4, generator=torch_gen(2), dtype=torch.float64), dim=1)
    y = torch.randint(0, 3, (23,), generator=torch_gen(3))
    beta = 3.0
    ref = 0.0
    for i in range(23):
        w = [math.exp(beta * float(z[i] @ z[n])) for n in range(23)]
        ref += sum(w[n] for n in range(23) if y[n] == y[i]) / sum(w)
    assert collision_fraction(z, y, beta) == pytest.approx(ref / 23, rel=1e-12)


def test_optimum_of_a_run_is_the_closed_form():
    from synthetic.engine.config import RunConfig
    from theory.hcl import scl_optimum, ucl_optimum

    assert optimum(RunConfig(num_classes=7, tau=0.5)) == scl_optimum(7, tau=0.5)
    u = RunConfig(method="HUCL", beta=2.0, num_classes=7, estimator="sampled", num_negatives=9)
    assert optimum(u) == ucl_optimum(7, num_negatives=9)
    assert optimum(u, "expectation") == pytest.approx(
        math.log(1 + 1 / 7 + 6 / 7 * math.exp(-7 / 6)), rel=1e-14
    )
    assert math.isnan(optimum(RunConfig(method="WeiNCE", num_classes=7)))
