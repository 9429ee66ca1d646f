"""Closed-form optima of the SCL / UCL / HUCL losses and Harris-dominance checks.

Notation (DESIGN.md, spec/hcl.md §2-§3): ``C`` classes, ``K`` (``num_negatives``) negatives per
(anchor, positive) pair, ``tau`` temperature, ``beta`` hardness, ``t_i = z.z^-_i - z.z^+``.
At Neural Collapse (NC) the positive score is 1, a same-class negative has ``t = 0`` and an
other-class negative has ``t = a := -C/(C-1)``.

The psi family is the one of :mod:`theory.losses` (spec/hcl.md §2.1), always applied to ``t/tau``:

* ``"mean"``: ``psi(t) = log(1 + (1/K) sum_i exp(t_i/tau))`` (the authors' form);
* ``"sum"``: ``psi(t) = log(1 + sum_i exp(t_i/tau))``;
* ``"triplet"``: ``psi(t) = (1/K) sum_i max(0, t_i/tau + margin)``.

Which closed form matches which estimator of :func:`theory.losses.contrastive_loss`:

* ``estimator="sampled"`` draws K negatives i.i.d. from the (tilted) law ``q`` and evaluates
  ``psi_K``; its expectation at NC is the **binomial mixture**
  ``sum_m Binom(m; K, q) psi_K(0^m, a^(K-m))`` (spec/hcl.md §3.5-§3.6). This is the population
  loss of the theory: :func:`ucl_optimum`, :func:`hucl_at_nc` (``estimator="sampled"``).
* ``estimator="expectation"`` replaces the K-sample average *inside* the log by its exact
  expectation: ``log(1 + E_q exp(t/tau))`` (mean) or ``log(1 + K E_q exp(t/tau))`` (sum). At NC
  this is the plug-in value ``log(1 + q + (1-q) e^(a/tau))`` (mean), i.e. the K -> infinity limit
  of the mean form; by Jensen (log concave) it is >= the binomial mixture for the mean form.
  :func:`hucl_at_nc` with ``estimator="expectation"``. For the triplet form psi is linear in the
  empirical law of the negatives, so both estimators have the same value.
* With only other-class negatives (SCL / HSCL) every negative at NC has ``t = a``: both estimators
  equal ``psi_K(a, ..., a)`` for every beta (:func:`scl_optimum`).

Harris dominance (spec/hcl.md §3.2, claims T1-T3): for a base law ``Q`` over negatives and the
tilted law ``dQ_eta = eta dQ / E_Q eta`` with ``eta >= 0`` non-decreasing,
``E_{Q_eta^k}[psi(s - s^+)] >= E_{Q^k}[psi(s - s^+)]`` for every coordinate-wise non-decreasing psi.
:func:`harris_exact` checks this by exact enumeration of k-tuples, :func:`harris_monte_carlo` by
Monte Carlo with confidence intervals, :func:`beta_monotonicity` checks that exponential tilting
is non-decreasing in beta.
"""

from __future__ import annotations

import functools
import itertools
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np
import torch
from scipy.special import logsumexp
from scipy.stats import binom, norm

from theory.losses import apply_psi
from theory.sampling import hardening
from theory.validation import integer, real

__all__ = [
    "PSI_FORMS",
    "Psi",
    "make_psi",
    "random_psi",
    "random_eta",
    "eta_from_hardening",
    "etf_negative_gap",
    "collision_probability",
    "collision_probability_batch",
    "binomial_mixture",
    "plugin_value",
    "scl_optimum",
    "ucl_optimum",
    "hucl_at_nc",
    "hucl_at_nc_batch",
    "weak_bound",
    "CheckResult",
    "harris_exact",
    "harris_exact_check",
    "harris_monte_carlo",
    "beta_monotonicity",
    "random_instance",
]

PSI_FORMS = ("mean", "sum", "triplet")


# --------------------------------------------------------------------------------------------
# validation helpers


_check_C = functools.partial(integer, "C", lo=2)
_check_K = functools.partial(integer, "num_negatives", lo=1)
_check_tau = functools.partial(real, "tau", lo=0.0, lo_open=True)
_check_beta = functools.partial(real, "beta", lo=0.0)
_check_margin = functools.partial(real, "margin", lo=0.0)


def _check_psi(psi) -> str:
    if psi not in PSI_FORMS:
        raise ValueError(f"psi must be one of {PSI_FORMS}, got {psi!r}")
    return psi


def _check_psi_args(psi, tau, num_negatives, margin) -> tuple[str, float, int, float]:
    """Validated ``(psi, tau, K, margin)``: the arguments shared by every closed-form value."""
    return _check_psi(psi), _check_tau(tau), _check_K(num_negatives), _check_margin(margin)


def _check_prob(q, name: str = "q") -> float:
    return real(name, q, lo=0.0, hi=1.0)


