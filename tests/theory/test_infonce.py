"""Two-view InfoNCE (theory.infonce) against a per-anchor loop reference."""

import math

import pytest
import torch

from theory.infonce import info_nce, two_view_candidates


def reference_info_nce(z1, z2, tau, anchors=None):
    """The loss (or the terms of ``anchors``, over the whole batch's 2N) anchor by anchor."""
    z = torch.cat([z1, z2])
    z = z / z.norm(dim=1, keepdim=True)
    A, N = z.shape[0], z1.shape[0]
    total = 0.0
    for i in range(A) if anchors is None else anchors.tolist():
        p = (i + N) % A
        den = sum(torch.exp(torch.dot(z[i], z[k]) / tau) for k in range(A) if k != i)
        total = total - torch.log(torch.exp(torch.dot(z[i], z[p]) / tau) / den)
    return total / A


@pytest.mark.parametrize("N", [2, 3, 8])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_info_nce_matches_loop(N, dtype):
    g = torch.Generator().manual_seed(N)
    z1, z2 = torch.randn(N, 5, generator=g, dtype=dtype), torch.randn(N, 5, generator=g, dtype=dtype)
    tol = 1e-12 if dtype == torch.float64 else 1e-5
    assert abs(float(info_nce(z1, z2, tau=0.3)) - float(reference_info_nce(z1, z2, 0.3))) < tol


def test_candidates_layout():
    N = 3
    z1, z2 = torch.randn(N, 4, dtype=torch.float64), torch.randn(N, 4, dtype=torch.float64)
    S, cand = two_view_candidates(z1, z2)
    A = 2 * N
    for i in range(A):
        cols = [(i + N) % A] + [k for k in range(A) if k not in (i, (i + N) % A)]
        assert torch.equal(cand[i], S[i, cols])


def test_info_nce_collapsed_equals_log_2n_minus_1():
    z = torch.ones(6, 4)
    assert float(info_nce(z, z, tau=0.5)) == pytest.approx(math.log(11), rel=1e-6)


def test_info_nce_validation():
    with pytest.raises(ValueError, match="tau"):
        info_nce(torch.ones(3, 2), torch.ones(3, 2), tau=0)
    with pytest.raises(ValueError, match="N >= 2"):
        info_nce(torch.ones(1, 2), torch.ones(1, 2))
    with pytest.raises(ValueError, match="same shape"):
        info_nce(torch.ones(3, 2), torch.ones(4, 2))


def test_info_nce_inputs():
    g = torch.Generator().manual_seed(0)
    z1, z2 = (
        torch.randn(4, 3, generator=g, dtype=torch.float64),
        torch.randn(4, 3, generator=g, dtype=torch.float64),
    )
    assert torch.equal(info_nce(z1.numpy(), z2.numpy()), info_nce(z1, z2))
    # rows whose norm overflows float32 are normalised, not zeroed
    big = (z1 * 1e20).float()
    torch.testing.assert_close(info_nce(big, z2.float()), info_nce(z1.float(), z2.float()))
    with pytest.raises(ValueError, match="z1/z2 is too large"):
        info_nce(big, z2.float(), normalize=False)
    bad = z1.clone()
    bad[0, 0] = float("nan")
    with pytest.raises(ValueError, match="must be finite"):
        info_nce(bad, z2)
    assert torch.isnan(info_nce(bad, z2, check_inputs=False))
    with pytest.raises(ValueError, match="^z1 is a meta tensor"):
        info_nce(z1.to("meta"), z2)


# ---------------------------------------------------------------------------------------------
# reference batches: the terms of some anchors (docs/hcl.md#reference-batches-anchors)


def _partition(A, seed):
    """A random partition of ``range(A)`` into 2 or 3 sorted, non-empty parts."""
    g = torch.Generator().manual_seed(seed)
    perm = torch.randperm(A, generator=g)
    cuts = sorted(torch.randperm(A - 1, generator=g)[: 1 + seed % 2].add(1).tolist())
    return [p.sort().values for p in torch.tensor_split(perm, cuts)]


@pytest.mark.parametrize("N", [2, 3, 8])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_info_nce_anchor_part_matches_loop(N, dtype):
    g = torch.Generator().manual_seed(10 + N)
    z1, z2 = torch.randn(N, 5, generator=g, dtype=dtype), torch.randn(N, 5, generator=g, dtype=dtype)
    anchors = torch.arange(0, 2 * N, 2)  # every other anchor, from both views
    tol = 1e-12 if dtype == torch.float64 else 1e-5
    got = info_nce(z1, z2, tau=0.3, anchors=anchors)
    assert abs(float(got) - float(reference_info_nce(z1, z2, 0.3, anchors))) < tol


@pytest.mark.parametrize("seed", [0, 1, 2, 3])
@pytest.mark.parametrize("N", [2, 3, 9])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_info_nce_partition_adds_up(N, dtype, seed):
    g = torch.Generator().manual_seed(seed)
    z1, z2 = torch.randn(N, 4, generator=g, dtype=dtype), torch.randn(N, 4, generator=g, dtype=dtype)
    a1, b1 = z1.clone().requires_grad_(True), z2.clone().requires_grad_(True)
    full = info_nce(a1, b1, tau=0.4)
    full.backward()
    a2, b2 = z1.clone().requires_grad_(True), z2.clone().requires_grad_(True)
    total = sum(info_nce(a2, b2, tau=0.4, anchors=part) for part in _partition(2 * N, seed))
    total.backward()
    tol = dict(rtol=1e-12, atol=1e-13) if dtype == torch.float64 else dict(rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(total, full, **tol)
    torch.testing.assert_close(a2.grad, a1.grad, **tol)
    torch.testing.assert_close(b2.grad, b1.grad, **tol)


def test_candidate_rows_of_anchors():
    g = torch.Generator().manual_seed(4)
    z1, z2 = (
        torch.randn(5, 3, generator=g, dtype=torch.float64),
        torch.randn(5, 3, generator=g, dtype=torch.float64),
    )
    S, cand = two_view_candidates(z1, z2)
    anchors = torch.tensor([1, 4, 5, 9])
    S_a, cand_a = two_view_candidates(z1, z2, anchors=anchors)
    assert S_a.shape == (4, 10) and cand_a.shape == (4, 9)
    torch.testing.assert_close(S_a, S[anchors], rtol=0, atol=1e-15)
    torch.testing.assert_close(cand_a, cand[anchors], rtol=0, atol=1e-15)


@pytest.mark.parametrize(
    "anchors,message",
    [
        (torch.tensor([0.0, 1.0]), "must be integers"),
        (torch.tensor([[0, 1]]), "1-D"),
        (torch.tensor([], dtype=torch.long), "at least one"),
        (torch.tensor([2, 1]), "sorted and unique"),
        (torch.tensor([1, 1]), "sorted and unique"),
        (torch.tensor([0, 6]), r"\[0, 6\)"),
        (torch.tensor([-1]), r"\[0, 6\)"),
    ],
)
def test_info_nce_invalid_anchors(anchors, message):
    z = torch.randn(3, 2, dtype=torch.float64)
    with pytest.raises(ValueError, match="anchors") as info:
        info_nce(z, z + 1, anchors=anchors)
    assert info.match(message)
