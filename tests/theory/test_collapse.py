"""Tests of theory/collapse.py against closed forms (spec/metrics.md §7), hand-built
configurations, slow Python-loop references and independent numpy/scipy computations."""

import math

import numpy as np
import pytest
import scipy.linalg
import scipy.stats
import torch

from theory.collapse import (
    SPECTRUM_FLOOR,
    ClassStatsAccumulator,
    between_class_covariance,
    class_mean_spectrum,
    class_means,
    effective_rank,
    embedding_spectrum,
    erank_cov,
    etf_error,
    nc1,
    nc1_cdnv,
    nc2_equiangularity,
    nc2_equinorm,
    nc2_max_angle,
    ncm_accuracy,
    paper_conditions,
    rankme,
    within_class_covariance,
    within_class_variation,
)
from theory.geometry import simplex_etf

LOG_FLOOR = math.log(SPECTRUM_FLOOR)


def _rng(seed):
    return np.random.default_rng(seed)


def _random_rotation(d, rng):
    q, r = np.linalg.qr(rng.standard_normal((d, d)))
    return q * np.sign(np.diag(r))


def _collapsed(mu, reps):
    """Every class mean repeated ``reps`` times, labels interleaved (balanced, collapsed)."""
    C = mu.shape[0]
    z = mu.repeat(reps, 1) if isinstance(mu, torch.Tensor) else np.tile(mu, (reps, 1))
    labels = np.tile(np.arange(C), reps)
    return z, labels


def _noisy_classes(rng, C, d, n_per, scale=3.0, noise=1.0, unbalanced=False):
    centres = rng.standard_normal((C, d)) * scale
    counts = [n_per + (7 * c if unbalanced else 0) for c in range(C)]
    labels = np.concatenate([np.full(n, c) for c, n in enumerate(counts)])
    z = centres[labels] + noise * rng.standard_normal((labels.size, d))
    perm = rng.permutation(labels.size)
    return z[perm], labels[perm]


# ------------------------------------------------------------------------------------------------
# Slow, obviously-correct references (Python loops)
# ------------------------------------------------------------------------------------------------


def ref_class_means(z, labels, C):
    out = []
    for c in range(C):
        rows = [z[i] for i in range(len(labels)) if labels[i] == c]
        out.append(np.sum(rows, axis=0) / len(rows))
    return np.array(out)


def ref_paper_conditions(mu):
    C = len(mu)
    norms = [math.sqrt(sum(x * x for x in m)) for m in mu]
    unit = sum(abs(n - 1) for n in norms) / C
    mean = [sum(mu[c][k] for c in range(C)) / C for k in range(len(mu[0]))]
    zero = math.sqrt(sum(x * x for x in mean))
    devs = []
    for a in range(C):
        for b in range(C):
            if a != b:
                cos = sum(x * y for x, y in zip(mu[a], mu[b])) / (norms[a] * norms[b])
                devs.append(abs(cos + 1 / (C - 1)))
    return {"unit_norm": unit, "zero_sum": zero, "etf_mean": sum(devs) / len(devs), "etf_max": max(devs)}


def ref_within_class_variation(z, labels, C):
    total = 0.0
    for c in range(C):
        rows = [z[i] for i in range(len(labels)) if labels[i] == c]
        m = np.sum(rows, axis=0) / len(rows)
        total += sum(math.sqrt(sum((a - b) ** 2 for a, b in zip(r, m))) for r in rows) / len(rows)
    return total / C


def ref_nc1_pinv(z, labels, C):
    """tr(Sigma_W pinv(Sigma_B)) / C with numpy/scipy pseudo-inverses (well-conditioned cases)."""
    N, d = z.shape
    mu = ref_class_means(z, labels, C)
    g = z.mean(axis=0)
    sw = np.zeros((d, d))
    for i in range(N):
        r = z[i] - mu[labels[i]]
        sw += np.outer(r, r)
    sw /= N
    sb = sum(np.outer(m - g, m - g) for m in mu) / C
    v1 = np.trace(sw @ np.linalg.pinv(sb, rcond=1e-10, hermitian=True)) / C
    v2 = np.trace(sw @ scipy.linalg.pinv(sb, atol=0, rtol=1e-10)) / C
    return v1, v2, sw, sb


