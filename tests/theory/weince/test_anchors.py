"""WeiNCE on a reference batch: ``weince_loss(..., anchors=..., gather=...)`` (core recipe).

The terms of some of the ``2N`` anchors, over the whole batch's ``2N``, with the gate of the whole
batch: per-anchor tails over all ``2N - 2`` negatives and the pivot ``rho0`` over the ``rho`` of
all ``2N`` anchors, gathered from the other parts as ``World.gather_nograd`` does in a multi-GPU
run (simulated here). Checked by the sum over a partition of the anchors (values and gradients),
the full call's gate restricted to the anchors, and a per-anchor loop
(docs/hcl.md#reference-batches-anchors, docs/weince.md#the-gate).
"""

from __future__ import annotations

import math

import pytest
import torch

import theory.weince._fast as fast
from tests.theory.weince.reference import (
    cosine_rows,
    make_views,
    ref_ce,
    ref_weince,
    sigmoid,
    tl,
    two_view_rows,
)
from theory.weince import GateConfig, WeiNCELoss, weince_loss


def _partition(A, seed):
    """A random partition of ``range(A)`` into 2 or 3 sorted, non-empty parts."""
    g = torch.Generator().manual_seed(seed)
    perm = torch.randperm(A, generator=g)
    cuts = sorted(torch.randperm(A - 1, generator=g)[: 1 + seed % 2].add(1).tolist())
    return [p.sort().values for p in torch.tensor_split(perm, cuts)]


def simulated_gathers(z1, z2, parts, **kw):
    """One ``gather`` per part that returns every part's ``rho``, concatenated in part order.

    As an all-gather across processes: a first pass records the float64 ``rho`` each part hands
    to its gather (its pivot is discarded), then each part's gather checks that it is handed the
    same values again and returns the concatenation of all of them.
    """
    A = 2 * z1.shape[0]
    rho: list[torch.Tensor] = []
    for anchors in parts:

        def record(r):
            rho.append(r.clone())
            return torch.zeros(A, dtype=torch.float64)  # a placeholder pool of the right shape

        weince_loss(z1.detach(), z2.detach(), anchors=anchors, gather=record, **kw)

    def gather(k):
        def fn(r):
            assert torch.equal(r, rho[k])
            return torch.cat(rho)

        return fn

    return [gather(k) for k in range(len(parts))]


@pytest.fixture(params=[True, False], ids=["numpy-fast-path", "device-path"])
def path(request, monkeypatch):
    """Run a test on the CPU fast path and on the torch-only (device) path."""
    monkeypatch.setattr(fast, "_NUMPY_FAST", request.param)
    return request.param


CASES = [
    # (N, gate fields)   why
    (2, {}),  # n_eff = 1 < 2: the lower-median pivot over all 2N anchors
    (3, {"q": 0.5}),
    (6, {"margin": 0.0}),
    (21, {"tail_frac": 0.5, "min_tail": 2, "margin": 40.0}),  # k_tail = 20, lam_AIC inside (0, 1)
]


@pytest.mark.parametrize("seed", [0, 1])
@pytest.mark.parametrize("N,fields", CASES)
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_partition_adds_up_to_the_batch(dtype, N, fields, seed, path):
    gate = GateConfig(**fields)
    z1, z2 = make_views(N, 5, seed=100 * N + seed, dtype=dtype)
    a1, b1 = z1.clone().requires_grad_(True), z2.clone().requires_grad_(True)
    full, diag = weince_loss(a1, b1, gate=gate, return_diagnostics=True)
    full.backward()
    parts = _partition(2 * N, seed)
    gathers = simulated_gathers(z1, z2, parts, gate=gate)
    a2, b2 = z1.clone().requires_grad_(True), z2.clone().requires_grad_(True)
    total = 0.0
    tol = dict(rtol=1e-11, atol=1e-12) if dtype == torch.float64 else dict(rtol=2e-5, atol=2e-6)
    for anchors, gather in zip(parts, gathers):
        part, d = weince_loss(a2, b2, gate=gate, anchors=anchors, gather=gather, return_diagnostics=True)
        total = total + part
        # the gate of each anchor is the whole batch's
        for name in ("lam", "lam_rho", "lam_aic", "rho"):
            torch.testing.assert_close(getattr(d, name), getattr(diag, name)[anchors], **tol)
        # dAIC is ill-conditioned (logs of small shortfalls): float32 round-off of the rows shows
        dAIC_tol = dict(rtol=1e-9, atol=1e-7) if dtype == torch.float64 else dict(rtol=1e-4, atol=1e-4)
        torch.testing.assert_close(d.dAIC, diag.dAIC[anchors], **dAIC_tol)
        torch.testing.assert_close(d.rho0, diag.rho0, **tol)
        assert (d.k_tail, d.n_eff) == (diag.k_tail, diag.n_eff)
    total.backward()
    torch.testing.assert_close(total, full, **tol)
    torch.testing.assert_close(a2.grad, a1.grad, **tol)
    torch.testing.assert_close(b2.grad, b1.grad, **tol)


