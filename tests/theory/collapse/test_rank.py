"""Ranks and spectra (theory.collapse.rank) against scipy and the DirectCLR recipe."""

import math

import numpy as np
import pytest
import scipy.linalg
import scipy.stats
import torch

from tests.theory.collapse.reference import LOG_FLOOR, SCALES
from theory.collapse import effective_rank, embedding_spectrum, erank_cov, rankme

# ------------------------------------------------------------------------------------------------
# Rank metrics
# ------------------------------------------------------------------------------------------------


def test_effective_rank_rankme_erank_cov_against_scipy(np_rng):
    rng = np_rng(13)
    z = rng.standard_normal((60, 8)) * np.geomspace(3.0, 0.01, 8) + 0.5
    s = scipy.linalg.svdvals(z)
    assert effective_rank(z) == pytest.approx(math.exp(scipy.stats.entropy(s)), rel=1e-12)
    p = s / s.sum() + 1e-7
    assert rankme(z) == pytest.approx(math.exp(-np.sum(p * np.log(p))), rel=1e-12)
    assert rankme(z, eps=0.0) == pytest.approx(effective_rank(z), rel=1e-12)
    lam = np.clip(np.linalg.eigvalsh(np.cov(z.T)), 0, None)
    assert erank_cov(z) == pytest.approx(math.exp(scipy.stats.entropy(lam)), rel=1e-10)
    assert abs(erank_cov(z) - rankme(z)) > 0.1  # the two definitions differ (pitfall 5)
    # diag(3, 1): p = (3/4, 1/4)
    assert effective_rank(np.diag([3.0, 1.0])) == pytest.approx(
        math.exp(-(0.75 * math.log(0.75) + 0.25 * math.log(0.25)))
    )
    # torch float32 agrees
    assert effective_rank(torch.tensor(z, dtype=torch.float32)) == pytest.approx(effective_rank(z), rel=1e-5)
    # N < d: bounded by N
    assert effective_rank(rng.standard_normal((3, 20))) <= 3 + 1e-12


def test_embedding_spectrum_matches_directclr_recipe(np_rng):
    rng = np_rng(14)
    z = rng.standard_normal((80, 6)) * np.array([2.0, 1.0, 1.0, 0.5, 0.1, 0.01])
    zn = z / np.linalg.norm(z, axis=1, keepdims=True)
    exp = np.log(np.linalg.svd(np.cov(zn.T), compute_uv=False))
    np.testing.assert_allclose(embedding_spectrum(z), exp, atol=1e-10)
    exp_raw = np.log(np.linalg.svd(np.cov(z.T), compute_uv=False))
    np.testing.assert_allclose(embedding_spectrum(torch.tensor(z), normalize=False), exp_raw, atol=1e-10)
    # collapsed to a 2-D subspace: the tail sits at the floor
    low = rng.standard_normal((50, 2)) @ rng.standard_normal((2, 6))
    spec = embedding_spectrum(low)
    assert np.all(spec[2:] == LOG_FLOOR) and np.all(spec[:2] > -10)


# ------------------------------------------------------------------------------------------------
# Scale safety (docs/metrics.md#scale)
# ------------------------------------------------------------------------------------------------


def test_ranks_of_a_huge_identity_are_its_rank():
    # the case: sigma = (1e308,) * 3, whose sum overflows
    big = 1e308 * np.eye(3)
    assert effective_rank(big) == pytest.approx(3.0, rel=1e-14)
    p = 1 / 3 + 1e-7
    assert rankme(big) == pytest.approx(math.exp(-3 * p * math.log(p)), rel=1e-14)


@pytest.mark.parametrize("scale", SCALES)
def test_ranks_and_spectra_at_any_scale(scale, np_rng):
    rng = np_rng(15)
    z = rng.standard_normal((40, 5)) * np.array([2.0, 1.0, 0.5, 0.1, 0.01]) + 0.3
    s = scipy.linalg.svdvals(z)  # of the unscaled z: the scale-invariant closed forms
    zs = z * scale
    assert effective_rank(zs) == pytest.approx(math.exp(scipy.stats.entropy(s)), rel=1e-12)
    p = s / s.sum() + 1e-7
    assert rankme(zs) == pytest.approx(math.exp(-np.sum(p * np.log(p))), rel=1e-12)
    lam = np.clip(np.linalg.eigvalsh(np.cov(z.T)), 0, None)
    assert erank_cov(zs) == pytest.approx(math.exp(scipy.stats.entropy(lam)), rel=1e-10)
    zn = z / np.linalg.norm(z, axis=1, keepdims=True)
    exp = np.log(np.linalg.svd(np.cov(zn.T), compute_uv=False))
    np.testing.assert_allclose(embedding_spectrum(zs), exp, atol=1e-10)


def test_absolute_embedding_spectrum_beyond_float64_raises_naming_z(np_rng):
    z = np_rng(16).standard_normal((20, 3)) * 1e200
    with pytest.raises(ValueError, match="^z: the embedding spectrum overflows float64"):
        embedding_spectrum(z, normalize=False)
    # tiny z: variances near 1e-200 (computed without underflow) sit below the absolute floor
    np.testing.assert_array_equal(embedding_spectrum(z * 1e-300, normalize=False), np.full(3, LOG_FLOOR))