def ref_ncm(train_z, train_labels, test_z, test_labels, C, similarity, k):
    mu = ref_class_means(train_z, train_labels, C)
    correct = 0
    for x, y in zip(test_z, test_labels):
        if similarity == "dot":
            scores = [float(np.dot(x, m)) for m in mu]
        else:
            scores = [-math.sqrt(sum((a - b) ** 2 for a, b in zip(x, m))) for m in mu]
        # stable sort by decreasing score: ties keep the lower class index first
        order = sorted(range(C), key=lambda c: -scores[c])
        correct += y in order[:k]
    return correct / len(test_labels)


# ------------------------------------------------------------------------------------------------
# Exact simplex ETF: spec/metrics.md §7
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
    # spec/metrics.md §7: sigma_i = C/(C-1)^2 = 0.1234568 (C = 10), 0.0102030 (C = 100)
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


def test_classes_on_a_line_have_one_nonzero_singular_value():
    rng = _rng(0)
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
def test_rank_r_configuration(r):
    rng = _rng(r)
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
    assert nc1(z, labels) == math.inf  # Sigma_B = 0: classes indistinguishable
    assert nc1_cdnv(z, labels) == math.inf
    assert effective_rank(np.zeros((3, 4))) == 0.0
    assert erank_cov(np.zeros((3, 4))) == 0.0
    with pytest.raises(ValueError, match="mu"):
        etf_error(mu)
    with pytest.raises(ValueError, match="mu"):
        nc2_equinorm(mu)


# ------------------------------------------------------------------------------------------------
# Random data against loop references
# ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("seed", [0, 1])
def test_paper_conditions_match_loop(dtype, seed):
    rng = _rng(seed)
    mu = (rng.standard_normal((7, 5)) * 0.4).astype(dtype)
    got = paper_conditions(mu)
    exp = ref_paper_conditions(mu.astype(np.float64).tolist())
    for key in exp:
        assert got[key] == pytest.approx(exp[key], rel=1e-12, abs=1e-15)
    got_t = paper_conditions(torch.from_numpy(mu))
    assert got_t == got


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("unbalanced", [False, True])
def test_class_means_and_within_class_variation_match_loop(dtype, unbalanced):
    rng = _rng(2)
    C, d = 4, 3
    z, labels = _noisy_classes(rng, C, d, 9, unbalanced=unbalanced)
    z = z.astype(dtype)
    z64 = z.astype(np.float64)
    m = class_means(z, labels)
    assert isinstance(m, np.ndarray) and m.dtype == dtype and m.shape == (C, d)
    np.testing.assert_allclose(m, ref_class_means(z64, labels, C), rtol=1e-6 if dtype == np.float32 else 1e-13)
    mt = class_means(torch.from_numpy(z), torch.from_numpy(labels))
    assert isinstance(mt, torch.Tensor) and mt.dtype == torch.from_numpy(z).dtype
    exp = ref_within_class_variation(z64.tolist(), labels.tolist(), C)
    assert within_class_variation(z, labels) == pytest.approx(exp, rel=1e-12)
    assert within_class_variation(torch.from_numpy(z), labels.tolist()) == pytest.approx(exp, rel=1e-12)


@pytest.mark.parametrize("C,d", [(5, 4), (4, 8), (3, 2)])
@pytest.mark.parametrize("unbalanced", [False, True])
def test_nc1_matches_pinv_reference(C, d, unbalanced):
    rng = _rng(C * 10 + d)
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


def test_nc1_never_negative_on_degenerate_inputs():
    rng = _rng(5)
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


