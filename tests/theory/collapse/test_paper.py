"""The "paper" metrics (theory.collapse.paper) against slow Python loops and numpy."""

import numpy as np
import pytest
import torch

from tests.theory.collapse.reference import (
    SCALES,
    _noisy_classes,
    ref_class_means,
    ref_ncm,
    ref_paper_conditions,
    ref_within_class_variation,
)
from theory.collapse import (
    class_mean_spectrum,
    class_means,
    ncm_accuracy,
    paper_conditions,
    within_class_variation,
)
from theory.geometry import simplex_etf

# ------------------------------------------------------------------------------------------------
# Random data against loop references
# ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("seed", [0, 1])
def test_paper_conditions_match_loop(dtype, seed, np_rng):
    rng = np_rng(seed)
    mu = (rng.standard_normal((7, 5)) * 0.4).astype(dtype)
    got = paper_conditions(mu)
    exp = ref_paper_conditions(mu.astype(np.float64).tolist())
    for key in exp:
        assert got[key] == pytest.approx(exp[key], rel=1e-12, abs=1e-15)
    got_t = paper_conditions(torch.from_numpy(mu))
    assert got_t == got


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("unbalanced", [False, True])
def test_class_means_and_within_class_variation_match_loop(dtype, unbalanced, np_rng):
    rng = np_rng(2)
    C, d = 4, 3
    z, labels = _noisy_classes(rng, C, d, 9, unbalanced=unbalanced)
    z = z.astype(dtype)
    z64 = z.astype(np.float64)
    m = class_means(z, labels)
    assert isinstance(m, np.ndarray) and m.dtype == dtype and m.shape == (C, d)
    np.testing.assert_allclose(
        m, ref_class_means(z64, labels, C), rtol=1e-6 if dtype == np.float32 else 1e-13
    )
    mt = class_means(torch.from_numpy(z), torch.from_numpy(labels))
    assert isinstance(mt, torch.Tensor) and mt.dtype == torch.from_numpy(z).dtype
    exp = ref_within_class_variation(z64.tolist(), labels.tolist(), C)
    assert within_class_variation(z, labels) == pytest.approx(exp, rel=1e-12)
    assert within_class_variation(torch.from_numpy(z), labels.tolist()) == pytest.approx(exp, rel=1e-12)


def test_class_mean_spectrum_matches_numpy_cov_svd(np_rng):
    """Same as the authors' recipe svd(np.cov(mu.T)) on a well-conditioned case."""
    rng = np_rng(9)
    for C, d in ((6, 5), (10, 9), (5, 8)):
        mu = rng.standard_normal((C, d))
        s = np.linalg.svd(np.cov(mu.T), compute_uv=False)
        k = min(C - 1, d)
        np.testing.assert_allclose(class_mean_spectrum(mu, relative=False)[:k], s[:k], rtol=1e-10)
        np.testing.assert_allclose(class_mean_spectrum(mu)[:k], np.log(s[:k] / s[0]), atol=1e-10)
        assert np.all(np.diff(class_mean_spectrum(mu)) <= 0)


# ------------------------------------------------------------------------------------------------
# NCM accuracy
# ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("similarity", ["dot", "euclidean"])
@pytest.mark.parametrize("k", [1, 3])
def test_ncm_matches_loop(similarity, k, np_rng):
    rng = np_rng(11)
    C, d = 5, 3
    tr_z, tr_y = _noisy_classes(rng, C, d, 8, scale=1.0, noise=1.0, unbalanced=True)
    te_z, te_y = _noisy_classes(rng, C, d, 6, scale=1.0, noise=1.0)
    exp = ref_ncm(tr_z, tr_y, te_z, te_y, C, similarity, k)
    assert 0.0 < exp < 1.0
    got = ncm_accuracy(tr_z, tr_y, te_z, te_y, similarity=similarity, top_k=k)
    assert got == pytest.approx(exp, abs=1e-15)
    got32 = ncm_accuracy(
        torch.tensor(tr_z, dtype=torch.float32),
        tr_y,
        torch.tensor(te_z, dtype=torch.float32),
        te_y,
        similarity=similarity,
        top_k=k,
    )
    assert abs(got32 - exp) <= 2 / len(te_y)
    assert ncm_accuracy(tr_z, tr_y, te_z, te_y, similarity=similarity, top_k=C) == 1.0


def test_ncm_separable_toy_data(np_rng):
    rng = np_rng(12)
    C, d = 10, 12
    mu = simplex_etf(C, d, generator=torch.Generator().manual_seed(0)).numpy()
    tr_y = np.repeat(np.arange(C), 20)
    te_y = np.tile(np.arange(C), 7)
    tr_z = mu[tr_y] + 0.05 * rng.standard_normal((tr_y.size, d))
    te_z = mu[te_y] + 0.05 * rng.standard_normal((te_y.size, d))
    for sim in ("dot", "euclidean"):
        assert ncm_accuracy(tr_z, tr_y, te_z, te_y, similarity=sim) == 1.0
    # chance-level when test labels are permuted relative to the features
    wrong = (te_y + 1) % C
    assert ncm_accuracy(tr_z, tr_y, te_z, wrong) == 0.0


