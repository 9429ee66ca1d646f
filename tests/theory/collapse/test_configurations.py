"""Every collapse metric on configurations with known values: the exact simplex ETF (docs/metrics.md),
scaled and shifted ETFs, antipodal classes, rank-r class means, total collapse."""

import math

import numpy as np
import pytest
import torch

from tests.theory.collapse.reference import LOG_FLOOR, _collapsed, ref_class_means
from theory.collapse import (
    between_class_covariance,
    class_mean_spectrum,
    class_means,
    effective_rank,
    erank_cov,
    etf_error,
    nc1,
    nc1_cdnv,
    nc2_equiangularity,
    nc2_equinorm,
    nc2_max_angle,
    paper_conditions,
    rankme,
    within_class_covariance,
    within_class_variation,
)
from theory.geometry import simplex_etf

# ------------------------------------------------------------------------------------------------
# Exact simplex ETF: docs/metrics.md
# ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("C,extra", [(2, 0), (4, 0), (10, 0), (10, 5), (100, 0), (100, 3)])
def test_exact_etf_all_conditions_vanish(C, extra):
    d = C - 1 + extra
    mu = simplex_etf(C, d, generator=torch.Generator().manual_seed(C + extra))  # random rotation
    for m in (mu, mu.numpy()):
        cond = paper_conditions(m)
        assert set(cond) == {"unit_norm", "zero_sum", "etf_mean", "etf_max"}
        assert all(isinstance(v, float) for v in cond.values())
        assert max(cond.values()) < 1e-10, cond
    assert etf_error(mu) < 1e-10
    assert nc2_equinorm(mu) < 1e-10
    assert nc2_equiangularity(mu) < 1e-10
    assert nc2_max_angle(mu) < 1e-10

    spec = class_mean_spectrum(mu)
    assert isinstance(spec, np.ndarray) and spec.shape == (d,) and spec.dtype == np.float64
    np.testing.assert_allclose(spec[: C - 1], 0.0, atol=1e-10)
    np.testing.assert_array_equal(spec[C - 1 :], LOG_FLOOR)
    sigma = class_mean_spectrum(mu, relative=False)
    np.testing.assert_allclose(sigma[: C - 1], C / (C - 1) ** 2, rtol=1e-10)
    assert np.all(np.abs(sigma[C - 1 :]) < 1e-25)

    # every sample collapsed onto its class vertex
    reps = 3
    z, labels = _collapsed(mu, reps)
    assert nc1(z, labels) < 1e-10
    assert nc1_cdnv(z, labels) < 1e-10
    assert within_class_variation(z, labels) < 1e-10
    torch.testing.assert_close(class_means(z, labels), mu, atol=1e-14, rtol=0)
    # singular values of M all sqrt(C/(C-1)) -> erank(M) = C - 1; the same for stacked Z
    assert effective_rank(mu) == pytest.approx(C - 1, abs=1e-9)
    assert effective_rank(z) == pytest.approx(C - 1, abs=1e-9)
    assert erank_cov(z) == pytest.approx(C - 1, abs=1e-9)
    # RankMe = C - 1 up to the eps terms: closed form with p = 1/(C-1) + eps, and eps for zeros
    eps = 1e-7
    q = min(z.shape)
    p = np.array([1 / (C - 1) + eps] * (C - 1) + [eps] * (q - (C - 1)))
    expected = math.exp(-np.sum(p * np.log(p)))
    assert rankme(z) == pytest.approx(expected, abs=1e-6)
    assert abs(rankme(z) - (C - 1)) < 1e-3 * C


def test_etf_spec_reference_values():
    # docs/metrics.md: sigma_i = C/(C-1)^2 = 0.1234568 (C = 10), 0.0102030 (C = 100)
    for C, value in ((10, 0.1234568), (100, 0.0102030)):
        sigma = class_mean_spectrum(simplex_etf(C, C - 1), relative=False)
        np.testing.assert_allclose(sigma, value, atol=5e-8)


def test_etf_float32_and_half_inputs():
    mu64 = simplex_etf(10, 12, generator=torch.Generator().manual_seed(1))
    for dtype, tol in ((torch.float32, 1e-6), (torch.float16, 2e-3), (torch.bfloat16, 2e-2)):
        mu = mu64.to(dtype)
        assert max(paper_conditions(mu).values()) < tol
        assert etf_error(mu) < tol
        z, labels = _collapsed(mu, 2)
        assert within_class_variation(z, labels) < tol
        m = class_means(z, labels)
        assert m.dtype == (torch.float32 if dtype != torch.float32 else dtype)
        np.testing.assert_allclose(class_mean_spectrum(mu)[:9], 0.0, atol=10 * tol)


def test_scaled_and_shifted_etf_paper_vs_standard():
    """Pitfall 2: a shifted ETF is perfect for standard NC2 but fails the paper's zero-sum."""
    C, d = 5, 7
    mu = simplex_etf(C, d, generator=torch.Generator().manual_seed(3))
    shift = torch.linspace(-0.3, 0.5, d, dtype=torch.float64)
    scaled = 0.6 * mu
    cond = paper_conditions(scaled)
    assert cond["unit_norm"] == pytest.approx(0.4, abs=1e-12)
    assert cond["zero_sum"] < 1e-12 and cond["etf_mean"] < 1e-12 and cond["etf_max"] < 1e-12
    np.testing.assert_allclose(class_mean_spectrum(scaled)[: C - 1], 0.0, atol=1e-10)

    shifted = mu + shift
    cond = paper_conditions(shifted)
    assert cond["zero_sum"] == pytest.approx(float(shift.norm()), rel=1e-12)
    assert cond["etf_mean"] > 1e-2
    assert etf_error(shifted) < 1e-10
    assert nc2_equinorm(shifted) < 1e-10
    assert nc2_equiangularity(shifted) < 1e-10
    assert nc2_max_angle(shifted) < 1e-10
    # the spectrum is translation invariant
    np.testing.assert_allclose(class_mean_spectrum(shifted), class_mean_spectrum(mu), atol=1e-10)


