"""Free-embedding landscape of the batch losses: a restart search for configurations that beat NC.

The open problem of docs/open_problems.md#o1-hucls-optimal-geometry-against-beta (Jiang et al.,
arXiv 2311.05139, "a tight lower bound for HUCL"): minimise the batch loss of
:func:`theory.hcl.contrastive_loss` (the exact-expectation estimator, float64) over **free**
per-sample embeddings: ``C = num_classes`` classes of ``n`` samples each (``B = C n``), in
dimension ``d`` (default ``C - 1``), on the unit sphere or in the unit ball, and compare the best
value found with the closed-form value at Neural Collapse (NC) and with the certified lower bound.

* The loss is a function of ``z`` alone: the tilt weights are **differentiated**
  (``detach_weights=False``), so the gradient is the gradient of the value that is minimised (the
  authors' detached weights give a different vector field that is the gradient of no function).
* Parametrisation (unconstrained, smooth): sphere ``z = u / |u|``; ball
  ``z = sin(s)^2 u / |u|`` (one extra parameter ``s`` per sample; ``sin^2`` maps ``R`` onto
  ``[0, 1]`` smoothly and reaches the boundary at a finite ``s = pi/2``, where the radial
  derivative vanishes: a boundary KKT point is a stationary point, and a boundary point whose
  radial gradient points inwards is a saddle in ``s`` that the search leaves).
* Optimiser: :func:`lbfgs`, a limited-memory BFGS with a per-run Armijo backtracking line search,
  vectorised over ``R`` restarts (one loss call evaluates all restarts: the run-batched kernel of
  :func:`~theory.hcl.contrastive_loss`).
* Restarts: half start at NC plus Gaussian noise (of several scales), half at random points
  (uniform directions; uniform ``s`` in the ball); all from one seeded ``torch.Generator``.

Any configuration's loss is an **upper bound** on the infimum over the searched class (up to the
float64 rounding of one evaluation), so a value below NC's by more than rounding is a certificate
that NC is not optimal, whether or not the optimiser converged.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import torch

from theory.collapse.paper import paper_conditions, within_class_variation
from theory.collapse.row import numerical_ranks
from theory.collapse.standard import etf_error
from theory.geometry import simplex_etf
from theory.hcl.losses import contrastive_loss
from theory.hcl.optima import hucl_at_nc_batch, plugin_value, scl_optimum
from theory.options import HCL_TAU, NORMALIZATIONS, NUM_NEGATIVES, PSI_FORMS, SETTINGS
from theory.validation import integer, one_of, real

__all__ = [
    "SEARCH_NORMALIZATIONS",
    "SMOOTH_PSI_FORMS",
    "nc_embeddings",
    "nc_value",
    "lower_bound",
    "embed",
    "batch_loss",
    "lbfgs",
    "geometry",
    "SearchResult",
    "search",
]

F64 = torch.float64

#: The normalisations of the search: the bounded ones of theory.options.NORMALIZATIONS (without
#: normalisation the loss has no minimum; it tends to its infimum as the norms grow).
SEARCH_NORMALIZATIONS: tuple[str, ...] = tuple(n for n in NORMALIZATIONS if n != "none")

#: The psi forms of the search and the Hessian: the twice-differentiable ones of
#: theory.options.PSI_FORMS (not the triplet hinge).
SMOOTH_PSI_FORMS: tuple[str, ...] = tuple(p for p in PSI_FORMS if p != "triplet")


def _check(num_classes: int, n: int, d: int | None) -> tuple[int, int, int]:
    C = integer("num_classes", num_classes, lo=2)
    n = integer("n", n, lo=1)
    d = C - 1 if d is None else integer("d", d, lo=1)
    if d < C - 1:
        raise ValueError(f"d must be >= num_classes - 1 = {C - 1} (an ETF must exist), got {d}")
    return C, n, d


def _check_loss_args(setting: str, psi: str, tau: float) -> tuple[str, str, float]:
    one_of("setting", setting, SETTINGS)
    one_of("psi", psi, SMOOTH_PSI_FORMS)
    tau = real("tau", tau, lo=0.0, lo_open=True)
    return setting, psi, tau


def nc_embeddings(num_classes: int, n: int, d: int | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """An exact NC batch: ``n`` copies of each vertex of the ETF of ``theory.geometry.simplex_etf``.

    Shape:
        -> ``z`` ``(C n, d)`` float64, ``labels`` ``(C n,)`` (class ``c`` in rows ``c n .. c n + n - 1``).
    """
    C, n, d = _check(num_classes, n, d)
    labels = torch.arange(C).repeat_interleave(n)
    return simplex_etf(C, d, dtype=F64)[labels], labels


def nc_value(
    setting: str,
    num_classes: int,
    n: int,
    beta: float,
    *,
    psi: str = "mean",
    tau: float = HCL_TAU,
    num_negatives: int = NUM_NEGATIVES,
) -> float:
    """Closed-form loss (expectation estimator) of the NC batch of ``n`` samples per class.

    Supervised (SCL / HSCL): :func:`~theory.hcl.optima.scl_optimum` for every ``beta``;
    unsupervised (UCL / HUCL): :func:`~theory.hcl.optima.hucl_at_nc_batch` (the plug-in value at
    the batch's collision probability, self-positives and self-negatives included).
    """
    setting, psi, tau = _check_loss_args(setting, psi, tau)
    C = integer("num_classes", num_classes, lo=2)
    n = integer("n", n, lo=1)
    beta = real("beta", beta, lo=0.0)
    if setting == "supervised":
        return scl_optimum(C, psi=psi, tau=tau, num_negatives=num_negatives)
    return hucl_at_nc_batch(
        [n] * C, beta, psi=psi, tau=tau, num_negatives=num_negatives, estimator="expectation"
    )


def lower_bound(
    setting: str,
    num_classes: int,
    *,
    psi: str = "mean",
    tau: float = HCL_TAU,
    num_negatives: int = NUM_NEGATIVES,
) -> float:
    """Certified lower bound of the balanced batch loss (expectation estimator), any ``beta``.

    Supervised: ``L*_SCL`` (attained at NC, every beta). Unsupervised: the UCL optimum in the
    plug-in form, ``log(1 + q + (1 - q) e^(a/tau))`` at ``q = 1/C`` (mean psi): Harris (the
    tilted law weights the increasing ``e^(t/tau)`` more, Chebyshev's association inequality)
    gives ``L_HUCL >= L_UCL``, and Jensen over the balanced classes (the pair law with
    self-positives is a product law within each class) gives ``L_UCL >= `` this value, attained at
    NC for ``beta = 0`` (docs/open_problems.md#o1c-a-bracket-on-the-tight-bound).
    """
    setting, psi, tau = _check_loss_args(setting, psi, tau)
    C = integer("num_classes", num_classes, lo=2)
    if setting == "supervised":
        return scl_optimum(C, psi=psi, tau=tau, num_negatives=num_negatives)
    return plugin_value(1.0 / C, C, psi=psi, tau=tau, num_negatives=num_negatives)


def embed(x: torch.Tensor, normalization: str) -> torch.Tensor:
    """The embeddings of the unconstrained parameters ``x`` (module docstring).

    Shape:
        sphere: ``x`` ``(..., B, d)`` -> ``(..., B, d)``; ball: ``x`` ``(..., B, d + 1)`` (last
        column ``s``) -> ``(..., B, d)``.
    """
    one_of("normalization", normalization, SEARCH_NORMALIZATIONS)
    if normalization == "sphere":
        z: torch.Tensor = x / torch.linalg.vector_norm(x, dim=-1, keepdim=True)
        return z
    u, s = x[..., :-1], x[..., -1:]
    z = torch.sin(s).square() * u / torch.linalg.vector_norm(u, dim=-1, keepdim=True)
    return z


def batch_loss(
    z: torch.Tensor,
    labels: torch.Tensor,
    *,
    setting: str,
    beta: float,
    psi: str = "mean",
    tau: float = HCL_TAU,
    num_negatives: int = NUM_NEGATIVES,
    check_inputs: bool = False,
) -> torch.Tensor:
    """The searched loss: :func:`theory.hcl.contrastive_loss`, expectation estimator, weights differentiated.

    Shape:
        ``z`` ``(B, d)`` or ``(R, B, d)``, ``labels`` ``(B,)`` -> ``()`` or ``(R,)``.
    """
    return contrastive_loss(
        z,
        labels,
        setting=setting,
        beta=beta,
        tau=tau,
        psi=psi,
        num_negatives=num_negatives,
        estimator="expectation",
        detach_weights=False,
        check_inputs=check_inputs,
    )


def lbfgs(
    fun: Any,
    x0: torch.Tensor,
    *,
    max_iter: int = 500,
    history: int = 10,
    gtol: float = 1e-10,
    ftol: float = 1e-15,
) -> tuple[torch.Tensor, torch.Tensor, int]:
    """Minimise ``R`` independent problems at once: L-BFGS with a per-run Armijo backtracking search.

    ``fun(x)`` maps ``x`` ``(R, m)`` to ``(R,)`` values (run ``r`` depends on row ``r`` only). A
    run stops when its largest gradient entry is below ``gtol``, when an accepted step lowers its
    value by less than ``ftol`` (relative), or when 40 halvings find no decrease; stopped runs
    keep their point. A non-descent direction resets the run's memory to steepest descent; pairs
    with ``s.y <= 0`` are skipped (no curvature condition in the line search).

    Returns:
        ``(x, f, iterations)``: the final points ``(R, m)``, their values ``(R,)``, iterations run.
    """
    max_iter = integer("max_iter", max_iter, lo=1)
    history = integer("history", history, lo=1)

    def value_grad(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        x = x.detach().requires_grad_(True)
        f = fun(x)
        (g,) = torch.autograd.grad(f.sum(), x)
        return f.detach(), g

    x = x0.detach().clone()
    R, m = x.shape
    f, g = value_grad(x)
    S = torch.zeros(R, history, m, dtype=x.dtype)
    Y = torch.zeros_like(S)
    rho = torch.zeros(R, history, dtype=x.dtype)
    active = torch.ones(R, dtype=torch.bool)
    it = 0
    while it < max_iter:
        it += 1
        active &= g.abs().amax(dim=1) > gtol
        if not bool(active.any()):
            break
        # two-loop recursion, memory slots ordered oldest..newest (zero rho: an empty slot)
        q = g.clone()
        alpha = torch.zeros(R, history, dtype=x.dtype)
        for j in range(history - 1, -1, -1):
            alpha[:, j] = rho[:, j] * (S[:, j] * q).sum(1)
            q -= alpha[:, j, None] * Y[:, j]
        yy = (Y[:, -1] * Y[:, -1]).sum(1)
        gamma = torch.where(rho[:, -1] > 0, 1.0 / (rho[:, -1] * yy).clamp_min(1e-300), 0.0)
        first = rho[:, -1] == 0
        gamma = torch.where(first, 1.0 / g.norm(dim=1).clamp_min(1.0), gamma)
        r = gamma[:, None] * q
        for j in range(history):
            b = rho[:, j] * (Y[:, j] * r).sum(1)
            r += (alpha[:, j] - b)[:, None] * S[:, j]
        p = -r
        slope = (g * p).sum(1)
        bad = ~(slope < 0)
        if bool(bad.any()):  # not a descent direction: steepest descent, memory cleared
            p[bad] = -g[bad] / g[bad].norm(dim=1, keepdim=True).clamp_min(1.0)
            rho[bad] = 0.0
            slope = (g * p).sum(1)
        step = torch.where(active, 1.0, 0.0).to(x.dtype)
        todo = active.clone()
        x_new, f_new, g_new = x.clone(), f.clone(), g.clone()
        for _ in range(40):
            if not bool(todo.any()):
                break
            xt = x + step[:, None] * p
            ft, gt = value_grad(xt)
            ok = todo & torch.isfinite(ft) & (ft <= f + 1e-4 * step * slope)
            x_new[ok], f_new[ok], g_new[ok] = xt[ok], ft[ok], gt[ok]
            todo &= ~ok
            step = torch.where(todo, step * 0.5, step)
        stalled = todo  # no decrease after 40 halvings
        moved = active & ~stalled
        s_k, y_k = x_new - x, g_new - g
        sy = (s_k * y_k).sum(1)
        upd = moved & (sy > 1e-300)
        if bool(upd.any()):
            S[upd] = torch.roll(S[upd], -1, dims=1)
            Y[upd] = torch.roll(Y[upd], -1, dims=1)
            rho[upd] = torch.roll(rho[upd], -1, dims=1)
            S[upd, -1], Y[upd, -1], rho[upd, -1] = s_k[upd], y_k[upd], 1.0 / sy[upd]
        small = moved & ((f - f_new) <= ftol * f.abs().clamp_min(1e-300))
        x, f, g = x_new, f_new, g_new
        active &= ~stalled & ~small
    return x, f, it


def geometry(z: torch.Tensor, labels: torch.Tensor) -> dict[str, float]:
    """The minimiser's geometry, with :mod:`theory.collapse`: NC metrics of one configuration.

    ``within_class_variation`` (P5), ``etf_mean`` (P3) and ``etf_error`` of the class means,
    ``rank_1e-2`` / ``rank_1e-4`` (numerical ranks of the centred means), ``mean_norm`` and
    ``min_norm`` of the embeddings, ``mean_norm_mu`` of the class means, and ``spectrum_min``
    (the smallest log-ratio of the class-mean spectrum over its first ``min(C - 1, d)`` entries).

    Shape:
        ``z`` ``(B, d)``, ``labels`` ``(B,)`` -> dict.
    """
    from theory.collapse.paper import class_mean_spectrum  # lazy: paper helpers only for this row

    C = int(labels.max()) + 1
    mu = torch.stack([z[labels == c].mean(0) for c in range(C)])
    norms = z.norm(dim=1)
    ranks = numerical_ranks(mu, (1e-2, 1e-4))
    spec = class_mean_spectrum(mu)[: min(C - 1, z.shape[1])]
    try:
        etf = etf_error(mu)
    except ValueError:  # all centred means zero
        etf = math.nan
    return {
        "within_class_variation": within_class_variation(z, labels),
        "etf_mean": paper_conditions(mu)["etf_mean"],
        "etf_error": etf,
        "rank_1e-2": float(ranks[0]),
        "rank_1e-4": float(ranks[1]),
        "mean_norm": float(norms.mean()),
        "min_norm": float(norms.min()),
        "mean_norm_mu": float(mu.norm(dim=1).mean()),
        "spectrum_min": float(spec.min()),
    }


@dataclass(frozen=True)
class SearchResult:
    """The outcome of :func:`search` for one ``(setting, C, n, d, normalization, psi, tau, beta)``.

    Attributes:
        best: the smallest loss found (re-evaluated with input checks at the returned ``z``).
        nc: the closed-form value at NC (:func:`nc_value`).
        nc_loss: the loss evaluated at the exact NC batch (:func:`nc_embeddings`).
        bound: the certified lower bound (:func:`lower_bound`).
        values: the final value of every restart, NC-plus-noise restarts first.
        z: the best configuration ``(B, d)``; ``labels`` its labels.
        geometry: :func:`geometry` of ``z``.
        iterations: L-BFGS iterations run.
    """

    best: float
    nc: float
    nc_loss: float
    bound: float
    values: tuple[float, ...]
    z: torch.Tensor
    labels: torch.Tensor
    geometry: dict[str, float] = field(default_factory=dict)
    iterations: int = 0

    @property
    def gain(self) -> float:
        """``(nc - best) / nc``: the relative margin by which the best configuration beats NC."""
        return (self.nc - self.best) / abs(self.nc)


def _starts(
    R: int, C: int, n: int, d: int, normalization: str, gen: torch.Generator, noise: tuple[float, ...]
) -> torch.Tensor:
    """``R`` starting parameter sets: NC plus noise (scales cycling through ``noise``) then random."""
    B = C * n
    v, _ = nc_embeddings(C, n, d)
    n_nc = (R + 1) // 2
    scales = torch.tensor([noise[i % len(noise)] for i in range(n_nc)], dtype=F64)
    u_nc = v[None] + scales[:, None, None] * torch.randn(n_nc, B, d, generator=gen, dtype=F64)
    u_rand = torch.randn(R - n_nc, B, d, generator=gen, dtype=F64)
    u = torch.cat([u_nc, u_rand])
    if normalization == "sphere":
        return u
    s_nc = math.pi / 2 + scales[:, None, None] * torch.randn(n_nc, B, 1, generator=gen, dtype=F64)
    s_rand = torch.rand(R - n_nc, B, 1, generator=gen, dtype=F64) * (math.pi / 2)
    return torch.cat([u, torch.cat([s_nc, s_rand])], dim=-1)


def search(
    num_classes: int,
    n: int,
    beta: float,
    *,
    setting: str = "unsupervised",
    normalization: str = "sphere",
    psi: str = "mean",
    tau: float = HCL_TAU,
    num_negatives: int = NUM_NEGATIVES,
    d: int | None = None,
    restarts: int = 8,
    seed: int = 0,
    noise: tuple[float, ...] = (0.03, 0.3),
    max_iter: int = 500,
) -> SearchResult:
    """Minimise the batch loss over free embeddings from ``restarts`` starts (module docstring).

    Args:
        num_classes: ``C >= 2``.
        n: samples per class, ``>= 1``.
        beta: hardness ``>= 0`` (``setting="supervised"``: HSCL, 0 is SCL; ``"unsupervised"``:
            HUCL, 0 is UCL).
        setting: ``"supervised"`` or ``"unsupervised"``.
        normalization: ``"sphere"`` or ``"ball"``.
        psi: ``"mean"`` or ``"sum"``.
        tau: temperature ``> 0``.
        num_negatives: ``K`` (the sum form's ``log K`` shift).
        d: embedding dimension ``>= C - 1`` (default ``C - 1``).
        restarts: number of starts ``>= 1``.
        seed: seed of the starts (same seed, same result, bit for bit on the CPU).
        noise: standard deviations of the NC-plus-noise starts (cycled).
        max_iter: L-BFGS iterations.

    Returns:
        A :class:`SearchResult`.

    Raises:
        ValueError: an argument out of range (named).
    """
    C, n, d = _check(num_classes, n, d)
    setting, psi, tau = _check_loss_args(setting, psi, tau)
    one_of("normalization", normalization, SEARCH_NORMALIZATIONS)
    beta = real("beta", beta, lo=0.0)
    R = integer("restarts", restarts, lo=1)
    seed = integer("seed", seed, lo=0)
    if not noise or any(not (isinstance(s, int | float) and math.isfinite(s) and s >= 0) for s in noise):
        raise ValueError(f"noise must be a non-empty tuple of finite scales >= 0, got {noise!r}")
    gen = torch.Generator().manual_seed(seed)
    x0 = _starts(R, C, n, d, normalization, gen, tuple(float(s) for s in noise))
    shape = x0.shape[1:]
    _, labels = nc_embeddings(C, n, d)
    kw: dict[str, Any] = dict(setting=setting, beta=beta, psi=psi, tau=tau, num_negatives=num_negatives)

    def fun(x: torch.Tensor) -> torch.Tensor:
        return batch_loss(embed(x.view(-1, *shape), normalization), labels, **kw)

    x, f, iters = lbfgs(fun, x0.reshape(R, -1), max_iter=max_iter)
    best = int(torch.argmin(torch.where(torch.isfinite(f), f, torch.inf)))
    z = embed(x[best].view(shape), normalization).detach()
    best_value = float(batch_loss(z, labels, check_inputs=True, **kw))
    z_nc, _ = nc_embeddings(C, n, d)
    return SearchResult(
        best=best_value,
        nc=nc_value(setting, C, n, beta, psi=psi, tau=tau, num_negatives=num_negatives),
        nc_loss=float(batch_loss(z_nc, labels, check_inputs=True, **kw)),
        bound=lower_bound(setting, C, psi=psi, tau=tau, num_negatives=num_negatives),
        values=tuple(float(v) for v in f),
        z=z,
        labels=labels,
        geometry=geometry(z, labels),
        iterations=iters,
    )
