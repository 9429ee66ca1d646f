"""WeiNCE: InfoNCE with per-anchor T_lambda logits (softmax blended with the Weibull shortfall).

Reference: Erol, Evren, Ozel, Morgan, Ryu, Zheng, "When Softmax Fails at the Top: Extreme-Value
Corrections for InfoNCE", ICML 2026 (arXiv 2606.00262); the algorithm as released by the authors
(policy ``tlambda_select``), spec/weince.md §2-§3.

Notation (spec/weince.md §2, DESIGN.md):

* ``z1, z2`` ``(N, d)`` the two views; ``A = 2N`` anchors of ``z = cat(z1, z2)``;
* ``S`` ``(A, A)`` cosine similarities; positive of row ``i`` is column ``p(i) = (i + N) mod A``;
* ``cand`` ``(A, A - 1)``: ``[S[i, p(i)], S[i, negatives in ascending column order]]``;
* ``K = A - 2`` negatives per anchor; ``k_tail`` tail size (§2.2); ``n_eff`` points after burn-in;
* shortfall ``delta = max(1 - s, eps)``; cap proximity ``rho_i = max(1 - max_neg S[i], eps)``;
* ``T_lambda(s) = (1 - lambda) s / tau + lambda (-log(1 - min(s, 1 - eps)))`` (§1.4, §2.7).

The gate (§2.3-§2.6, every statistic detached)::

    lambda_i = sigmoid(kappa_rho * log(rho0 / rho_i)) * sigmoid(kappa_aic * (dAIC_i - margin))

with ``rho0`` the ``round(q (A - 1))``-th smallest ``rho`` (round half to even) and ``dAIC_i`` the
difference of two least-squares "AIC"s on the anchor's ``k_tail`` hardest negatives (Weibull line
``log F = a + beta log delta`` versus the Gumbel-fast proxy ``log(-log F) = b - kappa log delta``,
``F`` the within-tail rank ECDF ``k / (k_tail + 1)``).

Implementation notes (speed, spec §3.1 costs): one sort / top-k of width ``k_tail`` per row on the
detached negatives (on CPU float32 a SIMD numpy sort, which returns the same values as
``torch.topk``), the two OLS fits vectorised over anchors with a shared response, and the T_lambda
logits + cross-entropy fused in one autograd function whose backward is the closed form
``d logit / d s = (1 - lambda)/tau + lambda/(1 - s) * [s <= 1 - eps]``. No ``(A, A, d)`` tensor is
ever formed (the authors' ``CosineSimilarity`` broadcast is replaced by a matmul).
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass, field

import numpy as np
import torch
import torch.nn.functional as F
from scipy.special import expit
from torch.autograd.function import once_differentiable

from theory.geometry import as_float_tensor
from theory.losses import two_view_candidates
from theory.validation import integer, real

__all__ = [
    "RECIPES",
    "tail_size",
    "rho0_index",
    "tlambda_logits",
    "GateStats",
    "TailFits",
    "tail_fits",
    "weince_gate",
    "WeibullBetaState",
    "WeiNCEDiagnostics",
    "weince_loss",
    "weince_label_loss",
    "WeiNCELoss",
]

RECIPES = ("core", "released")

#: Floors of the authors' least-squares fits (§2.5): denominator, SSE, and the sanity penalty.
_DEN_FLOOR = 1e-12
_SSE_FLOOR = 1e-12
_PENALTY = 1e6

#: Use numpy's SIMD kernels (sort, log1p, exp, partition) for CPU tensors. The torch-only branch
#: (used on GPU) computes the same quantities; tests switch this off to cover it on CPU.
_NUMPY_FAST = True


def _np_ok(t: torch.Tensor) -> bool:
    return _NUMPY_FAST and t.device.type == "cpu"


@dataclass(frozen=True)
class _GateParams:
    q: float
    tail_frac: float
    min_tail: int
    margin: float
    kappa_rho: float
    kappa_aic: float
    eps: float


def _gate_params(q, tail_frac, min_tail, margin, kappa_rho, kappa_aic, eps) -> _GateParams:
    return _GateParams(
        q=real("q", q, lo=0.0, hi=1.0),
        tail_frac=real("tail_frac", tail_frac, lo=0.0),
        min_tail=integer("min_tail", min_tail, lo=0),
        margin=real("margin", margin, allow_inf=True),
        kappa_rho=real("kappa_rho", kappa_rho, lo=0.0),
        kappa_aic=real("kappa_aic", kappa_aic, lo=0.0),
        eps=real("eps", eps, lo=0.0, lo_open=True, hi=0.5),
    )


# --------------------------------------------------------------------------------------------
# the rounding rules (§2.2, §2.6)
# --------------------------------------------------------------------------------------------


def tail_size(K: int, tail_frac: float = 0.1, min_tail: int = 32) -> int:
    """Tail size ``k_tail`` for ``K`` negatives (spec/weince.md §2.2, the authors' exact order).

    ``k = max(min_tail, round(tail_frac K)); k = min(k, K); k = max(10, k); k = min(k, K)`` with
    Python's ``round`` (round half to even). Examples: K=510 -> 51, K=126 -> 32, K=14 -> 14.

    Raises:
        ValueError: ``K < 1``, ``tail_frac < 0`` or ``min_tail < 0``.
    """
    K = integer("K", K, lo=1)
    tail_frac = real("tail_frac", tail_frac, lo=0.0)
    min_tail = integer("min_tail", min_tail, lo=0)
    k = max(min_tail, round(tail_frac * K))
    k = min(k, K)
    k = max(10, k)
    return min(k, K)


def rho0_index(A: int, q: float = 0.2) -> int:
    """Index of the pivot ``rho0`` in ``sort(rho)`` over ``A`` anchors: ``round(q (A - 1))``.

    Python ``round`` (half to even), spec/weince.md §2.6: A=512 -> 102, A=8 -> round(1.4) = 1.

    Raises:
        ValueError: ``A < 1`` or ``q`` outside ``[0, 1]``.
    """
    A = integer("A", A, lo=1)
    q = real("q", q, lo=0.0, hi=1.0)
    return round(q * (A - 1))


# --------------------------------------------------------------------------------------------
# logits
# --------------------------------------------------------------------------------------------


def tlambda_logits(s: torch.Tensor, lam: torch.Tensor | float, tau: float = 0.5, eps: float = 1e-6) -> torch.Tensor:
    """Closed-form T_lambda logits (spec/weince.md §2.7), differentiable in ``s``.

    ``l = (1 - lam) * (s / tau) + lam * (-log1p(-min(s, 1 - eps)))``; ``lam`` broadcasts against
    ``s`` (e.g. ``(A, 1)`` against ``(A, M)``). With ``lam = 0`` this is ``s / tau`` bit for bit.

    Shapes: ``s`` ``(..., M)``, ``lam`` scalar or broadcastable -> ``(..., M)``.

    float16/bfloat16 ``s`` is computed (and returned) in float32: in float16 ``1 - eps`` rounds
    to 1 and the shortfall branch would be ``-log(0) = inf`` (spec §3.2); float64 stays float64.
    """
    tau = real("tau", tau, lo=0.0, lo_open=True)
    eps = real("eps", eps, lo=0.0, lo_open=True, hi=0.5)
    if not isinstance(s, torch.Tensor):
        raise ValueError(f"s must be a torch tensor, got {type(s).__name__}")
    s = as_float_tensor(s, "s")
    lam = torch.as_tensor(lam, dtype=s.dtype, device=s.device)
    W = -torch.log1p(-torch.clamp(s, max=1.0 - eps))
    return (1 - lam) * (s / tau) + lam * W


class _TLambdaCE(torch.autograd.Function):
    """Fused ``mean_i CE(T_lambda(cand_i), 0)`` with the closed-form backward (lambda fixed)."""

    @staticmethod
    def forward(ctx, cand, lam, tau, eps):  # noqa: D102
        lam_c = lam[:, None]
        logits = cand / tau  # the very op info_nce uses -> identical bits when lam == 0
        W = torch.clamp(cand, max=1.0 - eps)
        if _np_ok(W):  # numpy's SIMD log1p is ~2x faster than torch's on CPU
            Wn = W.numpy()
            np.log1p(np.negative(Wn, out=Wn), out=Wn)
        else:
            W.neg_().log1p_()  # log(1 - s~) = -W
        logits.mul_(1 - lam_c)
        logits.addcmul_(W, lam_c, value=-1.0)  # (1-lam) s/tau + lam * (-log(1 - s~))
        logp = torch.log_softmax(logits, dim=1)
        target = torch.zeros(cand.shape[0], dtype=torch.long, device=cand.device)
        loss = F.nll_loss(logp, target)
        ctx.save_for_backward(cand, lam, logp)
        ctx.tau = tau
        ctx.eps = eps
        return loss

    @staticmethod
    @once_differentiable
    def backward(ctx, g):  # noqa: D102
        cand, lam, logp = ctx.saved_tensors
        A = cand.shape[0]
        scale = g / A
        lam_c = lam[:, None]
        # d loss / d logits = (softmax - onehot_0) * g / A
        if _np_ok(logp):
            P = torch.empty_like(logp)
            np.exp(logp.numpy(), out=P.numpy())
        else:
            P = logp.exp()
        P[:, 0] -= 1
        # d logits / d cand = (1 - lam)/tau + lam / (1 - s) * [s <= 1 - eps]   (times g / A)
        D = torch.rsub(cand, 1.0).reciprocal_()
        if bool(cand.max() > 1.0 - ctx.eps):  # the clamp is active somewhere (rare)
            D.masked_fill_(cand > 1.0 - ctx.eps, 0.0)
        D.mul_(lam_c * scale).add_((1 - lam_c) * (scale / ctx.tau))
        P.mul_(D)
        return P, None, None, None


# --------------------------------------------------------------------------------------------
# the gate (§2.3-§2.6)
# --------------------------------------------------------------------------------------------


@dataclass
class GateStats:
    """Per-anchor gate statistics (all detached), spec/weince.md §2.3-§2.6.

    Attributes:
        lam: ``(A,)`` lambda_i = lam_rho * lam_aic.
        lam_rho: ``(A,)`` sigmoid(kappa_rho (log rho0 - log rho_i)).
        lam_aic: ``(A,)`` sigmoid(kappa_aic (dAIC_i - margin)).
        rho: ``(A,)`` cap proximity max(1 - hardest negative, eps).
        rho0: 0-d tensor, the batch pivot (already floored at eps).
        dAIC: ``(A,)`` n_eff log(SSE_G / SSE_W) (0 in the n_eff < 2 fallback).
        k_tail: tail size (int; per-anchor ``(A,)`` tensor in the label variant).
        n_eff: points after burn-in (int; per-anchor tensor in the label variant).
    """

    lam: torch.Tensor
    lam_rho: torch.Tensor
    lam_aic: torch.Tensor
    rho: torch.Tensor
    rho0: torch.Tensor
    dAIC: torch.Tensor
    k_tail: int | torch.Tensor
    n_eff: int | torch.Tensor


def _top_desc(neg: torch.Tensor, k: int) -> np.ndarray:
    """The ``k`` largest entries of each row of ``neg`` ``(A, K)``, descending, as float64 numpy."""
    if _np_ok(neg) and neg.dtype == torch.float32:
        # numpy's SIMD sort of the whole row is ~6x faster than torch.topk here (same values)
        return np.sort(neg.numpy(), axis=1)[:, : -k - 1 : -1].astype(np.float64)
    return torch.topk(neg, k, dim=1, largest=True, sorted=True).values.cpu().double().numpy()


@functools.lru_cache(maxsize=64)
def _centred_responses(k: int, burn: int, eps: float) -> tuple[np.ndarray, np.ndarray]:
    """Shared responses of the tail fits: ``Y`` ``(n_eff, 2)`` and ``Syy`` ``(2,)``, float64.

    ``Y`` holds the centred ``y_W = log F`` and ``y_G = log(-log F)`` of the within-tail ECDF
    ``F = max(r / (k + 1), eps)`` at ranks ``r > burn`` (spec §2.4); ``Syy = sum Y^2`` per column.
    A pure function of ``(k, burn, eps)`` (numpy float64 on the host, whatever the input device),
    cached because every batch of a run uses the same vectors; the arrays are read-only.
    """
    F_hat = np.maximum(np.arange(1, k + 1, dtype=np.float64) / (k + 1), eps)[burn:]
    yW = np.log(F_hat)
    Y = np.stack([yW, np.log(-yW)], axis=1)
    Y = Y - Y.mean(axis=0, keepdims=True)
    syy = np.einsum("ij,ij->j", Y, Y)
    Y.setflags(write=False)
    syy.setflags(write=False)
    return Y, syy


@dataclass(frozen=True)
class TailFits:
    """The two least-squares tail fits of spec/weince.md §2.4-§2.5 for ``A`` anchors (one ``k_tail``).

    Attributes:
        k_tail: tail size; ``burn = max(1, k_tail // 20)``; ``n_eff = k_tail - burn``.
        slope: ``(A, 2)`` OLS slopes ``(slope_W, slope_G)`` of ``y_W``, ``y_G`` on ``x = log delta``
            (NaN when ``n_eff < 2``; slope_W is the anchor-wise beta_hat_i, unused by the gate).
        sse_raw: ``(A, 2)`` residual sums of squares (before the floor and the penalties).
        sse: ``(A, 2)`` ``max(sse_raw, 1e-12)``, ``+1e6`` where ``slope_W <= 0`` (column 0) or
            ``slope_G >= 0`` (column 1).
        syy: ``(2,)`` total sums of squares of the centred responses.
        dAIC: ``(A,)`` ``n_eff log(SSE_G / SSE_W)`` (0 when ``n_eff < 2``: the authors' fallback).
    """

    k_tail: int
    burn: int
    n_eff: int
    slope: np.ndarray
    sse_raw: np.ndarray
    sse: np.ndarray
    syy: np.ndarray
    dAIC: np.ndarray


def _tail_fits(T: np.ndarray, eps: float) -> TailFits:
    """Vectorised §2.4-§2.5 on descending tails ``T`` ``(A, k)`` float64 (no validation).

    The single implementation of the tail fits: used by the two-view gate, the label-positive
    gate and :func:`theory.evt.tail_aic_fit`.
    """
    A, k = T.shape
    burn = max(1, k // 20)
    n = k - burn
    if n < 2:
        nan = np.full((A, 2), np.nan)
        return TailFits(k, burn, n, nan, nan.copy(), nan.copy(), np.full(2, np.nan), np.zeros(A))
    x = np.log(np.maximum(1.0 - T[:, burn:], eps))  # (A, n) ascending log-shortfalls
    xc = x - x.mean(axis=1, keepdims=True)
    # all tail points tied: centred x is exactly 0 (a rounded mean would leave ulp noise whose
    # sign decides the +1e6 penalties); both slopes are then 0 and both SSEs penalised (§3.2)
    xc[x[:, 0] == x[:, -1]] = 0.0
    sxx = np.einsum("ij,ij->i", xc, xc)
    Y, syy = _centred_responses(k, burn, eps)  # (n, 2), (2,)
    sxy = xc @ Y  # (A, 2)
    slope = sxy / np.maximum(sxx, _DEN_FLOOR)[:, None]  # (A, 2): (slope_W, slope_G)
    # SSE = sum (yc - b xc)^2 = Syy - 2 b Sxy + b^2 Sxx (the unfloored Sxx: with a near-tied tail
    # Sxx < 1e-12 and b is not the least-squares slope); rows where this expansion could lose
    # digits to cancellation (SSE < 1e-6 Syy) are recomputed from explicit residuals
    sse_raw = syy[None, :] - 2.0 * slope * sxy + slope * slope * sxx[:, None]
    redo = np.flatnonzero((sse_raw < 1e-6 * syy[None, :]).any(axis=1))
    if redo.size:
        resid = Y.T[None, :, :] - slope[redo, :, None] * xc[redo, None, :]
        sse_raw[redo] = np.einsum("ijk,ijk->ij", resid, resid)
    sse = np.maximum(sse_raw, _SSE_FLOOR)
    sse[:, 0] += _PENALTY * (slope[:, 0] <= 0)
    sse[:, 1] += _PENALTY * (slope[:, 1] >= 0)
    dAIC = n * (np.log(sse[:, 1] / n) - np.log(sse[:, 0] / n))
    return TailFits(k, burn, n, slope, sse_raw, sse, syy, dAIC)


def tail_fits(tails, eps: float = 1e-6) -> TailFits:
    """Weibull-line versus Gumbel-fast least-squares "AIC" of per-anchor tails (spec §2.4-§2.5).

    For each row ``T_i`` (the ``k`` largest negatives, descending): ``x = log max(1 - T_i, eps)``,
    burn-in ``max(1, k // 20)``, OLS of ``y_W = log F`` and ``y_G = log(-log F)`` (``F = r/(k+1)``)
    on ``x``; ``dAIC_i = n_eff log(SSE_G / SSE_W)`` with the authors' floors and +1e6 penalties.
    Computed in float64 whatever the input dtype (the slope signs decide the penalties).

    Args:
        tails: ``(A, k)`` tensor or array, each row sorted in descending order, finite.
        eps: shortfall floor in ``(0, 0.5]``.

    Returns:
        :class:`TailFits`.

    Raises:
        ValueError: not 2-D, empty, non-finite, or a row not in descending order; bad ``eps``.
    """
    eps = real("eps", eps, lo=0.0, lo_open=True, hi=0.5)
    if isinstance(tails, torch.Tensor):
        tails = tails.detach().cpu().double().numpy()
    T = np.asarray(tails, dtype=np.float64)
    if T.ndim != 2 or T.shape[0] < 1 or T.shape[1] < 1:
        raise ValueError(f"tails must be a 2-D (A, k) array with A, k >= 1, got shape {T.shape}")
    if not np.all(np.isfinite(T)):
        raise ValueError("tails must be finite")
    if np.any(np.diff(T, axis=1) > 0):
        raise ValueError("tails must be sorted in descending order along each row")
    return _tail_fits(T, eps)


def _lambda_from(rho: np.ndarray, rho0: float, dAIC: np.ndarray, p: _GateParams):
    """``(lam, lam_rho, lam_aic)`` float64 numpy (spec §2.6)."""
    lam_rho = expit(p.kappa_rho * (math.log(max(float(rho0), p.eps)) - np.log(np.maximum(rho, p.eps))))
    lam_aic = np.full_like(dAIC, 0.5) if p.kappa_aic == 0.0 else expit(p.kappa_aic * (dAIC - p.margin))
    return lam_rho * lam_aic, lam_rho, lam_aic


def _finish_gate(rho: np.ndarray, dAIC: np.ndarray, fallback: bool, p: _GateParams, like: torch.Tensor,
                 k_tail, n_eff) -> GateStats:
    """Pivot ``rho0`` and lambda from float64 ``rho``, ``dAIC`` ``(A,)``; tensors like ``like``."""
    A = rho.shape[0]
    srt = np.sort(rho)
    if fallback:  # too few tail points everywhere (N = 2): the authors' fallback, lambda still applied (§3.2)
        rho0 = srt[(A - 1) // 2]  # the lower median, as torch.median
    else:
        rho0 = srt[rho0_index(A, p.q)]
    rho0 = max(float(rho0), p.eps)
    lam, lam_rho, lam_aic = _lambda_from(rho, rho0, dAIC, p)

    def back(a):
        return torch.from_numpy(np.ascontiguousarray(a)).to(device=like.device, dtype=like.dtype)

    return GateStats(back(lam), back(lam_rho), back(lam_aic), back(rho),
                     torch.tensor(rho0, dtype=like.dtype, device=like.device), back(dAIC), k_tail, n_eff)


def _gate(neg: torch.Tensor, p: _GateParams) -> GateStats:
    """Gate of the two-view loss: statistics in float64 numpy on the ``(A, k_tail)`` tails."""
    A, K = neg.shape
    k = tail_size(K, p.tail_frac, p.min_tail)
    T = _top_desc(neg, k)
    fits = _tail_fits(T, p.eps)
    rho = np.maximum(1.0 - T[:, 0], p.eps)
    return _finish_gate(rho, fits.dAIC, fits.n_eff < 2, p, neg, k, fits.n_eff)


def weince_gate(
    neg: torch.Tensor,
    *,
    q: float = 0.2,
    tail_frac: float = 0.1,
    min_tail: int = 32,
    margin: float = 2.0,
    kappa_rho: float = 10.0,
    kappa_aic: float = 1.0,
    eps: float = 1e-6,
) -> GateStats:
    """The per-anchor WeiNCE gate lambda from negative similarities (spec/weince.md §2.2-§2.6).

    ``lambda_i = sigmoid(kappa_rho log(rho0/rho_i)) * sigmoid(kappa_aic (dAIC_i - margin))``,
    computed without gradient. ``K = neg.shape[1]`` plays the role of ``2N - 2`` in the tail-size
    rule and ``A = neg.shape[0]`` the anchor count of the ``rho0`` index rule. When fewer than two
    points remain after burn-in (``K <= 2``) the authors' fallback applies: ``dAIC = 0`` and
    ``rho0 = median(rho)`` (torch's lower median), lambda is still applied (§3.2).

    Args:
        neg: ``(A, K)`` negative similarities per anchor (order irrelevant), ``K >= 1``.
        q, tail_frac, min_tail, margin, kappa_rho, kappa_aic, eps: see :func:`weince_loss`.

    Returns:
        :class:`GateStats` (float32 for half inputs; float64 stays float64).
    """
    p = _gate_params(q, tail_frac, min_tail, margin, kappa_rho, kappa_aic, eps)
    if not isinstance(neg, torch.Tensor) or neg.dim() != 2 or neg.shape[0] < 1 or neg.shape[1] < 1:
        raise ValueError(f"neg must be a 2-D tensor (A, K) with A, K >= 1, got {getattr(neg, 'shape', neg)!r}")
    with torch.no_grad():
        return _gate(as_float_tensor(neg.detach(), "neg"), p)


# --------------------------------------------------------------------------------------------
# the released recipe's batch-EMA beta (§2.8)
# --------------------------------------------------------------------------------------------


@dataclass
class WeibullBetaState:
    """State and settings of the released recipe's auxiliary terms (spec/weince.md §2.8).

    ``beta`` is the EMA buffer beta_t (initialised to ``weib_beta = 4.0``), updated once per call
    of :func:`weince_loss` with ``recipe="released"``: a batch-global Weibull slope ``beta_hat``
    from the ``k = min(K, max(min_tail_points, int(tail_frac K)))`` smallest shortfalls of all
    ``K = A (A - 2)`` negative entries (each unordered pair twice); OLS of
    ``log(r/(k+1))`` on ``log delta_(r)`` after burn-in ``max(1, k // 20)``; if ``R^2 >= r2_min``
    and ``beta_hat > 0``: ``beta <- momentum beta + (1 - momentum) clip(beta_hat, beta_min,
    beta_max)``. ``auto=False`` keeps ``beta`` fixed (the authors' ``auto_weib_beta=False``).

    The auxiliary loss terms are ``weib_weight * CE_Weibit-top-M(beta_t)`` and
    ``pl_weight * CE_PL-top-M`` over the positive and the ``M`` hardest negatives
    (``M = min(top_m, 2N - 2)``; the authors' ``min(top_m, 2N - 1)`` on a -1e9-filled row only adds
    a term ``< exp(-20 beta)`` for tiny batches).
    """

    beta: float = 4.0
    momentum: float = 0.9
    r2_min: float = 0.85
    beta_min: float = 0.5
    beta_max: float = 16.0
    tail_frac: float = 0.05
    min_tail_points: int = 1024
    eps: float = 1e-6
    auto: bool = True
    weib_weight: float = 0.5
    weib_top_m: int = 50
    pl_weight: float = 0.5
    pl_top_m: int = 50
    last_beta_hat: float = field(default=float("nan"))
    last_r2: float = field(default=float("nan"))
    steps: int = 0

    def __post_init__(self) -> None:
        real("beta", self.beta, lo=0.0, lo_open=True)
        real("momentum", self.momentum, lo=0.0, hi=1.0)
        real("r2_min", self.r2_min, lo=0.0, hi=1.0)
        real("beta_min", self.beta_min, lo=0.0, lo_open=True)
        if real("beta_max", self.beta_max) < self.beta_min:
            raise ValueError(f"beta_max must be >= beta_min={self.beta_min}, got {self.beta_max}")
        real("tail_frac", self.tail_frac, lo=0.0, hi=1.0)
        integer("min_tail_points", self.min_tail_points, lo=1)
        real("eps", self.eps, lo=0.0, lo_open=True, hi=0.5)
        real("weib_weight", self.weib_weight, lo=0.0)
        real("pl_weight", self.pl_weight, lo=0.0)
        integer("weib_top_m", self.weib_top_m, lo=1)
        integer("pl_top_m", self.pl_top_m, lo=1)

    @torch.no_grad()
    def update(self, neg: torch.Tensor) -> float:
        """Update the EMA from the ``(A, K)`` negative similarities of one batch; return beta_t."""
        self.steps += 1
        if not self.auto:
            return self.beta
        flat = as_float_tensor(neg.detach(), "neg").reshape(-1)
        Kn = flat.numel()
        k = min(Kn, max(self.min_tail_points, int(self.tail_frac * Kn)))
        burn = max(1, k // 20)
        if k - burn < 2:
            return self.beta
        if _np_ok(flat):  # numpy partition + sort: same values as torch.topk, faster
            a = flat.contiguous().numpy()
            top = np.sort(np.partition(a, Kn - k)[Kn - k:])[::-1].astype(np.float64)
        else:
            top = torch.topk(flat, k, largest=True, sorted=True).values.cpu().double().numpy()
        x = np.log(np.maximum(1.0 - top, self.eps))[burn:]
        y = np.log(np.maximum(np.arange(1, k + 1, dtype=np.float64) / (k + 1), self.eps))[burn:]
        xc, yc = x - x.mean(), y - y.mean()
        sxx = float(xc @ xc)
        slope = float(xc @ yc) / max(sxx, _DEN_FLOOR)
        sse = float(((yc - slope * xc) ** 2).sum())
        sst = float(yc @ yc)
        r2 = min(max(1.0 - sse / sst, 0.0), 1.0) if sst > 0 else 0.0
        beta_hat = max(slope, 0.0)
        self.last_beta_hat, self.last_r2 = beta_hat, r2
        if r2 >= self.r2_min and beta_hat > 0:
            clipped = min(max(beta_hat, self.beta_min), self.beta_max)
            self.beta = self.momentum * self.beta + (1.0 - self.momentum) * clipped
        return self.beta


# --------------------------------------------------------------------------------------------
# the losses
# --------------------------------------------------------------------------------------------


@dataclass
class WeiNCEDiagnostics:
    """Diagnostics of one WeiNCE call (all detached). ``beta_t`` is None for ``recipe="core"``.

    Attributes: ``lam, lam_rho, lam_aic, rho, dAIC`` ``(A,)``; ``rho0`` 0-d; ``k_tail``,
    ``n_eff`` ints (per-anchor tensors in the label variant); ``beta_t`` float or None.
    """

    lam: torch.Tensor
    lam_rho: torch.Tensor
    lam_aic: torch.Tensor
    rho: torch.Tensor
    rho0: torch.Tensor
    dAIC: torch.Tensor
    k_tail: int | torch.Tensor
    n_eff: int | torch.Tensor
    beta_t: float | None = None

    def summary(self) -> dict[str, float]:
        """Scalar summary (means and quantiles) suitable for a results row."""
        out: dict[str, float] = {}
        for name in ("lam", "lam_rho", "lam_aic", "dAIC", "rho"):
            v = getattr(self, name).double()
            out[f"{name}_mean"] = float(v.mean())
            for qq in (0.1, 0.5, 0.9):
                out[f"{name}_q{int(qq * 100):02d}"] = float(torch.quantile(v, qq))
        out["rho0"] = float(self.rho0)
        out["k_tail"] = float(self.k_tail.double().mean()) if isinstance(self.k_tail, torch.Tensor) else float(self.k_tail)
        out["n_eff"] = float(self.n_eff.double().mean()) if isinstance(self.n_eff, torch.Tensor) else float(self.n_eff)
        if self.beta_t is not None:
            out["beta_t"] = float(self.beta_t)
        return out


def _aux_terms(cand: torch.Tensor, tau: float, state: WeibullBetaState, beta_t: float) -> torch.Tensor:
    """``w_W CE_Weibit-top-M(beta_t) + w_PL CE_PL-top-M`` (spec/weince.md §2.8)."""
    neg = cand[:, 1:]
    pos = cand[:, :1]
    eps = state.eps
    A = cand.shape[0]
    target = torch.zeros(A, dtype=torch.long, device=cand.device)
    total = cand.new_zeros(())
    tops: dict[int, torch.Tensor] = {}

    def top_m(M: int) -> torch.Tensor:
        # the M hardest negatives (a set: CE is invariant to their order), differentiable
        if M not in tops:
            if _np_ok(neg) and neg.dtype == torch.float32 and M < neg.shape[1]:
                idx = np.argpartition(neg.detach().numpy(), neg.shape[1] - M, axis=1)[:, neg.shape[1] - M:]
                tops[M] = torch.gather(neg, 1, torch.from_numpy(idx))
            else:
                tops[M] = torch.topk(neg, M, dim=1).values
        return tops[M]

    if state.weib_weight > 0:
        sel = torch.cat([pos, top_m(min(state.weib_top_m, neg.shape[1]))], dim=1)
        logits = -beta_t * torch.log1p(-torch.clamp(sel, max=1.0 - eps))
        total = total + state.weib_weight * F.cross_entropy(logits, target)
    if state.pl_weight > 0:
        sel = torch.cat([pos, top_m(min(state.pl_top_m, neg.shape[1]))], dim=1)
        total = total + state.pl_weight * F.cross_entropy(sel / tau, target)
    return total


def weince_loss(
    z1: torch.Tensor,
    z2: torch.Tensor,
    *,
    tau: float = 0.5,
    q: float = 0.2,
    tail_frac: float = 0.1,
    min_tail: int = 32,
    margin: float = 2.0,
    kappa_rho: float = 10.0,
    kappa_aic: float = 1.0,
    eps: float = 1e-6,
    recipe: str = "core",
    state: WeibullBetaState | None = None,
    return_diagnostics: bool = False,
):
    """Two-view WeiNCE loss (spec/weince.md §2.1-§2.8, the authors' ``tlambda_select``).

    ``L = mean_i CE([T_lam_i(S[i,p(i)]), T_lam_i(S[i,negatives])], 0)`` with
    ``T_lam(s) = (1-lam) s/tau + lam (-log(1 - min(s, 1-eps)))`` and the detached per-anchor gate
    ``lam_i = sigmoid(kappa_rho log(rho0/rho_i)) sigmoid(kappa_aic (dAIC_i - margin))``.
    ``recipe="released"`` adds ``0.5 CE_Weibit-top-50(beta_t) + 0.5 CE_PL-top-50`` (§2.8) with the
    EMA ``beta_t`` kept in ``state``. ``lam = 0`` (e.g. ``margin=inf``) reproduces
    :func:`theory.losses.info_nce` bit for bit (same candidate rows, ``cand / tau``, then
    ``log_softmax`` + ``nll_loss``).

    Args:
        z1, z2: ``(N, d)`` the two views (not necessarily normalised: cosine similarities are
            used), ``N >= 2``. float16/bfloat16 are computed in float32; float64 stays float64.
        tau: temperature of the linear branch only (> 0).
        q: quantile of rho for the pivot rho0 in ``[0, 1]`` (the authors clip; we reject values
            outside).
        tail_frac, min_tail: tail-size rule (§2.2), round half to even.
        margin: AIC margin m (may be ``+inf``: lambda = 0).
        kappa_rho, kappa_aic: gate slopes ``>= 0``.
        eps: clamp of shortfalls and of ``s`` in the Weibit branch, in ``(0, 0.5]``.
        recipe: ``"core"`` (the paper's loss) or ``"released"`` (plus the §2.8 terms).
        state: :class:`WeibullBetaState`, required for ``recipe="released"`` (updated in place).
        return_diagnostics: also return a :class:`WeiNCEDiagnostics`.

    Returns:
        Scalar loss, or ``(loss, diagnostics)``.

    Raises:
        ValueError: ``N < 2``, shape mismatch, bad hyper-parameter, unknown recipe, or
            ``recipe="released"`` without a state.
    """
    tau = real("tau", tau, lo=0.0, lo_open=True)
    p = _gate_params(q, tail_frac, min_tail, margin, kappa_rho, kappa_aic, eps)
    if recipe not in RECIPES:
        raise ValueError(f"recipe must be one of {RECIPES}, got {recipe!r}")
    if recipe == "released" and not isinstance(state, WeibullBetaState):
        raise ValueError(f"recipe='released' needs state=WeibullBetaState(), got state={state!r}")
    if isinstance(z1, torch.Tensor) and z1.dim() == 2 and z1.shape[0] < 2:
        raise ValueError(f"WeiNCE needs N >= 2 pairs (2N - 2 >= 2 negatives per anchor), got N={z1.shape[0]}")
    S, cand = two_view_candidates(z1, z2)
    with torch.no_grad():
        stats = _gate(cand.detach()[:, 1:], p)
    loss = _TLambdaCE.apply(cand, stats.lam, tau, p.eps)
    beta_t = None
    if recipe == "released":
        beta_t = state.update(cand.detach()[:, 1:])
        loss = loss + _aux_terms(cand, tau, state, beta_t)
    if not return_diagnostics:
        return loss
    diag = WeiNCEDiagnostics(
        stats.lam, stats.lam_rho, stats.lam_aic, stats.rho, stats.rho0, stats.dAIC,
        stats.k_tail, stats.n_eff, beta_t,
    )
    return loss, diag


def weince_label_loss(
    z: torch.Tensor,
    labels: torch.Tensor,
    *,
    tau: float = 0.5,
    q: float = 0.2,
    tail_frac: float = 0.1,
    min_tail: int = 32,
    margin: float = 2.0,
    kappa_rho: float = 10.0,
    kappa_aic: float = 1.0,
    eps: float = 1e-6,
    normalize: bool = True,
    return_diagnostics: bool = False,
):
    """Label-positive WeiNCE, for SCL/UCL-type experiments (our extension of spec §2).

    Definition: ``S = z z^T`` (cosine when ``normalize``). For anchor ``i``: positives
    ``P(i) = {j != i : y_j = y_i}``, negatives ``N(i) = {j : y_j != y_i}`` (``K_i = |N(i)|``).
    The gate is the core rule applied per anchor to its own negatives: ``k_tail,i =
    tail_size(K_i)``, burn-in and the two OLS tail fits on its ``k_tail,i`` hardest negatives,
    ``rho_i = max(1 - max_{N(i)} S_i, eps)``; ``rho0`` is the ``round(q (A' - 1))``-th smallest
    ``rho`` over the ``A'`` anchors (all anchors, since a batch with 2+ classes gives every anchor
    a negative); per-anchor fallback ``dAIC_i = 0`` when ``n_eff,i < 2``, and ``rho0 = median``
    (lower) when every anchor is in the fallback. Loss::

        L = (1/|pairs|) sum_{i, j in P(i)} CE([T_i(S_ij), T_i(S_in) for n in N(i)], 0)

    with ``T_i = T_lambda_i`` of §2.7. With two views and label = instance id the gate
    statistics (lambda, rho, dAIC) are those of :func:`weince_loss` exactly (same float64 tail
    fits) and the loss equals it up to the round-off of the cross-entropy; with ``lambda = 0``
    it is the plain label InfoNCE
    (the SupCon "out" form with the other positives left out of each denominator).

    Args:
        z: ``(B, d)`` embeddings; labels: ``(B,)`` integer labels.
        tau, q, tail_frac, min_tail, margin, kappa_rho, kappa_aic, eps: as :func:`weince_loss`.
        normalize: L2-normalise ``z`` first (cosine similarities; the shortfall needs ``s <= 1``).
        return_diagnostics: also return :class:`WeiNCEDiagnostics` with per-anchor ``k_tail``
            and ``n_eff`` tensors.

    Raises:
        ValueError: bad shapes / hyper-parameters, a batch with a single class (no negatives), or
            no (anchor, positive) pair (all labels distinct).
    """
    tau = real("tau", tau, lo=0.0, lo_open=True)
    p = _gate_params(q, tail_frac, min_tail, margin, kappa_rho, kappa_aic, eps)
    if not isinstance(z, torch.Tensor) or z.dim() != 2:
        raise ValueError(f"z must be a 2-D tensor (B, d), got {getattr(z, 'shape', type(z).__name__)!r}")
    z = as_float_tensor(z)
    B = z.shape[0]
    labels = torch.as_tensor(labels, device=z.device)
    if labels.dim() != 1 or labels.shape[0] != B:
        raise ValueError(f"labels must have shape ({B},), got {tuple(labels.shape)}")
    if labels.is_floating_point() or labels.is_complex() or labels.dtype == torch.bool:
        raise ValueError(f"labels must be integers, got dtype {labels.dtype}")
    if B < 2:
        raise ValueError(f"need at least 2 samples, got B={B}")
    if normalize:
        z = F.normalize(z, dim=1, eps=1e-12)
    S = z @ z.T
    same = labels[:, None] == labels[None, :]
    eye = torch.eye(B, dtype=torch.bool, device=z.device)
    negmask = ~same
    posmask = same & ~eye
    K_i = negmask.sum(dim=1)
    if bool((K_i == 0).any()):
        raise ValueError(f"a batch with a single class (label {int(labels[0])}) has no negatives; the loss is undefined")
    num_pairs = int(posmask.sum())
    if num_pairs == 0:
        raise ValueError("no (anchor, positive) pair: every label is a singleton; the loss is undefined")

    with torch.no_grad():
        stats = _label_gate(S.detach(), negmask, K_i, p)
    lam = stats.lam[:, None]
    logits = tlambda_logits(S, lam, tau, p.eps)
    lse_neg = torch.logsumexp(logits.masked_fill(~negmask, float("-inf")), dim=1, keepdim=True)
    per_pair = torch.logaddexp(logits, lse_neg) - logits  # (B, B): CE with target the positive
    loss = per_pair.masked_fill(~posmask, 0.0).sum() / num_pairs
    if not return_diagnostics:
        return loss
    return loss, WeiNCEDiagnostics(
        stats.lam, stats.lam_rho, stats.lam_aic, stats.rho, stats.rho0, stats.dAIC,
        stats.k_tail, stats.n_eff, None,
    )


def _label_gate(S: torch.Tensor, negmask: torch.Tensor, K_i: torch.Tensor, p: _GateParams) -> GateStats:
    """Per-anchor gate with anchor-dependent negative counts (spec §2.2-§2.6 per anchor).

    The same code path as the two-view gate: float64 tails, :func:`_tail_fits` once per distinct
    tail size (anchors grouped by ``k_tail,i``), the same pivot and lambda; so with pair-id
    labels the statistics equal those of :func:`weince_loss` exactly.
    """
    B = S.shape[0]
    K_list = K_i.tolist()
    k_of = {K: tail_size(K, p.tail_frac, p.min_tail) for K in set(K_list)}
    k_np = np.array([k_of[K] for K in K_list], dtype=np.int64)
    T = _top_desc(S.masked_fill(~negmask, float("-inf")), int(k_np.max()))  # (B, kmax) float64
    rho = np.maximum(1.0 - T[:, 0], p.eps)
    dAIC = np.zeros(B)
    n_np = np.empty(B, dtype=np.int64)
    for k in np.unique(k_np):
        rows = np.flatnonzero(k_np == k)
        fits = _tail_fits(T[rows, :k], p.eps)  # k <= K_i: only finite (true negative) entries
        dAIC[rows] = fits.dAIC
        n_np[rows] = fits.n_eff
    return _finish_gate(rho, dAIC, bool((n_np < 2).all()), p, S, torch.from_numpy(k_np).to(S.device),
                        torch.from_numpy(n_np).to(S.device))


class WeiNCELoss(torch.nn.Module):
    """Module wrapper of :func:`weince_loss`; owns the released recipe's EMA state.

    ``WeiNCELoss(recipe="released")(z1, z2)`` updates ``self.state`` every call. Keyword
    arguments are those of :func:`weince_loss` (validated at construction).
    """

    def __init__(self, *, recipe: str = "core", state: WeibullBetaState | None = None, **kwargs) -> None:
        super().__init__()
        if recipe not in RECIPES:
            raise ValueError(f"recipe must be one of {RECIPES}, got {recipe!r}")
        self.recipe = recipe
        self.state = state if state is not None else (WeibullBetaState() if recipe == "released" else None)
        self.kwargs = dict(kwargs)
        allowed = {"tau", "q", "tail_frac", "min_tail", "margin", "kappa_rho", "kappa_aic", "eps"}
        bad = set(self.kwargs) - allowed
        if bad:
            raise ValueError(f"unknown WeiNCE arguments {sorted(bad)}; allowed {sorted(allowed)}")
        real("tau", self.kwargs.get("tau", 0.5), lo=0.0, lo_open=True)
        _gate_params(*(self.kwargs.get(k, d) for k, d in (
            ("q", 0.2), ("tail_frac", 0.1), ("min_tail", 32), ("margin", 2.0),
            ("kappa_rho", 10.0), ("kappa_aic", 1.0), ("eps", 1e-6))))

    def forward(self, z1: torch.Tensor, z2: torch.Tensor, return_diagnostics: bool = False):  # noqa: D102
        return weince_loss(z1, z2, recipe=self.recipe, state=self.state,
                           return_diagnostics=return_diagnostics, **self.kwargs)

    def extra_repr(self) -> str:  # noqa: D102
        return f"recipe={self.recipe!r}, {self.kwargs}"
