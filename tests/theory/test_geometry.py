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


# ---------------------------------------------------------------------------------------------
# sound inputs: integer promotion, overflow- and underflow-safe norms, NaN rows, sizes and dtypes
def test_integer_input_is_promoted_not_truncated():
    out = normalize(torch.tensor([[3, 4]]), "sphere")
    assert out.dtype == torch.get_default_dtype()
    torch.testing.assert_close(out, torch.tensor([[0.6, 0.8]]))
    torch.testing.assert_close(normalize(torch.tensor([[3, 4]]), "ball"), torch.tensor([[0.6, 0.8]]))
    assert normalize(torch.tensor([[3, 4]]), "none").dtype == torch.get_default_dtype()


ROWS = {
    # name: (row, expected sphere row)
    "overflow": ([3e20, 4e20, 0.0], [0.6, 0.8, 0.0]),
    "near max": ([3e38, 3e38, 0.0], [math.sqrt(0.5), math.sqrt(0.5), 0.0]),
    "underflow": ([3e-30, 4e-30, 0.0], [0.6, 0.8, 0.0]),
    "denormal": ([1e-44, 0.0, 0.0], [1.0, 0.0, 0.0]),
}


@pytest.mark.parametrize("name", list(ROWS))
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_sphere_norm_without_overflow_or_underflow(name, dtype):
    row, want = ROWS[name]
    z = torch.tensor([row, [1.0, 2.0, 2.0]], dtype=dtype)
    out = normalize(z, "sphere")
    torch.testing.assert_close(out[0], torch.tensor(want, dtype=dtype), rtol=1e-6, atol=1e-7)
    torch.testing.assert_close(out[1], torch.tensor([1 / 3, 2 / 3, 2 / 3], dtype=dtype))
    ball = normalize(z, "ball")
    if name in ("overflow", "near max"):
        torch.testing.assert_close(ball[0], torch.tensor(want, dtype=dtype), rtol=1e-6, atol=1e-7)
    else:  # inside the ball: unchanged
        assert torch.equal(ball[0], z[0])


@pytest.mark.parametrize("value", [float("nan"), float("inf"), float("-inf")])
def test_nonfinite_rows_never_become_zero_rows(value):
    z = torch.tensor([[value, 1.0], [3.0, 4.0], [0.0, 0.0]])
    sphere = normalize(z, "sphere")
    assert torch.isnan(sphere[0]).all()
    assert not torch.isfinite(normalize(z, "ball")[0]).all()
    torch.testing.assert_close(sphere[1], torch.tensor([0.6, 0.8]))
    assert torch.equal(sphere[2], torch.zeros(2))  # the exact-zero row stays zero


def test_normalize_gradient_is_that_of_z_over_its_norm():
    g = torch.Generator().manual_seed(3)
    z0 = torch.randn(6, 4, generator=g, dtype=torch.float64) * 3
    w = torch.randn(6, 4, generator=g, dtype=torch.float64)
    for normalization in ["sphere", "ball"]:
        z1, z2 = z0.clone().requires_grad_(True), z0.clone().requires_grad_(True)
        (normalize(z1, normalization) * w).sum().backward()
        n = z2.norm(dim=1, keepdim=True)
        ref = z2 / (n if normalization == "sphere" else n.clamp(min=1.0))
        (ref * w).sum().backward()
        torch.testing.assert_close(z1.grad, z2.grad, atol=1e-14, rtol=1e-12)


def test_normalize_accepts_numpy():
    import numpy as np

    out = normalize(np.array([[3.0, 4.0]]), "sphere")
    assert isinstance(out, torch.Tensor) and out.dtype == torch.float64
    torch.testing.assert_close(out, torch.tensor([[0.6, 0.8]], dtype=torch.float64))


def test_simplex_etf_sizes_and_dtypes():
    import numpy as np

    v = simplex_etf(np.int64(4), np.int32(3))
    torch.testing.assert_close(v, simplex_etf(4, 3))
    assert etf_gram(np.int64(5)).shape == (5, 5)
    for bad in [torch.int64, torch.bool, "float64", None]:
        with pytest.raises(ValueError, match=r"^dtype must be a floating torch dtype"):
            simplex_etf(4, 3, dtype=bad)
        with pytest.raises(ValueError, match=r"^dtype must be a floating torch dtype"):
            etf_gram(4, dtype=bad)
    for bad in [4.0, True, np.float64(4)]:
        with pytest.raises(ValueError, match="num_classes must be an integer >= 2"):
            simplex_etf(bad, 3)
    with pytest.raises(ValueError, match="d must be an integer"):
        simplex_etf(4, 3.0)
    assert simplex_etf(4, 3, dtype=torch.float32).dtype == torch.float32
