"""The streaming ClassStatsAccumulator (theory.collapse.streaming) against the batch metrics."""

import numpy as np
import pytest
import torch

from tests.theory.collapse.reference import _noisy_classes, ref_class_means
from theory.collapse import (
    between_class_covariance,
    class_means,
    ClassStatsAccumulator,
    nc1,
    nc1_cdnv,
    within_class_covariance,
    within_class_variation,
)


# ------------------------------------------------------------------------------------------------
# Streaming accumulator
# ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("covariance", [True, False])
def test_accumulator_equals_full_computation(dtype, covariance, np_rng):
    rng = np_rng(15)
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
