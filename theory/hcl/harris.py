"""Harris dominance of hard over base negatives: exact enumeration and Monte Carlo checks.

Harris dominance (docs/hcl.md#harris-dominance-t1-t2, claims T1-T3): for a base law ``Q`` over negatives and the
tilted law ``dQ_eta = eta dQ / E_Q eta`` with ``eta >= 0`` non-decreasing,
``E_{Q_eta^k}[psi(s - s^+)] >= E_{Q^k}[psi(s - s^+)]`` for every coordinate-wise non-decreasing psi.
:func:`harris_exact` checks this by exact enumeration of k-tuples, :func:`harris_monte_carlo` by
Monte Carlo with confidence intervals, :func:`beta_monotonicity` checks that exponential tilting
is non-decreasing in beta. The random instances are :func:`random_instance` (points),
:func:`theory.hcl.psi.random_psi` (psi) and :func:`random_eta` (hardening functions).

Notation: ``z`` ``(N, d)`` points, ``labels`` ``(N,)``, ``k`` (``num_negatives``) negatives per
(anchor, positive) pair, ``eta`` a hardening function (:func:`theory.hcl.sampling.hardening`).
"""

from __future__ import annotations

import functools
import itertools
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
from scipy.stats import norm

from theory.hcl.psi import Psi, make_psi, random_psi
from theory.hcl.sampling import hardening
from theory.options import HCL_TAU, NUM_NEGATIVES, PSI_FORMS, SETTINGS
from theory.validation import integer, one_of, real

__all__ = [
    "CheckResult",
    "random_instance",
    "random_eta",
    "eta_from_hardening",
    "harris_exact",
    "harris_exact_check",
    "beta_monotonicity",
    "harris_monte_carlo",
]

_check_K = functools.partial(integer, "num_negatives", lo=1)
_check_beta = functools.partial(real, "beta", lo=0.0)


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
    details: dict[str, Any] = field(default_factory=dict)


def random_instance(
    rng: np.random.Generator,
    *,
    num_points: int = 6,
    num_classes: int = 3,
    d: int = 3,
    normalization: str = "ball",
) -> tuple[np.ndarray, np.ndarray]:
    """Random labelled points in the unit ball or on the unit sphere, every class present.

    ``normalization="ball"`` or ``"sphere"``.

    Returns ``z`` ``(num_points, d)`` float64 and ``labels`` ``(num_points,)`` int64.
    """
    if num_classes < 2 or num_points < num_classes:
        raise ValueError(f"need num_points >= num_classes >= 2, got {num_points}, {num_classes}")
    if d < 1:
        raise ValueError(f"d must be >= 1, got {d}")
    one_of("normalization", normalization, ("ball", "sphere"))
    z = rng.normal(size=(num_points, d))
    z /= np.linalg.norm(z, axis=1, keepdims=True)
    if normalization == "ball":
        z *= rng.uniform(0.0, 1.0, size=(num_points, 1)) ** (1.0 / d)
    labels = np.concatenate([np.arange(num_classes), rng.integers(0, num_classes, num_points - num_classes)])
    return z, rng.permutation(labels)


def eta_from_hardening(eta: str = "exponential", **params: float) -> Callable[[np.ndarray], np.ndarray]:
    """Numpy wrapper of :func:`theory.hcl.sampling.hardening` (float64 in, float64 out)."""
    fn = hardening(eta, **params)
    return lambda s: fn(torch.as_tensor(np.asarray(s, dtype=np.float64))).numpy()


