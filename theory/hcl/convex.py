"""Convex programs over the Gram matrix of collapsed class representations (cvxpy).

Setting (docs/hcl.md#convex-gram-programs): every sample of class ``c`` is mapped to one point ``u_c``
(within-class collapse), and ``G = [u_c . u_c']`` is the ``C x C`` Gram matrix: ``G`` PSD with
``diag(G) <= 1`` (unit ball) or ``== 1`` (unit sphere); any such ``G`` is realisable in
``d >= C`` (``d >= rank G``). With class priors ``pi``, anchor class ``c ~ pi``, positive of the same
class (score ``G_cc``), and ``k`` i.i.d. negative classes drawn

* ``"supervised"`` (SCL): from ``pi`` restricted to the other classes, ``pi_c' / (1 - pi_c)``;
* ``"unsupervised"`` (UCL): from ``pi`` itself (a same-class negative gives ``t = 0``: collision),

the population loss is the exact expectation

    F(G) = sum_c pi_c sum_{c_1..c_k} prod_i p(c_i | c) psi_k(G_{c c_1} - G_cc, ..., G_{c c_k} - G_cc).

For the InfoNCE forms psi is a log-sum-exp of affine functions of G; the ordered k-tuples are
grouped into multisets (multinomial weights), so F is a weighted sum of ``log_sum_exp`` terms
(a DCP-convex objective, exponential cones). For the triplet form psi is the mean of hinges and
F is linear in the class-pair law (an LP over the PSD cone). Minimising F over G gives the
optimum of the loss over collapsed representations; with uniform priors the minimiser is the
ETF Gram ``C/(C-1) I - 1/(C-1) 11^T`` and the value is ``L*_SCL`` / ``L*_UCL``
(:mod:`theory.hcl.optima`). The UCL program is the bound ``F(G)`` of docs/hcl.md#the-ucl-optimum-t6 (step 1)
(conditionally independent views).

``C`` is ``num_classes`` and ``k`` is ``num_negatives``: a required keyword here, since the
programs enumerate the multisets of ``k`` negative classes (the losses' default of 256 would
never finish). ``tau`` and ``margin`` default to :data:`theory.options.HCL_TAU` and
:data:`theory.options.MARGIN`.

Solvers: Clarabel (interior point) by default, SCS as a fallback; a failed solve raises
``RuntimeError`` naming the statuses.
"""

from __future__ import annotations

import itertools
import math
import warnings
from collections import Counter
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import cvxpy as cp
import numpy as np
from scipy.special import logsumexp

from theory.options import HCL_TAU, MARGIN, PSI_FORMS, SETTINGS
from theory.validation import check_size, integer, one_of, real

__all__ = [
    "GramSolution",
    "minimize_gram",
    "minimize_scl",
    "minimize_ucl",
    "population_loss_at_gram",
    "etf_gram_np",
    "SOLVERS",
    "MAX_PROGRAM_TERMS",
    "MAX_TUPLES",
]

SOLVERS = ("CLARABEL", "SCS")
_OK = ("optimal",)

#: Largest number of log-sum-exp terms (``C`` times the multisets of ``k`` negative classes) a
#: cvxpy program may hold; larger ``(num_classes, num_negatives)`` are rejected up front.
MAX_PROGRAM_TERMS = 200_000

#: Largest number of ordered ``k``-tuples of classes (``C**k``) :func:`population_loss_at_gram` sums.
MAX_TUPLES = 10_000_000


@dataclass(frozen=True)
class GramSolution:
    """Result of :func:`minimize_gram`.

    Attributes:
        value: optimal objective value (the population loss at ``G``).
        G: ``(C, C)`` float64 symmetric optimal Gram matrix.
        status: cvxpy status string of the accepted solve (``"optimal"``).
        solver: name of the solver that produced it (``"CLARABEL"`` or ``"SCS"``).
        setting, psi, normalization, num_negatives, tau, margin: the program solved.
        priors: ``(C,)`` class priors used.
    """

    value: float
    G: np.ndarray
    status: str
    solver: str
    setting: str
    psi: str
    normalization: str
    num_negatives: int
    tau: float
    margin: float
    priors: np.ndarray

    def etf_deviation(self) -> float:
        """``max |G - G_ETF|`` (entry-wise) against the ETF Gram of the same ``C``."""
        return float(np.abs(self.G - etf_gram_np(self.G.shape[0])).max())


def etf_gram_np(num_classes: int) -> np.ndarray:
    """ETF Gram ``C/(C-1) I - 1/(C-1) 11^T`` as a float64 numpy array ``(C, C)``, ``C = num_classes``."""
    C = integer("num_classes", num_classes, lo=2)
    check_size("num_classes", C, 3 * 8 * C * C, what=f"({C}, {C}) float64 matrices")
    return (C * np.eye(C) - np.ones((C, C))) / (C - 1)


