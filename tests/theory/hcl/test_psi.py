"""The psi family: apply_psi against Python loops; make_psi / random_psi admissibility."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from tests.reference import psi_ref
from theory.hcl import apply_psi, make_psi, random_psi

PSIS = ("mean", "sum", "triplet")


@pytest.mark.parametrize("psi", ["mean", "sum", "triplet"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_apply_psi_matches_loop(psi, dtype):
    t = torch.randn(4, 7, generator=torch.Generator().manual_seed(0), dtype=dtype)
    got = apply_psi(t, psi, tau=0.3, margin=0.4)
    for r in range(4):
        vals = [float(v) / 0.3 for v in t[r]]
        if psi == "mean":
            ref = math.log(1 + sum(math.exp(v) for v in vals) / 7)
        elif psi == "sum":
            ref = math.log(1 + sum(math.exp(v) for v in vals))
        else:
            ref = sum(max(0.0, v + 0.4) for v in vals) / 7
        assert float(got[r]) == pytest.approx(ref, rel=1e-6 if dtype == torch.float32 else 1e-12)
    big = apply_psi(torch.full((2, 3), 1e4, dtype=dtype), psi, tau=0.01)
    assert torch.isfinite(big).all()
    with pytest.raises(ValueError, match="psi"):
        apply_psi(t, "hinge")
    with pytest.raises(ValueError, match="tau"):
        apply_psi(t, psi, tau=0)


@pytest.mark.parametrize("psi", PSIS)
def test_make_psi_matches_loop(psi):
    rng = np.random.default_rng(0)
    for k in (1, 2, 5):
        f = make_psi(psi, k, tau=0.7, margin=0.3)
        t = rng.normal(0, 3, size=(20, k))
        got = f(t)
        ref = [psi_ref(list(row), psi, 0.7, 0.3) for row in t]
        np.testing.assert_allclose(got, ref, rtol=1e-12, atol=1e-12)


def test_make_psi_stable_for_large_arguments():
    f = make_psi("sum", 3, tau=0.01)
    assert np.isfinite(f(np.array([[100.0, -100.0, 50.0]]))).all()


def test_random_psi_admissible():
    """Random psi are coordinate-wise non-decreasing and midpoint convex."""
    rng = np.random.default_rng(1)
    for _ in range(40):
        k = int(rng.integers(1, 4))
        f = random_psi(k, rng)
        x = rng.normal(size=(200, k))
        y = rng.normal(size=(200, k))
        assert (f(x + np.abs(y)) >= f(x) - 1e-12).all()
        assert (f((x + y) / 2) <= (f(x) + f(y)) / 2 + 1e-12).all()


@pytest.mark.parametrize(
    "call,match",
    [
        (lambda: make_psi("sum", 2)(np.zeros((3, 4))), "last dimension"),
    ],
)
def test_validation(call, match):
    with pytest.raises(ValueError, match=match):
        call()