@pytest.mark.parametrize("N,fields", CASES)
def test_without_gather_the_pivot_is_computed_over_all_anchors(N, fields, path):
    """gather=None computes the rho of all 2N anchors itself: the same part as with the gather."""
    gate = GateConfig(**fields)
    z1, z2 = make_views(N, 4, seed=N)
    parts = _partition(2 * N, 3)
    for anchors, gather in zip(parts, simulated_gathers(z1, z2, parts, gate=gate)):
        alone = weince_loss(z1, z2, gate=gate, anchors=anchors)
        gathered = weince_loss(z1, z2, gate=gate, anchors=anchors, gather=gather)
        torch.testing.assert_close(alone, gathered, rtol=1e-13, atol=1e-14)


@pytest.mark.parametrize("N", [2, 5, 17])
def test_anchor_part_matches_loop_reference(N, path):
    """The part is (1/2N) sum over the anchors of the reference CE with the reference lambda."""
    z1, z2 = make_views(N, 6, seed=7 * N)
    anchors = torch.arange(1, 2 * N, 3)
    _, lam, _, _, _, _, _ = ref_weince(z1, z2, tau=0.4)
    rows = two_view_rows(cosine_rows(z1, z2))
    eps = GateConfig().eps
    want = sum(ref_ce([tl(s, lam[i], 0.4, eps) for s in [rows[i][0], *rows[i][1]]]) for i in anchors.tolist())
    got = weince_loss(z1, z2, tau=0.4, anchors=anchors)
    assert abs(float(got) - want / (2 * N)) < 1e-13


def test_the_pivot_is_taken_over_what_gather_returns():
    """A pool of constant rho c gives rho0 = c and lam_rho_i = sigmoid(kappa log(c / rho_i))."""
    z1, z2 = make_views(6, 4, seed=2)
    c = 0.3
    anchors = torch.tensor([0, 5, 7])
    _, d = weince_loss(
        z1,
        z2,
        anchors=anchors,
        gather=lambda r: torch.full((12,), c, dtype=torch.float64),
        return_diagnostics=True,
    )
    kr = GateConfig().kappa_rho
    want = [sigmoid(kr * (math.log(c) - math.log(r))) for r in d.rho.tolist()]
    assert float(d.rho0) == pytest.approx(c, abs=1e-15)
    torch.testing.assert_close(d.lam_rho, torch.tensor(want, dtype=torch.float64), rtol=1e-13, atol=1e-15)


def test_module_forward_takes_anchors_and_gather():
    z1, z2 = make_views(4, 3, seed=5)
    anchors = torch.tensor([1, 2, 6])
    crit = WeiNCELoss()
    got = crit(z1, z2, anchors)
    assert crit.last_diagnostics.lam.shape == (3,)
    assert torch.equal(got, weince_loss(z1, z2, anchors=anchors))
    pool = weince_loss(z1, z2, return_diagnostics=True)[1].rho
    assert torch.equal(
        crit(z1, z2, anchors, lambda r: pool), weince_loss(z1, z2, anchors=anchors, gather=lambda r: pool)
    )


def test_released_recipe_and_misused_gather_are_rejected():
    from theory.weince import WeibullBetaState

    z1, z2 = make_views(4, 3, seed=6)
    anchors = torch.tensor([0, 1])
    with pytest.raises(ValueError, match="anchors.*released"):
        weince_loss(z1, z2, recipe="released", state=WeibullBetaState(), anchors=anchors)
    with pytest.raises(ValueError, match="anchors.*released"):
        WeiNCELoss(recipe="released")(z1, z2, anchors)
    with pytest.raises(ValueError, match="gather is only used with anchors"):
        weince_loss(z1, z2, gather=lambda r: r)
    with pytest.raises(ValueError, match="gather must return the rho of all 2N = 8 anchors"):
        weince_loss(z1, z2, anchors=anchors, gather=lambda r: r)  # only this part's rho


@pytest.mark.parametrize(
    "anchors,message",
    [
        (torch.tensor([0.5]), "must be integers"),
        (torch.tensor([[1]]), "1-D"),
        (torch.tensor([], dtype=torch.long), "at least one"),
        (torch.tensor([3, 2]), "sorted and unique"),
        (torch.tensor([8]), r"\[0, 8\)"),
    ],
)
def test_invalid_anchors_are_named(anchors, message):
    z1, z2 = make_views(4, 3, seed=8)
    with pytest.raises(ValueError, match="anchors") as info:
        weince_loss(z1, z2, anchors=anchors)
    assert info.match(message)


def test_non_finite_views_are_named_with_anchors():
    z1, z2 = make_views(4, 3, seed=9)
    z2[3, 1] = float("nan")  # a row outside the anchors: still a candidate of every anchor
    with pytest.raises(ValueError, match="z2 must be finite: row 3"):
        weince_loss(z1, z2, anchors=torch.tensor([0, 1]))
