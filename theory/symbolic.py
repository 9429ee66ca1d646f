"""Symbolic (sympy) derivations behind the closed forms of :mod:`theory.bounds`.

* the spectrum of the ETF Gram matrix (spec/hcl.md §3.1, metrics.md);
* ``-1/(C-1)`` as the smallest mean pairwise inner product of ``C`` unit vectors (§3.3 step 3);
* the optimal InfoNCE / triplet values ``L*_SCL``, ``L*_UCL`` and the HUCL value at NC (§3.3-§3.6);
* the derivative of the WeiNCE logit ``T_lambda(s) = (1-lambda) s/tau - lambda log(1-s)``
  (spec/weince.md §1.4);
* the Weibull (weibit) top-1 law ``P(D_j smallest) = q_j^(-beta) / sum_k q_k^(-beta)`` for
  shortfalls ``D_j = q_j W_j`` with ``W_j`` i.i.d. Weibull of shape ``beta`` (spec/weince.md §1.3).

Every function returns sympy objects (expressions, dicts) or Python booleans; nothing numeric is
assumed that sympy does not derive.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence

import sympy as sp

from theory.validation import integer

__all__ = [
    "etf_gram_matrix",
    "etf_gram_eigenvalues",
    "etf_gram_eigenvalues_general",
    "check_etf_spectrum",
    "min_mean_pairwise_inner_product",
    "scl_optimum_expr",
    "ucl_optimum_expr",
    "hucl_at_nc_expr",
    "collision_probability_expr",
    "tlambda",
    "tlambda_derivative",
    "check_tlambda_derivative",
    "weibull_top1_probabilities",
    "check_weibull_top1_law",
]


_check_C = functools.partial(integer, "C", lo=2)


def etf_gram_matrix(C: int) -> sp.Matrix:
    """The ETF Gram ``C/(C-1) I - 1/(C-1) 11^T`` as an exact rational ``(C, C)`` sympy Matrix."""
    C = _check_C(C)
    return sp.Matrix(C, C, lambda i, j: sp.Rational(1) if i == j else sp.Rational(-1, C - 1))


def etf_gram_eigenvalues(C: int) -> dict:
    """Exact eigenvalues of the ETF Gram for a concrete ``C``: ``{C/(C-1): C-1, 0: 1}``."""
    return dict(etf_gram_matrix(C).eigenvals())


def etf_gram_eigenvalues_general() -> tuple[sp.Symbol, dict]:
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


def check_etf_spectrum(Cs: Sequence[int] = (2, 3, 4, 5, 6, 7, 8, 10)) -> bool:
    """True iff the concrete spectra equal ``{C/(C-1): C-1, 0: 1}`` for every ``C`` in ``Cs``,
    the general formula substituted at those ``C`` agrees, and ``trace = C``."""
    Csym, general = etf_gram_eigenvalues_general()
    for C in Cs:
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


def _psi_expr(t: Sequence[sp.Expr], psi: str, tau: sp.Expr, margin: sp.Expr) -> sp.Expr:
    k = len(t)
    if psi == "mean":
        return sp.log(1 + sum(sp.exp(ti / tau) for ti in t) / k)
    if psi == "sum":
        return sp.log(1 + sum(sp.exp(ti / tau) for ti in t))
    if psi == "triplet":
        return sum(sp.Max(0, ti / tau + margin) for ti in t) / k
    raise ValueError(f"psi must be 'mean', 'sum' or 'triplet', got {psi!r}")


def _args(C, num_negatives, tau, margin):
    C = _check_C(C)
    num_negatives = integer("num_negatives", num_negatives, lo=1)
    tau = sp.nsimplify(tau)
    margin = sp.nsimplify(margin)
    if not tau.is_positive:
        raise ValueError(f"tau must be > 0, got {tau}")
    if margin.is_negative:
        raise ValueError(f"margin must be >= 0, got {margin}")
    return C, num_negatives, tau, margin


def scl_optimum_expr(C: int, *, psi: str = "mean", num_negatives: int = 256, tau=1, margin=1) -> sp.Expr:
    """``psi_K(a, ..., a)`` with ``a = -C/(C-1)``: the exact ``L*_SCL`` (spec/hcl.md §3.3).

    E.g. mean form: ``log(1 + exp(-C/((C-1) tau)))``.
    """
    C, K, tau, margin = _args(C, num_negatives, tau, margin)
    a = sp.Rational(-C, C - 1)
    return sp.simplify(_psi_expr([a] * K, psi, tau, margin))


def collision_probability_expr(C: int | sp.Symbol | None = None, beta=None) -> sp.Expr:
    """``q(beta) = e^beta / (e^beta + (C-1) e^(-beta/(C-1)))`` (spec/hcl.md §3.6), derived.

    The tilt at NC weighs a same-class negative (score 1) by ``e^beta`` and each of the ``C-1``
    other classes (score ``-1/(C-1)``) by ``e^(-beta/(C-1))``, all with prior ``1/C``.
    """
    if C is None:
        C = sp.Symbol("C", positive=True)
    elif not isinstance(C, sp.Symbol):
        if isinstance(C, bool) or int(C) != C or int(C) < 2:
            raise ValueError(f"C must be an integer >= 2 or a sympy Symbol, got {C!r}")
        C = sp.Integer(int(C))
    beta = sp.Symbol("beta", nonnegative=True) if beta is None else sp.nsimplify(beta)
    same = sp.exp(beta * 1) / C
    other = (C - 1) * sp.exp(beta * (-1 / (C - 1))) / C
    return same / (same + other)


def _binomial_mixture_expr(q: sp.Expr, C: int, psi: str, K: int, tau, margin) -> sp.Expr:
    a = sp.Rational(-C, C - 1)
    return sum(
        sp.binomial(K, m) * q**m * (1 - q) ** (K - m) * _psi_expr([sp.Integer(0)] * m + [a] * (K - m), psi, tau, margin)
        for m in range(K + 1)
    )


def ucl_optimum_expr(C: int, *, psi: str = "mean", num_negatives: int = 2, tau=1, margin=1) -> sp.Expr:
    """``sum_m Binom(m; K, 1/C) psi_K(0^m, a^(K-m))``: the exact ``L*_UCL`` (spec/hcl.md §3.5).

    An explicit sum of ``K + 1`` terms; keep ``num_negatives`` small (<= 32).
    """
    C, K, tau, margin = _args(C, num_negatives, tau, margin)
    return _binomial_mixture_expr(sp.Rational(1, C), C, psi, K, tau, margin)


def hucl_at_nc_expr(C: int, beta, *, psi: str = "mean", num_negatives: int = 2, tau=1, margin=1) -> sp.Expr:
    """Binomial HUCL value at NC with ``q = q(beta)`` (spec/hcl.md §3.6), exact for rational beta."""
    C, K, tau, margin = _args(C, num_negatives, tau, margin)
    q = collision_probability_expr(sp.Integer(C), beta)
    return _binomial_mixture_expr(q, C, psi, K, tau, margin)


def tlambda() -> tuple[tuple[sp.Symbol, ...], sp.Expr]:
    """``T_lambda(s) = (1-lambda) s/tau - lambda log(1-s)`` (spec/weince.md §1.4).

    Returns:
        ``((s, lam, tau), T)`` with ``s < 1`` real, ``lam`` in [0, 1], ``tau > 0`` symbols.
    """
    s = sp.Symbol("s", real=True)
    lam = sp.Symbol("lambda", nonnegative=True)
    tau = sp.Symbol("tau", positive=True)
    return (s, lam, tau), (1 - lam) * s / tau - lam * sp.log(1 - s)


def tlambda_derivative(order: int = 1) -> sp.Expr:
    """``d^order T_lambda / ds^order``: order 1 is ``(1-lambda)/tau + lambda/(1-s)``, order 2 is
    ``lambda/(1-s)^2`` (so T is increasing and convex on ``s < 1`` for ``lambda`` in [0, 1])."""
    order = integer("order", order, lo=1)
    (s, _, _), T = tlambda()
    return sp.simplify(sp.diff(T, s, order))


def check_tlambda_derivative() -> bool:
    """True iff sympy's derivatives equal the stated closed forms and are positive / non-negative
    on ``s < 1`` (substituting ``s = 1 - u`` with ``u > 0``) for ``lambda`` in ``[0, 1]``."""
    (s, lam, tau), _ = tlambda()
    d1, d2 = tlambda_derivative(1), tlambda_derivative(2)
    if sp.simplify(d1 - ((1 - lam) / tau + lam / (1 - s))) != 0:
        return False
    if sp.simplify(d2 - lam / (1 - s) ** 2) != 0:
        return False
    u = sp.Symbol("u", positive=True)
    mu = sp.Symbol("mu", nonnegative=True)  # 1 - lambda
    d1u = sp.simplify(d1.subs(s, 1 - u).subs(lam, 1 - mu))
    # lambda in [0, 1]: lambda = 1 - mu with mu in [0, 1]. d1 is affine in mu, so it is positive on
    # [0, 1] iff it is positive at both end points (sympy decides each from the symbol assumptions).
    if sp.diff(d1u, mu, 2) != 0:
        return False
    if not (d1u.subs(mu, 0).is_positive and d1u.subs(mu, 1).is_positive):
        return False
    d2u = d2.subs(s, 1 - u)
    return bool(d2u.is_nonnegative)


def weibull_top1_probabilities(K: int, beta=None) -> tuple[tuple, list[sp.Expr]]:
    """``P(D_j is the smallest)``, ``j = 1..K``, for ``D_j = q_j W_j``, W i.i.d. Weibull(beta).

    ``P(W > w) = exp(-w^beta)``, so ``D_j`` has survival ``exp(-r_j t^beta)`` with
    ``r_j = q_j^(-beta)`` and density ``beta r_j t^(beta-1) exp(-r_j t^beta)``; then
    ``P(D_j smallest) = int_0^inf beta r_j t^(beta-1) exp(-t^beta sum_k r_k) dt``.

    * ``beta=None`` (symbolic ``beta > 0``): sympy integrates after the change of variables
      ``u = t^beta`` (done by ``Integral.transform``), in the symbols ``r_j = q_j^(-beta)``;
      the result is then rewritten in the ``q_j``.
    * concrete ``beta`` (a positive rational): sympy integrates the density in ``t`` directly,
      with the ``q_j`` as positive symbols.

    Returns:
        ``((q_1..q_K), [P_1, ..., P_K])`` sympy expressions.

    Raises:
        ValueError: ``K`` not in 2..4 (integration time grows quickly) or ``beta <= 0``.
    """
    K = integer("K", K, lo=2, hi=4)
    t, u = sp.symbols("t u", positive=True)
    q = sp.symbols(f"q1:{K + 1}", positive=True)
    probs = []
    if beta is None:
        b = sp.Symbol("beta", positive=True)
        r = sp.symbols(f"r1:{K + 1}", positive=True)
        R = sum(r)
        for j in range(K):
            integrand = b * r[j] * t ** (b - 1) * sp.exp(-(t**b) * R)
            integral = sp.Integral(integrand, (t, 0, sp.oo)).transform(t**b, u)
            integral = sp.Integral(sp.powsimp(sp.expand_power_base(integral.function), force=True), *integral.limits)
            val = sp.simplify(integral.doit(conds="none"))
            probs.append(val.subs({r[i]: q[i] ** (-b) for i in range(K)}))
        return q, probs
    b = sp.nsimplify(beta)
    if not b.is_positive:
        raise ValueError(f"beta must be > 0, got {beta}")
    for j in range(K):
        dens = b * t ** (b - 1) * q[j] ** (-b) * sp.exp(-((t / q[j]) ** b))
        surv = sp.Mul(*[sp.exp(-((t / q[i]) ** b)) for i in range(K) if i != j])
        probs.append(sp.simplify(sp.integrate(dens * surv, (t, 0, sp.oo))))
    return q, probs


def check_weibull_top1_law(K: int, beta=None) -> bool:
    """True iff :func:`weibull_top1_probabilities` equals ``q_j^(-beta) / sum_k q_k^(-beta)``
    for every ``j`` (and hence the probabilities sum to 1)."""
    q, probs = weibull_top1_probabilities(K, beta)
    b = sp.Symbol("beta", positive=True) if beta is None else sp.nsimplify(beta)
    denom = sum(qi ** (-b) for qi in q)
    return all(sp.simplify(p - q[j] ** (-b) / denom) == 0 for j, p in enumerate(probs))
