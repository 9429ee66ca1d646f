"""The Hessian at NC of the open problem O1b (theory.hcl.nc_hessian), against finite differences."""

from __future__ import annotations

import math

import pytest
import torch

from theory.hcl.landscape import batch_loss, nc_embeddings
from theory.hcl.nc_hessian import (
    etf_split_frame,
    hessian_at_nc,
    quadratic_form,
    radial_beta_expr,
    radial_slope,
    radial_slope_expr,
    saddle_beta,
    split_curvature,
    split_curvature_expr,
    split_direction,
)


def _geodesic(z, xi, eps):
    """Each row of z moved along its great circle in the direction of xi's row (tangent)."""
    step = xi.norm(dim=1, keepdim=True)
    unit = torch.where(step > 0, xi / step.clamp_min(1e-300), torch.zeros_like(xi))
    return torch.cos(eps * step) * z + torch.sin(eps * step) * unit


@pytest.mark.parametrize("setting,beta", [("unsupervised", 0.0), ("unsupervised", 2.0), ("supervised", 3.0)])
def test_quadratic_form_against_finite_differences_along_geodesics(setting, beta):
    C, n = 4, 2
    z, labels = nc_embeddings(C, n)
    g = torch.Generator().manual_seed(11)
    xi = torch.randn(z.shape, generator=g, dtype=torch.float64)
    xi -= (xi * z).sum(1, keepdim=True) * z
    xi /= xi.norm()

    def f(eps):
        return float(batch_loss(_geodesic(z, xi, eps), labels, setting=setting, beta=beta))

    h = 1e-4
    fd = (f(h) - 2 * f(0.0) + f(-h)) / h**2
    assert quadratic_form(setting, C, n, beta, xi) == pytest.approx(fd, abs=1e-6)


def test_smallest_eigenvalue_against_a_finite_difference_hessian():
    """The tangent-space Hessian built from central differences of the gradient (no autograd
    second derivatives) has the same smallest eigenvalue off the rotations."""
    C, n, beta = 3, 2, 2.0
    z, labels = nc_embeddings(C, n)
    B, d = z.shape

    def grad(x):
        x = x.clone().requires_grad_(True)
        (gr,) = torch.autograd.grad(batch_loss(x.view(B, d), labels, setting="unsupervised", beta=beta), x)
        return gr

    x0 = z.reshape(-1)
    h = 1e-5
    H = torch.stack(
        [(grad(x0 + h * e) - grad(x0 - h * e)) / (2 * h) for e in torch.eye(B * d, dtype=torch.float64)]
    )
    H = 0.5 * (H + H.T)
    g0 = grad(x0).view(B, d)
    # tangent basis of the circle S^1 at each point, and the rotation direction (d = 2: one generator)
    T = torch.stack([torch.stack([-z[i, 1], z[i, 0]]) for i in range(B)])  # (B, 2) unit tangents
    P = torch.zeros(B * d, B, dtype=torch.float64)
    for i in range(B):
        P[i * d : (i + 1) * d, i] = T[i]
    Hr = P.T @ H @ P - torch.diag((z * g0).sum(1))
    rot = torch.ones(B, dtype=torch.float64) / math.sqrt(B)  # every point rotates by the same angle
    Q = torch.linalg.qr(torch.cat([rot[:, None], torch.eye(B, dtype=torch.float64)], dim=1))[0][:, 1:]
    lam_fd = float(torch.linalg.eigvalsh(Q.T @ Hr @ Q)[0])
    res = hessian_at_nc("unsupervised", C, n, beta)
    assert res.rotation_dim == 1 and res.tangent_dim == B
    assert res.min_eigenvalue == pytest.approx(lam_fd, abs=1e-7)


def test_nc_is_critical_and_rotations_are_zero_modes():
    for C, beta in ((3, 0.0), (5, 1.0), (6, 4.0)):
        r = hessian_at_nc("unsupervised", C, 2, beta)
        assert r.grad_tangent < 1e-12 and r.rotation_residual < 1e-10
        assert r.rotation_dim == (C - 1) * (C - 2) // 2


