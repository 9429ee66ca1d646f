"""Closed-form optima of the SCL / UCL / HUCL losses at Neural Collapse.

Notation (DESIGN.md, docs/hcl.md#theory): ``C`` (``num_classes``) classes, ``K``
(``num_negatives``) negatives per (anchor, positive) pair, ``tau`` temperature, ``beta``
hardness, ``t_i = z.z^-_i - z.z^+``. At Neural Collapse (NC) the positive score is 1, a
same-class negative has ``t = 0`` and an other-class negative has ``t = a := -C/(C-1)``.

The psi family is the one of :func:`theory.hcl.psi.apply_psi` (docs/hcl.md#the-psi-family), always
applied to ``t/tau``:

* ``"mean"``: ``psi(t) = log(1 + (1/K) sum_i exp(t_i/tau))`` (the authors' form);
* ``"sum"``: ``psi(t) = log(1 + sum_i exp(t_i/tau))``;
* ``"triplet"``: ``psi(t) = (1/K) sum_i max(0, t_i/tau + margin)``.

Which closed form matches which estimator of :func:`theory.hcl.losses.contrastive_loss`:

* ``estimator="sampled"`` draws K negatives i.i.d. from the (tilted) law ``q`` and evaluates
  ``psi_K``; its expectation at NC is the **binomial mixture**
  ``sum_m Binom(m; K, q) psi_K(0^m, a^(K-m))`` (docs/hcl.md#the-ucl-optimum-t6, docs/hcl.md#hucl-at-neural-collapse-t7). This is the population
  loss of the theory: :func:`ucl_optimum`, :func:`hucl_at_nc` (``estimator="sampled"``).
* ``estimator="expectation"`` replaces the K-sample average *inside* the log by its exact
  expectation: ``log(1 + E_q exp(t/tau))`` (mean) or ``log(1 + K E_q exp(t/tau))`` (sum). At NC
  this is the plug-in value ``log(1 + q + (1-q) e^(a/tau))`` (mean), i.e. the K -> infinity limit
  of the mean form; by Jensen (log concave) it is >= the binomial mixture for the mean form.
  :func:`hucl_at_nc` with ``estimator="expectation"``. For the triplet form psi is linear in the
  empirical law of the negatives, so both estimators have the same value.
* With only other-class negatives (SCL / HSCL) every negative at NC has ``t = a``: both estimators
  equal ``psi_K(a, ..., a)`` for every beta (:func:`scl_optimum`).

Defaults: ``tau`` = :data:`theory.options.HCL_TAU`, ``num_negatives`` =
:data:`theory.options.NUM_NEGATIVES`, ``margin`` = :data:`theory.options.MARGIN`.

Memory (docs/hcl.md#optimal-values): the binomial mixtures are exact sums over ``m = 0..K`` up to
``K = EXACT_NEGATIVES``; above, they sum over the window ``|m - K q| <= t`` that holds all but
``TAIL_MASS`` of the binomial mass (Bernstein's inequality), i.e. O(sqrt(K q (1 - q))) terms, with
an absolute error below ``TAIL_MASS * max|psi|``. ``num_negatives`` above ``MAX_NEGATIVES`` is
rejected.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence

import numpy as np
from scipy.stats import binom

from theory.options import ESTIMATORS, HCL_TAU, MARGIN, NORMALIZATIONS, NUM_NEGATIVES, PSI_FORMS, SETTINGS
from theory.validation import integer, one_of, real

__all__ = [
    "EXACT_NEGATIVES",
    "MAX_NEGATIVES",
    "TAIL_MASS",
    "etf_negative_gap",
    "collision_probability",
    "collision_probability_batch",
    "binomial_mixture",
    "plugin_value",
    "scl_optimum",
    "ucl_optimum",
    "nc_optimum",
    "hucl_at_nc",
    "hucl_at_nc_batch",
    "weak_bound",
]


# --------------------------------------------------------------------------------------------
# validation helpers


#: Binomial mixtures with ``K`` up to this are exact sums over all ``K + 1`` terms.
EXACT_NEGATIVES = 1 << 16

#: Largest ``num_negatives`` the closed forms accept (the window of a mixture then holds at most
#: about 5e5 terms).
MAX_NEGATIVES = 10**9

#: Binomial mass left outside the window of a mixture with ``K > EXACT_NEGATIVES`` terms: the
#: absolute error is below ``TAIL_MASS * max|psi|``.
TAIL_MASS = 1e-20

_check_C = functools.partial(integer, "num_classes", lo=2)
_check_K = functools.partial(integer, "num_negatives", lo=1, hi=MAX_NEGATIVES)
_check_tau = functools.partial(real, "tau", lo=0.0, lo_open=True)
_check_beta = functools.partial(real, "beta", lo=0.0)
_check_margin = functools.partial(real, "margin", lo=0.0)


def _check_psi_args(psi: str, tau: float, num_negatives: int, margin: float) -> tuple[str, float, int, float]:
    """Validated ``(psi, tau, K, margin)``: the arguments shared by every closed-form value."""
    return one_of("psi", psi, PSI_FORMS), _check_tau(tau), _check_K(num_negatives), _check_margin(margin)


def _check_prob(q: float, name: str = "q") -> float:
    """``q`` as a probability in ``[0, 1]``."""
    return real(name, q, lo=0.0, hi=1.0)


def etf_negative_gap(num_classes: int) -> float:
    """``a = -C/(C-1)``: the score gap ``z.z^- - z.z^+`` of an other-class negative at NC."""
    C = _check_C(num_classes)
    return -C / (C - 1)


def collision_probability(num_classes: int, beta: float) -> float:
    """Population probability that an exponentially tilted UCL negative is same-class at NC.

    ``q(beta) = e^beta / (e^beta + (C-1) e^(-beta/(C-1)))`` (uniform priors; docs/hcl.md#hucl-at-neural-collapse-t7),
    computed stably as ``sigmoid(beta C/(C-1) - log(C-1))``. ``q(0) = 1/C``; ``C = num_classes``.
    """
    C = _check_C(num_classes)
    beta = _check_beta(beta)
    x = beta * C / (C - 1) - math.log(C - 1)
    return float(1.0 / (1.0 + math.exp(-x))) if x >= 0 else float(math.exp(x) / (1.0 + math.exp(x)))


def collision_probability_batch(
    counts: Sequence[int] | np.ndarray, beta: float, *, self_negative: bool = True
) -> np.ndarray:
    """Per-class collision probability of the batch's tilted law at an exact NC batch.

    The batch holds ``counts[c]`` copies of the ETF vertex ``v_c`` (``C = len(counts)``; the ETF
    is that of all ``C`` classes even if some count is 0). An anchor of class ``c`` draws from all
    batch members with weight ``exp(beta z_i.z_n)``: ``n_same = counts[c]`` (or ``counts[c]-1``
    without self-negatives) members at score 1 and ``B - counts[c]`` at ``-1/(C-1)``:
    ``q_c = n_same e^beta / (n_same e^beta + n_other e^(-beta/(C-1)))`` (docs/hcl.md#the-batched-loss, docs/hcl.md#hucl-at-neural-collapse-t7).

    Shapes: ``counts`` ``(C,)`` -> ``(C,)`` float64 (``nan`` for classes with no negatives at all).

    Raises:
        ValueError: fewer than 2 classes, negative counts, or ``beta < 0``.
    """
    n = np.asarray(counts)
    if n.ndim != 1 or n.size < 2:
        raise ValueError(f"counts must be a 1-D sequence of C >= 2 class counts, got shape {n.shape}")
    if not np.issubdtype(n.dtype, np.integer) or (n < 0).any():
        raise ValueError(f"counts must be non-negative integers, got {n.tolist()}")
    beta = _check_beta(beta)
    C = n.size
    B = int(n.sum())
    n_same = np.maximum(n - (0 if self_negative else 1), 0).astype(np.float64)
    n_other = (B - n).astype(np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        logit = np.log(n_same) - np.log(n_other) + beta * C / (C - 1)
        q = np.where(
            logit >= 0,
            1.0 / (1.0 + np.exp(-np.abs(logit))),
            np.exp(-np.abs(logit)) / (1.0 + np.exp(-np.abs(logit))),
        )
    q = np.where((n_same == 0) & (n_other == 0), np.nan, q)
    return q


def binomial_mixture(
    q: float,
    num_classes: int,
    *,
    psi: str = "mean",
    tau: float = HCL_TAU,
    num_negatives: int = NUM_NEGATIVES,
    margin: float = MARGIN,
) -> float:
    """``E_{m ~ Binom(K, q)} psi_K(0^m, a^(K-m))`` with ``a = -C/(C-1)`` (docs/hcl.md#hucl-at-neural-collapse-t7).

    The expected value of the K-sample (``estimator="sampled"``) loss at NC when each negative is
    same-class with probability ``q`` independently. In log space; an exact sum over ``m = 0..K``
    for ``K <= EXACT_NEGATIVES``, else over the Bernstein window holding all but ``TAIL_MASS`` of
    the mass (O(sqrt(K)) memory, absolute error below ``TAIL_MASS * max|psi|``).

    Args:
        q: collision probability in ``[0, 1]``.
        num_classes: ``C >= 2``.
        psi: the psi form.
        tau: temperature ``> 0``.
        num_negatives: ``K`` in ``[1, MAX_NEGATIVES]``.
        margin: triplet margin ``>= 0``.

    Returns:
        The mixture value.

    Raises:
        ValueError: an argument out of range (named).
    """
    q = _check_prob(q)
    C = _check_C(num_classes)
    psi, tau, K, margin = _check_psi_args(psi, tau, num_negatives, margin)
    return _binomial_mixture(q, C, psi, tau, K, margin, EXACT_NEGATIVES)


def _binomial_window(K: int, q: float) -> tuple[int, int]:
    """``[lo, hi]``: ``P(|Binom(K, q) - K q| > t) <= TAIL_MASS`` outside (Bernstein's inequality)."""
    L = math.log(2.0 / TAIL_MASS)
    t = L / 3.0 + math.sqrt(L * L / 9.0 + 2.0 * L * K * q * (1.0 - q))
    return max(0, math.floor(K * q - t)), min(K, math.ceil(K * q + t))


def _binomial_mixture(
    q: float, C: int, psi: str, tau: float, K: int, margin: float, exact_limit: int
) -> float:
    """:func:`binomial_mixture` on validated arguments (window above ``exact_limit``)."""
    a = -C / (C - 1)
    lo, hi = (0, K) if K <= exact_limit else _binomial_window(K, q)
    m = np.arange(lo, hi + 1, dtype=np.float64)
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
    num_classes: int,
    *,
    psi: str = "mean",
    tau: float = HCL_TAU,
    num_negatives: int = NUM_NEGATIVES,
    margin: float = MARGIN,
) -> float:
    """NC value of the ``estimator="expectation"`` loss with collision probability ``q``.

    ``mean``: ``log(1 + q + (1-q) e^(a/tau))``; ``sum``: ``log(1 + K (q + (1-q) e^(a/tau)))``;
    ``triplet``: ``q margin + (1-q) max(0, a/tau + margin)``; ``a = -C/(C-1)``.
    """
    q = _check_prob(q)
    C = _check_C(num_classes)
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
    num_classes: int,
    *,
    psi: str = "mean",
    tau: float = HCL_TAU,
    num_negatives: int = NUM_NEGATIVES,
    margin: float = MARGIN,
) -> float:
    """``L*_SCL = psi_K(-C/(C-1), ..., -C/(C-1))`` (docs/hcl.md#the-scl-optimum-t4-t5, claims T4/T5).

    The minimum of the SCL and HSCL losses over representations in the unit ball (or sphere) with
    ``d >= C-1``, attained at NC. ``mean``: ``log(1 + e^(a/tau))``; ``sum``:
    ``log(1 + K e^(a/tau))``; ``triplet``: ``max(0, a/tau + margin)``; ``a = -C/(C-1)``.
    Equal for both estimators and every beta.
    """
    return plugin_value(0.0, num_classes, psi=psi, tau=tau, num_negatives=num_negatives, margin=margin)


def ucl_optimum(
    num_classes: int,
    *,
    psi: str = "mean",
    tau: float = HCL_TAU,
    num_negatives: int = NUM_NEGATIVES,
    margin: float = MARGIN,
) -> float:
    """``L*_UCL = sum_m Binom(m; K, 1/C) psi_K(0^m, (-C/(C-1))^(K-m))`` (docs/hcl.md#the-ucl-optimum-t6, claim T6).

    The minimum of the population UCL loss (conditionally independent views, uniform priors,
    unit ball, ``d >= C-1``), attained at NC. Strictly above :func:`scl_optimum`.
    """
    C = _check_C(num_classes)
    return binomial_mixture(1.0 / C, C, psi=psi, tau=tau, num_negatives=num_negatives, margin=margin)


def nc_optimum(
    setting: str | None,
    num_classes: int,
    *,
    d: int,
    normalization: str,
    psi: str = "mean",
    tau: float = HCL_TAU,
    num_negatives: int = NUM_NEGATIVES,
    margin: float = MARGIN,
    estimator: str = "expectation",
) -> float:
    """The closed-form NC value of a training run's loss: the ``optimum`` column of both stacks.

    With ``a = -C / ((C - 1) tau)`` (the scaled cross-class ``t`` at NC):

    * ``setting="supervised"`` (SCL / HSCL): :func:`scl_optimum`, ``L*_SCL``, attained at NC for
      every beta and both estimators;
    * ``"unsupervised"`` (UCL / HUCL, same-class negatives at ``t = 0``): ``L*_UCL`` in the form
      of the estimator, :func:`ucl_optimum` (``"sampled"``: the binomial mixture) or
      :func:`plugin_value` at ``q = 1/C`` (``"expectation"``); a lower bound for HUCL;
    * NaN where there is no such optimum: ``setting=None`` (the two-view losses),
      ``normalization="none"`` (the loss tends to 0, its infimum) and ``d < C - 1`` (no simplex
      ETF exists).

    Args:
        setting: a :data:`theory.options.SETTINGS` entry, or None.
        num_classes: ``C >= 2``.
        d: the embedding dimension.
        normalization: a :data:`theory.options.NORMALIZATIONS` entry.
        psi: the psi family.
        tau: temperature ``> 0``.
        num_negatives: ``K``.
        margin: triplet margin.
        estimator: ``"expectation"`` or ``"sampled"``.

    Returns:
        The value (NaN where it is no optimum).

    References:
        Jiang et al., arXiv 2311.05139, section 3; docs/hcl.md#theory.
    """
    if setting is not None:
        one_of("setting", setting, SETTINGS)
    one_of("normalization", normalization, NORMALIZATIONS)
    one_of("estimator", estimator, ESTIMATORS)
    C = _check_C(num_classes)
    d = integer("d", d, lo=1)
    if setting is None or normalization == "none" or d < C - 1:
        return math.nan
    kw = dict(psi=psi, tau=tau, num_negatives=num_negatives, margin=margin)
    if setting == "supervised":
        return float(scl_optimum(C, **kw))  # type: ignore[arg-type]
    if estimator == "sampled":
        return float(ucl_optimum(C, **kw))  # type: ignore[arg-type]
    return float(plugin_value(1.0 / C, C, **kw))  # type: ignore[arg-type]


def hucl_at_nc(
    num_classes: int,
    beta: float,
    *,
    psi: str = "mean",
    tau: float = HCL_TAU,
    num_negatives: int = NUM_NEGATIVES,
    margin: float = MARGIN,
    estimator: str = "sampled",
) -> float:
    """Population HUCL loss at NC with exponential tilting (docs/hcl.md#hucl-at-neural-collapse-t7, claim T7).

    ``estimator="sampled"`` (the theory's population loss, the expectation of the K-sample loss):
    ``sum_m Binom(m; K, q(beta)) psi_K(0^m, a^(K-m))``; ``"expectation"``: the plug-in value
    :func:`plugin_value` at ``q(beta)``; ``q`` from :func:`collision_probability`.
    ``beta = 0`` gives :func:`ucl_optimum`; ``beta -> inf`` gives ``psi_K(0, ..., 0)``.
    """
    one_of("estimator", estimator, ESTIMATORS)
    q = collision_probability(num_classes, beta)
    f = binomial_mixture if estimator == "sampled" else plugin_value
    return f(q, num_classes, psi=psi, tau=tau, num_negatives=num_negatives, margin=margin)


def hucl_at_nc_batch(
    counts: Sequence[int] | np.ndarray,
    beta: float,
    *,
    psi: str = "mean",
    tau: float = HCL_TAU,
    num_negatives: int = NUM_NEGATIVES,
    margin: float = MARGIN,
    estimator: str = "sampled",
    self_positive: bool = True,
    self_negative: bool = True,
) -> float:
    """Batched HUCL loss (docs/hcl.md#the-batched-loss) of an exact NC batch with given class counts.

    Per anchor of class ``c`` the value is the binomial mixture (``estimator="sampled"``, the
    expectation over the K draws) or the plug-in value (``"expectation"``, exact) at the batch's
    collision probability ``q_c`` (:func:`collision_probability_batch`); the anchor has
    ``counts[c]`` positives (``counts[c]-1`` without ``self_positive``). The loss is the mean over
    all (anchor, positive) pairs, as in :func:`theory.hcl.losses.contrastive_loss`
    (``setting="unsupervised"``) evaluated at ``z[i] = v_{labels[i]}``.

    Raises:
        ValueError: bad counts / options, no (anchor, positive) pair, or an anchor with a pair
            but no negative.
    """
    one_of("estimator", estimator, ESTIMATORS)
    q = collision_probability_batch(counts, beta, self_negative=self_negative)
    n = np.asarray(counts)
    C = n.size
    npos = n if self_positive else np.maximum(n - 1, 0)
    weights = n * npos
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
    *, psi: str = "mean", tau: float = HCL_TAU, num_negatives: int = NUM_NEGATIVES, margin: float = MARGIN
) -> float:
    """``psi_K(-1, ..., -1)``: the UCL/HUCL lower bound without conditional independence.

    Jensen over everything: ``E[z.z^-] = ||E z||^2 >= 0`` for a marginal negative and
    ``E[z.z^+] <= 1`` (docs/hcl.md#hucl-at-neural-collapse-t7). ``mean``: ``log(1 + e^(-1/tau))``; ``sum``:
    ``log(1 + K e^(-1/tau))``; ``triplet``: ``max(0, margin - 1/tau)``.
    """
    psi, tau, K, margin = _check_psi_args(psi, tau, num_negatives, margin)
    if psi == "triplet":
        return max(0.0, margin - 1.0 / tau)
    shift = math.log(K) if psi == "sum" else 0.0
    return float(np.logaddexp(0.0, -1.0 / tau + shift))