def _validate(
    C: Any,
    setting: str,
    psi: str,
    normalization: str,
    num_negatives: Any,
    tau: Any,
    margin: Any,
    priors: Any,
) -> tuple[int, int, float, float, np.ndarray]:
    """Validated ``(C, k, tau, margin, priors)`` of a program; errors name the argument."""
    C = integer("num_classes", C, lo=2)
    one_of("setting", setting, SETTINGS)
    one_of("psi", psi, PSI_FORMS)
    one_of("normalization", normalization, ("sphere", "ball"))
    num_negatives = integer("num_negatives", num_negatives, lo=1)
    tau = real("tau", tau, lo=0, lo_open=True)
    margin = real("margin", margin, lo=0)
    if priors is None:
        pi = np.full(C, 1.0 / C)
    else:
        pi = np.asarray(priors, dtype=np.float64)
        if pi.shape != (C,) or not np.isfinite(pi).all() or (pi <= 0).any():
            raise ValueError(f"priors must be {C} positive finite numbers, got {priors!r}")
        if abs(pi.sum() - 1.0) > 1e-9:
            raise ValueError(f"priors must sum to 1, got sum {pi.sum()}")
    return C, num_negatives, tau, margin, pi


def _negative_law(pi: np.ndarray, c: int, setting: str) -> np.ndarray:
    """The law of one negative class for an anchor of class ``c``."""
    p = pi.copy()
    if setting == "supervised":
        p[c] = 0.0
    law: np.ndarray = p / p.sum()
    return law


def _multisets(classes: Sequence[int], p: np.ndarray, k: int) -> Iterator[tuple[float, Counter[int]]]:
    """Yield ``(prob, Counter)`` over the multisets of ``k`` i.i.d. draws from ``p`` on ``classes``."""
    for combo in itertools.combinations_with_replacement(classes, k):
        cnt = Counter(combo)
        coef = math.factorial(k)
        prob = 1.0
        for c, m in cnt.items():
            coef //= math.factorial(m)
            prob *= p[c] ** m
        yield coef * prob, cnt


def _objective(
    G: Any, C: int, k: int, setting: str, psi: str, tau: float, margin: float, pi: np.ndarray
) -> Any:
    """Cvxpy expression of the population loss F(G) (see module docstring)."""
    terms = []
    for c in range(C):
        p = _negative_law(pi, c, setting)
        support = [c2 for c2 in range(C) if p[c2] > 0]
        if psi == "triplet":
            for c2 in support:
                t = 0 if c2 == c else (G[c, c2] - G[c, c]) / tau
                terms.append(pi[c] * p[c2] * cp.pos(t + margin))  # type: ignore[no-untyped-call]
            continue
        for prob, cnt in _multisets(support, p, k):
            # psi = log(1 + w sum_i exp(t_i)) with w = 1/k (mean) or 1 (sum): one lse over the
            # distinct classes, each entry offset by log(count * w).
            entries = [cp.Constant(0.0)]
            for c2, m in cnt.items():
                off = math.log(m) - (math.log(k) if psi == "mean" else 0.0)
                if c2 == c:
                    entries.append(cp.Constant(off))
                else:
                    entries.append((G[c, c2] - G[c, c]) / tau + off)
            terms.append(pi[c] * prob * cp.log_sum_exp(cp.hstack(entries)))
    return cp.sum(cp.hstack(terms))


def population_loss_at_gram(
    G: Any,
    *,
    num_negatives: int,
    setting: str = "supervised",
    psi: str = "mean",
    tau: float = HCL_TAU,
    margin: float = MARGIN,
    priors: Any = None,
) -> float:
    """F(G): the population loss of collapsed representations with Gram ``G`` (numpy, exact).

    Same objective as the cvxpy programs, summed over the ordered k-tuples of negative classes.
    Shapes: ``G`` ``(C, C)`` -> float. Cost ``O(C^(k+1) k)``.
    """
    G = np.asarray(G, dtype=np.float64)
    if G.ndim != 2 or G.shape[0] != G.shape[1]:
        raise ValueError(f"G must be a square (C, C) matrix, got shape {G.shape}")
    C, k, tau, margin, pi = _validate(G.shape[0], setting, psi, "ball", num_negatives, tau, margin, priors)
    if k * math.log(C) > math.log(MAX_TUPLES):
        raise ValueError(
            f"num_negatives={k} with C={C} means C**k = 10^{k * math.log10(C):.1f} ordered tuples (limit "
            f"MAX_TUPLES = {MAX_TUPLES:.0e}); use the closed forms of theory.hcl.optima for large K"
        )
    total = 0.0
    tuples = np.array(list(itertools.product(range(C), repeat=k)), dtype=np.int64)  # (T, k)
    for c in range(C):
        p = _negative_law(pi, c, setting)
        w = np.prod(p[tuples], axis=1)
        t = (G[c, tuples] - G[c, c]) / tau  # (T, k)
        if psi == "triplet":
            vals = np.maximum(t + margin, 0.0).mean(axis=1)
        else:
            lse = logsumexp(t, axis=1) - (math.log(k) if psi == "mean" else 0.0)
            vals = np.logaddexp(0.0, lse)
        total += pi[c] * float(np.dot(w, vals))
    return total