def test_ncm_dot_uses_unnormalised_means_and_ties_go_to_lower_index():
    tr_z = np.array([[10.0, 0.0], [0.0, 1.0]])
    tr_y = np.array([0, 1])
    x = np.array([[0.5, 1.0]])
    assert ncm_accuracy(tr_z, tr_y, x, [0], similarity="dot") == 1.0  # 5 > 1
    assert ncm_accuracy(tr_z, tr_y, x, [1], similarity="euclidean") == 1.0  # closer to (0, 1)
    tie = np.array([[1.0, 10.0]])  # dot: 10 vs 10
    assert ncm_accuracy(tr_z, tr_y, tie, [0]) == 1.0
    assert ncm_accuracy(tr_z, tr_y, tie, [1]) == 0.0
    assert ncm_accuracy(tr_z, tr_y, tie, [1], top_k=2) == 1.0


# ------------------------------------------------------------------------------------------------
# Scale safety (docs/metrics.md#scale)
# ------------------------------------------------------------------------------------------------


def test_paper_conditions_of_a_huge_etf():
    # the case: cosines of 1e160 * ETF are those of the ETF; norms 1e160 (not inf)
    etf = simplex_etf(4, 3, dtype=torch.float64)
    got = paper_conditions(etf * 1e160)
    assert got["etf_mean"] < 1e-15 and got["etf_max"] < 1e-15
    assert got["unit_norm"] == pytest.approx(1e160 - 1, rel=1e-15)
    assert got["zero_sum"] < 1e160 * 1e-15  # 0 up to the round-off of the ETF itself


@pytest.mark.parametrize("scale", SCALES)
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_paper_metrics_at_any_scale(scale, dtype, np_rng):
    rng = np_rng(21)
    C, d = 4, 3
    z, labels = _noisy_classes(rng, C, d, 9)
    if dtype == np.float32:  # the float32 range: 2^+-120 keeps every entry a normal float32
        scale = 2.0 ** (120 if scale > 1 else -120)
    z = z.astype(dtype).astype(np.float64)  # the exact values the metric sees
    zs = (z * scale).astype(dtype)
    mu = ref_class_means(z, labels, C)
    exp = ref_paper_conditions(mu.tolist())
    got = paper_conditions(ref_class_means(zs.astype(np.float64), labels, C))
    for key in ("etf_mean", "etf_max"):
        assert got[key] == pytest.approx(exp[key], rel=1e-12)
    norms = [float(np.sqrt(np.sum(m * m))) for m in mu]
    assert got["unit_norm"] == pytest.approx(sum(abs(n * scale - 1) for n in norms) / C, rel=1e-12)
    assert got["zero_sum"] == pytest.approx(exp["zero_sum"] * scale, rel=1e-12)
    wcv = ref_within_class_variation(z.tolist(), labels.tolist(), C)
    assert within_class_variation(zs, labels) == pytest.approx(wcv * scale, rel=1e-12)
    np.testing.assert_allclose(
        class_mean_spectrum(ref_class_means(zs.astype(np.float64), labels, C)),
        class_mean_spectrum(mu),
        atol=1e-12,
    )
    np.testing.assert_allclose(
        class_means(zs, labels).astype(np.float64) / scale, mu, rtol=1e-6 if dtype == np.float32 else 1e-13
    )
    for sim in ("dot", "euclidean"):
        assert ncm_accuracy(zs, labels, zs[::2], labels[::2], similarity=sim) == pytest.approx(
            ref_ncm(z, labels, z[::2], labels[::2], C, sim, 1)
        )


def test_scale_dependent_values_beyond_float64_raise_naming_mu_or_z():
    mu = np.array([[1.0, 0.0], [0.0, 1.0], [-1.0, -1.0]]) * 1e200
    with pytest.raises(ValueError, match="^mu: .*overflows float64"):
        class_mean_spectrum(mu, relative=False)  # sigma ~ 1e400
    np.testing.assert_allclose(class_mean_spectrum(mu), class_mean_spectrum(mu / 1e200), atol=1e-12)
    with pytest.raises(ValueError, match="^mu: .*overflows float64"):
        paper_conditions(np.full((3, 4), 1.5e308))  # ||mu_c|| = 3e308
    z = np.array([[1.5e308, 1.5e308], [-1.5e308, -1.5e308]])  # distances 2.1e308 to the mean 0
    with pytest.raises(ValueError, match="^z: within_class_variation overflows float64"):
        within_class_variation(z, [0, 0])
    assert within_class_variation(z / 2, [0, 0]) == pytest.approx(0.75e308 * 2**0.5, rel=1e-15)
