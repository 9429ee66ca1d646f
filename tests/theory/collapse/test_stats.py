"""The shared statistics kernel and input validation of the collapse metrics (theory.collapse.stats)."""

import numpy as np
import pytest
import torch

from tests.theory.collapse.reference import _noisy_classes
from theory.collapse import (
    between_class_covariance,
    class_counts,
    class_mean_spectrum,
    class_means,
    effective_rank,
    embedding_spectrum,
    erank_cov,
    etf_error,
    global_mean,
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
from theory.collapse.standard import _nc1_from_cov


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


def test_class_counts_and_global_mean(np_rng):
    z, y = _noisy_classes(np_rng(3), 4, 5, 6, unbalanced=True)
    counts = class_counts(y)
    assert counts.dtype == torch.int64 and counts.tolist() == [int((y == c).sum()) for c in range(4)]
    assert class_counts(y, num_classes=6).tolist()[4:] == [0, 0]  # empty classes count 0, no error
    g = global_mean(z)
    assert g.dtype == torch.float64 and torch.equal(g, torch.from_numpy(z).mean(dim=0))
    with pytest.raises(ValueError, match="labels"):
        class_counts(np.array([0.5, 1.0]))
    with pytest.raises(ValueError, match="labels"):
        class_counts(np.array([0, 3]), num_classes=2)
    with pytest.raises(ValueError, match="z"):
        global_mean(np.ones(3))


def test_batch_metrics_share_the_statistics_kernel(np_rng):
    """nc1 is Tr(Sigma_W Sigma_B^+)/C of the public covariance functions, bit for bit; the
    covariances are those of the class means and the global mean."""
    z, y = _noisy_classes(np_rng(4), 5, 6, 8, unbalanced=True)
    sw, sb = within_class_covariance(z, y), between_class_covariance(z, y)
    assert torch.equal(sw, sw.T) and torch.equal(sb, sb.T)
    assert nc1(z, y) == _nc1_from_cov(sw, sb, 5, None)
    mu = torch.from_numpy(class_means(z, y))
    c = mu - global_mean(z)
    assert torch.allclose(sb, c.T @ c / 5, rtol=1e-14, atol=1e-15)
    r = torch.from_numpy(z) - mu[torch.from_numpy(y)]
    assert torch.allclose(sw, r.T @ r / len(y), rtol=1e-14, atol=1e-15)