# --------------------------------------------------------------------------------------------
# the psi family


@dataclass(frozen=True)
class Psi:
    """An admissible psi_k (convex, coordinate-wise non-decreasing), evaluated in numpy.

    Attributes:
        name: a readable description (``"mean"``, ``"softplus-combo"``, ...).
        k: number of arguments.
        fn: ``t`` ``(..., k)`` float64 -> ``(...)``.
    """

    name: str
    k: int
    fn: Callable[[np.ndarray], np.ndarray] = field(repr=False, compare=False)

    def __call__(self, t) -> np.ndarray:
        t = np.asarray(t, dtype=np.float64)
        if t.shape[-1:] != (self.k,):
            raise ValueError(f"t must have last dimension k={self.k}, got shape {t.shape}")
        return self.fn(t)


def make_psi(kind: str = "mean", k: int = 1, *, tau: float = 1.0, margin: float = 1.0) -> Psi:
    """The psi forms of :mod:`theory.losses` as numpy functions (spec/hcl.md §2.1).

    ``mean``: ``log(1 + mean_i exp(t_i/tau))``; ``sum``: ``log(1 + sum_i exp(t_i/tau))``;
    ``triplet``: ``mean_i max(0, t_i/tau + margin)``. Log-sum-exp throughout.

    Raises:
        ValueError: unknown ``kind``, ``k < 1``, ``tau <= 0`` or ``margin < 0``.
    """
    kind = _check_psi(kind)
    k = _check_K(k)
    tau = _check_tau(tau)
    margin = _check_margin(margin)

    def fn(t):  # the one psi implementation, theory.losses.apply_psi, on numpy input
        t = torch.as_tensor(np.asarray(t, dtype=np.float64))
        return apply_psi(t, kind, tau=tau, margin=margin).numpy()

    return Psi(f"{kind}(tau={tau:g}" + (f", margin={margin:g})" if kind == "triplet" else ")"), k, fn)


def random_psi(k: int, rng: np.random.Generator) -> Psi:
    """A random admissible psi_k: convex and coordinate-wise non-decreasing.

    One of (chosen at random):

    * ``sum_j w_j softplus(a_j . t + b_j)`` with ``a_j >= 0``, ``w_j >= 0`` (smooth);
    * ``max_j (a_j . t + b_j)`` with ``a_j >= 0`` (piecewise linear, not strictly convex);
    * ``log sum_j exp(a_j . t + b_j)`` with ``a_j >= 0``;
    * ``sum_i max(0, c_i t_i + m_i)^p`` with ``c_i >= 0``, ``p >= 1`` (a generalised hinge).

    Shapes: ``t`` ``(..., k)`` -> ``(...)``.
    """
    k = _check_K(k)
    if not isinstance(rng, np.random.Generator):
        raise ValueError(f"rng must be a numpy Generator, got {type(rng).__name__}")
    kind = int(rng.integers(4))
    J = int(rng.integers(1, 5))
    a = rng.exponential(1.0, size=(J, k)) * (rng.random((J, k)) < 0.8)
    b = rng.normal(0.0, 1.0, size=J)
    if kind == 0:
        w = rng.exponential(1.0, size=J)
        return Psi("softplus-combo", k, lambda t: np.logaddexp(0.0, t @ a.T + b) @ w)
    if kind == 1:
        return Psi("max-affine", k, lambda t: np.max(t @ a.T + b, axis=-1))
    if kind == 2:
        return Psi("lse-affine", k, lambda t: logsumexp(t @ a.T + b, axis=-1))
    c = rng.exponential(1.0, size=k)
    m = rng.normal(0.5, 0.5, size=k)
    p = float(rng.choice([1.0, 1.5, 2.0]))
    return Psi("power-hinge", k, lambda t: (np.maximum(t * c + m, 0.0) ** p).sum(axis=-1))


def eta_from_hardening(kind: str = "exponential", **params: float) -> Callable[[np.ndarray], np.ndarray]:
    """numpy wrapper of :func:`theory.sampling.hardening` (float64 in, float64 out)."""
    eta = hardening(kind, **params)
    return lambda s: eta(torch.as_tensor(np.asarray(s, dtype=np.float64))).numpy()


