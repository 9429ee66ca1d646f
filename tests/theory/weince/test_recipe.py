"""The released recipe (auxiliary terms, batch-beta EMA) against loop references; its state."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from tests.theory.weince.reference import (
    cosine_rows,
    make_views,
    ref_beta_update,
    ref_released,
    two_view_rows,
)
from theory.weince import ReleasedConfig, WeibullBetaState, weince_loss


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_released_recipe_matches_reference(dtype):
    z1, z2 = make_views(30, 8, seed=12, dtype=dtype)
    tol = 1e-10 if dtype == torch.float64 else 2e-5
    state = WeibullBetaState()
    loss, diag = weince_loss(z1, z2, recipe="released", state=state, return_diagnostics=True)
    want, beta = ref_released(z1, z2, 4.0)
    rows = two_view_rows(cosine_rows(z1, z2))
    _, bh, r2 = ref_beta_update([v for _, ng in rows for v in ng], 4.0)
    assert abs(float(state.beta) - beta) < tol and abs(float(diag.beta_t) - beta) < tol
    assert beta != 4.0  # this batch is trusted: the EMA moved
    assert abs(float(state.beta_hat) - bh) < 1e3 * tol and abs(float(state.r2) - r2) < 1e2 * tol
    assert abs(loss.item() - want) < tol
    # a second call continues the EMA from the state
    want2, beta2 = ref_released(z1, z2, beta)
    loss2 = weince_loss(z1, z2, recipe="released", state=state)
    assert abs(float(state.beta) - beta2) < tol and int(state.steps) == 2
    assert abs(loss2.item() - want2) < tol


def test_fixed_beta_is_kept():
    z1, z2 = make_views(30, 8, seed=12)
    fixed = WeibullBetaState(ReleasedConfig(auto_beta=False, beta_init=3.0))
    loss = weince_loss(z1, z2, recipe="released", state=fixed)
    assert float(fixed.beta) == 3.0 and int(fixed.steps) == 1
    assert torch.isnan(fixed.beta_hat) and torch.isnan(fixed.r2)
    assert torch.isfinite(loss)


def test_n_equal_two_skips_the_beta_fit_as_the_authors():
    # N = 2: A (A - 2) = 8 < 10 negative entries -> the authors keep beta (4.0) without fitting
    z1, z2 = make_views(2, 5, seed=40)
    state = WeibullBetaState()
    loss, diag = weince_loss(z1, z2, recipe="released", state=state, return_diagnostics=True)
    assert float(state.beta) == 4.0 and float(diag.beta_t) == 4.0 and int(state.steps) == 1
    assert torch.isnan(state.beta_hat)
    want, beta = ref_released(z1, z2, 4.0, M=50)
    assert beta == 4.0 and abs(loss.item() - want) < 1e-12
    # what a fit on these 8 entries would have done (the previous behaviour): beta moves
    rows = two_view_rows(cosine_rows(z1, z2))
    negs = [v for _, ng in rows for v in ng]
    assert len(negs) == 8
    k, burn = 8, 1
    d = np.sort(np.maximum(1 - np.array(negs), 1e-6))[:k]
    x = np.log(d)[burn:]
    y = np.log(np.arange(1, k + 1) / (k + 1))[burn:]
    slope, icpt = np.polyfit(x, y, 1)
    r2 = 1 - ((y - slope * x - icpt) ** 2).sum() / ((y - y.mean()) ** 2).sum()
    assert r2 >= 0.85 and slope > 0  # a fit would have been trusted ...
    assert abs(0.9 * 4.0 + 0.1 * min(max(slope, 0.5), 16.0) - 3.697) < 1e-3  # ... and moved beta


def test_n_equal_three_fits():
    # N = 3: 6 * 4 = 24 >= 10 entries: the fit runs (and may or may not be trusted)
    z1, z2 = make_views(3, 5, seed=41)
    state = WeibullBetaState()
    weince_loss(z1, z2, recipe="released", state=state)
    rows = two_view_rows(cosine_rows(z1, z2))
    beta, bh, r2 = ref_beta_update([v for _, ng in rows for v in ng], 4.0)
    assert abs(float(state.beta_hat) - bh) < 1e-9 and abs(float(state.r2) - r2) < 1e-9
    assert abs(float(state.beta) - beta) < 1e-10


def test_small_batch_top_m_is_capped_at_the_negatives():
    # 2N - 2 = 6 negatives < M = 50: all negatives enter both auxiliary terms
    z1, z2 = make_views(4, 5, seed=42)
    loss = weince_loss(z1, z2, recipe="released", state=WeibullBetaState())
    want, _ = ref_released(z1, z2, 4.0)
    assert abs(loss.item() - want) < 1e-12


def test_state_is_a_module_with_buffers_and_resumes_exactly():
    z = [make_views(16, 6, seed=50 + t, dtype=torch.float32) for t in range(4)]
    a = WeibullBetaState()
    for z1, z2 in z[:2]:
        weince_loss(z1, z2, recipe="released", state=a)
    assert set(a.state_dict()) == {"beta", "beta_hat", "r2", "steps"}
    b = WeibullBetaState()
    b.load_state_dict(a.state_dict())
    for z1, z2 in z[2:]:
        la = weince_loss(z1, z2, recipe="released", state=a)
        lb = weince_loss(z1, z2, recipe="released", state=b)
        assert torch.equal(la, lb)
    for name in ("beta", "beta_hat", "r2", "steps"):
        assert torch.equal(getattr(a, name), getattr(b, name)), name
    assert int(a.steps) == 4 and a.beta.dtype == torch.float64


def test_state_validation():
    with pytest.raises(ValueError, match="config must be a ReleasedConfig"):
        WeibullBetaState({"beta_init": 4.0})  # type: ignore[arg-type]


@pytest.mark.parametrize("case", ["random", "one hot row", "ties", "tiny"])
def test_global_top_from_sorted_rows_is_exact(case):
    from theory.weince.recipe import _global_top_np

    rng = np.random.default_rng(3)
    a = np.tanh(rng.normal(0.0, 0.4, (200, 198))).astype(np.float32)
    if case == "one hot row":  # one anchor holds more of the global top than the shortcut keeps
        a[7] = np.float32(0.999) - np.arange(198, dtype=np.float32) * 1e-5
    if case == "ties":
        a = np.round(a, 1)
    if case == "tiny":
        a = a[:4, :6]
    srt = np.sort(a, axis=1)
    for k in (1, 40, 1980, a.size):
        if k > a.size:
            continue
        want = np.sort(a.ravel())[::-1][:k].astype(np.float64)
        assert np.array_equal(_global_top_np(srt, k), want), (case, k)


def test_top_m_indices_with_and_without_ties():
    from theory.weince.loss import _top_index_np

    rng = np.random.default_rng(4)
    for a in (np.tanh(rng.normal(0, 0.4, (64, 62))).astype(np.float32), np.round(rng.random((64, 62)), 1)):
        srt = np.sort(a, axis=1)
        for M in (1, 10, 61):
            idx = _top_index_np(a, srt, M)
            got = np.sort(np.take_along_axis(a, idx, axis=1), axis=1)
            want = np.sort(torch.topk(torch.from_numpy(a), M, dim=1).values.numpy(), axis=1)
            assert idx.shape == (64, M) and np.array_equal(got, want)
            assert all(len(set(r)) == M for r in idx.tolist())  # distinct columns


def test_released_recipe_at_the_benchmark_size_matches_the_device_path(monkeypatch):
    # 2N = 400: the beta fit takes its shortcut through the sorted rows (m < K)
    import theory.weince._fast as W

    z1, z2 = make_views(200, 16, seed=44, dtype=torch.float32)
    out = []
    for fast in (True, False):
        monkeypatch.setattr(W, "_NUMPY_FAST", fast)
        state = WeibullBetaState()
        loss = weince_loss(z1, z2, recipe="released", state=state)
        out.append((loss, float(state.beta), float(state.beta_hat), float(state.r2)))
    (l0, b0, h0, r0), (l1, b1, h1, r1) = out
    assert torch.allclose(l0, l1, rtol=1e-5, atol=1e-6)
    assert abs(b0 - b1) < 1e-9 and abs(h0 - h1) < 1e-6 and abs(r0 - r1) < 1e-9