# ------------------------------------------------------------------------------------------------
# Hand-built configurations with known values
# ------------------------------------------------------------------------------------------------


def test_two_antipodal_classes():
    mu = np.array([[1.0, 0.0, 0.0], [-1.0, 0.0, 0.0]])
    assert max(paper_conditions(mu).values()) < 1e-15  # C = 2: cos = -1 = -1/(C-1)
    sigma = class_mean_spectrum(mu, relative=False)
    np.testing.assert_allclose(sigma, [2.0, 0.0, 0.0], atol=1e-15)  # C/(C-1)^2 = 2
    np.testing.assert_allclose(class_mean_spectrum(mu), [0.0, LOG_FLOOR, LOG_FLOOR])
    assert np.all(np.isneginf(class_mean_spectrum(mu, floor=0.0)[1:]))
    assert etf_error(mu) < 1e-15
    assert effective_rank(mu) == pytest.approx(1.0)
    # samples spread along the separating axis: within-class distance and NC1 in closed form
    z = np.array([[1.5, 0, 0], [0.5, 0, 0], [-1.5, 0, 0], [-0.5, 0, 0]])
    labels = np.array([0, 0, 1, 1])
    assert within_class_variation(z, labels) == pytest.approx(0.5)
    # Sigma_W = diag(0.25, 0, 0), Sigma_B = diag(1, 0, 0) -> NC1 = 0.25 / 2
    assert nc1(z, labels) == pytest.approx(0.125, rel=1e-12)
    # CDNV = (0.25 + 0.25) / (2 * 4)
    assert nc1_cdnv(z, labels) == pytest.approx(0.0625, rel=1e-12)


def test_classes_on_a_line_have_one_nonzero_singular_value(np_rng):
    rng = np_rng(0)
    u = rng.standard_normal(6)
    offset = rng.standard_normal(6)
    C = 5
    mu = offset + np.arange(C)[:, None] * u  # collinear class means
    sigma = class_mean_spectrum(mu, relative=False)
    assert sigma[0] == pytest.approx(np.var(np.arange(C), ddof=1) * u @ u, rel=1e-12)
    assert np.all(sigma[1:] < 1e-25 * sigma[0])
    spec = class_mean_spectrum(mu)
    assert spec[0] == 0.0 and np.all(spec[1:] == LOG_FLOOR)
    # NC1 keeps only the one direction Sigma_B spans: (u^T Sigma_W u / ||u||^2) / lambda / C
    labels = np.tile(np.arange(C), 30)
    noise = 0.1 * rng.standard_normal((labels.size, 6))
    noise -= ref_class_means(noise, labels, C)[labels]  # zero-mean noise per class
    z = mu[labels] + noise  # class means exactly on the line, spread in every direction
    v1 = nc1(z, labels)
    sw = within_class_covariance(z, labels).numpy()
    sb = between_class_covariance(z, labels).numpy()
    lam, vec = np.linalg.eigh(sb)
    direction = vec[:, -1]
    assert np.allclose(abs(direction @ u) / np.linalg.norm(u), 1.0, atol=1e-6)
    assert v1 == pytest.approx(direction @ sw @ direction / lam[-1] / C, rel=1e-6)
    assert v1 >= 0


@pytest.mark.parametrize("r", [1, 2, 4])
def test_rank_r_configuration(r, np_rng):
    rng = np_rng(r)
    C, d = 8, 10
    mu = rng.standard_normal((C, r)) @ rng.standard_normal((r, d)) + rng.standard_normal(d)
    sigma = class_mean_spectrum(mu, relative=False)
    assert np.all(sigma[:r] > 1e-3) and np.all(sigma[r:] < 1e-25 * sigma[0])
    spec = class_mean_spectrum(mu)
    assert np.all(spec[:r] > -20) and np.all(spec[r:] == LOG_FLOOR)
    centred = mu - mu.mean(axis=0)
    assert effective_rank(centred) <= r + 1e-9
    assert erank_cov(mu) <= r + 1e-9


def test_total_collapse_to_one_point():
    mu = np.tile(np.array([[0.3, -0.2, 0.1]]), (4, 1))
    np.testing.assert_array_equal(class_mean_spectrum(mu), LOG_FLOOR)
    np.testing.assert_array_equal(class_mean_spectrum(mu, relative=False), 0.0)
    z = np.concatenate([mu, mu + 0.01])
    labels = np.array([0, 1, 2, 3, 0, 1, 2, 3])
    with pytest.raises(ValueError, match="coincide"):  # Sigma_B = 0: NC1 undefined
        nc1(z, labels)
    assert nc1_cdnv(z, labels) == math.inf
    assert effective_rank(np.zeros((3, 4))) == 0.0
    assert erank_cov(np.zeros((3, 4))) == 0.0
    with pytest.raises(ValueError, match="mu"):
        etf_error(mu)
    with pytest.raises(ValueError, match="mu"):
        nc2_equinorm(mu)