def test_nc1_cdnv_matches_loop():
    rng = _rng(7)
    C, d = 4, 3
    z, labels = _noisy_classes(rng, C, d, 10, unbalanced=True)
    mu = ref_class_means(z, labels, C)
    var = [np.mean([np.sum((z[i] - mu[c]) ** 2) for i in range(len(z)) if labels[i] == c]) for c in range(C)]
    vals = [
        (var[a] + var[b]) / (2 * np.sum((mu[a] - mu[b]) ** 2)) for a in range(C) for b in range(a + 1, C)
    ]
    assert nc1_cdnv(z, labels) == pytest.approx(np.mean(vals), rel=1e-12)


def test_nc2_and_etf_error_match_loops():
    rng = _rng(8)
    C, d = 6, 4
    z, labels = _noisy_classes(rng, C, d, 5, unbalanced=True)
    mu = ref_class_means(z, labels, C)
    for g, kwargs in ((mu.mean(axis=0), {}), (z.mean(axis=0), {"global_mean": torch.tensor(z.mean(axis=0))})):
        c = mu - g
        norms = np.array([math.sqrt(sum(x * x for x in row)) for row in c])
        assert nc2_equinorm(mu, **kwargs) == pytest.approx(np.std(norms, ddof=1) / np.mean(norms), rel=1e-12)
        cos = [c[a] @ c[b] / (norms[a] * norms[b]) for a in range(C) for b in range(C) if a != b]
        assert nc2_equiangularity(mu, **kwargs) == pytest.approx(np.std(cos, ddof=1), rel=1e-12)
        assert nc2_max_angle(mu, **kwargs) == pytest.approx(np.mean(np.abs(np.array(cos) + 1 / (C - 1))), rel=1e-12)
        gram = c @ c.T
        target = (np.eye(C) - np.ones((C, C)) / C) / math.sqrt(C - 1)
        exp = np.linalg.norm(gram / np.linalg.norm(gram, "fro") - target, "fro")
        assert etf_error(mu, **kwargs) == pytest.approx(exp, rel=1e-12)
    # the two global means differ for unbalanced classes, and so do the metrics
    assert etf_error(mu) != pytest.approx(etf_error(mu, global_mean=z.mean(axis=0)), rel=1e-6)


def test_class_mean_spectrum_matches_numpy_cov_svd():
    """Same as the authors' recipe svd(np.cov(mu.T)) on a well-conditioned case."""
    rng = _rng(9)
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
def test_ncm_matches_loop(similarity, k):
    rng = _rng(11)
    C, d = 5, 3
    tr_z, tr_y = _noisy_classes(rng, C, d, 8, scale=1.0, noise=1.0, unbalanced=True)
    te_z, te_y = _noisy_classes(rng, C, d, 6, scale=1.0, noise=1.0)
    exp = ref_ncm(tr_z, tr_y, te_z, te_y, C, similarity, k)
    assert 0.0 < exp < 1.0
    got = ncm_accuracy(tr_z, tr_y, te_z, te_y, similarity=similarity, top_k=k)
    assert got == pytest.approx(exp, abs=1e-15)
    got32 = ncm_accuracy(
        torch.tensor(tr_z, dtype=torch.float32), tr_y, torch.tensor(te_z, dtype=torch.float32), te_y,
        similarity=similarity, top_k=k,
    )
    assert abs(got32 - exp) <= 2 / len(te_y)
    assert ncm_accuracy(tr_z, tr_y, te_z, te_y, similarity=similarity, top_k=C) == 1.0


def test_ncm_separable_toy_data():
    rng = _rng(12)
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
# Rank metrics
# ------------------------------------------------------------------------------------------------


def test_effective_rank_rankme_erank_cov_against_scipy():
    rng = _rng(13)
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
    assert effective_rank(np.diag([3.0, 1.0])) == pytest.approx(math.exp(-(0.75 * math.log(0.75) + 0.25 * math.log(0.25))))
    # torch float32 agrees
    assert effective_rank(torch.tensor(z, dtype=torch.float32)) == pytest.approx(effective_rank(z), rel=1e-5)
    # N < d: bounded by N
    assert effective_rank(rng.standard_normal((3, 20))) <= 3 + 1e-12


