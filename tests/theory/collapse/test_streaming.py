"""The streaming accumulator (theory.collapse.streaming) against the batch path and loop references."""

import numpy as np
import pytest
import torch

from tests.theory.collapse.reference import (
    SCALES,
    _noisy_classes,
    ref_class_means,
    ref_class_stats,
    ref_nc1_pinv,
    ref_within_class_variation,
)
from theory.collapse import (
    ClassStatsAccumulator,
    between_class_covariance,
    class_means,
    class_stats,
    nc1,
    nc1_cdnv,
    nc1_from_stats,
    within_class_covariance,
    within_class_variation,
)


def _random_chunks(rng, n, max_parts=9):
    """Random cut points: chunk sizes from 1 row to most of the data, in a random order."""
    k = int(rng.integers(1, max_parts))
    cuts = np.sort(rng.choice(np.arange(1, n), size=k, replace=False))
    return np.split(rng.permutation(n), cuts)


@pytest.mark.parametrize("seed", range(6))
def test_accumulator_equals_batch_path_to_1e_12_float64(seed, np_rng):
    rng = np_rng(200 + seed)
    C, d = int(rng.integers(2, 7)), int(rng.integers(1, 8))
    z, labels = _noisy_classes(rng, C, d, int(rng.integers(3, 30)), unbalanced=bool(seed % 2))
    acc = ClassStatsAccumulator(num_classes=C)
    for i, idx in enumerate(_random_chunks(rng, len(labels))):  # alternate torch and numpy batches
        acc.update(torch.from_numpy(z[idx]) if i % 2 else z[idx], labels[idx])
    full = class_stats(z, labels, C)
    st = acc.stats()
    assert torch.equal(st.counts, full.counts)
    for name in ("means", "within_ss", "scatter"):
        torch.testing.assert_close(getattr(st, name), getattr(full, name), rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(acc.global_mean(), torch.from_numpy(z).mean(0), rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(
        acc.within_class_covariance(), within_class_covariance(z, labels), rtol=1e-12, atol=1e-12
    )
    torch.testing.assert_close(
        acc.between_class_covariance(), between_class_covariance(z, labels), rtol=1e-12, atol=1e-12
    )
    assert acc.nc1() == pytest.approx(nc1(z, labels), rel=1e-12)
    assert acc.nc1() == nc1_from_stats(st)
    assert acc.nc1_cdnv() == pytest.approx(nc1_cdnv(z, labels), rel=1e-12)
    # against the loop reference too
    counts, means, ss, scatter = ref_class_stats(z, labels, C)
    np.testing.assert_allclose(st.within_ss.numpy(), ss, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(acc.class_means().numpy(), means, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(acc.class_sums().numpy(), means * counts[:, None], rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(st.scatter.numpy(), scatter, rtol=1e-12, atol=1e-12)
    # pass 2 with another random batching
    for idx in _random_chunks(rng, len(labels)):
        acc.update_distances(z[idx], labels[idx])
    assert acc.within_class_variation() == pytest.approx(within_class_variation(z, labels), rel=1e-12)
    with pytest.raises(RuntimeError, match="frozen"):
        acc.update(z[:3], labels[:3])


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_accumulator_low_precision_batches(dtype, np_rng):
    """Half/single-precision batches are accumulated in float64 from the values they hold."""
    rng = np_rng(17)
    C, d = 4, 5
    z_np, labels = _noisy_classes(rng, C, d, 25, unbalanced=True)
    z = torch.tensor(z_np, dtype=dtype)
    acc = ClassStatsAccumulator(C)
    for idx in _random_chunks(rng, len(labels)):
        acc.update(z[idx], labels[idx])
    z64 = z.to(torch.float64)
    assert acc.class_means().dtype == torch.float64
    torch.testing.assert_close(acc.class_means(), class_means(z64, labels), rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(
        acc.within_class_covariance(), within_class_covariance(z64, labels), rtol=1e-12, atol=1e-12
    )
    assert acc.nc1() == pytest.approx(nc1(z, labels), rel=1e-12)


def test_accumulator_without_covariance(np_rng):
    rng = np_rng(15)
    z, labels = _noisy_classes(rng, 3, 4, 10)
    acc = ClassStatsAccumulator(3, covariance=False)
    for idx in _random_chunks(rng, len(labels)):
        acc.update(z[idx], labels[idx])
    assert acc.stats().scatter is None
    assert acc.nc1_cdnv() == pytest.approx(nc1_cdnv(z, labels), rel=1e-12)
    with pytest.raises(RuntimeError, match="scatter"):
        acc.nc1()
    with pytest.raises(RuntimeError, match="scatter"):
        acc.within_class_covariance()


def test_accumulator_is_stable_near_collapse(np_rng):
    """Large offsets, tiny within-class spread: raw second moments would cancel completely."""
    rng = np_rng(16)
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


def test_accumulator_missing_classes_and_validation():
    acc = ClassStatsAccumulator(3, dim=2)
    with pytest.raises(RuntimeError, match="no batch"):
        acc.class_means()
    with pytest.raises(RuntimeError, match="update first"):
        acc.update_distances(np.zeros((1, 2)), [0])
    with pytest.raises(ValueError, match="dimension"):
        acc.update(np.zeros((4, 3)), [0, 1, 2, 0])
    with pytest.raises(ValueError, match="labels"):
        acc.update(np.zeros((2, 2)), [0, 3])
    acc.update(np.array([[1.0, 1.0], [2.0, 0.0]]), [0, 1])
    mu = acc.class_means()
    assert torch.isnan(mu[2]).all() and mu[:2].tolist() == [[1.0, 1.0], [2.0, 0.0]]  # NaN, not zero
    assert acc.class_sums()[2].tolist() == [0.0, 0.0]
    for call in (acc.nc1, acc.nc1_cdnv, acc.between_class_covariance):
        with pytest.raises(ValueError, match=r"class\(es\) \[2\] have no sample"):
            call()
    acc.update(np.zeros((1, 2)), [2])
    assert torch.isfinite(acc.class_means()).all()
    acc.update_distances(np.ones((2, 2)), [0, 1])
    with pytest.raises(ValueError, match="update_distances"):
        acc.within_class_variation()  # class 2 missing from pass 2
    with pytest.raises(ValueError, match="num_classes"):
        ClassStatsAccumulator(None)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_accumulator_on_cuda_bfloat16(np_rng):
    rng = np_rng(18)
    C, d = 5, 16
    z_np, labels = _noisy_classes(rng, C, d, 200, unbalanced=True)
    z = torch.tensor(z_np, dtype=torch.bfloat16, device="cuda")
    y = torch.tensor(labels, device="cuda")
    acc = ClassStatsAccumulator(C)
    for idx in _random_chunks(rng, len(labels)):
        acc.update(z[idx], y[idx])
    st = acc.stats()
    assert st.means.device.type == "cuda" and st.means.dtype == torch.float64
    full = class_stats(z.cpu().double(), labels, C)
    for name in ("means", "within_ss", "scatter"):
        torch.testing.assert_close(getattr(st, name).cpu(), getattr(full, name), rtol=1e-12, atol=1e-12)
    assert acc.nc1() == pytest.approx(nc1(z.cpu(), labels), rel=1e-10)


@pytest.mark.parametrize("scale", SCALES)
def test_accumulator_at_any_scale_and_when_the_scale_grows(scale, np_rng):
    # batches in increasing order of their largest |z| (so the state is rescaled on the way),
    # compared with the loop references of the unscaled data
    rng = np_rng(240)
    C, d = 3, 2
    z, labels = _noisy_classes(rng, C, d, 12, unbalanced=True)
    order = np.argsort(np.abs(z).max(axis=1))
    z, labels = z[order], labels[order]
    zs = z * scale
    acc = ClassStatsAccumulator(num_classes=C)
    for idx in np.array_split(np.arange(len(z)), 5):
        acc.update(zs[idx], labels[idx])
    counts, means, ss, _ = ref_class_stats(z, labels, C)
    v1, _, _, _ = ref_nc1_pinv(z, labels, C)
    assert acc.nc1() == pytest.approx(v1, rel=1e-9)
    var = ss / counts
    pairs = [(a, b) for a in range(C) for b in range(a + 1, C)]
    cdnv = np.mean([(var[a] + var[b]) / (2 * np.sum((means[a] - means[b]) ** 2)) for a, b in pairs])
    assert acc.nc1_cdnv() == pytest.approx(cdnv, rel=1e-12)
    np.testing.assert_allclose(acc.class_means().numpy() / scale, means, rtol=1e-13)
    np.testing.assert_allclose(acc.global_mean().numpy() / scale, z.mean(axis=0), rtol=1e-13)
    for idx in np.array_split(np.arange(len(z)), 3):
        acc.update_distances(zs[idx], labels[idx])
    wcv = ref_within_class_variation(z.tolist(), labels.tolist(), C)
    assert acc.within_class_variation() == pytest.approx(wcv * scale, rel=1e-12)
    if scale > 1:  # second moments beyond float64 in the units of z: a ValueError naming z
        with pytest.raises(ValueError, match="^z: the within-class sum of squares overflows"):
            acc.stats()
        with pytest.raises(ValueError, match="^z: Sigma_W overflows"):
            acc.within_class_covariance()
    else:
        np.testing.assert_allclose(acc.stats().means.numpy() / scale, means, rtol=1e-13)
