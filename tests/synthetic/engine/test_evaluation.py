"""Tests of synthetic/engine/evaluation.py: numerical ranks, spectrum columns, collision fraction."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from synthetic.engine.evaluation import (
    collapse_metrics,
    collision_fraction,
    numerical_ranks,
    spectrum_columns,
)
from theory.geometry import simplex_etf
from theory.hcl import collision_probability


def test_numerical_ranks_at_an_etf_and_in_a_subspace(torch_gen):
    C = 12
    etf = simplex_etf(C, C - 1).double()
    assert numerical_ranks(etf) == [C - 1, C - 1]
    # class means in a 3-dimensional subspace, plus directions at 1e-3 and 1e-6 of the largest
    basis = torch.linalg.qr(torch.randn(C - 1, C - 1, generator=torch_gen(0), dtype=torch.float64))[0]
    coef = torch.randn(C, C - 1, generator=torch_gen(1), dtype=torch.float64)
    coef[:, 3:6] *= 1e-3
    coef[:, 6:] *= 1e-6
    mu = coef @ basis.T
    s = torch.linalg.svdvals(mu - mu.mean(0))
    ref = [int((s / s[0] > t).sum()) for t in (1e-2, 1e-4)]
    assert numerical_ranks(mu) == ref == [3, 6]
    assert numerical_ranks(torch.ones(C, 4)) == [0, 0]


def test_spectrum_columns_are_the_authors_curve():
    C = 6
    etf = simplex_etf(C, C - 1).double()
    cols = spectrum_columns(etf)
    assert list(cols) == [f"spectrum_{i}" for i in range(C - 1)]
    np.testing.assert_allclose(list(cols.values()), 0.0, atol=1e-12)
    mu = torch.diag(torch.tensor([3.0, 2.0, 1.0, 0.0], dtype=torch.float64))[:, :3]
    cov = np.cov(mu.numpy().T)
    ev = np.sort(np.linalg.eigvalsh(cov))[::-1]
    got = spectrum_columns(mu)
    np.testing.assert_allclose(list(got.values()), np.log(np.maximum(ev / ev[0], 1e-30)), atol=1e-12)


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


def test_collapse_metrics_carry_ranks_and_spectrum():
    C = 5
    y = torch.arange(C).repeat_interleave(4)
    z = simplex_etf(C, C - 1)[y]
    m, mu = collapse_metrics(z, y, C)
    assert m["rank_1e-2"] == m["rank_1e-4"] == C - 1 and m["spectrum_min"] == m[f"spectrum_{C - 2}"]
    assert m["etf_mean"] < 1e-6 and mu.shape == (C, C - 1)
