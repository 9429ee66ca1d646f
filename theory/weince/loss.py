"""WeiNCE: InfoNCE with per-anchor T_lambda logits (softmax blended with the Weibull shortfall).

Reference: Erol, Evren, Ozel, Morgan, Ryu, Zheng, "When Softmax Fails at the Top: Extreme-Value
Corrections for InfoNCE", ICML 2026 (arXiv 2606.00262); the algorithm as released by the authors
(policy ``tlambda_select``), spec/weince.md §2-§3.

Notation (spec/weince.md §2, DESIGN.md):

* ``z1, z2`` ``(N, d)`` the two views; ``A = 2N`` anchors of ``z = cat(z1, z2)``;
* ``S`` ``(A, A)`` cosine similarities; positive of row ``i`` is column ``p(i) = (i + N) mod A``;
* ``cand`` ``(A, A - 1)``: ``[S[i, p(i)], S[i, negatives in ascending column order]]``
  (:func:`theory.infonce.two_view_candidates`);
* ``K = A - 2`` negatives per anchor; ``k_tail`` tail size (§2.2); ``n_eff`` points after burn-in;
* shortfall ``delta = max(1 - s, eps)``; cap proximity ``rho_i = max(1 - max_neg S[i], eps)``;
* ``T_lambda(s) = (1 - lambda) s / tau + lambda (-log(1 - min(s, 1 - eps)))`` (§1.4, §2.7).

The gate (§2.3-§2.6, every statistic detached, :mod:`theory.weince.gate`)::

    lambda_i = sigmoid(kappa_rho * log(rho0 / rho_i)) * sigmoid(kappa_aic * (dAIC_i - margin))

with ``rho0`` the ``round(q (A - 1))``-th smallest ``rho`` (round half to even) and ``dAIC_i`` the
difference of two least-squares "AIC"s on the anchor's ``k_tail`` hardest negatives (Weibull line
``log F = a + beta log delta`` versus the Gumbel-fast proxy ``log(-log F) = b - kappa log delta``,
``F`` the within-tail rank ECDF ``k / (k_tail + 1)``; :mod:`theory.weince.tailfit`).

Implementation notes (speed, spec §3.1 costs): the T_lambda logits + cross-entropy are fused in one
autograd function (:mod:`theory.weince.logits`) whose backward is the closed form
``d logit / d s = (1 - lambda)/tau + lambda/(1 - s) * [s <= 1 - eps]``. No ``(A, A, d)`` tensor is
ever formed (the authors' ``CosineSimilarity`` broadcast is replaced by a matmul). ``tau``
defaults to :data:`theory.options.WEINCE_TAU`.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F

from theory.infonce import two_view_candidates
from theory.options import RECIPES, WEINCE_TAU
from theory.validation import as_float_tensor, one_of, real
from theory.weince._fast import _np_ok
from theory.weince.gate import _gate, _gate_params, _label_gate
from theory.weince.logits import _TLambdaCE, tlambda_logits
from theory.weince.recipe import WeibullBetaState

__all__ = ["WeiNCEDiagnostics", "weince_loss", "weince_label_loss", "WeiNCELoss"]


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
    tau: float = WEINCE_TAU,
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
    :func:`theory.infonce.info_nce` bit for bit (same candidate rows, ``cand / tau``, then
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
    one_of("recipe", recipe, RECIPES)
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
    tau: float = WEINCE_TAU,
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


class WeiNCELoss(torch.nn.Module):
    """Module wrapper of :func:`weince_loss`; owns the released recipe's EMA state.

    ``WeiNCELoss(recipe="released")(z1, z2)`` updates ``self.state`` every call. Keyword
    arguments are those of :func:`weince_loss` (validated at construction).
    """

    def __init__(self, *, recipe: str = "core", state: WeibullBetaState | None = None, **kwargs) -> None:
        super().__init__()
        self.recipe = one_of("recipe", recipe, RECIPES)
        self.state = state if state is not None else (WeibullBetaState() if recipe == "released" else None)
        self.kwargs = dict(kwargs)
        allowed = {"tau", "q", "tail_frac", "min_tail", "margin", "kappa_rho", "kappa_aic", "eps"}
        bad = set(self.kwargs) - allowed
        if bad:
            raise ValueError(f"unknown WeiNCE arguments {sorted(bad)}; allowed {sorted(allowed)}")
        real("tau", self.kwargs.get("tau", WEINCE_TAU), lo=0.0, lo_open=True)
        _gate_params(*(self.kwargs.get(k, d) for k, d in (
            ("q", 0.2), ("tail_frac", 0.1), ("min_tail", 32), ("margin", 2.0),
            ("kappa_rho", 10.0), ("kappa_aic", 1.0), ("eps", 1e-6))))

    def forward(self, z1: torch.Tensor, z2: torch.Tensor, return_diagnostics: bool = False):  # noqa: D102
        return weince_loss(z1, z2, recipe=self.recipe, state=self.state,
                           return_diagnostics=return_diagnostics, **self.kwargs)

    def extra_repr(self) -> str:  # noqa: D102
        return f"recipe={self.recipe!r}, {self.kwargs}"
