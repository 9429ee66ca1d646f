"""Two-view InfoNCE (theory.infonce) against a per-anchor loop reference."""

import math

import pytest
import torch

from theory.infonce import info_nce, two_view_candidates


def reference_info_nce(z1, z2, tau):
    z = torch.cat([z1, z2])
    z = z / z.norm(dim=1, keepdim=True)
    A, N = z.shape[0], z1.shape[0]
    total = 0.0
    for i in range(A):
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