def test_embedding_spectrum_matches_directclr_recipe():
    rng = _rng(14)
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
# Streaming accumulator
# ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("covariance", [True, False])
def test_accumulator_equals_full_computation(dtype, covariance):
    rng = _rng(15)
    C, d = 5, 6
    z_np, labels = _noisy_classes(rng, C, d, 40, unbalanced=True)
    z = torch.tensor(z_np, dtype=dtype)
    N = z.shape[0]
    sizes = [1, 7, 100, 45, N - 153]
    acc = ClassStatsAccumulator(num_classes=C, covariance=covariance)
    start = 0
    for i, b in enumerate(sizes):  # alternate torch and numpy batches
        zb, yb = z[start : start + b], labels[start : start + b]
        acc.update(zb if i % 2 else zb.numpy(), yb)
        start += b
    assert torch.equal(acc.counts, torch.bincount(torch.from_numpy(labels), minlength=C))
    z64 = z.to(torch.float64)  # the accumulator keeps float64 statistics of the given values
    torch.testing.assert_close(acc.class_means(), class_means(z64, labels), rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(acc.global_mean(), z64.mean(0), rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(acc.between_class_covariance(), between_class_covariance(z, labels), rtol=1e-10, atol=1e-12)
    assert acc.nc1_cdnv() == pytest.approx(nc1_cdnv(z, labels), rel=1e-10)
    torch.testing.assert_close(acc.class_sums(), torch.from_numpy(ref_class_means(z64.numpy(), labels, C)) * acc.counts[:, None].double())
    if covariance:
        torch.testing.assert_close(acc.within_class_covariance(), within_class_covariance(z, labels), rtol=1e-10, atol=1e-12)
        assert acc.nc1() == pytest.approx(nc1(z, labels), rel=1e-10)
    else:
        with pytest.raises(RuntimeError):
            acc.nc1()
    with pytest.raises(RuntimeError, match="second pass"):
        acc.within_class_variation()
    # pass 2 with a different batching and order
    perm = rng.permutation(N)
    for chunk in np.array_split(perm, 4):
        acc.update_distances(z[chunk], labels[chunk])
    assert acc.within_class_variation() == pytest.approx(within_class_variation(z, labels), rel=1e-12)
    with pytest.raises(RuntimeError, match="frozen"):
        acc.update(z[:3], labels[:3])


def test_accumulator_is_stable_near_collapse():
    """Large offsets, tiny within-class spread: raw second moments would cancel completely."""
    rng = _rng(16)
    C, d = 3, 4
    z, labels = _noisy_classes(rng, C, d, 50, scale=1.0, noise=1e-5)
    z = z + 1e4
    acc = ClassStatsAccumulator(C, dim=d)
    for chunk in np.array_split(np.arange(len(z)), 7):
        acc.update(z[chunk], labels[chunk])
    full = within_class_covariance(z, labels)
    scale = float(full.diagonal().max())  # about 1e-10
    err = float((acc.within_class_covariance() - full).abs().max())
    assert err < 1e-6 * scale
    # the raw-moment formula (sum z z^T - sum_c n_c mu_c mu_c^T) / N fails here: the test can tell
    mu = ref_class_means(z, labels, C)
    counts = np.bincount(labels)
    naive = (z.T @ z - (mu.T * counts) @ mu) / len(z)
    assert np.abs(naive - full.numpy()).max() > 1e-2 * scale
    assert acc.nc1() == pytest.approx(nc1(z, labels), rel=1e-6)


def test_accumulator_validation():
    acc = ClassStatsAccumulator(3, dim=2)
    with pytest.raises(RuntimeError):
        acc.class_means()
    with pytest.raises(ValueError, match="dimension"):
        acc.update(np.zeros((4, 3)), [0, 1, 2, 0])
    with pytest.raises(ValueError, match="labels"):
        acc.update(np.zeros((2, 2)), [0, 3])
    acc.update(np.ones((2, 2)), [0, 1])
    with pytest.raises(ValueError, match=r"class\(es\) \[2\]"):
        acc.class_means()
    acc.update(np.zeros((1, 2)), [2])
    acc.update_distances(np.ones((2, 2)), [0, 1])
    with pytest.raises(ValueError, match="update_distances"):
        acc.within_class_variation()  # class 2 missing from pass 2
    with pytest.raises(ValueError, match="num_classes"):
        ClassStatsAccumulator(0)
    with pytest.raises(ValueError, match="dim"):
        ClassStatsAccumulator(3, dim=0)


# ------------------------------------------------------------------------------------------------
# Input validation
# ------------------------------------------------------------------------------------------------


def test_invalid_inputs_raise_value_error():
    z = np.random.default_rng(0).standard_normal((6, 3))
    y = np.array([0, 1, 2, 0, 1, 2])
    for fn in (class_means, within_class_variation, nc1, nc1_cdnv, within_class_covariance):
        with pytest.raises(ValueError, match="labels"):
            fn(z, np.array([0, 1, 2, 0, 1, 5]), num_classes=3)  # out of range
        with pytest.raises(ValueError, match="labels"):
            fn(z, np.array([0, 1, -1, 0, 1, 2]))  # negative
        with pytest.raises(ValueError, match="no sample"):
            fn(z, np.array([0, 2, 2, 0, 2, 0]))  # class 1 empty
        with pytest.raises(ValueError, match="no sample"):
            fn(z, y, num_classes=4)  # class 3 empty
        with pytest.raises(ValueError, match="labels"):
            fn(z, y[:5])  # length mismatch
        with pytest.raises(ValueError, match="labels"):
            fn(z, y.astype(float))  # not integers
        with pytest.raises(ValueError, match="z"):
            fn(z[:, 0], y)  # not 2-D
        with pytest.raises(ValueError, match="z"):
            fn(z[None], y)
        bad = z.copy()
        bad[0, 0] = np.nan
        with pytest.raises(ValueError, match="non-finite"):
            fn(bad, y)
    with pytest.raises(ValueError, match="num_classes"):
        class_means(z, y, num_classes=0)
    with pytest.raises(ValueError, match="rtol"):
        nc1(z, y, rtol=-1e-3)
    for fn in (paper_conditions, class_mean_spectrum, etf_error, nc2_equinorm, nc2_equiangularity, nc2_max_angle):
        with pytest.raises(ValueError, match="mu"):
            fn(np.ones((1, 3)))  # one class
        with pytest.raises(ValueError, match="mu"):
            fn(np.ones(3))  # not 2-D
    with pytest.raises(ValueError, match="floor"):
        class_mean_spectrum(z, floor=-1.0)
    with pytest.raises(ValueError, match="global_mean"):
        etf_error(z, global_mean=np.zeros(4))
    with pytest.raises(ValueError, match="d ="):
        ncm_accuracy(z, y, z[:, :2], y)  # d mismatch
    with pytest.raises(ValueError, match="similarity"):
        ncm_accuracy(z, y, z, y, similarity="cosine")
    with pytest.raises(ValueError, match="top_k"):
        ncm_accuracy(z, y, z, y, top_k=4)
    with pytest.raises(ValueError, match="test_labels"):
        ncm_accuracy(z, y, z, np.array([0, 1, 2, 0, 1, 3]))
    with pytest.raises(ValueError, match="train_labels"):
        ncm_accuracy(z, np.array([0, 0, 2, 0, 2, 2]), z, y)  # empty training class 1
    with pytest.raises(ValueError, match="matrix"):
        effective_rank(np.ones(3))
    with pytest.raises(ValueError, match="z"):
        rankme(np.ones((2, 2, 2)))
    with pytest.raises(ValueError, match="z"):
        erank_cov(np.ones((1, 3)))
    with pytest.raises(ValueError, match="eps"):
        rankme(z, eps=-1.0)
    with pytest.raises(ValueError, match="z"):
        embedding_spectrum(np.ones((1, 3)))
