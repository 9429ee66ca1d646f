"""The statistics kernel (theory.collapse.stats) against Python loops: ClassStats, the two global
means, Sigma_W / Sigma_B, merges, compact relabelling and missing classes."""

import numpy as np
import pytest
import torch

from tests.theory.collapse.reference import (
    SCALES,
    _noisy_classes,
    ref_class_means,
    ref_class_stats,
    ref_nc1_pinv,
)
from theory.collapse import (
    ClassStats,
    between_class_covariance,
    between_class_covariance_from_stats,
    class_counts,
    class_means,
    class_stats,
    global_mean,
    merge_class_stats,
    nc1,
    nc1_cdnv,
    nc1_cdnv_from_stats,
    nc1_from_stats,
    within_class_covariance,
    within_class_covariance_from_stats,
    within_class_variation,
)

TOL = {np.float32: 1e-6, np.float64: 1e-12}


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("container", ["numpy", "torch"])
@pytest.mark.parametrize("unbalanced", [False, True])
def test_class_stats_match_loops(dtype, container, unbalanced, np_rng):
    rng = np_rng(21)
    C, d = 4, 3
    z, labels = _noisy_classes(rng, C, d, 7, unbalanced=unbalanced)
    z = z.astype(dtype)
    counts, means, ss, scatter = ref_class_stats(z.astype(np.float64), labels, C)
    arg = torch.from_numpy(z) if container == "torch" else z
    st = class_stats(arg, labels)
    assert isinstance(st, ClassStats)
    assert st.counts.dtype == torch.int64 and st.means.dtype == torch.float64
    assert (st.num_classes, st.dim, st.num_samples) == (C, d, len(labels))
    assert st.counts.tolist() == counts.tolist()
    assert st.classes.tolist() == list(range(C))
    # the statistics are float64 statistics of the given (possibly float32) values
    np.testing.assert_allclose(st.means.numpy(), means, rtol=1e-13, atol=1e-13)
    np.testing.assert_allclose(st.within_ss.numpy(), ss, rtol=1e-12)
    np.testing.assert_allclose(st.scatter.numpy(), scatter, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(st.sums.numpy(), means * counts[:, None], rtol=1e-13, atol=1e-13)
    np.testing.assert_allclose(st.class_variances.numpy(), ss / counts, rtol=1e-12)
    # the two global means (docs/metrics.md pitfall 3)
    z64 = z.astype(np.float64)
    np.testing.assert_allclose(st.global_mean.numpy(), z64.sum(axis=0) / len(z64), rtol=1e-13, atol=1e-14)
    np.testing.assert_allclose(st.mean_of_class_means.numpy(), means.mean(axis=0), rtol=1e-13, atol=1e-14)
    if unbalanced:
        assert not np.allclose(st.global_mean.numpy(), st.mean_of_class_means.numpy(), rtol=1e-6)
    else:
        np.testing.assert_allclose(st.global_mean.numpy(), st.mean_of_class_means.numpy(), atol=1e-13)
    # covariances
    sw = within_class_covariance_from_stats(st)
    sb = between_class_covariance_from_stats(st)
    np.testing.assert_allclose(sw.numpy(), scatter / len(z), rtol=1e-12, atol=1e-13)
    g = z64.mean(axis=0)
    ref_sb = sum(np.outer(m - g, m - g) for m in means) / C
    np.testing.assert_allclose(sb.numpy(), ref_sb, rtol=1e-12, atol=1e-13)
    assert torch.equal(sw, sw.T) and torch.equal(sb, sb.T)
    # the raw-input forms are the same kernel
    assert torch.equal(within_class_covariance(arg, labels), sw)
    assert torch.equal(between_class_covariance(arg, labels), sb)
    # class_means keeps the container and float dtype
    m = class_means(arg, labels)
    assert isinstance(m, type(arg)) and m.dtype == arg.dtype
    np.testing.assert_allclose(np.asarray(m, dtype=np.float64), means, rtol=TOL[dtype])


def test_metrics_are_functions_of_the_statistics(np_rng):
    """The raw-input metrics equal their *_from_stats forms bit for bit (one kernel)."""
    z, y = _noisy_classes(np_rng(4), 5, 6, 8, unbalanced=True)
    st = class_stats(z, y)
    assert nc1(z, y) == nc1_from_stats(st)
    assert nc1(z, y, rtol=1e-6) == nc1_from_stats(st, rtol=1e-6)
    assert nc1_cdnv(z, y) == nc1_cdnv_from_stats(st)
    assert nc1_cdnv_from_stats(class_stats(z, y, covariance=False)) == nc1_cdnv(z, y)
    with pytest.raises(ValueError, match="covariance=False"):
        nc1_from_stats(class_stats(z, y, covariance=False))


def test_global_mean_and_class_counts(np_rng):
    z, y = _noisy_classes(np_rng(3), 4, 5, 6, unbalanced=True)
    counts = class_counts(y)
    assert counts.dtype == torch.int64 and counts.tolist() == [int((y == c).sum()) for c in range(4)]
    assert class_counts(y, num_classes=6).tolist()[4:] == [0, 0]  # missing classes count 0, no error
    g = global_mean(z)
    assert g.dtype == torch.float64 and torch.equal(g, torch.from_numpy(z).mean(dim=0))
    assert class_counts(np.array([7, 3, 7, 7])).tolist() == [1, 3]  # compact: labels 3, 7


# ------------------------------------------------------------------------------------------------
# Merging (the streaming update) against the batch statistics
# ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_merge_equals_batch_statistics(seed, np_rng):
    rng = np_rng(100 + seed)
    C, d = 5, 4
    z, y = _noisy_classes(rng, C, d, 12, unbalanced=True)
    full = class_stats(z, y, C)
    cuts = np.sort(rng.choice(np.arange(1, len(y)), size=4, replace=False))
    parts = [class_stats(zc, yc, C) for zc, yc in zip(np.split(z, cuts), np.split(y, cuts))]
    acc = parts[0]
    for p in parts[1:]:
        acc = merge_class_stats(acc, p)
    assert torch.equal(acc.counts, full.counts)
    for name in ("means", "within_ss", "scatter"):
        torch.testing.assert_close(getattr(acc, name), getattr(full, name), rtol=1e-12, atol=1e-12)
    # merging is order independent up to round-off
    rev = parts[-1]
    for p in parts[-2::-1]:
        rev = merge_class_stats(rev, p)
    torch.testing.assert_close(rev.scatter, full.scatter, rtol=1e-12, atol=1e-12)


def test_merge_handles_missing_classes_and_mismatches():
    a = class_stats(np.array([[1.0, 2.0], [3.0, 4.0]]), [0, 0], num_classes=3)
    b = class_stats(np.array([[5.0, 6.0]]), [2], num_classes=3)
    assert torch.isnan(a.means[1:]).all() and torch.isnan(b.means[:2]).all()
    m = merge_class_stats(a, b)
    assert m.counts.tolist() == [2, 0, 1]
    assert m.means[0].tolist() == [2.0, 3.0] and m.means[2].tolist() == [5.0, 6.0]
    assert torch.isnan(m.means[1]).all()  # still missing: NaN, never zero
    assert m.missing.tolist() == [1]
    assert m.within_ss.tolist() == [4.0, 0.0, 0.0]
    with pytest.raises(ValueError, match="classes"):
        merge_class_stats(class_stats(np.ones((2, 2)), [0, 1]), class_stats(np.ones((2, 2)), [0, 5]))
    with pytest.raises(ValueError, match="dimension"):
        merge_class_stats(a, class_stats(np.ones((1, 3)), [0], num_classes=3))
    no_cov = merge_class_stats(a, class_stats(np.ones((1, 2)), [1], num_classes=3, covariance=False))
    assert no_cov.scatter is None


# ------------------------------------------------------------------------------------------------
# Labels: compact relabelling, the range check, missing classes
# ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("big", [10**8, 2**40, 2**62])
def test_huge_label_values_are_relabelled_compactly(big, np_rng):
    """{0, big} in an 8-row batch: C = 2, O(N) memory (a bincount of length big would need
    big * 8 bytes: 0.8 GB, 8 TB, ...)."""
    rng = np_rng(5)
    z = rng.standard_normal((8, 3))
    labels = np.array([0, big, 0, big, big, 0, 0, big], dtype=np.int64)
    st = class_stats(z, labels)
    assert st.num_classes == 2 and st.classes.tolist() == [0, big]
    dense = np.where(labels == 0, 0, 1)
    np.testing.assert_allclose(st.means.numpy(), ref_class_means(z, dense, 2), rtol=1e-14)
    assert class_counts(labels).tolist() == [4, 4]
    assert nc1(z, labels) == nc1(z, dense)
    assert within_class_variation(torch.from_numpy(z), torch.from_numpy(labels)) == within_class_variation(
        z, dense
    )
    # with num_classes given the range check stays
    with pytest.raises(ValueError, match="num_classes"):
        class_stats(z, labels, num_classes=2)


def test_compact_relabelling_keeps_label_order(np_rng):
    z = np_rng(6).standard_normal((6, 2))
    labels = np.array([9, 2, 5, 2, 9, 5])
    st = class_stats(z, labels)
    assert st.classes.tolist() == [2, 5, 9]
    np.testing.assert_allclose(st.means.numpy(), [z[[1, 3]].mean(0), z[[2, 5]].mean(0), z[[0, 4]].mean(0)])
    mu = class_means(z, labels)
    np.testing.assert_allclose(mu, st.means.numpy())


def test_missing_classes_are_nan_in_statistics_and_raise_in_metrics(np_rng):
    z = np_rng(7).standard_normal((6, 3))
    y = np.array([0, 2, 2, 0, 2, 0])  # class 1 has no sample
    st = class_stats(z, y, num_classes=4)  # classes 1 and 3 missing
    assert st.counts.tolist() == [3, 0, 3, 0] and st.missing.tolist() == [1, 3]
    assert torch.isnan(st.means[[1, 3]]).all() and torch.isfinite(st.means[[0, 2]]).all()
    assert torch.isnan(st.class_variances[[1, 3]]).all()
    mu = class_means(z, y, num_classes=4)
    assert np.isnan(mu[1]).all() and np.isnan(mu[3]).all()  # never silently zero means
    # the pooled statistics ignore the missing classes
    np.testing.assert_allclose(st.global_mean.numpy(), z.mean(axis=0), rtol=1e-14)
    torch.testing.assert_close(within_class_covariance(z, y, num_classes=4), within_class_covariance(z, y))
    # metrics averaging over classes raise, naming the missing classes
    for call in (
        lambda: nc1(z, y, num_classes=4),
        lambda: nc1_cdnv(z, y, num_classes=4),
        lambda: within_class_variation(z, y, num_classes=4),
        lambda: between_class_covariance(z, y, num_classes=4),
    ):
        with pytest.raises(ValueError, match=r"labels: class\(es\) \[1, 3\] have no sample"):
            call()
    for call in (lambda: nc1_from_stats(st), lambda: between_class_covariance_from_stats(st)):
        with pytest.raises(ValueError, match=r"stats: class\(es\) \[1, 3\] have no sample"):
            call()
    # explicit exclusion
    kept = st.present()
    assert kept.classes.tolist() == [0, 2] and kept.counts.tolist() == [3, 3]
    assert nc1_from_stats(kept) == nc1(z, y)  # compact relabelling gives the same classes
    assert torch.equal(kept.scatter, st.scatter)


def test_class_stats_post_init_checks_shapes():
    st = class_stats(np.ones((2, 2)), [0, 1])
    with pytest.raises(ValueError, match="counts"):
        ClassStats(st.counts[:1], st.means, st.within_ss, st.scatter, st.classes)
    with pytest.raises(ValueError, match="scatter"):
        ClassStats(st.counts, st.means, st.within_ss, torch.zeros(3, 3, dtype=torch.float64), st.classes)
    with pytest.raises(ValueError, match="means"):
        ClassStats(st.counts, st.means.float(), st.within_ss, st.scatter, st.classes)


# ------------------------------------------------------------------------------------------------
# Scale safety (docs/metrics.md#scale)
# ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("scale", SCALES)
def test_statistics_at_any_scale(scale, np_rng):
    z, labels = _noisy_classes(np_rng(31), 3, 2, 8, unbalanced=True)
    _, means, _, _ = ref_class_stats(z, labels, 3)  # of the unscaled z
    zs = z * scale
    np.testing.assert_allclose(class_means(zs, labels) / scale, means, rtol=1e-13)
    np.testing.assert_allclose(global_mean(zs).numpy() / scale, z.mean(axis=0), rtol=1e-13)
    # the scale-invariant metrics of statistics, from statistics that hold no overflowing square
    st = class_stats(z, labels)
    big = ClassStats(st.counts, st.means * scale, st.within_ss, st.scatter, st.classes)
    np.testing.assert_allclose(big.global_mean.numpy() / scale, z.mean(axis=0), rtol=1e-13)
    if scale > 1:  # the raw second moments overflow: a ValueError naming z, not inf
        with pytest.raises(ValueError, match="^z: the within-class sum of squares overflows float64"):
            class_stats(zs, labels)
        with pytest.raises(ValueError, match="^stats: Sigma_B overflows float64"):
            between_class_covariance_from_stats(big)
    else:  # they underflow to their correctly rounded value, 0; the means are exact
        tiny = class_stats(zs, labels)
        np.testing.assert_allclose(tiny.means.numpy() / scale, means, rtol=1e-13)
        assert not tiny.within_ss.any() and not tiny.scatter.any()


def test_metrics_of_statistics_are_scale_safe(np_rng):
    # statistics with means near 1e160 (whose products overflow) and second moments t s^2 times
    # those of z (t = 2^-1000 keeps them representable): NC1 and CDNV are linear in the second
    # moments and invariant under the scale s, so they are t times those of z
    z, labels = _noisy_classes(np_rng(32), 3, 2, 8)
    st = class_stats(z, labels)
    s, t = 2.0**530, 2.0**-1000
    big = ClassStats(st.counts, st.means * s, st.within_ss * t * s * s, st.scatter * t * s * s, st.classes)
    v1, _, _, _ = ref_nc1_pinv(z, labels, 3)
    assert nc1_from_stats(big) == pytest.approx(t * v1, rel=1e-9)
    mu = ref_class_means(z, labels, 3)
    var = [np.mean([np.sum((z[i] - mu[c]) ** 2) for i in range(len(z)) if labels[i] == c]) for c in range(3)]
    cdnv = np.mean(
        [(var[a] + var[b]) / (2 * np.sum((mu[a] - mu[b]) ** 2)) for a, b in ((0, 1), (0, 2), (1, 2))]
    )
    assert nc1_cdnv_from_stats(big) == pytest.approx(t * cdnv, rel=1e-12)
