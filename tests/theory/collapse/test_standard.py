"""The standard NC1 / NC2 metrics (theory.collapse.standard) against pseudo-inverse and loop references."""

import math

import numpy as np
import pytest
import torch

from tests.theory.collapse.reference import SCALES, _noisy_classes, ref_class_means, ref_nc1_pinv
from theory.collapse import (
    between_class_covariance,
    etf_error,
    nc1,
    nc1_cdnv,
    nc2_equiangularity,
    nc2_equinorm,
    nc2_max_angle,
    within_class_covariance,
)


@pytest.mark.parametrize("C,d", [(5, 4), (4, 8), (3, 2)])
@pytest.mark.parametrize("unbalanced", [False, True])
def test_nc1_matches_pinv_reference(C, d, unbalanced, np_rng):
    rng = np_rng(C * 10 + d)
    z, labels = _noisy_classes(rng, C, d, 20, unbalanced=unbalanced)
    v1, v2, sw, sb = ref_nc1_pinv(z, labels, C)
    got = nc1(z, labels)
    assert got == pytest.approx(v1, rel=1e-9) and got == pytest.approx(v2, rel=1e-9)
    np.testing.assert_allclose(within_class_covariance(z, labels).numpy(), sw, atol=1e-12)
    np.testing.assert_allclose(between_class_covariance(z, labels).numpy(), sb, atol=1e-12)
    # with no relative cut-off, the restriction to the top C - 1 eigenpairs alone keeps it exact
    # (Sigma_B has d - C + 1 round-off eigenvalues near 1e-17 that a plain inverse would divide by)
    assert nc1(z, labels, rtol=0.0) == pytest.approx(v1, rel=1e-9)
    # float32 input agrees (statistics in float64)
    assert nc1(torch.tensor(z, dtype=torch.float32), labels) == pytest.approx(v1, rel=1e-5)


def test_nc1_never_negative_on_degenerate_inputs(np_rng):
    rng = np_rng(5)
    for trial in range(20):
        C = int(rng.integers(2, 12))
        d = int(rng.integers(1, 6))  # often d < C - 1: Sigma_B rank-deficient
        n_per = int(rng.integers(1, 4))
        noise = 10.0 ** rng.uniform(-12, 0)
        z, labels = _noisy_classes(rng, C, d, n_per, noise=noise)
        if trial % 3 == 0:  # nearly coincident means
            z = z * 1e-9 + 1.0
        v = nc1(z, labels)
        assert v >= 0 and not math.isnan(v)


def test_nc1_cdnv_matches_loop(np_rng):
    rng = np_rng(7)
    C, d = 4, 3
    z, labels = _noisy_classes(rng, C, d, 10, unbalanced=True)
    mu = ref_class_means(z, labels, C)
    var = [np.mean([np.sum((z[i] - mu[c]) ** 2) for i in range(len(z)) if labels[i] == c]) for c in range(C)]
    vals = [(var[a] + var[b]) / (2 * np.sum((mu[a] - mu[b]) ** 2)) for a in range(C) for b in range(a + 1, C)]
    assert nc1_cdnv(z, labels) == pytest.approx(np.mean(vals), rel=1e-12)


def test_nc2_and_etf_error_match_loops(np_rng):
    rng = np_rng(8)
    C, d = 6, 4
    z, labels = _noisy_classes(rng, C, d, 5, unbalanced=True)
    mu = ref_class_means(z, labels, C)
    for g, kwargs in ((mu.mean(axis=0), {}), (z.mean(axis=0), {"global_mean": torch.tensor(z.mean(axis=0))})):
        c = mu - g
        norms = np.array([math.sqrt(sum(x * x for x in row)) for row in c])
        assert nc2_equinorm(mu, **kwargs) == pytest.approx(np.std(norms, ddof=1) / np.mean(norms), rel=1e-12)
        cos = [c[a] @ c[b] / (norms[a] * norms[b]) for a in range(C) for b in range(C) if a != b]
        assert nc2_equiangularity(mu, **kwargs) == pytest.approx(np.std(cos, ddof=1), rel=1e-12)
        assert nc2_max_angle(mu, **kwargs) == pytest.approx(
            np.mean(np.abs(np.array(cos) + 1 / (C - 1))), rel=1e-12
        )
        gram = c @ c.T
        target = (np.eye(C) - np.ones((C, C)) / C) / math.sqrt(C - 1)
        exp = np.linalg.norm(gram / np.linalg.norm(gram, "fro") - target, "fro")
        assert etf_error(mu, **kwargs) == pytest.approx(exp, rel=1e-12)
    # the two global means differ for unbalanced classes, and so do the metrics
    assert etf_error(mu) != pytest.approx(etf_error(mu, global_mean=z.mean(axis=0)), rel=1e-6)


