"""Second-order analysis of the batch losses at Neural Collapse: the Hessian on the sphere.

docs/open_problems.md#o1b-the-hessian-at-nc (Jiang et al., arXiv 2311.05139, open problem "a
tight lower bound for HUCL"). The loss is that of :func:`theory.hcl.landscape.batch_loss` (the
exact-expectation estimator, tilt weights differentiated), a function of the ``B = C n``
embeddings, each on the unit sphere ``S^(d-1)``.

* :func:`hessian_at_nc`: the **Riemannian Hessian** on the product of spheres at the NC batch,
  ``Hess f[xi, xi] = xi^T (nabla^2 f) xi - sum_i (z_i . nabla_i f) |xi_i|^2`` for tangent
  ``xi`` (``xi_i . z_i = 0``; the second term is the curvature of the sphere), restricted to the
  complement of the **symmetry directions**: the global rotations ``xi_i = A z_i`` (``A``
  skew-symmetric), which leave every inner product and therefore the loss unchanged. Its smallest
  eigenvalue decides: ``> 0`` a strict local minimum (up to rotation), ``< 0`` a saddle. NC is
  always a critical point on the sphere (by symmetry the Euclidean gradient of ``z_i`` is
  parallel to ``z_i``); the tangential gradient is returned as a check.
* :func:`saddle_beta`: the smallest ``beta`` on a grid at which the smallest eigenvalue is below
  ``-margin``, refined by bisection.
* :func:`split_curvature` / :func:`split_curvature_expr`: the curvature along one explicit
  perturbation, the **within-class split** (``n`` even): sample ``k`` of class ``c`` moves along
  the great circle ``cos(eps) v_c + sigma_k sin(eps) w_c`` with ``sigma_k = (-1)^k`` and
  ``w_c = (e_(c+1) - e_(c+2)) / sqrt(2)`` in the ``R^C`` coordinates of the ETF
  (``v_c ∝ e_c - 1/C``; indices mod ``C``). Numerically the Rayleigh quotient of the Hessian;
  symbolically (sympy, exact) ``d^2/d eps^2 L`` at 0 as an expression in ``beta``.
* :func:`radial_slope` / :func:`radial_slope_expr`: the unit-ball counterpart. NC lies on the
  ball's boundary; it is a KKT point of the ball iff ``d/dr L(r NC)`` at ``r = 1`` is ``<= 0``
  (every ``z_i . nabla_i f`` is equal, by symmetry). The closed form: with ``a = -C/(C-1)``,
  ``L(r) = log(1 + k (q_r + (1 - q_r) e^(a r^2 / tau)))``, ``q_r = sigmoid(beta r^2 C/(C-1) -
  log(C-1))`` (``k = 1`` mean form, ``K`` sum form; the HUCL batch value of a scaled ETF).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from theory.hcl.landscape import SMOOTH_PSI_FORMS, batch_loss, nc_embeddings
from theory.options import HCL_TAU, NUM_NEGATIVES, SETTINGS
from theory.validation import integer, one_of, real

__all__ = [
    "HessianAtNC",
    "etf_split_frame",
    "hessian_at_nc",
    "quadratic_form",
    "saddle_beta",
    "split_direction",
    "split_curvature",
    "split_curvature_expr",
    "radial_slope",
    "radial_slope_expr",
    "radial_beta_expr",
]

F64 = torch.float64


@dataclass(frozen=True)
class HessianAtNC:
    """The Riemannian Hessian of the loss at the NC batch, symmetry directions removed.

    Attributes:
        eigenvalues: ascending eigenvalues on the complement of the rotations (tangent space).
        min_eigenvalue: the smallest one.
        rotation_dim: the dimension of the removed rotation span.
        tangent_dim: the dimension of the tangent space ``B (d - 1)``.
        grad_tangent: the largest tangential gradient entry at NC (0 up to rounding: a critical point).
        radial: ``z_i . nabla_i f`` (equal for every ``i`` by symmetry; the ball's KKT multiplier).
        rotation_residual: largest ``|Hess xi|`` over the unit rotation directions (0: exact zero modes).
    """

    eigenvalues: np.ndarray
    min_eigenvalue: float
    rotation_dim: int
    tangent_dim: int
    grad_tangent: float
    radial: float
    rotation_residual: float


def _loss_kw(setting: str, beta: float, psi: str, tau: float, num_negatives: int) -> dict[str, Any]:
    one_of("setting", setting, SETTINGS)
    one_of("psi", psi, SMOOTH_PSI_FORMS)
    return dict(
        setting=setting,
        beta=real("beta", beta, lo=0.0),
        psi=psi,
        tau=real("tau", tau, lo=0.0, lo_open=True),
        num_negatives=integer("num_negatives", num_negatives, lo=1),
    )


def _tangent_bases(z: torch.Tensor) -> torch.Tensor:
    """Orthonormal bases ``(B, d, d-1)`` of the tangent spaces ``z_i^perp`` of unit rows ``z_i``."""
    d = z.shape[1]
    proj = torch.eye(d, dtype=z.dtype)[None] - z[:, :, None] * z[:, None, :]
    _, vecs = torch.linalg.eigh(proj)  # eigenvalues 0 (z_i), then 1 (d - 1 times)
    out: torch.Tensor = vecs[:, :, 1:]
    return out


def _rotation_span(z: torch.Tensor, T: torch.Tensor) -> torch.Tensor:
    """Orthonormal basis ``(B (d-1), r)`` of the rotation directions ``A z_i``, in tangent coordinates."""
    B, d = z.shape
    cols = []
    for a in range(d):
        for b in range(a + 1, d):
            xi = torch.zeros(B, d, dtype=z.dtype)
            xi[:, a], xi[:, b] = z[:, b], -z[:, a]  # (E_ab - E_ba) z_i
            cols.append(torch.einsum("bdk,bd->bk", T, xi).reshape(-1))
    M = torch.stack(cols, dim=1)
    U, s, _ = torch.linalg.svd(M, full_matrices=False)
    rank = int((s > 1e-10 * max(1.0, float(s.max()))).sum())
    out: torch.Tensor = U[:, :rank]
    return out


def hessian_at_nc(
    setting: str,
    num_classes: int,
    n: int,
    beta: float,
    *,
    psi: str = "mean",
    tau: float = HCL_TAU,
    num_negatives: int = NUM_NEGATIVES,
    d: int | None = None,
) -> HessianAtNC:
    """The Riemannian Hessian at the NC batch (module docstring), float64, autograd.

    Args:
        setting: ``"supervised"`` (SCL at ``beta = 0``, HSCL) or ``"unsupervised"`` (UCL, HUCL).
        num_classes: ``C >= 2``.
        n: samples per class.
        beta: hardness ``>= 0``.
        psi: ``"mean"`` or ``"sum"``.
        tau: temperature.
        num_negatives: ``K`` (sum form).
        d: dimension ``>= C - 1`` (default ``C - 1``).

    Returns:
        A :class:`HessianAtNC`.

    Raises:
        ValueError: an argument out of range (named).
    """
    kw = _loss_kw(setting, beta, psi, tau, num_negatives)
    z, labels = nc_embeddings(num_classes, n, d)
    B, dd = z.shape

    def f(x: torch.Tensor) -> torch.Tensor:
        return batch_loss(x.view(B, dd), labels, **kw)

    x = z.reshape(-1).clone().requires_grad_(True)
    (g,) = torch.autograd.grad(f(x), x)
    H = torch.autograd.functional.hessian(f, z.reshape(-1).clone())  # type: ignore[no-untyped-call]
    g = g.view(B, dd)
    T = _tangent_bases(z)
    P = torch.block_diag(*T)  # type: ignore[no-untyped-call]  # (B d, B (d-1))
    radial = (z * g).sum(1)
    Hr = P.T @ H @ P - torch.diag(radial.repeat_interleave(dd - 1))
    Hr = 0.5 * (Hr + Hr.T)
    g_tan = torch.einsum("bdk,bd->bk", T, g)
    Rot = _rotation_span(z, T)
    rot_res = float((Hr @ Rot).norm(dim=0).max()) if Rot.shape[1] else 0.0
    # orthonormal complement of the rotation span
    full, _ = torch.linalg.qr(torch.cat([Rot, torch.eye(Hr.shape[0], dtype=F64)], dim=1))
    Q = full[:, Rot.shape[1] :]
    ev = torch.linalg.eigvalsh(Q.T @ Hr @ Q).numpy()
    return HessianAtNC(
        eigenvalues=ev,
        min_eigenvalue=float(ev[0]) if ev.size else math.nan,
        rotation_dim=int(Rot.shape[1]),
        tangent_dim=int(Hr.shape[0]),
        grad_tangent=float(g_tan.abs().max()),
        radial=float(radial.mean()),
        rotation_residual=rot_res,
    )


def quadratic_form(
    setting: str,
    num_classes: int,
    n: int,
    beta: float,
    xi: torch.Tensor,
    *,
    psi: str = "mean",
    tau: float = HCL_TAU,
    num_negatives: int = NUM_NEGATIVES,
) -> float:
    """``Hess f[xi, xi] = xi^T (nabla^2 f) xi - sum_i (z_i . nabla_i f) |xi_i|^2`` at the NC batch.

    A Hessian-vector product (double backward), independent of the eigen-decomposition of
    :func:`hessian_at_nc`; ``xi`` ``(C n, C - 1)`` is projected onto the tangent space first.
    """
    kw = _loss_kw(setting, beta, psi, tau, num_negatives)
    z, labels = nc_embeddings(num_classes, n)
    xi = xi.to(F64)
    if xi.shape != z.shape:
        raise ValueError(f"xi must have shape {tuple(z.shape)}, got {tuple(xi.shape)}")
    xi = xi - (xi * z).sum(1, keepdim=True) * z
    x = z.clone().requires_grad_(True)
    (g,) = torch.autograd.grad(batch_loss(x, labels, **kw), x, create_graph=True)
    (hv,) = torch.autograd.grad((g * xi).sum(), x)
    return float((hv * xi).sum() - ((z * g.detach()).sum(1) * (xi * xi).sum(1)).sum())


def saddle_beta(
    setting: str,
    num_classes: int,
    n: int,
    betas: tuple[float, ...],
    *,
    margin: float,
    psi: str = "mean",
    tau: float = HCL_TAU,
    num_negatives: int = NUM_NEGATIVES,
    d: int | None = None,
    bisections: int = 20,
) -> tuple[float, list[float]]:
    """The smallest ``beta`` at which NC is a saddle: min eigenvalue ``< -margin``.

    Scans ``betas`` (ascending) and bisects ``bisections`` times between the last grid point that
    is not a saddle and the first that is (assuming one sign change there).

    Returns:
        ``(beta_saddle, min_eigenvalues)``: ``beta_saddle`` is NaN if no grid point is a saddle
        (the scan then covers every grid point); the list holds the smallest eigenvalue at each
        scanned grid point (the scan stops at the first saddle).
    """
    if list(betas) != sorted(betas) or not betas:
        raise ValueError(f"betas must be a non-empty ascending tuple, got {betas!r}")
    margin = real("margin", margin, lo=0.0)

    def lam(b: float) -> float:
        return hessian_at_nc(
            setting, num_classes, n, b, psi=psi, tau=tau, num_negatives=num_negatives, d=d
        ).min_eigenvalue

    mins: list[float] = []
    for i, b in enumerate(betas):
        mins.append(lam(b))
        if mins[-1] < -margin:
            if i == 0:
                return float(b), mins
            lo, hi = float(betas[i - 1]), float(b)
            for _ in range(bisections):
                mid = 0.5 * (lo + hi)
                lo, hi = (lo, mid) if lam(mid) < -margin else (mid, hi)
            return hi, mins
    return math.nan, mins


def etf_split_frame(num_classes: int, d: int | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """The ETF ``v`` of :func:`theory.geometry.simplex_etf` and the split directions ``w`` in its coordinates.

    ``simplex_etf`` is the centred, rescaled standard basis of ``R^C`` in an orthonormal basis of
    the sum-zero subspace; the same linear map carries ``w_c = (e_(c+1) - e_(c+2)) / sqrt(2)`` to
    ``R^d``, so that the numerical frame matches the exact one of :func:`split_curvature_expr`.

    Shape:
        -> ``v`` ``(C, d)``, ``w`` ``(C, d)`` (unit rows, ``w_c . v_c = 0``).
    """
    C = integer("num_classes", num_classes, lo=3)
    v, _ = nc_embeddings(C, 1, d)
    E = (torch.eye(C, dtype=F64) - 1.0 / C) * math.sqrt(C / (C - 1))  # rows: exact ETF in R^C
    Mmap = torch.linalg.pinv(E) @ v  # R^C (sum-zero part) -> R^d, E @ Mmap = v
    W = torch.zeros(C, C, dtype=F64)
    for c in range(C):
        W[c, (c + 1) % C], W[c, (c + 2) % C] = 1 / math.sqrt(2), -1 / math.sqrt(2)
    return v, W @ Mmap


def split_direction(num_classes: int, n: int, d: int | None = None) -> torch.Tensor:
    """The unit tangent direction of the within-class split at the NC batch (module docstring).

    Shape:
        -> ``(C n, d)``, normalised to unit Frobenius norm.
    """
    n = integer("n", n, lo=2)
    if n % 2:
        raise ValueError(f"n must be even for the within-class split, got {n}")
    _, w = etf_split_frame(num_classes, d)
    sign = torch.tensor([(-1.0) ** k for k in range(n)], dtype=F64)
    xi = (w[:, None, :] * sign[None, :, None]).reshape(-1, w.shape[1])
    out: torch.Tensor = xi / xi.norm()
    return out


def split_curvature(
    setting: str,
    num_classes: int,
    n: int,
    beta: float,
    *,
    psi: str = "mean",
    tau: float = HCL_TAU,
    num_negatives: int = NUM_NEGATIVES,
) -> float:
    """``d^2/d eps^2 L`` at 0 along the geodesic split with ``|xi| = 1`` (autograd, float64, ``d = C - 1``)."""
    kw = _loss_kw(setting, beta, psi, tau, num_negatives)
    z, labels = nc_embeddings(num_classes, n)
    xi = split_direction(num_classes, n)
    step = xi.norm(dim=1, keepdim=True)
    unit = xi / step

    eps = torch.zeros((), dtype=F64, requires_grad=True)
    zz = torch.cos(eps * step) * z + torch.sin(eps * step) * unit
    (g,) = torch.autograd.grad(batch_loss(zz, labels, **kw), eps, create_graph=True)
    (h,) = torch.autograd.grad(g, eps)
    return float(h)


def split_curvature_expr(
    setting: str,
    num_classes: int,
    *,
    psi: str = "mean",
    tau: float = HCL_TAU,
    num_negatives: int = NUM_NEGATIVES,
) -> Any:
    """Exact (sympy) curvature along the within-class split, ``n = 2``, as an expression in ``beta``.

    The batch of ``2 C`` points ``cos(eps / sqrt(2C)) v_c ± sin(eps / sqrt(2C)) w_c`` (a unit total direction)
    in ``R^C``, the loss written out term by term (anchors, self-included positives, the tilted
    negatives), differentiated twice in ``eps`` and evaluated at 0.

    Returns:
        A sympy expression in the symbol ``beta`` (``sympy.Symbol("beta", nonnegative=True)``).
    """
    import sympy as sp  # lazy: sympy only for the exact curvature

    one_of("setting", setting, SETTINGS)
    one_of("psi", psi, SMOOTH_PSI_FORMS)
    C = integer("num_classes", num_classes, lo=3)
    beta, eps = sp.Symbol("beta", nonnegative=True), sp.Symbol("eps", real=True)
    tau_s, shift = sp.nsimplify(tau), (sp.Integer(num_negatives) if psi == "sum" else sp.Integer(1))
    s = sp.sqrt(sp.Rational(C, C - 1))
    V = [[s * ((1 if j == c else 0) - sp.Rational(1, C)) for j in range(C)] for c in range(C)]
    W = [[0] * C for _ in range(C)]
    for c in range(C):
        W[c][(c + 1) % C], W[c][(c + 2) % C] = 1 / sp.sqrt(2), -1 / sp.sqrt(2)
    a = eps / sp.sqrt(2 * C)  # each of the 2C points moves by |xi_i| = 1/sqrt(2C): |xi| = 1
    # cos(a) = 1 - a^2/2 + O(a^4), sin(a) = a + O(a^3): exact to the second order in eps
    cos_a, sin_a = 1 - a**2 / 2, a
    pts, labs = [], []
    for c in range(C):
        for sg in (1, -1):
            pts.append([cos_a * V[c][j] + sg * sin_a * W[c][j] for j in range(C)])
            labs.append(c)
    N = len(pts)
    S = [[sp.expand(sum(pts[i][k] * pts[m][k] for k in range(C))) for m in range(N)] for i in range(N)]
    terms = []
    for i in range(N):
        neg = [m for m in range(N) if setting == "unsupervised" or labs[m] != labs[i]]
        wts = [sp.exp(beta * S[i][m]) for m in neg]
        Z = sum(wts)
        for j in range(N):
            if labs[j] != labs[i]:
                continue
            inner = sum(w * sp.exp((S[i][m] - S[i][j]) / tau_s) for w, m in zip(wts, neg, strict=True)) / Z
            terms.append(sp.log(1 + shift * inner))
    L = sum(terms) / len(terms)
    return sp.diff(L, eps, 2).subs(eps, 0)


def radial_slope(
    num_classes: int,
    n: int,
    beta: float,
    *,
    psi: str = "mean",
    tau: float = HCL_TAU,
    num_negatives: int = NUM_NEGATIVES,
) -> float:
    """``d/dr L(r NC)`` at ``r = 1`` (HUCL, autograd): ``<= 0`` iff NC is a KKT point of the ball."""
    kw = _loss_kw("unsupervised", beta, psi, tau, num_negatives)
    z, labels = nc_embeddings(num_classes, n)
    r = torch.ones((), dtype=F64, requires_grad=True)
    (g,) = torch.autograd.grad(batch_loss(r * z, labels, **kw), r)
    return float(g)


def radial_slope_expr(
    num_classes: int, *, psi: str = "mean", tau: float = HCL_TAU, num_negatives: int = NUM_NEGATIVES
) -> Any:
    """Exact ``d/dr L(r NC)`` at ``r = 1`` (HUCL, module docstring) as a sympy expression in ``beta``."""
    import sympy as sp  # lazy: sympy only for the exact slope

    one_of("psi", psi, SMOOTH_PSI_FORMS)
    C = integer("num_classes", num_classes, lo=2)
    beta, r = sp.Symbol("beta", nonnegative=True), sp.Symbol("r", positive=True)
    tau_s = sp.nsimplify(tau)
    shift = sp.Integer(num_negatives) if psi == "sum" else sp.Integer(1)
    same = sp.exp(beta * r**2)
    other = (C - 1) * sp.exp(-beta * r**2 / (C - 1))
    q = same / (same + other)
    L = sp.log(1 + shift * (q + (1 - q) * sp.exp(-sp.Rational(C, C - 1) * r**2 / tau_s)))
    return sp.diff(L, r).subs(r, 1)


def radial_beta_expr(
    num_classes: int,
    *,
    psi: str = "mean",
    tau: float = HCL_TAU,
    num_negatives: int = NUM_NEGATIVES,
    guess: float = 1.0,
) -> float:
    """The root in ``beta`` of :func:`radial_slope_expr` (sympy ``nsolve``, 30 digits): NC stops being a KKT point of the ball."""
    import sympy as sp  # lazy: sympy only for the exact slope

    expr = radial_slope_expr(num_classes, psi=psi, tau=tau, num_negatives=num_negatives)
    beta = sorted(expr.free_symbols, key=str)[0]
    return float(sp.nsolve(expr, beta, guess, prec=30))
