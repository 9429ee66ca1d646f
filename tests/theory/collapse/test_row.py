"""Tests of theory/collapse/row.py: the metric row of a training run, against the metric functions
and the reference values at an exact simplex ETF."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from theory import collapse as col
from theory.collapse import ROW_COLUMNS, metric_row, numerical_ranks, spectrum_columns
from theory.geometry import simplex_etf


def test_numerical_ranks_at_an_etf_and_in_a_subspace(torch_gen):
    C = 12
    etf = simplex_etf(C, C - 1).double()
    assert numerical_ranks(etf) == [C - 1, C - 1]
    # class means in a 3-dimensional subspace, plus directions at 1e-3 and 1e-6 of the largest
    basis = torch.linalg.qr(torch.randn(C - 1, C - 1, generator=torch_gen(0), dtype=torch.float64))[0]
    coef = torch.randn(C, C - 1, generator=torch_gen(1), dtype=torch.float64)
    coef[:, 3:6] *= 1e-3
    coef[:, 6:] *= 1e-6
    mu = coef @ basis.T
    s = torch.linalg.svdvals(mu - mu.mean(0))
    ref = [int((s / s[0] > t).sum()) for t in (1e-2, 1e-4)]
    assert numerical_ranks(mu) == ref == [3, 6]
    assert numerical_ranks(torch.ones(C, 4)) == [0, 0]


def test_spectrum_columns_are_the_authors_curve():
    C = 6
    etf = simplex_etf(C, C - 1).double()
    cols = dict(zip(spectrum_columns(C, C - 1), col.class_mean_spectrum(etf)))
    assert list(cols) == [f"spectrum_{i}" for i in range(C - 1)]
    np.testing.assert_allclose(list(cols.values()), 0.0, atol=1e-12)
    mu = torch.diag(torch.tensor([3.0, 2.0, 1.0, 0.0], dtype=torch.float64))[:, :3]
    cov = np.cov(mu.numpy().T)
    ev = np.sort(np.linalg.eigvalsh(cov))[::-1]
    got = metric_row(mu.float(), torch.arange(4), 4).values
    got = {k: v for k, v in got.items() if k.startswith("spectrum_") and k != "spectrum_min"}
    np.testing.assert_allclose(list(got.values()), np.log(np.maximum(ev / ev[0], 1e-30)), atol=1e-12)


def test_the_row_at_an_exact_etf():
    C = 5
    y = torch.arange(C).repeat_interleave(4)
    z = simplex_etf(C, C - 1)[y]
    row = metric_row(z, y, C, simplex_etf(C, C - 1), torch.arange(C))
    m = row.values
    assert list(m) == [*ROW_COLUMNS, *spectrum_columns(C, C - 1)]
    assert m["rank_1e-2"] == m["rank_1e-4"] == C - 1 and m["spectrum_min"] == m[f"spectrum_{C - 2}"]
    assert m["etf_mean"] < 1e-6 and m["within_class_variation"] < 1e-6 and row.class_means.shape == (C, C - 1)
    assert m["ncm_acc"] == m["ncm_top5"] == m["train_ncm_acc"] == 1.0
    assert m["effective_rank"] == pytest.approx(C - 1, rel=1e-6) and m["mean_norm"] == pytest.approx(1.0)
    assert m["nc1"] == pytest.approx(0.0, abs=1e-10)  # no within-class scatter
    assert row.spectrum.shape == (C - 1,)


def test_the_row_equals_the_metric_functions(torch_gen):
    C, n, d = 4, 6, 5
    y = torch.arange(C).repeat_interleave(n)
    z = torch.randn(C * n, d, generator=torch_gen(4), dtype=torch.float32)
    zt = torch.randn(10, d, generator=torch_gen(5), dtype=torch.float32)
    yt = torch.randint(0, C, (10,), generator=torch_gen(6))
    m = metric_row(z, y, C, zt, yt).values
    z64, t64 = z.double(), zt.double()
    mu = col.class_means(z64, y, C)
    cond = col.paper_conditions(mu)
    expect = {
        **{k: cond[k] for k in ("unit_norm", "zero_sum", "etf_mean", "etf_max")},
        "within_class_variation": col.within_class_variation(z64, y, C),
        "nc1": col.nc1(z64, y, C),
        "nc2_equinorm": col.nc2_equinorm(mu),
        "nc2_equiangularity": col.nc2_equiangularity(mu),
        "etf_error": col.etf_error(mu),
        "effective_rank": col.effective_rank(mu),
        "rankme": col.rankme(z64),
        "mean_norm": float(z64.norm(dim=1).mean()),
        "ncm_acc": col.ncm_accuracy(z64, y, t64, yt, num_classes=C),
        "ncm_top5": col.ncm_accuracy(z64, y, t64, yt, top_k=C, num_classes=C),
        "train_ncm_acc": col.ncm_accuracy(z64, y, z64, y, num_classes=C),
    }
    for k, v in expect.items():
        assert m[k] == pytest.approx(v, rel=1e-12, abs=1e-15), k
    # NCM by hand: raw inner product with the training class means
    means = torch.stack([z64[y == c].mean(0) for c in range(C)])
    assert m["ncm_acc"] == float(((t64 @ means.T).argmax(1) == yt).double().mean())
    assert m["ncm_top5"] == 1.0  # C = 4 <= 5 classes: every point is in the top 5
    assert math.isnan(metric_row(z, y, C).values["ncm_acc"])


def test_undefined_metrics_are_nan_not_errors():
    C = 3
    y = torch.arange(C).repeat_interleave(2)
    z = torch.ones(2 * C, 2)  # every class mean coincides
    m = metric_row(z, y, C).values
    assert math.isnan(m["nc1"]) and m["rank_1e-2"] == 0.0 and np.isfinite(m["etf_mean"])


@pytest.mark.parametrize("scale", [2.0**-1000, 2.0**530, 2.0**1000])
def test_the_row_at_any_scale(scale, torch_gen):
    # every column is scale-invariant except unit_norm, zero_sum, within_class_variation and
    # mean_norm, which scale by `scale` (unit_norm up to the -1): checked against loops of z
    C, n, d = 4, 6, 5
    y = torch.arange(C).repeat_interleave(n)
    z = torch.randn(C * n, d, generator=torch_gen(7), dtype=torch.float64)
    base = metric_row(z, y, C, z[:8], y[:8]).values
    got = metric_row(z * scale, y, C, z[:8] * scale, y[:8]).values
    zl = z.tolist()
    mean_norm = sum(math.sqrt(sum(x * x for x in row)) for row in zl) / len(zl)
    assert got["mean_norm"] == pytest.approx(mean_norm * scale, rel=1e-12)
    assert got["within_class_variation"] == pytest.approx(base["within_class_variation"] * scale, rel=1e-12)
    assert got["zero_sum"] == pytest.approx(base["zero_sum"] * scale, rel=1e-12)
    for k, v in got.items():
        if k not in ("unit_norm", "zero_sum", "within_class_variation", "mean_norm"):
            assert v == pytest.approx(base[k], rel=1e-9, abs=1e-12), k
