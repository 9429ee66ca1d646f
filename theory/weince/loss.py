"""WeiNCE: InfoNCE with per-anchor T_lambda logits (softmax blended with the Weibull shortfall).

Reference: Erol, Evren, Ozel, Morgan, Ryu, Zheng, "When Softmax Fails at the Top: Extreme-Value
Corrections for InfoNCE", ICML 2026 (arXiv 2606.00262); the algorithm as released by the
authors (policy ``tlambda_select``). Documentation: ``docs/weince.md#the-loss``.

Notation (``docs/README.md#notation``):

* ``z1, z2`` ``(N, d)`` the two views; ``A = 2N`` anchors of ``z = cat(z1, z2)``;
* ``S`` ``(A, A)`` cosine similarities; positive of row ``i`` is column ``p(i) = (i + N) mod A``;
* ``cand`` ``(A, A - 1)``: ``[S[i, p(i)], S[i, negatives in ascending column order]]``
  (:func:`theory.infonce.two_view_candidates`);
* ``K = A - 2`` negatives per anchor; ``k_tail`` tail size; ``n_eff`` points after burn-in;
* ``T_lambda(s) = (1 - lambda) s / tau + lambda (-log(1 - min(s, 1 - eps)))``.

The gate (every statistic detached, :mod:`theory.weince.gate`, ``docs/weince.md#the-gate``)::

    lambda_i = sigmoid(kappa_rho * log(rho0 / rho_i)) * sigmoid(kappa_aic * (dAIC_i - margin))

API::

    from theory.weince import GateConfig, WeiNCELoss, weince_loss

    loss = weince_loss(z1, z2)                                  # functional, core recipe
    loss, diag = weince_loss(z1, z2, return_diagnostics=True)   # plus the gate statistics
    criterion = WeiNCELoss(tau=0.5, gate=GateConfig(margin=6.0), recipe="released").to(device)
    loss = criterion(z1, z2)                                    # always a tensor
    criterion.last_diagnostics                                  # WeiNCEDiagnostics, detached
    part = weince_loss(z1, z2, anchors=mine, gather=all_gather)  # a process's anchors (multi-GPU)

Implementation notes (speed): the T_lambda logits + cross-entropy are fused in one autograd
function (:mod:`theory.weince.logits`) with the closed-form backward; no ``(A, A, d)`` tensor is
formed (the authors' ``CosineSimilarity`` broadcast is a matmul here); the gate runs on the
tensors' device. With ``check_inputs=False`` nothing on the forward or backward path waits for the
device (no ``.item()``, ``.cpu()``, ``.numpy()`` or Python conversion of a tensor, off the CPU).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal, overload

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from theory.infonce import _anchor_index, _candidate_rows, _two_view_embeddings, two_view_candidates
from theory.options import RECIPES, WEINCE_TAU
from theory.validation import as_tensor, one_of, real
from theory.weince._fast import _np_ok
from theory.weince._inputs import check_rows, reject_meta
from theory.weince.config import DEFAULT_GATE, DEFAULT_RELEASED, GateConfig, ReleasedConfig
from theory.weince.gate import GateStats, RhoPool, _gate, _gate_sorted_np, _sort_rows_np
from theory.weince.logits import _cap, _TLambdaCE
from theory.weince.recipe import WeibullBetaState

__all__ = ["WeiNCEDiagnostics", "weince_loss", "WeiNCELoss"]

Recipe = Literal["core", "released"]

#: ``gather(t)``: the concatenation (along dim 0, in rank order) of every process's per-anchor
#: tensor ``t``, e.g. ``realdata.training.distributed.World.gather_nograd`` (no autograd).
Gather = Callable[[torch.Tensor], torch.Tensor]


@dataclass
class WeiNCEDiagnostics(GateStats):
    """Diagnostics of one WeiNCE call: the gate statistics and ``beta_t`` (all detached).

    ``docs/weince.md#gate-diagnostics``. The tensors stay on the device of the loss; only
    :meth:`summary` copies them to the host.

    Attributes:
        lam, lam_rho, lam_aic, rho, dAIC: ``(A,)`` per-anchor gate statistics (see
            :class:`theory.weince.gate.GateStats`).
        rho0: 0-d tensor, the batch pivot.
        k_tail, n_eff: ints (per-anchor ``(A,)`` tensors in the label variant).
        beta_t: 0-d float64 tensor, the released recipe's EMA after this call; None for
            ``recipe="core"``.
    """

    beta_t: torch.Tensor | None = None

    def summary(self) -> dict[str, float]:
        """Scalar summary (means and quantiles) for a results row; synchronises with the device.

        Returns:
            ``{name}_mean`` and ``{name}_q10/q50/q90`` for ``lam, lam_rho, lam_aic, dAIC, rho``,
            then ``rho0``, ``k_tail``, ``n_eff`` (means in the label variant) and ``beta_t``
            (released recipe only).
        """
        out: dict[str, float] = {}
        for name in ("lam", "lam_rho", "lam_aic", "dAIC", "rho"):
            v = getattr(self, name).double()
            out[f"{name}_mean"] = float(v.mean())
            for qq in (0.1, 0.5, 0.9):
                out[f"{name}_q{int(qq * 100):02d}"] = float(torch.quantile(v, qq))
        out["rho0"] = float(self.rho0)
        for name in ("k_tail", "n_eff"):
            v = getattr(self, name)
            out[name] = float(v.double().mean()) if isinstance(v, torch.Tensor) else float(v)
        if self.beta_t is not None:
            out["beta_t"] = float(self.beta_t)
        return out


def _diagnostics(stats: GateStats, beta_t: torch.Tensor | None) -> WeiNCEDiagnostics:
    return WeiNCEDiagnostics(
        stats.lam,
        stats.lam_rho,
        stats.lam_aic,
        stats.rho,
        stats.rho0,
        stats.dAIC,
        stats.k_tail,
        stats.n_eff,
        None if beta_t is None else beta_t.detach().clone(),
    )


# --------------------------------------------------------------------------------------------
# the released recipe's auxiliary terms
# --------------------------------------------------------------------------------------------


def _top_index_np(a: np.ndarray, srt: np.ndarray, M: int) -> np.ndarray:
    """Column indices ``(A, M)`` of the ``M`` largest entries of each row of ``a`` (CPU fast path).

    ``srt`` holds the rows of ``a`` sorted ascending: the threshold is each row's ``M``-th largest
    value, and the entries at or above it are the top ``M`` unless a row has ties at the
    threshold (then ``np.argpartition`` picks ``M`` of them, as ``torch.topk`` would).
    """
    A, K = a.shape
    cols = np.nonzero(a >= srt[:, K - M, None])[1]
    if cols.size == A * M:  # every row has >= M such entries, so exactly M each
        return cols.reshape(A, M)
    return np.argpartition(a, K - M, axis=1)[:, K - M :]


def _aux_terms(
    cand: torch.Tensor,
    tau: float,
    cfg: ReleasedConfig,
    eps: float,
    beta_t: torch.Tensor,
    srt: np.ndarray | None = None,
) -> torch.Tensor:
    """``w_W CE_Weibit-top-M(beta_t) + w_PL CE_PL-top-M`` (``docs/weince.md#core-and-released-recipes``).

    ``srt``: the CPU fast path's negatives with every row sorted ascending, or None.
    """
    neg = cand[:, 1:]
    pos = cand[:, :1]
    K = neg.shape[1]
    target = torch.zeros(cand.shape[0], dtype=torch.long, device=cand.device)
    total = cand.new_zeros(())
    tops: dict[int, torch.Tensor] = {}

    def top_m(M: int) -> torch.Tensor:
        # the M hardest negatives (a set: the cross-entropy ignores their order), differentiable
        if M not in tops:
            if M == K:
                tops[M] = neg
            elif srt is not None:
                idx = _top_index_np(neg.detach().numpy(), srt, M)
                tops[M] = torch.gather(neg, 1, torch.from_numpy(idx))
            else:
                tops[M] = torch.topk(neg, M, dim=1, sorted=False).values
        return tops[M]

    if cfg.weib_weight > 0:
        sel = torch.cat([pos, top_m(min(cfg.weib_top_m, K))], dim=1)
        logits = torch.log1p(-torch.clamp(sel, max=1.0 - eps)) * (-beta_t.to(sel.dtype))
        total = total + cfg.weib_weight * F.cross_entropy(logits, target)
    if cfg.pl_weight > 0:
        sel = torch.cat([pos, top_m(min(cfg.pl_top_m, K))], dim=1)
        total = total + cfg.pl_weight * F.cross_entropy(sel / tau, target)
    return total


# --------------------------------------------------------------------------------------------
# the two-view loss
# --------------------------------------------------------------------------------------------


def _views(z1: Any, z2: Any) -> tuple[torch.Tensor, torch.Tensor]:
    """The two views as tensors, with their shape rules; no host synchronisation.

    The input rule of docs/README.md#conventions: tensors, numpy arrays (without a copy) and
    nested sequences.
    """
    z1 = as_tensor(z1, "z1", allow_meta=True)  # a meta view is rejected later when check_inputs
    z2 = as_tensor(z2, "z2", allow_meta=True)
    for name, z in (("z1", z1), ("z2", z2)):
        if z.dim() != 2:
            raise ValueError(f"{name} must be 2-D (N, d), got shape {tuple(z.shape)}")
    if z1.shape != z2.shape:
        raise ValueError(
            f"z1 and z2 must have the same shape (N, d), got {tuple(z1.shape)} and {tuple(z2.shape)}"
        )
    if z1.shape[0] < 2:
        raise ValueError(f"WeiNCE needs N >= 2 pairs (2N - 2 >= 2 negatives per anchor), got N={z1.shape[0]}")
    return z1, z2


def _two_view(
    z1: Any,
    z2: Any,
    tau: float,
    gate: GateConfig,
    state: WeibullBetaState | None,
    check_inputs: bool,
    anchors: Any = None,
    gather: Gather | None = None,
) -> tuple[torch.Tensor, WeiNCEDiagnostics]:
    """The two-view loss on validated settings (``state`` given iff the released recipe)."""
    z1, z2 = _views(z1, z2)
    if check_inputs:
        reject_meta(z1=z1, z2=z2)
    if anchors is not None:
        if state is not None:
            raise ValueError(
                "anchors are not supported by recipe='released' (its batch-beta EMA is a statistic "
                "of every anchor's negatives); compute the released loss of the whole batch"
            )
        return _two_view_anchors(z1, z2, tau, gate, check_inputs, anchors, gather)
    if gather is not None:
        raise ValueError("gather is only used with anchors (the rho of the other processes' anchors)")
    S, cand = two_view_candidates(z1, z2, check_inputs=False)  # checked below, naming the view
    if check_inputs:
        check_rows(S, [("z1", z1), ("z2", z2)], normalized=True)
    neg = cand.detach()[:, 1:]
    srt = _sort_rows_np(neg) if _np_ok(neg) else None  # CPU fast path: one sort, shared
    with torch.no_grad():
        stats = _gate(neg, gate) if srt is None else _gate_sorted_np(srt, gate, neg)
    clamped = None
    if srt is not None:  # does any candidate exceed 1 - eps? (the sorted rows hold each row's max)
        cap = _cap(gate.eps, cand.dtype)
        clamped = bool(srt[:, -1].max() > cap or cand.detach().numpy()[:, 0].max() > cap)
    loss = _TLambdaCE.apply(cand, stats.lam, tau, gate.eps, clamped)
    beta_t = None
    if state is not None:
        beta_t = state.update(neg, gate.eps) if srt is None else state._update_sorted(srt, gate.eps)
        loss = loss + _aux_terms(cand, tau, state.config, gate.eps, beta_t, srt)
    return loss, _diagnostics(stats, beta_t)


def _two_view_anchors(
    z1: torch.Tensor,
    z2: torch.Tensor,
    tau: float,
    gate: GateConfig,
    check_inputs: bool,
    anchors: Any,
    gather: Gather | None,
) -> tuple[torch.Tensor, WeiNCEDiagnostics]:
    """The core loss's terms of ``anchors`` (docs/hcl.md#reference-batches-anchors), over ``2N``.

    The rows ``(b, 2N)`` of the anchors only; their gate as in the whole batch, with the pivot
    ``rho0`` taken over the ``rho`` of all ``2N`` anchors (:func:`_rho_pool`).
    """
    z = _two_view_embeddings(z1, z2, True, False, 1.0)
    A = z.shape[0]
    if check_inputs:
        # check_rows reads the self-similarities S_ii off the diagonal of its first argument: a
        # broadcast column carries them for every row without forming the (A, A) matrix
        self_sim = (z.detach() * z.detach()).sum(dim=1)
        check_rows(self_sim[:, None].expand(A, A), [("z1", z1), ("z2", z2)], normalized=True)
    index = _anchor_index(anchors, A, z.device, check_values=check_inputs)
    _, cand = _candidate_rows(z, index)
    neg = cand.detach()[:, 1:]
    pool = _rho_pool(z, gather, gate.eps)
    srt = _sort_rows_np(neg) if _np_ok(neg) else None
    with torch.no_grad():
        stats = _gate(neg, gate, pool) if srt is None else _gate_sorted_np(srt, gate, neg, pool)
    clamped = None
    if srt is not None:
        cap = _cap(gate.eps, cand.dtype)
        clamped = bool(srt[:, -1].max() > cap or cand.detach().numpy()[:, 0].max() > cap)
    loss = _TLambdaCE.apply(cand, stats.lam, tau, gate.eps, clamped, A)
    return loss, _diagnostics(stats, None)


def _rho_pool(z: torch.Tensor, gather: Gather | None, eps: float) -> RhoPool:
    """The ``rho`` of all ``2N`` anchors of the normalised ``z = cat(z1, z2)``, for the pivot.

    With ``gather``: ``gather(rho of the selected anchors)`` (every process's, concatenated; the
    pivot is an order statistic, so the order does not matter). Without: computed here from the
    hardest negative of every row of ``z z^T`` (no gradient; one ``(2N, 2N)`` product), with the
    gate's own rule ``rho_i = max(1 - max_neg S[i], eps)`` in float64.
    """
    A = z.shape[0]

    def pool(rho: torch.Tensor) -> torch.Tensor:
        if gather is not None:
            every = gather(rho)
            if not isinstance(every, torch.Tensor) or tuple(every.shape) != (A,):
                raise ValueError(
                    f"gather must return the rho of all 2N = {A} anchors (a ({A},) tensor: every "
                    f"process's anchors, concatenated), got {getattr(every, 'shape', type(every).__name__)!r}"
                )
            return every.to(device=rho.device, dtype=torch.float64)
        with torch.no_grad():
            zd = z.detach()
            S = zd @ zd.T
            i = torch.arange(A, device=z.device)
            S[i, i] = float("-inf")  # the anchor itself
            S[i, (i + A // 2) % A] = float("-inf")  # its positive
            return torch.clamp(torch.rsub(S.amax(dim=1).double(), 1.0), min=eps).to(rho.device)

    return pool


def _settings(tau: float, gate: GateConfig, recipe: str) -> float:
    tau = real("tau", tau, lo=0.0, lo_open=True)
    if not isinstance(gate, GateConfig):
        raise ValueError(f"gate must be a GateConfig, got {type(gate).__name__}")
    one_of("recipe", recipe, RECIPES)
    return tau


@overload
def weince_loss(
    z1: Any,
    z2: Any,
    *,
    tau: float = ...,
    gate: GateConfig = ...,
    recipe: Recipe = ...,
    state: WeibullBetaState | None = ...,
    check_inputs: bool = ...,
    return_diagnostics: Literal[False] = ...,
    anchors: Any = ...,
    gather: Gather | None = ...,
) -> torch.Tensor: ...


@overload
def weince_loss(
    z1: Any,
    z2: Any,
    *,
    tau: float = ...,
    gate: GateConfig = ...,
    recipe: Recipe = ...,
    state: WeibullBetaState | None = ...,
    check_inputs: bool = ...,
    return_diagnostics: Literal[True],
    anchors: Any = ...,
    gather: Gather | None = ...,
) -> tuple[torch.Tensor, WeiNCEDiagnostics]: ...


@overload
def weince_loss(
    z1: Any,
    z2: Any,
    *,
    tau: float = ...,
    gate: GateConfig = ...,
    recipe: Recipe = ...,
    state: WeibullBetaState | None = ...,
    check_inputs: bool = ...,
    return_diagnostics: bool,
    anchors: Any = ...,
    gather: Gather | None = ...,
) -> torch.Tensor | tuple[torch.Tensor, WeiNCEDiagnostics]: ...


def weince_loss(
    z1: Any,
    z2: Any,
    *,
    tau: float = WEINCE_TAU,
    gate: GateConfig = DEFAULT_GATE,
    recipe: Recipe = "core",
    state: WeibullBetaState | None = None,
    check_inputs: bool = True,
    return_diagnostics: bool = False,
    anchors: Any = None,
    gather: Gather | None = None,
) -> torch.Tensor | tuple[torch.Tensor, WeiNCEDiagnostics]:
    """Two-view WeiNCE loss, the authors' ``tlambda_select`` (arXiv 2606.00262).

    ``L = mean_i CE([T_lam_i(S[i,p(i)]), T_lam_i(S[i,negatives])], 0)`` with
    ``T_lam(s) = (1-lam) s/tau + lam (-log(1 - min(s, 1-eps)))`` and the detached per-anchor gate
    ``lam_i = sigmoid(kappa_rho log(rho0/rho_i)) sigmoid(kappa_aic (dAIC_i - margin))``
    (``docs/weince.md#the-loss``, ``docs/weince.md#the-gate``). ``recipe="released"`` adds
    ``0.5 CE_Weibit-top-50(beta_t) + 0.5 CE_PL-top-50`` with the EMA ``beta_t`` kept in ``state``
    (``docs/weince.md#core-and-released-recipes``). ``lam = 0`` (``GateConfig(margin=inf)``)
    reproduces :func:`theory.infonce.info_nce` bit for bit. :class:`WeiNCELoss` is the module form.

    With ``anchors`` (core recipe; docs/hcl.md#reference-batches-anchors) only the terms of those
    anchors of ``cat(z1, z2)`` are computed, each against every candidate of the whole batch, and
    their sum is divided by the ``2N`` of the whole batch; their gate is that of the whole batch:
    ``k_tail`` and the tail fits use all ``2N - 2`` negatives of the anchor, and the pivot
    ``rho0`` is the quantile of ``rho`` over **all** ``2N`` anchors (the ``n_eff < 2`` lower-median
    rule included). ``rho`` of the other anchors comes from ``gather`` (a process of a multi-GPU
    run: every process's ``rho``, concatenated), or, without ``gather``, is computed here from the
    hardest negative of every anchor (one no-grad ``(2N, 2N)`` product). Either way the values
    over a partition of the ``2N`` anchors add up to the loss of the whole batch (values and
    gradients, to round-off).

    Args:
        z1: ``(N, d)`` first views, ``N >= 2`` (cosine similarities are used, so they need not be
            normalised): a torch tensor, a numpy array or a nested sequence (the input rule of
            docs/README.md#conventions). float16/bfloat16 are computed in float32; float64 stays
            float64.
        z2: ``(N, d)`` second views, the same shape.
        tau: temperature of the linear branch only, ``> 0``.
        gate: the seven gate hyper-parameters.
        recipe: ``"core"`` (the paper's loss) or ``"released"`` (plus the two auxiliary terms).
        state: :class:`WeibullBetaState`, required for ``recipe="released"`` (updated in place,
            moved to the batch's device if needed); must be None for ``"core"``.
        check_inputs: run the fused finiteness check (one host synchronisation); with False the
            call never waits for the device.
        return_diagnostics: also return the :class:`WeiNCEDiagnostics`.
        anchors: optional sorted, unique indices ``(b,)`` into the ``2N`` anchors of
            ``cat(z1, z2)`` (row ``i < N`` is ``z1[i]``, row ``N + i`` is ``z2[i]``); core recipe
            only. Its values are checked with ``check_inputs``.
        gather: with ``anchors``: ``gather(t)`` returns the concatenation of every process's
            per-anchor tensor ``t`` (in any fixed order; ``World.gather_nograd`` of a multi-GPU
            run), applied to the float64 ``rho`` of the selected anchors; it must return all
            ``2N``. ``None``: computed here (exact, see above).

    Returns:
        The scalar loss (with ``anchors``, the selected anchors' part of it), or
        ``(loss, diagnostics)``.

    Shape:
        ``z1``, ``z2`` ``(N, d)`` -> scalar; diagnostics ``(2N,)`` per anchor (``(b,)``, the
        selected anchors', with ``anchors``).

    Raises:
        ValueError: not 2-D (or not convertible to a tensor), shape mismatch, ``N < 2``, NaN / inf / an overflowing row
            norm in ``z1`` or ``z2`` (naming it), bad ``tau``, a ``gate`` that is not a
            :class:`GateConfig`, an unknown recipe, a ``state`` that does not match the recipe,
            invalid ``anchors`` (or ``anchors`` with ``recipe="released"``), ``gather`` without
            ``anchors``, or a ``gather`` that does not return ``2N`` values.
    """
    tau = _settings(tau, gate, recipe)
    if recipe == "released" and not isinstance(state, WeibullBetaState):
        raise ValueError(f"recipe='released' needs state=WeibullBetaState(), got state={state!r}")
    if recipe == "core" and state is not None:
        raise ValueError("state is only used by recipe='released'; got a state with recipe='core'")
    loss, diag = _two_view(z1, z2, tau, gate, state, check_inputs, anchors, gather)
    return (loss, diag) if return_diagnostics else loss


class WeiNCELoss(nn.Module):
    """WeiNCE as an ``nn.Module`` (arXiv 2606.00262; ``docs/weince.md#the-loss-module``).

    ``L = mean_i CE(T_lambda_i logits of anchor i's candidates, positive)`` with the detached
    per-anchor gate ``lambda_i`` (``docs/weince.md#the-gate``); see :func:`weince_loss`. Settings
    are validated once here; :meth:`forward` always returns the loss tensor and keeps the gate
    statistics of the call in :attr:`last_diagnostics`.

    The released recipe's EMA ``beta_t`` lives in the submodule :attr:`beta_state`
    (:class:`WeibullBetaState`, buffers ``beta``, ``beta_hat``, ``r2``, ``steps``): it moves with
    ``.to(device)`` and is saved in ``state_dict()``, so a checkpoint resumes exactly. The module
    has no trainable parameter.

    Example::

        criterion = WeiNCELoss(recipe="released").to("cuda")
        loss = criterion(z1, z2)
        loss.backward()
        criterion.last_diagnostics.lam.mean()

    Args:
        tau: temperature of the linear branch, ``> 0`` (default 0.5, every released configuration).
        gate: the gate hyper-parameters (default: the authors').
        recipe: ``"core"`` (the paper's loss) or ``"released"`` (plus the auxiliary terms).
        released: settings of the released recipe (default :class:`ReleasedConfig` ``()`` when
            ``recipe="released"``); must be None for ``"core"``.
        check_inputs: run the fused finiteness check on every call (one host synchronisation);
            False makes the forward pass synchronisation-free.

    Attributes:
        tau, gate, recipe, check_inputs: the validated settings.
        beta_state: :class:`WeibullBetaState` for the released recipe, else None.
        last_diagnostics: :class:`WeiNCEDiagnostics` of the last call (detached, on the loss's
            device), None before the first call.

    Shape:
        ``z1``, ``z2`` ``(N, d)`` with ``N >= 2`` -> scalar.

    Raises:
        ValueError: a bad setting (in ``__init__``), or bad inputs (in :meth:`forward`).
    """

    def __init__(
        self,
        tau: float = WEINCE_TAU,
        gate: GateConfig = DEFAULT_GATE,
        recipe: Recipe = "core",
        released: ReleasedConfig | None = None,
        check_inputs: bool = True,
    ) -> None:
        super().__init__()
        self.tau = _settings(tau, gate, recipe)
        self.gate = gate
        self.recipe: Recipe = recipe
        if not isinstance(check_inputs, bool):
            raise ValueError(f"check_inputs must be a bool, got {check_inputs!r}")
        self.check_inputs = check_inputs
        if recipe == "core" and released is not None:
            raise ValueError(
                "released settings are only used by recipe='released'; got them with recipe='core'"
            )
        if released is not None and not isinstance(released, ReleasedConfig):
            raise ValueError(f"released must be a ReleasedConfig, got {type(released).__name__}")
        self.beta_state: WeibullBetaState | None = (
            WeibullBetaState(released or DEFAULT_RELEASED) if recipe == "released" else None
        )
        self.last_diagnostics: WeiNCEDiagnostics | None = None

    def forward(
        self,
        z1: Any,
        z2: Any,
        anchors: Any = None,
        gather: Gather | None = None,
    ) -> torch.Tensor:
        """The loss of one batch of pairs; the gate statistics go to :attr:`last_diagnostics`.

        Args:
            z1: ``(N, d)`` first views.
            z2: ``(N, d)`` second views.
            anchors: optional sorted, unique indices ``(b,)`` into the ``2N`` anchors: only
                their part of the loss (core recipe; see :func:`weince_loss`).
            gather: with ``anchors``, the concatenation of every process's per-anchor ``rho``
                (see :func:`weince_loss`); ``None`` computes it here.

        Returns:
            The scalar loss (float32 for half and float32 inputs, float64 for float64).

        Raises:
            ValueError: bad inputs, ``anchors`` with ``recipe="released"``, or ``gather``
                without ``anchors``.
        """
        loss, diagnostics = _two_view(
            z1, z2, self.tau, self.gate, self.beta_state, self.check_inputs, anchors, gather
        )
        # a plain attribute (not a parameter, buffer or module): stored without nn.Module.__setattr__'s checks
        self.__dict__["last_diagnostics"] = diagnostics
        return loss

    def extra_repr(self) -> str:  # noqa: D102
        return f"tau={self.tau}, gate={self.gate}, recipe={self.recipe!r}, check_inputs={self.check_inputs}"