def minimize_gram(
    num_classes: int,
    *,
    num_negatives: int,
    setting: str = "supervised",
    psi: str = "mean",
    normalization: str = "sphere",
    tau: float = HCL_TAU,
    margin: float = MARGIN,
    priors: Any = None,
    solver: str | None = None,
    solver_options: dict[str, Any] | None = None,
) -> GramSolution:
    """Minimise the population SCL / UCL loss over the Gram matrix of collapsed representations.

    ``min_G F(G)`` s.t. ``G`` PSD and ``diag(G) == 1`` (``normalization="sphere"``) or ``<= 1``
    (``"ball"``); ``F`` as in the module docstring (docs/hcl.md#convex-gram-programs).

    Args:
        num_classes: C (keep ``C <= 6`` and ``num_negatives <= 2`` for sub-second solves).
        num_negatives: k, the number of negatives per (anchor, positive) pair (required).
        setting: ``"supervised"`` (SCL) or ``"unsupervised"`` (UCL, collisions included).
        psi: ``"mean"``, ``"sum"`` or ``"triplet"`` (as :func:`theory.hcl.psi.apply_psi`, on
            ``t/tau``).
        normalization: ``"sphere"`` or ``"ball"``.
        tau: temperature ``> 0``.
        margin: triplet margin ``>= 0``.
        priors: ``(C,)`` class priors (default uniform).
        solver: ``"CLARABEL"`` or ``"SCS"`` to force one; default Clarabel then SCS.
        solver_options: extra keyword arguments passed to ``Problem.solve``.

    Returns:
        :class:`GramSolution`.

    Raises:
        ValueError: bad arguments. RuntimeError: no solver reached an optimal status.
    """
    C, k, tau, margin, pi = _validate(
        num_classes, setting, psi, normalization, num_negatives, tau, margin, priors
    )
    log_terms = math.log(C) + math.lgamma(C + k) - math.lgamma(k + 1) - math.lgamma(C)  # C * multisets
    if psi != "triplet" and log_terms > math.log(MAX_PROGRAM_TERMS):
        raise ValueError(
            f"num_negatives={k} with C={C} gives 10^{log_terms / math.log(10):.1f} log-sum-exp terms (limit "
            f"MAX_PROGRAM_TERMS = {MAX_PROGRAM_TERMS}); keep C <= 6 and num_negatives <= 3, or use theory.hcl.optima"
        )
    if solver is None:
        order = list(SOLVERS)
    elif solver in SOLVERS:
        order = [solver]
    else:
        raise ValueError(f"solver must be one of {SOLVERS} or None, got {solver!r}")
    G = cp.Variable((C, C), PSD=True)
    cons = [cp.diag(G) == 1] if normalization == "sphere" else [cp.diag(G) <= 1]
    prob = cp.Problem(cp.Minimize(_objective(G, C, k, setting, psi, tau, margin, pi)), cons)
    failures = []
    for name in order:
        try:
            with warnings.catch_warnings():
                # an inaccurate solve is reported through the status and then rejected
                warnings.simplefilter("ignore", UserWarning)
                prob.solve(solver=name, **(solver_options or {}))  # type: ignore[no-untyped-call]
        except (cp.error.SolverError, ValueError, ArithmeticError) as exc:
            failures.append(f"{name}: {type(exc).__name__}: {exc}")
            continue
        if prob.status in _OK and G.value is not None:
            Gv = np.asarray(G.value, dtype=np.float64)
            Gv = (Gv + Gv.T) / 2
            return GramSolution(
                value=float(prob.value),
                G=Gv,
                status=prob.status,
                solver=name,
                setting=setting,
                psi=psi,
                normalization=normalization,
                num_negatives=k,
                tau=tau,
                margin=margin,
                priors=pi,
            )
        failures.append(f"{name}: status {prob.status!r}")
    raise RuntimeError(
        f"Gram program (C={C}, setting={setting}, psi={psi}, normalization={normalization}, k={k}) failed: "
        + "; ".join(failures)
    )


def minimize_scl(num_classes: int, *, num_negatives: int, **kwargs: Any) -> GramSolution:
    """SCL program: :func:`minimize_gram` with ``setting="supervised"`` (docs/hcl.md#the-scl-optimum-t4-t5)."""
    return minimize_gram(num_classes, setting="supervised", num_negatives=num_negatives, **kwargs)


def minimize_ucl(num_classes: int, *, num_negatives: int, **kwargs: Any) -> GramSolution:
    """UCL program: :func:`minimize_gram` with ``setting="unsupervised"`` (docs/hcl.md#the-ucl-optimum-t6)."""
    return minimize_gram(num_classes, setting="unsupervised", num_negatives=num_negatives, **kwargs)