def random_eta(rng: np.random.Generator) -> tuple[str, Callable[[np.ndarray], np.ndarray]]:
    """A random non-negative, non-decreasing hardening function on ``[-1, 1]``.

    One of :func:`theory.sampling.hardening`'s kinds (exponential with beta in [0, 10], step,
    polynomial) with random parameters, or a random non-decreasing staircase. All are strictly
    positive on ``[-1, 1]`` except possibly below a step (``low`` may be 0), so ``E[eta]`` may
    vanish for some anchors; :func:`harris_exact` treats those anchors as degenerate.

    Returns:
        ``(description, eta)`` with ``eta`` mapping a float64 array to a float64 array.
    """
    if not isinstance(rng, np.random.Generator):
        raise ValueError(f"rng must be a numpy Generator, got {type(rng).__name__}")
    kind = int(rng.integers(4))
    if kind == 0:
        beta = float(rng.uniform(0.0, 10.0))
        return f"exponential(beta={beta:.3g})", eta_from_hardening("exponential", beta=beta)
    if kind == 1:
        thr = float(rng.uniform(-1.0, 1.0))
        low = float(rng.choice([0.0, rng.uniform(0.0, 1.0)]))
        return f"step(threshold={thr:.3g}, low={low:.3g})", eta_from_hardening("step", threshold=thr, low=low)
    if kind == 2:
        power = float(rng.uniform(0.0, 6.0))
        shift = float(rng.uniform(1.0, 2.0))
        return f"polynomial(power={power:.3g}, shift={shift:.3g})", eta_from_hardening(
            "polynomial", power=power, shift=shift
        )
    knots = np.sort(rng.uniform(-1.0, 1.0, size=int(rng.integers(1, 6))))
    jumps = rng.exponential(1.0, size=knots.size)
    base = float(rng.uniform(0.0, 1.0))
    return "staircase", lambda s: base + (np.asarray(s)[..., None] >= knots).astype(float) @ jumps


# --------------------------------------------------------------------------------------------
# closed forms at Neural Collapse


def etf_negative_gap(C: int) -> float:
    """``a = -C/(C-1)``: the score gap ``z.z^- - z.z^+`` of an other-class negative at NC."""
    C = _check_C(C)
    return -C / (C - 1)


def collision_probability(C: int, beta: float) -> float:
    """Population probability that an exponentially tilted UCL negative is same-class at NC.

    ``q(beta) = e^beta / (e^beta + (C-1) e^(-beta/(C-1)))`` (uniform priors; spec/hcl.md §3.6),
    computed stably as ``sigmoid(beta C/(C-1) - log(C-1))``. ``q(0) = 1/C``.
    """
    C = _check_C(C)
    beta = _check_beta(beta)
    x = beta * C / (C - 1) - math.log(C - 1)
    return float(1.0 / (1.0 + math.exp(-x))) if x >= 0 else float(math.exp(x) / (1.0 + math.exp(x)))


