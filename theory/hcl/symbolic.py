"""Symbolic (sympy) derivations behind the closed forms of :mod:`theory.hcl.optima`.

Jiang, Nguyen, Aeron, Ishwar, TMLR 2025 (arXiv 2311.05139); docs/hcl.md#symbolic-derivations:

* the spectrum of the ETF Gram matrix (docs/hcl.md#simplex-etf-and-neural-collapse);
* ``-1/(C-1)`` as the smallest mean pairwise inner product of ``C`` unit vectors
  (docs/hcl.md#the-scl-optimum-t4-t5);
* the optimal InfoNCE / triplet values ``L*_SCL``, ``L*_UCL`` and the HUCL value at NC
  (docs/hcl.md#optimal-values);
* the collision probability ``q(beta)`` of the tilted UCL negative law at NC
  (docs/hcl.md#hucl-at-neural-collapse-t7).

``C`` is ``num_classes``; ``num_negatives`` (K), ``tau`` and ``margin`` default to
:data:`theory.options.NUM_NEGATIVES`, :data:`theory.options.HCL_TAU` and
:data:`theory.options.MARGIN`, as in the float closed forms (so ``ucl_optimum_expr(C)`` is the
exact twin of ``ucl_optimum(C)``). psi of a multiset of equal arguments is formed from the
multiplicities (O(1) terms for any K); the binomial sums have ``K + 1`` terms, so they accept at
most :data:`SYMBOLIC_MAX_NEGATIVES` (pass a small ``num_negatives`` for speed). The WeiNCE sympy
part is :mod:`theory.weince.symbolic`.

Every function returns sympy objects (expressions, dicts) or Python booleans; nothing numeric is
assumed that sympy does not derive.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Any

import sympy as sp

from theory.options import HCL_TAU, MARGIN, NUM_NEGATIVES, PSI_FORMS
from theory.validation import integer, one_of

__all__ = [
    "SYMBOLIC_MAX_NEGATIVES",
    "etf_gram_matrix",
    "etf_gram_eigenvalues",
    "etf_gram_eigenvalues_general",
    "check_etf_spectrum",
    "min_mean_pairwise_inner_product",
    "scl_optimum_expr",
    "ucl_optimum_expr",
    "hucl_at_nc_expr",
    "collision_probability_expr",
]


#: Largest ``num_negatives`` of the exact binomial sums (``K + 1`` sympy terms each).
SYMBOLIC_MAX_NEGATIVES = 1024

_check_C = functools.partial(integer, "num_classes", lo=2)


def etf_gram_matrix(num_classes: int) -> sp.Matrix:
    """The ETF Gram ``C/(C-1) I - 1/(C-1) 11^T`` as an exact rational ``(C, C)`` sympy Matrix."""
    C = _check_C(num_classes)
    return sp.Matrix(C, C, lambda i, j: sp.Rational(1) if i == j else sp.Rational(-1, C - 1))


def etf_gram_eigenvalues(num_classes: int) -> dict[sp.Expr, int]:
    """Exact eigenvalues of the ETF Gram for a concrete ``C``: ``{C/(C-1): C-1, 0: 1}``."""
    return dict(etf_gram_matrix(num_classes).eigenvals())


def etf_gram_eigenvalues_general() -> tuple[sp.Symbol, dict[sp.Expr, sp.Expr]]:
    """Eigenvalues of the ETF Gram for a symbolic ``C``.

    Write ``G = a I + b J`` (``J = 11^T``) with ``a = C/(C-1)``, ``b = -1/(C-1)``. ``J`` has the
    eigenvalue ``C`` on ``1`` and ``0`` on the ``(C-1)``-dimensional complement, so ``G`` has
    ``a + b C`` (once) and ``a`` (``C-1`` times).

    Returns:
        ``(C, {eigenvalue: multiplicity})`` with sympy expressions in the positive symbol ``C``;
        the dict is ``{C/(C-1): C-1, 0: 1}`` after simplification.
    """
    C = sp.Symbol("C", positive=True, integer=True)
    a, b = C / (C - 1), -1 / (C - 1)
    return C, {sp.simplify(a): C - 1, sp.simplify(a + b * C): sp.Integer(1)}


def check_etf_spectrum(num_classes: Sequence[int] = (2, 3, 4, 5, 6, 7, 8, 10)) -> bool:
    """True iff the ETF Gram spectra are ``{C/(C-1): C-1, 0: 1}`` for every ``C`` in ``num_classes``.

    Checks the concrete spectra, the general formula substituted at those ``C`` (a sequence of class
    counts), and ``trace = C``.
    """
    Csym, general = etf_gram_eigenvalues_general()
    for C in num_classes:
        want = {sp.Rational(C, C - 1): C - 1, sp.Integer(0): 1}
        if etf_gram_eigenvalues(C) != want:
            return False
        if {sp.nsimplify(k.subs(Csym, C)): int(v.subs(Csym, C)) for k, v in general.items()} != want:
            return False
        if etf_gram_matrix(C).trace() != C:
            return False
    return True


def min_mean_pairwise_inner_product() -> tuple[sp.Symbol, sp.Expr]:
    """Minimum over unit vectors ``u_1..u_C`` of ``mean_{i != j} u_i.u_j``: ``-1/(C-1)``.

    Derivation: ``sum_{i != j} u_i.u_j = ||sum_i u_i||^2 - C``, so the mean is
    ``(s - C)/(C(C-1))`` with ``s = ||sum u||^2 >= 0``; it is increasing in ``s`` (checked: the
    derivative ``1/(C(C-1)) > 0``), so the minimum is at ``s = 0`` (zero-sum), value ``-1/(C-1)``.
    Cross-check: for the symmetric Gram ``I + b(J - I)`` the eigenvalue on ``1`` is
    ``1 + (C-1) b``; PSD-ness puts the smallest admissible ``b`` at its root, the same value.

    Returns:
        ``(C, -1/(C-1))`` as sympy objects.

    Raises:
        RuntimeError: if the two derivations disagree (never expected).
    """
    C = sp.Symbol("C", positive=True, integer=True)
    s, b = sp.symbols("s b", real=True)
    mean = (s - C) / (C * (C - 1))
    slope = sp.diff(mean, s)
    if not sp.ask(sp.Q.positive(slope), sp.Q.positive(C - 1)):
        raise RuntimeError(f"unexpected slope {slope}")
    value = sp.simplify(mean.subs(s, 0))
    (b_min,) = sp.solve(sp.Eq(1 + (C - 1) * b, 0), b)
    if sp.simplify(value - b_min) != 0:
        raise RuntimeError(f"derivations disagree: {value} vs {b_min}")
    return C, value


def _psi_expr(counts: Sequence[tuple[sp.Expr, int]], psi: str, tau: sp.Expr, margin: sp.Expr) -> sp.Expr:
    """psi_K of the multiset holding each ``t`` of ``counts`` ``(t, multiplicity)`` (K = total)."""
    k = sum(m for _, m in counts)
    if psi == "mean":
        return sp.log(1 + sum(m * sp.exp(ti / tau) for ti, m in counts) / k)
    if psi == "sum":
        return sp.log(1 + sum(m * sp.exp(ti / tau) for ti, m in counts))
    if psi == "triplet":
        return sum(m * sp.Max(0, ti / tau + margin) for ti, m in counts) / k
    raise ValueError(f"psi must be one of {PSI_FORMS}, got {psi!r}")


def _args(
    C: int, psi: str, num_negatives: int, tau: Any, margin: Any, *, limit: int | None = None
) -> tuple[int, int, sp.Expr, sp.Expr]:
    C = _check_C(C)
    one_of("psi", psi, PSI_FORMS)
    num_negatives = integer("num_negatives", num_negatives, lo=1, hi=limit)
    tau = sp.nsimplify(tau)
    margin = sp.nsimplify(margin)
    if not tau.is_positive:
        raise ValueError(f"tau must be > 0, got {tau}")
    if margin.is_negative:
        raise ValueError(f"margin must be >= 0, got {margin}")
    return C, num_negatives, tau, margin


def scl_optimum_expr(
    num_classes: int,
    *,
    psi: str = "mean",
    num_negatives: int = NUM_NEGATIVES,
    tau: Any = HCL_TAU,
    margin: Any = MARGIN,
) -> sp.Expr:
    """``psi_K(a, ..., a)`` with ``a = -C/(C-1)``: the exact ``L*_SCL`` (docs/hcl.md#the-scl-optimum-t4-t5).

    E.g. mean form: ``log(1 + exp(-C/((C-1) tau)))``.
    """
    C, K, tau, margin = _args(num_classes, psi, num_negatives, tau, margin)
    a = sp.Rational(-C, C - 1)
    return sp.simplify(_psi_expr([(a, K)], psi, tau, margin))


def collision_probability_expr(num_classes: int | sp.Symbol | None = None, beta: Any = None) -> sp.Expr:
    """``q(beta) = e^beta / (e^beta + (C-1) e^(-beta/(C-1)))`` (docs/hcl.md#hucl-at-neural-collapse-t7), derived.

    The tilt at NC weighs a same-class negative (score 1) by ``e^beta`` and each of the ``C-1``
    other classes (score ``-1/(C-1)``) by ``e^(-beta/(C-1))``, all with prior ``1/C``.
    ``num_classes``: a concrete ``C``, a sympy Symbol, or ``None`` for the positive symbol ``C``.
    """
    C = num_classes
    if C is None:
        C = sp.Symbol("C", positive=True)
    elif not isinstance(C, sp.Symbol):
        if isinstance(C, bool) or int(C) != C or int(C) < 2:
            raise ValueError(f"num_classes must be an integer >= 2 or a sympy Symbol, got {C!r}")
        C = sp.Integer(int(C))
    beta = sp.Symbol("beta", nonnegative=True) if beta is None else sp.nsimplify(beta)
    same = sp.exp(beta * 1) / C
    other = (C - 1) * sp.exp(beta * (-1 / (C - 1))) / C
    return same / (same + other)


def _binomial_mixture_expr(q: sp.Expr, C: int, psi: str, K: int, tau: sp.Expr, margin: sp.Expr) -> sp.Expr:
    a = sp.Rational(-C, C - 1)
    return sum(
        sp.binomial(K, m)
        * q**m
        * (1 - q) ** (K - m)
        * _psi_expr([(sp.Integer(0), m), (a, K - m)], psi, tau, margin)
        for m in range(K + 1)
    )


def ucl_optimum_expr(
    num_classes: int,
    *,
    psi: str = "mean",
    num_negatives: int = NUM_NEGATIVES,
    tau: Any = HCL_TAU,
    margin: Any = MARGIN,
) -> sp.Expr:
    """``sum_m Binom(m; K, 1/C) psi_K(0^m, a^(K-m))``: the exact ``L*_UCL`` (docs/hcl.md#the-ucl-optimum-t6).

    An explicit sum of ``K + 1`` terms: ``num_negatives`` at most :data:`SYMBOLIC_MAX_NEGATIVES`
    (pass a small one, <= 32, for speed).
    """
    C, K, tau, margin = _args(num_classes, psi, num_negatives, tau, margin, limit=SYMBOLIC_MAX_NEGATIVES)
    return _binomial_mixture_expr(sp.Rational(1, C), C, psi, K, tau, margin)


def hucl_at_nc_expr(
    num_classes: int,
    beta: Any,
    *,
    psi: str = "mean",
    num_negatives: int = NUM_NEGATIVES,
    tau: Any = HCL_TAU,
    margin: Any = MARGIN,
) -> sp.Expr:
    """Binomial HUCL value at NC with ``q = q(beta)`` (docs/hcl.md#hucl-at-neural-collapse-t7), exact for rational beta.

    An explicit sum of ``K + 1`` terms: ``num_negatives`` at most :data:`SYMBOLIC_MAX_NEGATIVES`.
    """
    C, K, tau, margin = _args(num_classes, psi, num_negatives, tau, margin, limit=SYMBOLIC_MAX_NEGATIVES)
    q = collision_probability_expr(sp.Integer(C), beta)
    return _binomial_mixture_expr(q, C, psi, K, tau, margin)
