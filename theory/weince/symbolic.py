"""Symbolic (sympy) derivations of the WeiNCE paper (Erol et al., ICML 2026, arXiv 2606.00262).

* the derivative of the WeiNCE logit ``T_lambda(s) = (1-lambda) s/tau - lambda log(1-s)``
  (``docs/weince.md#the-t-lambda-logits``): increasing and convex on ``s < 1`` for ``lambda`` in [0, 1];
* the Weibull (weibit) top-1 law ``P(D_j smallest) = q_j^(-beta) / sum_k q_k^(-beta)`` for
  shortfalls ``D_j = q_j W_j`` with ``W_j`` i.i.d. Weibull of shape ``beta`` (``docs/weince.md#the-weibit-top-1-law``).

``K`` here is the number of candidates ``j = 1..K`` of the top-1 law. Every function returns
sympy objects or Python booleans; nothing numeric is assumed that sympy does not derive.
"""

from __future__ import annotations

import sympy as sp

from theory.validation import integer

__all__ = [
    "tlambda",
    "tlambda_derivative",
    "check_tlambda_derivative",
    "weibull_top1_probabilities",
    "check_weibull_top1_law",
]


def tlambda() -> tuple[tuple[sp.Symbol, ...], sp.Expr]:
    """``T_lambda(s) = (1-lambda) s/tau - lambda log(1-s)`` (``docs/weince.md#the-t-lambda-logits``).

    Returns:
        ``((s, lam, tau), T)`` with ``s < 1`` real, ``lam`` in [0, 1], ``tau > 0`` symbols.
    """
    s = sp.Symbol("s", real=True)
    lam = sp.Symbol("lambda", nonnegative=True)
    tau = sp.Symbol("tau", positive=True)
    return (s, lam, tau), (1 - lam) * s / tau - lam * sp.log(1 - s)


def tlambda_derivative(order: int = 1) -> sp.Expr:
    """``d^order T_lambda / ds^order`` (sympy).

    Order 1 is ``(1-lambda)/tau + lambda/(1-s)``, order 2 is ``lambda/(1-s)^2`` (so T is
    increasing and convex on ``s < 1`` for ``lambda`` in [0, 1]; ``docs/weince.md#the-t-lambda-logits``).

    Args:
        order: derivative order ``>= 1``.

    Returns:
        The simplified derivative.
    """
    order = integer("order", order, lo=1)
    (s, _, _), T = tlambda()
    return sp.simplify(sp.diff(T, s, order))


def check_tlambda_derivative() -> bool:
    """Check the stated derivatives of T_lambda and their signs with sympy.

    True iff sympy's derivatives equal the stated closed forms and are positive / non-negative on
    ``s < 1`` (substituting ``s = 1 - u`` with ``u > 0``) for ``lambda`` in ``[0, 1]``.
    """
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


def weibull_top1_probabilities(
    K: int, beta: float | None = None
) -> tuple[tuple[sp.Symbol, ...], list[sp.Expr]]:
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
            integral = sp.Integral(
                sp.powsimp(sp.expand_power_base(integral.function), force=True), *integral.limits
            )
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


def check_weibull_top1_law(K: int, beta: float | None = None) -> bool:
    """Check the Weibull top-1 law with sympy (``docs/weince.md#the-w-law-check``).

    True iff :func:`weibull_top1_probabilities` equals ``q_j^(-beta) / sum_k q_k^(-beta)`` for
    every ``j`` (and hence the probabilities sum to 1).
    """
    q, probs = weibull_top1_probabilities(K, beta)
    b = sp.Symbol("beta", positive=True) if beta is None else sp.nsimplify(beta)
    denom = sum(qi ** (-b) for qi in q)
    return all(sp.simplify(p - q[j] ** (-b) / denom) == 0 for j, p in enumerate(probs))