# ------------------------------------------------------------------------------------------------
# Scale safety (docs/metrics.md#scale)
# ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("scale", SCALES)
def test_standard_metrics_at_any_scale(scale, np_rng):
    rng = np_rng(9)
    C, d = 4, 3
    z, labels = _noisy_classes(rng, C, d, 10, unbalanced=True)
    zs = z * scale
    v1, _, _, _ = ref_nc1_pinv(z, labels, C)  # of the unscaled z
    assert nc1(zs, labels) == pytest.approx(v1, rel=1e-9)
    mu = ref_class_means(z, labels, C)
    var = [np.mean([np.sum((z[i] - mu[c]) ** 2) for i in range(len(z)) if labels[i] == c]) for c in range(C)]
    vals = [(var[a] + var[b]) / (2 * np.sum((mu[a] - mu[b]) ** 2)) for a in range(C) for b in range(a + 1, C)]
    assert nc1_cdnv(zs, labels) == pytest.approx(np.mean(vals), rel=1e-12)
    mus = mu * scale
    c = mu - mu.mean(axis=0)
    norms = np.sqrt((c * c).sum(axis=1))
    assert nc2_equinorm(mus) == pytest.approx(np.std(norms, ddof=1) / np.mean(norms), rel=1e-12)
    cos = [c[a] @ c[b] / (norms[a] * norms[b]) for a in range(C) for b in range(C) if a != b]
    assert nc2_equiangularity(mus) == pytest.approx(np.std(cos, ddof=1), rel=1e-12)
    assert nc2_max_angle(mus) == pytest.approx(np.mean(np.abs(np.array(cos) + 1 / (C - 1))), rel=1e-12)
    gram = c @ c.T
    target = (np.eye(C) - np.ones((C, C)) / C) / math.sqrt(C - 1)
    exp = np.linalg.norm(gram / np.linalg.norm(gram, "fro") - target, "fro")
    assert etf_error(mus) == pytest.approx(exp, rel=1e-12)
    assert etf_error(mus, global_mean=z.mean(axis=0) * scale) == pytest.approx(
        etf_error(mu, global_mean=z.mean(axis=0)), rel=1e-12
    )
    # the covariances scale by scale^2 (below 1e-320 their correctly rounded value is 0): a
    # ValueError naming z where they overflow, never inf or NaN
    if scale > 1:
        for cov in (within_class_covariance, between_class_covariance):
            with pytest.raises(ValueError, match="^z: Sigma_[WB] overflows float64"):
                cov(zs, labels)
    else:
        assert (
            not within_class_covariance(zs, labels).any() and not between_class_covariance(zs, labels).any()
        )


def test_covariances_are_formed_without_overflowing_sums(np_rng):
    # entries near 5e153: Sigma_W and Sigma_B (below 1e308) are representable, the scatter
    # sum_i r_i r_i^T (N times Sigma_W) is not
    z, labels = _noisy_classes(np_rng(10), 3, 2, 200)
    z = z / np.abs(z).max() * 0.7
    _, _, sw, sb = ref_nc1_pinv(z, labels, 3)
    scale = 2.0**511
    assert float(np.abs(sw).max()) * scale * scale * len(z) > 1.79e308  # the scatter overflows
    assert float(np.abs(sb).max()) * scale * scale * 3 < 1.7e308  # C Sigma_B does not
    np.testing.assert_allclose(within_class_covariance(z * scale, labels).numpy() / scale**2, sw, rtol=1e-12)
    np.testing.assert_allclose(between_class_covariance(z * scale, labels).numpy() / scale**2, sb, rtol=1e-12)


def test_nc1_of_tiny_features_is_defined():
    # the case: at z * 1e-200 every product of two entries underflows
    z = np.array([[1.0, 0.0], [1.2, 0.1], [0.0, 1.0], [0.1, 1.3], [-1.0, -1.0], [-1.1, -0.8]])
    labels = [0, 0, 1, 1, 2, 2]
    v1, v2, _, _ = ref_nc1_pinv(z, np.array(labels), 3)
    assert nc1(z * 1e-200, labels) == pytest.approx(v1, rel=1e-9)
    assert nc1(z * 1e200, labels) == pytest.approx(v2, rel=1e-9)