def collision_probability_batch(
    counts: Sequence[int], beta: float, *, self_negative: bool = True
) -> np.ndarray:
    """Per-class collision probability of the batch's tilted law at an exact NC batch.

    The batch holds ``counts[c]`` copies of the ETF vertex ``v_c`` (``C = len(counts)``; the ETF
    is that of all ``C`` classes even if some count is 0). An anchor of class ``c`` draws from all
    batch members with weight ``exp(beta z_i.z_n)``: ``n_same = counts[c]`` (or ``counts[c]-1``
    without self-negatives) members at score 1 and ``B - counts[c]`` at ``-1/(C-1)``:
    ``q_c = n_same e^beta / (n_same e^beta + n_other e^(-beta/(C-1)))`` (spec/hcl.md §2.5, §3.6).

    Shapes: ``counts`` ``(C,)`` -> ``(C,)`` float64 (``nan`` for classes with no negatives at all).

    Raises:
        ValueError: fewer than 2 classes, negative counts, or ``beta < 0``.
    """
    counts = np.asarray(counts)
    if counts.ndim != 1 or counts.size < 2:
        raise ValueError(f"counts must be a 1-D sequence of C >= 2 class counts, got shape {counts.shape}")
    if not np.issubdtype(counts.dtype, np.integer) or (counts < 0).any():
        raise ValueError(f"counts must be non-negative integers, got {counts.tolist()}")
    beta = _check_beta(beta)
    C = counts.size
    B = int(counts.sum())
    n_same = counts - (0 if self_negative else 1)
    n_same = np.maximum(n_same, 0).astype(np.float64)
    n_other = (B - counts).astype(np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        logit = np.log(n_same) - np.log(n_other) + beta * C / (C - 1)
        q = np.where(logit >= 0, 1.0 / (1.0 + np.exp(-np.abs(logit))), np.exp(-np.abs(logit)) / (1.0 + np.exp(-np.abs(logit))))
    q = np.where((n_same == 0) & (n_other == 0), np.nan, q)
    return q


def binomial_mixture(
    q: float,
    C: int,
    *,
    psi: str = "mean",
    tau: float = 1.0,
    num_negatives: int = 256,
    margin: float = 1.0,
) -> float:
    """``E_{m ~ Binom(K, q)} psi_K(0^m, a^(K-m))`` with ``a = -C/(C-1)`` (spec/hcl.md §3.5-§3.6).

    The expected value of the K-sample (``estimator="sampled"``) loss at NC when each negative is
    same-class with probability ``q`` independently. Exact sum over ``m = 0..K`` in log space.
    """
    q = _check_prob(q)
    C = _check_C(C)
    psi, tau, K, margin = _check_psi_args(psi, tau, num_negatives, margin)
    a = -C / (C - 1)
    m = np.arange(K + 1, dtype=np.float64)
    pmf = binom.pmf(m, K, q)
    if psi == "triplet":
        vals = (m * margin + (K - m) * max(0.0, a / tau + margin)) / K
    else:
        with np.errstate(divide="ignore"):
            inner = np.logaddexp(np.log(m), np.log(K - m) + a / tau)
        if psi == "mean":
            inner = inner - math.log(K)
        vals = np.logaddexp(0.0, inner)
    return float(np.dot(pmf, vals))


def plugin_value(
    q: float,
    C: int,
    *,
    psi: str = "mean",
    tau: float = 1.0,
    num_negatives: int = 256,
    margin: float = 1.0,
) -> float:
    """NC value of the ``estimator="expectation"`` loss with collision probability ``q``.

    ``mean``: ``log(1 + q + (1-q) e^(a/tau))``; ``sum``: ``log(1 + K (q + (1-q) e^(a/tau)))``;
    ``triplet``: ``q margin + (1-q) max(0, a/tau + margin)``; ``a = -C/(C-1)``.
    """
    q = _check_prob(q)
    C = _check_C(C)
    psi, tau, K, margin = _check_psi_args(psi, tau, num_negatives, margin)
    a = -C / (C - 1)
    if psi == "triplet":
        return float(q * margin + (1 - q) * max(0.0, a / tau + margin))
    with np.errstate(divide="ignore"):
        inner = float(np.logaddexp(np.log(q), np.log1p(-q) + a / tau))
    if psi == "sum":
        inner += math.log(K)
    return float(np.logaddexp(0.0, inner))


def scl_optimum(
    C: int,
    *,
    psi: str = "mean",
    tau: float = 1.0,
    num_negatives: int = 256,
    margin: float = 1.0,
) -> float:
    """``L*_SCL = psi_K(-C/(C-1), ..., -C/(C-1))`` (spec/hcl.md §3.3, claims T4/T5).

    The minimum of the SCL and HSCL losses over representations in the unit ball (or sphere) with
    ``d >= C-1``, attained at NC. ``mean``: ``log(1 + e^(a/tau))``; ``sum``:
    ``log(1 + K e^(a/tau))``; ``triplet``: ``max(0, a/tau + margin)``; ``a = -C/(C-1)``.
    Equal for both estimators and every beta.
    """
    return plugin_value(0.0, C, psi=psi, tau=tau, num_negatives=num_negatives, margin=margin)


def ucl_optimum(
    C: int,
    *,
    psi: str = "mean",
    tau: float = 1.0,
    num_negatives: int = 256,
    margin: float = 1.0,
) -> float:
    """``L*_UCL = sum_m Binom(m; K, 1/C) psi_K(0^m, (-C/(C-1))^(K-m))`` (spec/hcl.md §3.5, T6).

    The minimum of the population UCL loss (conditionally independent views, uniform priors,
    unit ball, ``d >= C-1``), attained at NC. Strictly above :func:`scl_optimum`.
    """
    C = _check_C(C)
    return binomial_mixture(1.0 / C, C, psi=psi, tau=tau, num_negatives=num_negatives, margin=margin)


def hucl_at_nc(
    C: int,
    beta: float,
    *,
    psi: str = "mean",
    tau: float = 1.0,
    num_negatives: int = 256,
    margin: float = 1.0,
    estimator: str = "sampled",
) -> float:
    """Population HUCL loss at NC with exponential tilting (spec/hcl.md §3.6, claim T7).

    ``estimator="sampled"`` (the theory's population loss, the expectation of the K-sample loss):
    ``sum_m Binom(m; K, q(beta)) psi_K(0^m, a^(K-m))``; ``"expectation"``: the plug-in value
    :func:`plugin_value` at ``q(beta)``; ``q`` from :func:`collision_probability`.
    ``beta = 0`` gives :func:`ucl_optimum`; ``beta -> inf`` gives ``psi_K(0, ..., 0)``.
    """
    if estimator not in ("sampled", "expectation"):
        raise ValueError(f"estimator must be 'sampled' or 'expectation', got {estimator!r}")
    q = collision_probability(C, beta)
    f = binomial_mixture if estimator == "sampled" else plugin_value
    return f(q, C, psi=psi, tau=tau, num_negatives=num_negatives, margin=margin)


def hucl_at_nc_batch(
    counts: Sequence[int],
    beta: float,
    *,
    psi: str = "mean",
    tau: float = 1.0,
    num_negatives: int = 256,
    margin: float = 1.0,
    estimator: str = "sampled",
    self_positive: bool = True,
    self_negative: bool = True,
) -> float:
    """Batched HUCL loss (spec/hcl.md §2.5) of an exact NC batch with given class counts.

    Per anchor of class ``c`` the value is the binomial mixture (``estimator="sampled"``, the
    expectation over the K draws) or the plug-in value (``"expectation"``, exact) at the batch's
    collision probability ``q_c`` (:func:`collision_probability_batch`); the anchor has
    ``counts[c]`` positives (``counts[c]-1`` without ``self_positive``). The loss is the mean over
    all (anchor, positive) pairs, as in :func:`theory.losses.contrastive_loss`
    (``setting="unsupervised"``) evaluated at ``z[i] = v_{labels[i]}``.

    Raises:
        ValueError: bad counts / options, no (anchor, positive) pair, or an anchor with a pair
            but no negative.
    """
    if estimator not in ("sampled", "expectation"):
        raise ValueError(f"estimator must be 'sampled' or 'expectation', got {estimator!r}")
    q = collision_probability_batch(counts, beta, self_negative=self_negative)
    counts = np.asarray(counts)
    C = counts.size
    npos = counts if self_positive else np.maximum(counts - 1, 0)
    weights = counts * npos
    if weights.sum() == 0:
        raise ValueError("no (anchor, positive) pair in the batch; the loss is undefined")
    f = binomial_mixture if estimator == "sampled" else plugin_value
    total = 0.0
    for c in range(C):
        if weights[c] == 0:
            continue
        if not np.isfinite(q[c]):
            raise ValueError(f"anchors of class {c} have no negative in the batch; the loss is undefined")
        total += weights[c] * f(float(q[c]), C, psi=psi, tau=tau, num_negatives=num_negatives, margin=margin)
    return float(total / weights.sum())


def weak_bound(
    *, psi: str = "mean", tau: float = 1.0, num_negatives: int = 256, margin: float = 1.0
) -> float:
    """``psi_K(-1, ..., -1)``: the UCL/HUCL lower bound without conditional independence.

    Jensen over everything: ``E[z.z^-] = ||E z||^2 >= 0`` for a marginal negative and
    ``E[z.z^+] <= 1`` (spec/hcl.md §3.6). ``mean``: ``log(1 + e^(-1/tau))``; ``sum``:
    ``log(1 + K e^(-1/tau))``; ``triplet``: ``max(0, margin - 1/tau)``.
    """
    psi, tau, K, margin = _check_psi_args(psi, tau, num_negatives, margin)
    if psi == "triplet":
        return max(0.0, margin - 1.0 / tau)
    shift = math.log(K) if psi == "sum" else 0.0
    return float(np.logaddexp(0.0, -1.0 / tau + shift))


# --------------------------------------------------------------------------------------------
# Harris dominance checks


@dataclass
class CheckResult:
    """Outcome of a numerical check of an inequality ``lhs >= rhs``.

    Attributes:
        name: what was checked.
        instances: number of random instances (or (anchor, positive) pairs) examined.
        worst_gap: the smallest ``lhs - rhs`` seen (negative = a violation, beyond ``tol``).
        passed: ``worst_gap >= -tol`` (exact checks) or no significant violation (Monte Carlo).
        details: free-form numbers (sizes, confidence intervals, the worst instance, ...).
    """

    name: str
    instances: int
    worst_gap: float
    passed: bool
    details: dict = field(default_factory=dict)


def random_instance(
    rng: np.random.Generator,
    *,
    num_points: int = 6,
    num_classes: int = 3,
    d: int = 3,
    domain: str = "ball",
) -> tuple[np.ndarray, np.ndarray]:
    """Random labelled points in the unit ball (or on the sphere) with every class present.

    Returns ``z`` ``(num_points, d)`` float64 and ``labels`` ``(num_points,)`` int64.
    """
    if num_classes < 2 or num_points < num_classes:
        raise ValueError(f"need num_points >= num_classes >= 2, got {num_points}, {num_classes}")
    if d < 1:
        raise ValueError(f"d must be >= 1, got {d}")
    if domain not in ("ball", "sphere"):
        raise ValueError(f"domain must be 'ball' or 'sphere', got {domain!r}")
    z = rng.normal(size=(num_points, d))
    z /= np.linalg.norm(z, axis=1, keepdims=True)
    if domain == "ball":
        z *= rng.uniform(0.0, 1.0, size=(num_points, 1)) ** (1.0 / d)
    labels = np.concatenate([np.arange(num_classes), rng.integers(0, num_classes, num_points - num_classes)])
    return z, rng.permutation(labels)


def _negative_sets(labels: np.ndarray, setting: str) -> list[np.ndarray]:
    N = labels.size
    if setting == "supervised":
        return [np.flatnonzero(labels != labels[i]) for i in range(N)]
    return [np.arange(N) for _ in range(N)]


def _eval_eta(eta: Callable, s: np.ndarray) -> np.ndarray:
    """Evaluate ``eta`` on float64 scores; accepts numpy or torch hardening functions
    (e.g. :func:`theory.sampling.hardening` directly)."""
    try:
        out = eta(s)
    except (TypeError, AttributeError):  # a torch-only function (e.g. uses Tensor methods)
        out = eta(torch.as_tensor(s))
    if isinstance(out, torch.Tensor):
        out = out.detach().cpu().numpy()
    out = np.broadcast_to(np.asarray(out, dtype=np.float64), s.shape)
    if not np.isfinite(out).all() or (out < 0).any():
        raise ValueError("eta must return finite non-negative values")
    return out


def _exact_expectations(
    z: np.ndarray,
    labels: np.ndarray,
    setting: str,
    psi: Psi,
    etas: Sequence[Callable[[np.ndarray], np.ndarray] | None],
) -> tuple[np.ndarray, np.ndarray]:
    """``E[psi]`` per (anchor, positive) pair for each law (``None`` = the base law).

    Exact sum over all ``|A_i|^k`` ordered k-tuples of allowed negatives ``A_i``.
    Returns ``values`` ``(len(etas), P)`` and ``valid`` ``(len(etas), P)`` (False where
    ``E[eta] = 0`` for that anchor, so the tilted law is undefined).
    """
    k = psi.k
    S = z @ z.T
    neg_sets = _negative_sets(labels, setting)
    out, valid = [], []
    for i in range(labels.size):
        A = neg_sets[i]
        if A.size == 0:
            raise ValueError(f"anchor {i} has no allowed negative in setting={setting!r}")
        pos = np.flatnonzero(labels == labels[i])
        s = S[i, A]
        tuples = np.array(list(itertools.product(range(A.size), repeat=k)), dtype=np.int64)  # (T, k)
        t = s[tuples][None, :, :] - S[i, pos][:, None, None]  # (P_i, T, k)
        vals = psi(t)  # (P_i, T)
        row, row_valid = [], []
        for eta in etas:
            w = np.ones(A.size) if eta is None else _eval_eta(eta, s).copy()
            total = w.sum()
            ok = total > 0
            w = w / total if ok else np.full(A.size, 1.0 / A.size)
            wt = np.prod(w[tuples], axis=1)  # (T,)
            row.append(vals @ wt)
            row_valid.append(np.full(pos.size, ok))
        out.append(np.stack(row))
        valid.append(np.stack(row_valid))
    return np.concatenate(out, axis=1), np.concatenate(valid, axis=1)


def harris_exact(
    z,
    labels,
    *,
    setting: str = "supervised",
    psi: Psi,
    eta: Callable[[np.ndarray], np.ndarray],
) -> np.ndarray:
    """Per-pair gaps ``E_hard[psi] - E_base[psi]`` by exact enumeration (spec/hcl.md §3.2).

    The finite set of points ``z`` with ``labels`` is the population (an empirical law). For every
    (anchor ``i``, positive ``j``) pair with ``labels[j] == labels[i]`` (``j = i`` included), the base
    law is uniform over the allowed negatives (other-class for ``"supervised"``, all points for
    ``"unsupervised"``) and the hard law is ``∝ eta(z_i.z_n)`` on the same set. Both expectations of
    ``psi(z_i.z_{n_1} - z_i.z_j, ..., z_i.z_{n_k} - z_i.z_j)`` are exact sums over the k-tuples.

    Shapes: ``z`` ``(N, d)``, ``labels`` ``(N,)`` -> gaps ``(P,)`` (pairs whose anchor has
    ``E[eta] = 0`` are dropped). Cost ``O(N^2 |A|^k k)``; keep ``N <= 10``, ``k <= 3``.

    Raises:
        ValueError: bad shapes, unknown setting, or an anchor without negatives.
    """
    z, labels = _check_points(z, labels)
    if setting not in ("supervised", "unsupervised"):
        raise ValueError(f"setting must be 'supervised' or 'unsupervised', got {setting!r}")
    if not isinstance(psi, Psi):
        raise ValueError(f"psi must be a Psi (see make_psi / random_psi), got {type(psi).__name__}")
    vals, valid = _exact_expectations(z, labels, setting, psi, [None, eta])
    ok = valid[1]
    return (vals[1] - vals[0])[ok]


def _check_sizes(**sizes) -> None:
    for name, value in sizes.items():
        integer(name, value, lo=1)


def _check_points(z, labels) -> tuple[np.ndarray, np.ndarray]:
    z = np.asarray(z, dtype=np.float64)
    labels = np.asarray(labels)
    if z.ndim != 2:
        raise ValueError(f"z must be 2-D (N, d), got shape {z.shape}")
    if labels.shape != (z.shape[0],) or not np.issubdtype(labels.dtype, np.integer):
        raise ValueError(f"labels must be integers of shape ({z.shape[0]},), got {labels.shape} {labels.dtype}")
    return z, labels


def harris_exact_check(
    num_instances: int = 100,
    *,
    setting: str = "supervised",
    seed: int = 0,
    max_points: int = 7,
    max_k: int = 3,
    tol: float = 1e-10,
) -> CheckResult:
    """Harris dominance on random instances, exact enumeration (claims T1 / T2).

    Each instance draws: N in [C, max_points] points in the unit ball (or sphere) of R^d, C in
    [2, 3], k in [1, max_k]; psi uniformly among mean / sum / triplet (random tau, margin) and
    :func:`random_psi`; eta from :func:`random_eta`. ``worst_gap = min (E_hard - E_base)`` over all
    (anchor, positive) pairs of all instances; passes iff ``worst_gap >= -tol``.
    """
    _check_sizes(num_instances=num_instances, max_points=max_points, max_k=max_k)
    rng = np.random.default_rng(seed)
    worst, worst_desc, pairs, strict = math.inf, "", 0, 0
    for _ in range(num_instances):
        C = int(rng.integers(2, 4))
        N = int(rng.integers(C + 1, max(C + 1, max_points) + 1))
        d = int(rng.integers(1, 5))
        k = int(rng.integers(1, max_k + 1))
        z, labels = random_instance(rng, num_points=N, num_classes=C, d=d, domain=str(rng.choice(["ball", "sphere"])))
        form = int(rng.integers(4))
        if form < 3:
            psi = make_psi(PSI_FORMS[form], k, tau=float(rng.uniform(0.1, 2.0)), margin=float(rng.uniform(0, 2)))
        else:
            psi = random_psi(k, rng)
        eta_name, eta = random_eta(rng)
        gaps = harris_exact(z, labels, setting=setting, psi=psi, eta=eta)
        if gaps.size == 0:
            continue
        pairs += gaps.size
        strict += int((gaps > 1e-9).sum())
        g = float(gaps.min())
        if g < worst:
            worst, worst_desc = g, f"N={N} C={C} d={d} k={k} psi={psi.name} eta={eta_name}"
    return CheckResult(
        name=f"Harris exact ({setting})",
        instances=num_instances,
        worst_gap=worst,
        passed=worst >= -tol,
        details={"pairs": pairs, "strict_pairs": strict, "worst_instance": worst_desc, "tol": tol},
    )


def beta_monotonicity(
    num_instances: int = 50,
    *,
    setting: str = "supervised",
    betas: Sequence[float] = (0.0, 0.5, 1.0, 2.0, 5.0, 10.0, 30.0),
    seed: int = 0,
    max_points: int = 7,
    max_k: int = 3,
    tol: float = 1e-10,
) -> CheckResult:
    """Exponential tilting: ``E_beta[psi]`` is non-decreasing in ``beta`` (claim T3).

    Exact enumeration on random instances as in :func:`harris_exact_check` (admissible psi:
    mean / sum / triplet and :func:`random_psi`), for each (anchor, positive) pair and each
    consecutive pair of ``betas``. ``worst_gap = min (E_{beta_{r+1}} - E_{beta_r})``.
    """
    _check_sizes(num_instances=num_instances, max_points=max_points, max_k=max_k)
    betas = [_check_beta(b) for b in betas]
    if len(betas) < 2 or any(b2 <= b1 for b1, b2 in zip(betas, betas[1:])):
        raise ValueError(f"betas must be strictly increasing with >= 2 values, got {betas}")
    rng = np.random.default_rng(seed)
    worst, pairs, worst_desc = math.inf, 0, ""
    mean_curve = np.zeros(len(betas))
    for _ in range(num_instances):
        C = int(rng.integers(2, 4))
        N = int(rng.integers(C + 1, max(C + 1, max_points) + 1))
        d = int(rng.integers(1, 5))
        k = int(rng.integers(1, max_k + 1))
        z, labels = random_instance(rng, num_points=N, num_classes=C, d=d)
        form = int(rng.integers(4))
        psi = make_psi(PSI_FORMS[form], k) if form < 3 else random_psi(k, rng)
        etas = [eta_from_hardening("exponential", beta=b) for b in betas]
        z, labels = _check_points(z, labels)
        vals, _ = _exact_expectations(z, labels, setting, psi, etas)  # (R, P)
        diffs = np.diff(vals, axis=0)
        pairs += vals.shape[1]
        mean_curve += vals.mean(axis=1) / num_instances
        g = float(diffs.min())
        if g < worst:
            worst, worst_desc = g, f"N={N} C={C} d={d} k={k} psi={psi.name}"
    return CheckResult(
        name=f"beta monotonicity ({setting})",
        instances=num_instances,
        worst_gap=worst,
        passed=worst >= -tol,
        details={"pairs": pairs, "betas": list(betas), "mean_curve": mean_curve.tolist(), "worst_instance": worst_desc},
    )


def _sample_rows(rng: np.random.Generator, w: np.ndarray, K: int) -> np.ndarray:
    """``K`` i.i.d. column indices from each row of the (unnormalised) weights ``w`` ``(M, N)``."""
    M, N = w.shape
    cdf = np.cumsum(w, axis=1)
    cdf /= cdf[:, -1:]
    flat = (cdf + 2.0 * np.arange(M)[:, None]).ravel()
    u = rng.random((M, K)) + 2.0 * np.arange(M)[:, None]
    idx = np.searchsorted(flat, u.ravel(), side="right").reshape(M, K) - np.arange(M)[:, None] * N
    return np.clip(idx, 0, N - 1)


def harris_monte_carlo(
    *,
    num_classes: int = 10,
    per_class: int = 50,
    d: int = 9,
    num_negatives: int = 256,
    num_pairs: int = 4000,
    setting: str = "supervised",
    psi: str = "mean",
    tau: float = 1.0,
    eta: str = "exponential",
    eta_params: dict | None = None,
    domain: str = "ball",
    confidence: float = 0.99,
    seed: int = 0,
) -> CheckResult:
    """Harris dominance at realistic sizes, Monte Carlo with a confidence interval (T1 / T2).

    Random unit-ball (or sphere) features for ``num_classes * per_class`` points; ``num_pairs``
    (anchor, positive) pairs drawn uniformly among same-class pairs; for each pair K negatives are
    drawn from the base law and, independently, from the tilted law; the per-pair difference of the
    psi values is averaged. ``worst_gap`` is the lower end of the two-sided ``confidence`` interval
    of ``E_hard - E_base``; the check passes unless the interval lies entirely below 0 (a
    significant violation). ``details`` holds the estimate, the interval, and both means.
    """
    confidence = real("confidence", confidence, lo=0.0, lo_open=True, hi=1.0, hi_open=True)
    if setting not in ("supervised", "unsupervised"):
        raise ValueError(f"setting must be 'supervised' or 'unsupervised', got {setting!r}")
    if num_pairs < 2:
        raise ValueError(f"num_pairs must be >= 2, got {num_pairs}")
    K = _check_K(num_negatives)
    num_classes = integer("num_classes", num_classes, lo=2)
    _check_sizes(per_class=per_class, d=d)
    rng = np.random.default_rng(seed)
    N = num_classes * per_class
    z, _ = random_instance(rng, num_points=N, num_classes=num_classes, d=d, domain=domain)
    labels = np.repeat(np.arange(num_classes), per_class)
    psi_fn = make_psi(psi, K, tau=tau)
    if eta_params is None:
        eta_params = {"beta": 5.0} if eta == "exponential" else {}
    eta_fn = eta_from_hardening(eta, **eta_params)
    anchors = rng.integers(0, N, num_pairs)
    positives = labels[anchors] * per_class + rng.integers(0, per_class, num_pairs)
    S_a = z[anchors] @ z.T  # (M, N)
    allowed = labels[None, :] != labels[anchors][:, None] if setting == "supervised" else np.ones_like(S_a, bool)
    s_pos = np.einsum("md,md->m", z[anchors], z[positives])[:, None]
    base_w = allowed.astype(np.float64)
    hard_w = base_w * _eval_eta(eta_fn, S_a)
    if not (hard_w.sum(axis=1) > 0).all():
        raise ValueError("eta vanishes on every allowed negative of some anchor; the tilted law is undefined")
    means = []
    for w in (base_w, hard_w):
        idx = _sample_rows(rng, w, K)
        t = np.take_along_axis(S_a, idx, axis=1) - s_pos
        means.append(psi_fn(t))
    diff = means[1] - means[0]
    est = float(diff.mean())
    se = float(diff.std(ddof=1) / math.sqrt(num_pairs))
    zc = float(norm.ppf(0.5 + confidence / 2))
    lo, hi = est - zc * se, est + zc * se
    return CheckResult(
        name=f"Harris Monte Carlo ({setting})",
        instances=num_pairs,
        worst_gap=lo,
        passed=hi >= 0.0,
        details={
            "estimate": est,
            "ci": (lo, hi),
            "confidence": confidence,
            "base_mean": float(means[0].mean()),
            "hard_mean": float(means[1].mean()),
            "sizes": f"C={num_classes} N={N} d={d} K={K} psi={psi} eta={eta}{eta_params or {'beta': 5.0}}",
        },
    )
