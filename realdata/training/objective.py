"""The training objectives of the real-data runs: the one adapter to ``theory``'s losses.

Every call into :mod:`theory.hcl`, :mod:`theory.infonce` and :mod:`theory.weince` made by training
lives in this module, so a change of their interface is adapted here only; no loss mathematics is
written here. :func:`build_loss` returns an :class:`Objective`:
``objective(z1, z2, labels, generator) -> StepLoss``.

**How a step consumes the embeddings** (``z`` are cast to float32 first, so the losses and every
WeiNCE statistic run in float32 even when the encoder runs under bf16 autocast):

* SCL / HSCL / UCL / HUCL with ``views="label"`` (the HCL authors): one view ``z1``; the batched
  loss ``contrastive_loss(z1, labels, setting, beta, tau, estimator, K)`` with label positives, the
  anchor its own positive (arXiv 2311.05139, Sec. 5; docs/hcl.md).
* The same with ``views="simclr"``: the ``2B`` embeddings ``cat(z1, z2)`` with labels
  ``cat(labels, labels)``. Supervised: positives are every same-label view (SupCon style);
  unsupervised: positives are the image's own two views (instance ids), negatives the whole batch.
* The two-view methods: the method's loss by name, :func:`theory.two_view.two_view_loss` (InfoNCE:
  ``info_nce(z1, z2, tau)``); WeiNCE through the module :class:`theory.weince.WeiNCELoss` (the
  released recipe's state, the gate diagnostics). Cosine similarities; arXiv 2606.00262, Sec. 2.

**Several processes** (``world.size = W > 1``, DDP; the authors' code has none). ``z1``, ``z2``
and the labels are gathered from every rank (:meth:`realdata.training.distributed.World.gather`,
differentiable), so negatives, the hard-negative tilt and WeiNCE's gate range over the **global**
batch. In the default ``mode="local"`` each rank makes **one call of the theory loss** on the
gathered batch with ``anchors`` = this rank's rows (a reference batch,
docs/hcl.md#reference-batches-anchors, as pytorch-metric-learning's ``ref_emb``): rows
``r n .. (r+1) n - 1`` of the gathered batch, and with two views also the same rows of the second
half of ``cat(z1, z2)``. The theory function computes the terms of those anchors only, against
the whole gathered batch, divided by the **global** normaliser (pair count ``P`` for the HCL family,
``2N`` anchors for the two-view losses), so the sum of the ranks' parts is the loss of the
concatenated batch. The part is multiplied by ``W`` before ``backward``: the gather's backward
sums the gradient of every part with respect to each rank's embeddings, and DDP averages the
parameter gradients over ranks, so ``(1/W) sum_r W dL_r = dL``: the averaged gradients are the
single-process gradients of the concatenated batch. ``mode="replicated"`` instead evaluates the
whole global loss on every rank (the same theory function without ``anchors``) without rescaling;
it is exact too, costs ``W`` times the loss compute, and is used for WeiNCE's ``released`` recipe
(whose batch-beta EMA is a statistic of all the batch's negative pairs; the theory function
rejects ``anchors`` there).

Rules for the global statistics (what the theory functions do with ``anchors``):

* the **sampled estimator** draws from a generator shared by all ranks (same seed, same state):
  every rank takes the same one stream seed from it per step, and its own pairs draw from the
  stream counters of their places among **all** ``P`` global (anchor, positive) pairs (anchors
  ascending, positives ascending), so the draws equal those of one process on the concatenated
  batch and the shared generator stays in step on every rank;
* WeiNCE's pivot ``rho0`` (a quantile of ``rho`` over all ``2N`` anchors, the ``n_eff < 2``
  lower-median rule included) is computed from the ``rho`` of every rank, gathered with
  ``gather=world.gather_nograd``; ``k_tail`` and the tail fits use all ``2N - 2`` negatives of
  each anchor; lambda_AIC needs only the anchor's own row.

Under DDP the batch norms of the encoder use per-rank statistics unless the run converts them to
``SyncBatchNorm``; the equality above is about the loss given the embeddings.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from realdata.training.distributed import SINGLE, World
from theory.hcl import contrastive_loss
from theory.options import (
    DDP_LOSS_MODES,
    ESTIMATORS,
    HCL_TAU,
    METHODS,
    NUM_NEGATIVES,
    RECIPES,
    TWO_VIEW_METHODS,
    VIEWS,
)
from theory.two_view import two_view_loss
from theory.validation import one_of
from theory.weince import WeiNCELoss

__all__ = ["LossSpec", "StepLoss", "Objective", "build_loss"]


@dataclass(frozen=True)
class LossSpec:
    """What the objective computes (a projection of :class:`realdata.training.config.TrainConfig`).

    Attributes:
        method: a key of :data:`theory.options.METHODS` (SCL, HSCL, UCL, HUCL, InfoNCE, WeiNCE).
        beta: hardness (HCL family).
        tau: temperature.
        estimator: one of :data:`theory.options.ESTIMATORS` (HCL family).
        num_negatives: ``K`` of the sampled estimator.
        views: one of :data:`theory.options.VIEWS` (``label`` or ``simclr``).
        recipe: one of :data:`theory.options.RECIPES` (WeiNCE).
    """

    method: str
    beta: float = 0.0
    tau: float = HCL_TAU
    estimator: str = "sampled"  # the authors' K draws (TrainConfig's default)
    num_negatives: int = NUM_NEGATIVES
    views: str = "label"
    recipe: str = "core"

    def __post_init__(self) -> None:
        one_of("method", self.method, METHODS)
        one_of("views", self.views, VIEWS)
        one_of("estimator", self.estimator, ESTIMATORS)
        one_of("recipe", self.recipe, RECIPES)
        if self.method in TWO_VIEW_METHODS and self.views != METHODS[self.method].views:
            raise ValueError(
                f"views must be {METHODS[self.method].views!r} for {self.method}, got {self.views!r}"
            )
        if not (isinstance(self.tau, (int, float)) and math.isfinite(self.tau) and self.tau > 0):
            raise ValueError(f"tau must be a finite number > 0, got {self.tau!r}")

    @classmethod
    def from_config(cls, config: Any) -> LossSpec:
        """From a (resolved) :class:`realdata.training.config.TrainConfig`."""
        c = config.resolved()
        return cls(c.method, c.beta, float(c.tau), c.estimator, c.num_negatives, c.views, c.recipe)


@dataclass
class StepLoss:
    """One step's objective.

    Attributes:
        loss: the tensor to ``backward`` (already scaled for DDP: ``W`` times this rank's part).
        value: detached 0-d float64 value of the loss of the global batch (every rank).
        gate: WeiNCE only: detached per-anchor ``lambda, lambda_rho, lambda_aic, daic`` of this
            rank's anchors (float32 CPU-free tensors on the device), else ``None``.
        extra: detached 0-d tensors (``beta_t`` of the released recipe).
    """

    loss: torch.Tensor
    value: torch.Tensor
    gate: dict[str, torch.Tensor] | None = None
    extra: dict[str, torch.Tensor] | None = None


class Objective(nn.Module):
    """The loss of one run: ``objective(z1, z2, labels, generator) -> StepLoss``.

    Args:
        spec: what to compute.
        world: the processes (default one).
        mode: ``local`` or ``replicated`` (see the module docstring); WeiNCE's ``released``
            recipe always runs ``replicated``.
    """

    def __init__(self, spec: LossSpec, world: World = SINGLE, mode: str = "local") -> None:
        super().__init__()
        one_of("mode", mode, DDP_LOSS_MODES)
        self.spec = spec
        self.world = world
        self.mode = "replicated" if (spec.method == "WeiNCE" and spec.recipe == "released") else mode
        self.criterion: Any = None  # theory.weince.WeiNCELoss for WeiNCE
        if spec.method == "WeiNCE":
            # check_inputs=False: no host synchronisation per step (the loop checks the epoch loss)
            self.criterion = WeiNCELoss(tau=spec.tau, recipe=spec.recipe, check_inputs=False)  # type: ignore[arg-type]

    def extra_repr(self) -> str:  # noqa: D102
        return f"{self.spec}, world={self.world.size}, mode={self.mode!r}"

    # ---------------------------------------------------------------- EMA state (checkpoints)
    def state_payload(self) -> dict[str, Any]:
        """The WeiNCE EMA state (the criterion's buffers) as CPU tensors; empty otherwise."""
        if self.criterion is None:
            return {}
        return {k: v.detach().cpu().clone() for k, v in self.criterion.state_dict().items()}

    def load_state_payload(self, payload: dict[str, Any]) -> None:
        """Restore :meth:`state_payload`."""
        if self.criterion is not None and payload:
            self.criterion.load_state_dict(payload)

    def beta_t(self) -> float | None:
        """The released recipe's current ``beta_t`` (None otherwise)."""
        state = getattr(self.criterion, "beta_state", None)
        return None if state is None else float(state.beta)

    # ---------------------------------------------------------------- the step
    def forward(  # noqa: D102
        self,
        z1: torch.Tensor,
        z2: torch.Tensor | None,
        labels: torch.Tensor,
        generator: torch.Generator | None = None,
    ) -> StepLoss:
        spec, world = self.spec, self.world
        z1 = z1.float() if z1.dtype != torch.float64 else z1
        if z2 is not None:
            z2 = z2.float() if z2.dtype != torch.float64 else z2
        if spec.views == "simclr" and z2 is None:
            raise ValueError("z2 is required with two views (views='simclr')")
        if not world.distributed:
            loss, gate, extra = self._theory(z1, z2, labels, generator)
            return StepLoss(loss, loss.detach().to(torch.float64), gate, extra)
        n = z1.shape[0]
        lo, hi = world.rank * n, (world.rank + 1) * n
        g1 = world.gather(z1)
        g2 = world.gather(z2) if z2 is not None else None
        yg = world.gather_nograd(labels)
        if self.mode == "replicated":
            loss, gate, extra = self._theory(g1, g2, yg, generator)
            return StepLoss(
                loss, loss.detach().to(torch.float64), _slice_gate(gate, lo, hi, g1.shape[0]), extra
            )
        mine = torch.arange(lo, hi, device=g1.device)
        if g2 is not None:  # the same rows of the second view, rows N + lo .. N + hi - 1 of cat(z1, z2)
            mine = torch.cat([mine, mine + g1.shape[0]])
        part, gate, extra = self._theory(g1, g2, yg, generator, anchors=mine, gather=world.gather_nograd)
        value = world.sum(part.detach().to(torch.float64))
        return StepLoss(part * world.size, value, gate, extra)

    def _theory(
        self,
        z1: torch.Tensor,
        z2: torch.Tensor | None,
        labels: torch.Tensor,
        generator: torch.Generator | None,
        anchors: torch.Tensor | None = None,
        gather: Callable[[torch.Tensor], torch.Tensor] | None = None,
    ) -> tuple[torch.Tensor, dict[str, torch.Tensor] | None, dict[str, torch.Tensor] | None]:
        """One call of the theory loss on ``(z1, z2, labels)``; with ``anchors``, their part.

        Returns ``(loss, gate, extra)`` as the fields of :class:`StepLoss`.
        """
        spec = self.spec
        setting = METHODS[spec.method].setting
        if setting is not None:  # the hard-negative family
            kw: dict[str, Any] = dict(
                setting=setting,
                beta=spec.beta,
                tau=spec.tau,
                psi="mean",  # the authors' form
                estimator=spec.estimator,
                num_negatives=spec.num_negatives,
                generator=generator,
                anchors=anchors,
            )
            if z2 is None:
                loss = contrastive_loss(z1, labels, **kw)
            else:
                groups = None  # supervised: every same-label view is a positive (SupCon style)
                if setting == "unsupervised":  # the image's own two views (instance ids)
                    groups = torch.arange(z1.shape[0], device=z1.device).repeat(2)
                loss = contrastive_loss(
                    torch.cat([z1, z2]), torch.cat([labels, labels]), positive_groups=groups, **kw
                )
            return loss, None, None
        assert z2 is not None  # two views (checked in forward)
        if self.criterion is None:  # a stateless two-view loss, by name
            return two_view_loss(spec.method, z1, z2, tau=spec.tau, anchors=anchors), None, None
        loss = self.criterion(z1, z2, anchors, gather if anchors is not None else None)
        diag = self.criterion.last_diagnostics
        gate = {"lambda": diag.lam, "lambda_rho": diag.lam_rho, "lambda_aic": diag.lam_aic, "daic": diag.dAIC}
        extra = None if diag.beta_t is None else {"beta_t": diag.beta_t}
        return loss, {k: v.detach() for k, v in gate.items()}, extra


def _slice_gate(
    gate: dict[str, torch.Tensor] | None, lo: int, hi: int, N: int
) -> dict[str, torch.Tensor] | None:
    """This rank's anchors (rows ``lo:hi`` and ``N + lo : N + hi``) of the per-anchor gate statistics."""
    if gate is None:
        return None
    idx = torch.cat([torch.arange(lo, hi), torch.arange(N + lo, N + hi)])
    return {k: v[idx.to(v.device)] for k, v in gate.items()}


def build_loss(config: Any, world: World = SINGLE, mode: str = "local") -> Objective:
    """The :class:`Objective` of a :class:`realdata.training.config.TrainConfig` (or a :class:`LossSpec`)."""
    spec = config if isinstance(config, LossSpec) else LossSpec.from_config(config)
    return Objective(spec, world, mode)