@pytest.mark.parametrize("C", [3, 4, 6])
def test_scl_hscl_ucl_have_no_negative_curvature_at_nc(C):
    assert hessian_at_nc("supervised", C, 2, 0.0).min_eigenvalue > 1e-3
    assert hessian_at_nc("unsupervised", C, 2, 0.0).min_eigenvalue > 1e-3
    for beta in (1.0, 5.0, 30.0):
        assert hessian_at_nc("supervised", C, 2, beta).min_eigenvalue > 1e-3


def test_hucl_becomes_a_saddle_and_the_threshold_grows_with_c():
    b3, mins = saddle_beta("unsupervised", 3, 2, (0.0, 0.5, 1.0, 2.0), margin=1e-8)
    assert mins[0] > 0 and mins[-1] < 0 and 0.5 < b3 <= 1.0
    assert hessian_at_nc("unsupervised", 3, 2, b3 - 1e-4).min_eigenvalue > 0
    assert hessian_at_nc("unsupervised", 3, 2, b3 + 1e-4).min_eigenvalue < 0
    b5, _ = saddle_beta("unsupervised", 5, 2, (0.0, 0.5, 1.0, 2.0), margin=1e-8)
    assert b5 > b3
    none, m = saddle_beta("supervised", 3, 2, (0.0, 1.0, 10.0), margin=1e-8)
    assert math.isnan(none) and len(m) == 3


def test_split_frame_is_orthogonal_to_the_etf():
    v, w = etf_split_frame(5)
    assert torch.allclose((v * w).sum(1), torch.zeros(5, dtype=torch.float64), atol=1e-14)
    assert torch.allclose(w.norm(dim=1), torch.ones(5, dtype=torch.float64))
    assert torch.allclose(
        v @ v.T, torch.full((5, 5), -0.25, dtype=torch.float64) + 1.25 * torch.eye(5, dtype=torch.float64)
    )


@pytest.mark.parametrize("beta", [0.0, 0.75, 3.0])
def test_sympy_split_curvature_equals_autograd_and_the_hessian_form(beta):
    import sympy as sp

    expr = split_curvature_expr("unsupervised", 3)
    b = sorted(expr.free_symbols, key=str)[0]
    exact = float(expr.subs(b, sp.nsimplify(beta)).evalf(30))
    num = split_curvature("unsupervised", 3, 2, beta)
    assert exact == pytest.approx(num, abs=1e-12)
    assert quadratic_form("unsupervised", 3, 2, beta, split_direction(3, 2)) == pytest.approx(num, abs=1e-12)
    assert hessian_at_nc("unsupervised", 3, 2, beta).min_eigenvalue <= num + 1e-12


def test_radial_slope_closed_form_and_threshold():
    import sympy as sp

    expr = radial_slope_expr(4)
    b = sorted(expr.free_symbols, key=str)[0]
    for beta in (0.0, 0.5, 2.0):
        assert float(expr.subs(b, beta)) == pytest.approx(radial_slope(4, 2, beta), abs=1e-12)
    root = radial_beta_expr(4, guess=1.0)
    assert radial_slope(4, 2, root - 1e-6) < 0 < radial_slope(4, 2, root + 1e-6)
    assert float(sp.N(expr.subs(b, root))) == pytest.approx(0.0, abs=1e-12)


@pytest.mark.parametrize(
    "call,name",
    [
        (lambda: hessian_at_nc("weak", 3, 2, 1.0), "setting"),
        (lambda: hessian_at_nc("unsupervised", 3, 2, -1.0), "beta"),
        (lambda: hessian_at_nc("unsupervised", 3, 2, 1.0, psi="triplet"), "psi"),
        (lambda: hessian_at_nc("unsupervised", 1, 2, 1.0), "num_classes"),
        (lambda: split_direction(3, 3), "n"),
        (lambda: etf_split_frame(2), "num_classes"),
        (lambda: saddle_beta("unsupervised", 3, 2, (1.0, 0.5), margin=1e-8), "betas"),
        (lambda: quadratic_form("unsupervised", 3, 2, 1.0, torch.zeros(2, 2)), "xi"),
    ],
)
def test_bad_inputs_raise(call, name):
    with pytest.raises(ValueError, match=name):
        call()
