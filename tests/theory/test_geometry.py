import math

import pytest
import torch

from theory.geometry import Normalize, etf_gram, gram, normalize, simplex_etf


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_normalize_normalizations(dtype):
    g = torch.Generator().manual_seed(0)
    z = torch.randn(50, 7, generator=g, dtype=dtype) * torch.linspace(0.01, 3.0, 50, dtype=dtype)[:, None]
    norms = z.norm(dim=1)
    assert torch.equal(normalize(z, "none"), z)
    ball = normalize(z, "ball")
    for i in range(50):  # slow reference: rescale only rows outside the ball
        expected = z[i] / norms[i] if norms[i] > 1 else z[i]
        torch.testing.assert_close(ball[i], expected)
    sphere = normalize(z, "sphere")
    torch.testing.assert_close(sphere.norm(dim=1), torch.ones(50, dtype=dtype))
    assert torch.all(ball.norm(dim=1) <= 1 + 1e-6)


def test_sphere_is_safe_at_zero():
    z = torch.zeros(3, 4, requires_grad=True)
    out = normalize(z, "sphere")
    out.sum().backward()
    assert torch.isfinite(out).all() and torch.isfinite(z.grad).all()
    assert torch.equal(out.detach(), torch.zeros(3, 4))


def test_normalize_rejects_bad_normalization():
    with pytest.raises(ValueError, match="normalization"):
        normalize(torch.ones(2, 2), "cube")
    with pytest.raises(ValueError, match="normalization"):
        Normalize("l2")


def test_normalize_module_matches_function():
    m = Normalize("ball")
    z = torch.randn(5, 3) * 4
    assert torch.equal(m(z), normalize(z, "ball"))
    assert "ball" in repr(m)


@pytest.mark.parametrize("C", [2, 3, 10, 100])
@pytest.mark.parametrize("extra", [0, 3])
@pytest.mark.parametrize("rotate", [False, True])
def test_simplex_etf_properties(C, extra, rotate):
    d = C - 1 + extra
    g = torch.Generator().manual_seed(C) if rotate else None
    v = simplex_etf(C, d, generator=g)
    assert v.shape == (C, d)
    G = v @ v.T
    off = G[~torch.eye(C, dtype=torch.bool)]
    torch.testing.assert_close(torch.diagonal(G), torch.ones(C, dtype=torch.float64), atol=1e-12, rtol=0)
    torch.testing.assert_close(off, torch.full_like(off, -1.0 / (C - 1)), atol=1e-12, rtol=0)
    assert v.sum(dim=0).abs().max() < 1e-12
    torch.testing.assert_close(G, etf_gram(C), atol=1e-12, rtol=0)


def test_simplex_etf_rotation_is_random_but_seeded():
    a = simplex_etf(5, 6, generator=torch.Generator().manual_seed(1))
    b = simplex_etf(5, 6, generator=torch.Generator().manual_seed(1))
    c = simplex_etf(5, 6, generator=torch.Generator().manual_seed(2))
    assert torch.equal(a, b)
    assert not torch.allclose(a, c)


def test_simplex_etf_rejects_small_dimension():
    with pytest.raises(ValueError, match="d must be"):
        simplex_etf(10, 8)
    with pytest.raises(ValueError, match="num_classes must be"):
        simplex_etf(1, 3)


def test_etf_gram_cosines_match_spec():
    for C, cos in [(10, -0.1111), (100, -0.010101), (200, -0.0050251)]:
        assert math.isclose(float(etf_gram(C)[0, 1]), cos, abs_tol=1e-4)


def test_gram():
    z = torch.randn(4, 3, dtype=torch.float64)
    torch.testing.assert_close(gram(z), torch.einsum("id,jd->ij", z, z))
    with pytest.raises(ValueError):
        gram(torch.ones(3))


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_normalize_half_precision_zero_and_tiny_rows(dtype):
    z = torch.tensor([[0.0, 0.0], [1e-4, 0.0], [3.0, 4.0]], dtype=dtype, requires_grad=True)
    for normalization in ["ball", "sphere"]:
        out = normalize(z, normalization)
        assert out.dtype == dtype and torch.isfinite(out).all()
        out.sum().backward()
        assert torch.isfinite(z.grad).all()
        z.grad = None
    sphere = normalize(z, "sphere").float()
    torch.testing.assert_close(sphere[1:].norm(dim=1), torch.ones(2), atol=1e-2, rtol=0)
    assert torch.equal(sphere[0], torch.zeros(2))