def random_eta(rng: np.random.Generator) -> tuple[str, Callable[[np.ndarray], np.ndarray]]:
    """A random non-negative, non-decreasing hardening function on ``[-1, 1]``.

    One of :func:`theory.hcl.sampling.hardening`'s families (exponential with beta in [0, 10], step,
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


def _negative_sets(labels: np.ndarray, setting: str) -> list[np.ndarray]:
    N = labels.size
    if setting == "supervised":
        return [np.flatnonzero(labels != labels[i]) for i in range(N)]
    return [np.arange(N) for _ in range(N)]


def _eval_eta(eta: Callable[..., Any], s: np.ndarray) -> np.ndarray:
    """Evaluate ``eta`` on float64 scores.

    Accepts numpy or torch hardening functions (e.g. :func:`theory.hcl.sampling.hardening` directly).
    """
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
    z: Any,
    labels: Any,
    *,
    setting: str = "supervised",
    psi: Psi,
    eta: Callable[[np.ndarray], np.ndarray],
) -> np.ndarray:
    """Per-pair gaps ``E_hard[psi] - E_base[psi]`` by exact enumeration (docs/hcl.md#harris-dominance-t1-t2).

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
    zz, yy = _check_points(z, labels)
    one_of("setting", setting, SETTINGS)
    if not isinstance(psi, Psi):
        raise ValueError(f"psi must be a Psi (see make_psi / random_psi), got {type(psi).__name__}")
    vals, valid = _exact_expectations(zz, yy, setting, psi, [None, eta])
    gaps: np.ndarray = (vals[1] - vals[0])[valid[1]]
    return gaps


def _check_sizes(**sizes: Any) -> None:
    for name, value in sizes.items():
        integer(name, value, lo=1)


def _check_points(z: Any, labels: Any) -> tuple[np.ndarray, np.ndarray]:
    z = np.asarray(z, dtype=np.float64)
    labels = np.asarray(labels)
    if z.ndim != 2:
        raise ValueError(f"z must be 2-D (N, d), got shape {z.shape}")
    if labels.shape != (z.shape[0],) or not np.issubdtype(labels.dtype, np.integer):
        raise ValueError(
            f"labels must be integers of shape ({z.shape[0]},), got {labels.shape} {labels.dtype}"
        )
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
        z, labels = random_instance(
            rng, num_points=N, num_classes=C, d=d, normalization=str(rng.choice(["ball", "sphere"]))
        )
        form = int(rng.integers(4))
        if form < 3:
            psi = make_psi(
                PSI_FORMS[form], k, tau=float(rng.uniform(0.1, 2.0)), margin=float(rng.uniform(0, 2))
            )
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
    if len(betas) < 2 or any(b2 <= b1 for b1, b2 in zip(betas, betas[1:], strict=False)):
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
        details={
            "pairs": pairs,
            "betas": list(betas),
            "mean_curve": mean_curve.tolist(),
            "worst_instance": worst_desc,
        },
    )


def _sample_rows(rng: np.random.Generator, w: np.ndarray, K: int) -> np.ndarray:
    """``K`` i.i.d. column indices from each row of the (unnormalised) weights ``w`` ``(M, N)``."""
    M, N = w.shape
    cdf = np.cumsum(w, axis=1)
    cdf /= cdf[:, -1:]
    flat = (cdf + 2.0 * np.arange(M)[:, None]).ravel()
    u = rng.random((M, K)) + 2.0 * np.arange(M)[:, None]
    idx = np.searchsorted(flat, u.ravel(), side="right").reshape(M, K) - np.arange(M)[:, None] * N
    out: np.ndarray = np.clip(idx, 0, N - 1)
    return out


def harris_monte_carlo(
    *,
    num_classes: int = 10,
    per_class: int = 50,
    d: int = 9,
    num_negatives: int = NUM_NEGATIVES,
    num_pairs: int = 4000,
    setting: str = "supervised",
    psi: str = "mean",
    tau: float = HCL_TAU,
    eta: str = "exponential",
    eta_params: dict[str, float] | None = None,
    normalization: str = "ball",
    confidence: float = 0.99,
    seed: int = 0,
) -> CheckResult:
    """Harris dominance at realistic sizes, Monte Carlo with a confidence interval (T1 / T2).

    Random unit-ball (or sphere, ``normalization``) features for ``num_classes * per_class``
    points; ``num_pairs``
    (anchor, positive) pairs drawn uniformly among same-class pairs; for each pair K negatives are
    drawn from the base law and, independently, from the tilted law; the per-pair difference of the
    psi values is averaged. ``worst_gap`` is the lower end of the two-sided ``confidence`` interval
    of ``E_hard - E_base``; the check passes unless the interval lies entirely below 0 (a
    significant violation). ``details`` holds the estimate, the interval, and both means.
    """
    confidence = real("confidence", confidence, lo=0.0, lo_open=True, hi=1.0, hi_open=True)
    one_of("setting", setting, SETTINGS)
    if num_pairs < 2:
        raise ValueError(f"num_pairs must be >= 2, got {num_pairs}")
    K = _check_K(num_negatives)
    num_classes = integer("num_classes", num_classes, lo=2)
    _check_sizes(per_class=per_class, d=d)
    rng = np.random.default_rng(seed)
    N = num_classes * per_class
    z, _ = random_instance(rng, num_points=N, num_classes=num_classes, d=d, normalization=normalization)
    labels = np.repeat(np.arange(num_classes), per_class)
    psi_fn = make_psi(psi, K, tau=tau)
    if eta_params is None:
        eta_params = {"beta": 5.0} if eta == "exponential" else {}
    eta_fn = eta_from_hardening(eta, **eta_params)
    anchors = rng.integers(0, N, num_pairs)
    positives = labels[anchors] * per_class + rng.integers(0, per_class, num_pairs)
    S_a = z[anchors] @ z.T  # (M, N)
    allowed = (
        labels[None, :] != labels[anchors][:, None] if setting == "supervised" else np.ones_like(S_a, bool)
    )
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
