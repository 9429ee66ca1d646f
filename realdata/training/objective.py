"""The training objectives of the real-data runs: the one adapter to ``theory``'s losses.

Every call into :mod:`theory.hcl`, :mod:`theory.infonce` and :mod:`theory.weince` made by training
lives in this module, so a change of their interface is adapted here only. :func:`build_loss`
returns an :class:`Objective`: ``objective(z1, z2, labels, generator) -> StepLoss``.

**How a step consumes the embeddings** (``z`` are cast to float32 first, so the losses and every
WeiNCE statistic run in float32 even when the encoder runs under bf16 autocast):

* SCL / HSCL / UCL / HUCL with ``views="label"`` (the HCL authors): one view ``z1``; the batched
  loss ``contrastive_loss(z1, labels, setting, beta, tau, estimator, K)`` with label positives, the
  anchor its own positive (arXiv 2311.05139, Sec. 5; docs/hcl.md).
* The same with ``views="simclr"``: the ``2B`` embeddings ``cat(z1, z2)`` with labels
  ``cat(labels, labels)``. Supervised: positives are every same-label view (SupCon style);
  unsupervised: positives are the image's own two views (instance ids), negatives the whole batch.
* InfoNCE / WeiNCE: ``info_nce(z1, z2, tau)`` / ``weince_loss(z1, z2, tau, recipe)`` (cosine
  similarities; arXiv 2606.00262, Sec. 2).

**Several processes** (``world.size = W > 1``, DDP; the authors' code has none). ``z1``, ``z2``
and the labels are gathered from every rank (:meth:`realdata.training.distributed.World.gather`,
differentiable), so negatives, the hard-negative tilt and WeiNCE's gate range over the **global**
batch. In the default ``mode="local"`` each rank evaluates only the terms of its own anchors
against the gathered batch, divided by the **global** normaliser (pair count ``P`` for the HCL
family, ``2N`` anchors for the two-view losses); the sum of the ranks' parts is the loss of the
concatenated batch. The part is multiplied by ``W`` before ``backward``: the gather's backward
sums the gradient of every part with respect to each rank's embeddings, and DDP averages the
parameter gradients over ranks, so ``(1/W) sum_r W dL_r = dL``: the averaged gradients are the
single-process gradients of the concatenated batch. ``mode="replicated"`` instead evaluates the
whole global loss on every rank (through the ``theory`` function itself) without rescaling; it is
exact too, costs ``W`` times the loss compute, and is used for WeiNCE's ``released`` recipe
(whose batch-beta EMA is a statistic of all the batch's negative pairs).

Rules for the global statistics:

* the **sampled estimator** draws from a generator shared by all ranks (same seed, same state):
  every rank draws the uniforms of **all** ``P`` global (anchor, positive) pairs, ``rand(P, K)`` in
  float64 in the order of the pairs (anchors ascending, positives ascending)
  (:func:`theory.hcl.sampling.draw_uniforms`), and draws its own pairs' negatives with theory's
  alias sampler on those rows (:func:`theory.hcl.sampling.sample_negatives` with ``uniforms``), so
  the draws equal those of one process on the concatenated batch;
* WeiNCE's pivot ``rho0`` (a quantile of ``rho`` over all ``2N`` anchors) is computed from the
  gathered ``rho`` of every rank; ``k_tail`` and the tail fits use all ``2N - 2`` negatives of each
  anchor; lambda_AIC needs only the anchor's own row.

Under DDP the batch norms of the encoder use per-rank statistics unless the run converts them to
``SyncBatchNorm``; the equality above is about the loss given the embeddings.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from realdata.training.distributed import SINGLE, World

__all__ = [
    "LossSpec",
    "StepLoss",
    "Objective",
    "build_loss",
    "hcl_partial_loss",
    "two_view_partial_loss",
    "pair_count",
]

_SETTINGS = {"SCL": "supervised", "HSCL": "supervised", "UCL": "unsupervised", "HUCL": "unsupervised"}
MODES = ("local", "replicated")


@dataclass(frozen=True)
class LossSpec:
    """What the objective computes (a projection of :class:`realdata.training.config.TrainConfig`).

    Attributes:
        method: SCL, HSCL, UCL, HUCL, InfoNCE or WeiNCE.
        beta: hardness (HCL family).
        tau: temperature.
        estimator: ``sampled`` or ``expectation`` (HCL family).
        num_negatives: ``K`` of the sampled estimator.
        views: ``label`` or ``simclr``.
        recipe: ``core`` or ``released`` (WeiNCE).
    """

    method: str
    beta: float = 0.0
    tau: float = 1.0
    estimator: str = "sampled"
    num_negatives: int = 256
    views: str = "label"
    recipe: str = "core"

    def __post_init__(self) -> None:
        if self.method not in (*_SETTINGS, "InfoNCE", "WeiNCE"):
            raise ValueError(
                f"method must be one of {(*_SETTINGS, 'InfoNCE', 'WeiNCE')}, got {self.method!r}"
            )
        if self.views not in ("label", "simclr"):
            raise ValueError(f"views must be 'label' or 'simclr', got {self.views!r}")
        if self.method in ("InfoNCE", "WeiNCE") and self.views != "simclr":
            raise ValueError(f"views must be 'simclr' for {self.method}, got {self.views!r}")
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


# --------------------------------------------------------------------------------------------
# the HCL family on a subset of anchors of the global batch
# --------------------------------------------------------------------------------------------


def pair_count(groups: torch.Tensor) -> torch.Tensor:
    """Per-anchor number of (anchor, positive) pairs, the anchor included: ``n_{g(i)}``.

    Shape:
        ``(B,)`` int -> ``(B,)`` int64.
    """
    return torch.bincount(groups)[groups]


def hcl_partial_loss(
    z: torch.Tensor,
    labels: torch.Tensor,
    anchors: torch.Tensor,
    *,
    setting: str,
    beta: float,
    tau: float,
    estimator: str,
    num_negatives: int,
    generator: torch.Generator | None = None,
    groups: torch.Tensor | None = None,
) -> torch.Tensor:
    """This rank's part of the HCL batch loss: the terms of ``anchors`` over the global batch.

    ``(1/P) sum_{i in anchors} sum_{j in Pos(i)} log(1 + mean_r exp((S[i, n_r] - S[i, j]) / tau))``
    (the authors' mean-form psi; docs/hcl.md) with ``P`` the number of (anchor, positive) pairs
    of the **whole** batch, so the parts of disjoint anchor sets add up to
    :func:`theory.hcl.contrastive_loss` of the batch. Positives: members with the same ``groups``
    id (default the labels), the anchor included. Negatives: other-label members (supervised) or
    the whole batch (unsupervised). Expectation estimator: ``log E_{q_i} exp(S/tau)`` with the tilt
    ``q_i ∝ exp(beta S[i, .])`` held fixed (detached). Sampled estimator: uniforms
    ``rand(P, K, float64)`` of all pairs from ``generator`` (see the module docstring), of which the
    rows of the anchors' pairs are used.

    Args:
        z: ``(B, d)`` the gathered global batch (float32 or float64).
        labels: ``(B,)`` its labels.
        anchors: ``(b,)`` sorted global indices of this rank's anchors.
        setting: ``supervised`` or ``unsupervised``.
        beta: hardness >= 0.
        tau: temperature > 0.
        estimator: ``expectation`` or ``sampled``.
        num_negatives: ``K``.
        generator: the shared generator (sampled estimator).
        groups: optional ``(B,)`` positive-group ids (instance ids of two views).

    Returns:
        0-d tensor, the part (differentiable in ``z``).
    """
    from theory.hcl.psi import apply_psi
    from theory.hcl.sampling import draw_uniforms, log_expected_exp, sample_negatives, tilted_log_weights

    if setting not in ("supervised", "unsupervised"):
        raise ValueError(f"setting must be 'supervised' or 'unsupervised', got {setting!r}")
    if estimator not in ("expectation", "sampled"):
        raise ValueError(f"estimator must be 'expectation' or 'sampled', got {estimator!r}")
    B = z.shape[0]
    g = labels if groups is None else groups
    counts = pair_count(g)
    P = int(counts.sum())
    za = z[anchors]
    S = za @ z.T  # (b, B)
    eq = g[anchors][:, None] == g[None, :]
    rows, cols = eq.nonzero(as_tuple=True)  # anchors ascending, positives ascending (theory's order)
    if setting == "supervised":
        allowed = labels[anchors][:, None] != labels[None, :]
        if not bool(allowed.any(dim=1).all()):
            i = int(anchors[~allowed.any(dim=1)][0])
            raise ValueError(
                f"anchor {i} (label {int(labels[i])}) has an empty negative set in setting='supervised' "
                "(a batch with a single class?); the loss is undefined"
            )
    else:
        allowed = torch.ones(anchors.numel(), B, dtype=torch.bool, device=z.device)
    logq = tilted_log_weights(S.detach(), allowed, beta)
    pos = S[rows, cols]
    if estimator == "expectation":
        m = log_expected_exp(logq, S, tau)
        per_pair = F.softplus(m[rows] - pos / tau)
    else:
        # global index of each local pair: pairs of anchor i start at cumsum of the counts before i
        start = torch.cumsum(counts, 0) - counts
        first_local = torch.searchsorted(rows, torch.arange(anchors.numel(), device=z.device))
        pair_idx = start[anchors][rows] + (torch.arange(rows.numel(), device=z.device) - first_local[rows])
        u = draw_uniforms(P, num_negatives, generator, z.device)[pair_idx]
        flat = sample_negatives(logq, rows, num_negatives, flat=True, uniforms=u)
        t = torch.take(S, flat) - pos[:, None]
        per_pair = apply_psi(t, "mean", tau=tau)
    return per_pair.sum() / P


# --------------------------------------------------------------------------------------------
# the two-view losses on a subset of anchors
# --------------------------------------------------------------------------------------------


def two_view_partial_loss(
    z1: torch.Tensor,
    z2: torch.Tensor,
    lo: int,
    hi: int,
    *,
    tau: float,
    weince: bool,
    world: World = SINGLE,
    gate_kwargs: dict[str, Any] | None = None,
) -> tuple[torch.Tensor, dict[str, torch.Tensor] | None]:
    """This rank's part of InfoNCE / WeiNCE (core recipe) over the gathered two-view batch.

    Anchors of this rank: rows ``lo:hi`` and ``N + lo : N + hi`` of ``z = cat(z1, z2)`` (``2N``
    anchors), positive ``(i + N) mod 2N``, negatives every other column (cosine similarities).
    InfoNCE: ``CE(S_i / tau)``; WeiNCE: ``CE(T_lambda_i(S_i))`` with the per-anchor gate
    (docs/weince.md), ``rho0`` from the ``rho`` of every rank. Divided by the global ``2N``.

    Args:
        z1: ``(N, d)`` gathered first views.
        z2: ``(N, d)`` gathered second views.
        lo: first pair index of this rank.
        hi: end of this rank's pairs.
        tau: temperature of the linear branch.
        weince: WeiNCE (True) or InfoNCE.
        world: for the gather of ``rho``.
        gate_kwargs: WeiNCE gate hyper-parameters (fields of :class:`theory.weince.GateConfig`:
            ``q, tail_frac, min_tail, margin, kappa_rho, kappa_aic, eps``); default the authors'.

    Returns:
        ``(part, gate)``; ``gate`` holds the detached per-anchor statistics (WeiNCE) or None.
    """
    N = z1.shape[0]
    A = 2 * N
    z = F.normalize(torch.cat([z1, z2]), dim=1, eps=1e-12)
    local = torch.cat([torch.arange(lo, hi, device=z.device), torch.arange(N + lo, N + hi, device=z.device)])
    S = z[local] @ z.T  # (2n, A)
    p = (local + N) % A
    r = torch.arange(local.numel(), device=z.device)
    mask = torch.ones_like(S, dtype=torch.bool)
    mask[r, local] = False
    mask[r, p] = False
    neg = S[mask].view(local.numel(), A - 2)  # ascending columns, as theory's candidate rows
    cand = torch.cat([S[r, p][:, None], neg], dim=1)
    target = torch.zeros(local.numel(), dtype=torch.long, device=z.device)
    if not weince:
        return F.cross_entropy(cand / tau, target, reduction="sum") / A, None
    from theory.weince import GateConfig, rho0_index, tlambda_logits, weince_gate

    g = GateConfig(**(gate_kwargs or {}))
    with torch.no_grad():
        st = weince_gate(neg.detach(), gate=g)
        rho_all = world.gather_nograd(st.rho.to(torch.float64))
        srt = torch.sort(rho_all).values
        n_eff = st.n_eff if isinstance(st.n_eff, int) else int(st.n_eff.min())
        idx = (A - 1) // 2 if n_eff < 2 else rho0_index(A, g.q)
        eps = g.eps
        rho0 = torch.clamp(srt[idx], min=eps)
        log_rho = torch.log(torch.clamp(st.rho.double(), min=eps))
        lam_rho = torch.sigmoid(g.kappa_rho * (torch.log(rho0) - log_rho))
        lam = (lam_rho * st.lam_aic.double()).to(cand.dtype)
    logits = tlambda_logits(cand, lam[:, None], tau, eps)
    part = F.cross_entropy(logits, target, reduction="sum") / A
    gate = {
        "lambda": lam,
        "lambda_rho": lam_rho.to(cand.dtype),
        "lambda_aic": st.lam_aic.to(cand.dtype),
        "daic": st.dAIC.to(cand.dtype),
    }
    return part, gate


# --------------------------------------------------------------------------------------------
# the objective
# --------------------------------------------------------------------------------------------


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
        if mode not in MODES:
            raise ValueError(f"mode must be one of {MODES}, got {mode!r}")
        self.spec = spec
        self.world = world
        self.mode = "replicated" if (spec.method == "WeiNCE" and spec.recipe == "released") else mode
        self.criterion: Any = None  # theory.weince.WeiNCELoss for WeiNCE
        if spec.method == "WeiNCE":
            from theory.weince import WeiNCELoss

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
            return self._single(z1, z2, labels, generator)
        n = z1.shape[0]
        lo, hi = world.rank * n, (world.rank + 1) * n
        g1 = world.gather(z1)
        g2 = world.gather(z2) if z2 is not None else None
        yg = world.gather_nograd(labels)
        if self.mode == "replicated":
            out = self._single(g1, g2, yg, generator)
            return StepLoss(out.loss, out.value, _slice_gate(out.gate, lo, hi, g1.shape[0]), out.extra)
        if spec.method in _SETTINGS:
            part = self._hcl_part(g1, g2, yg, lo, hi, generator)
            gate = None
        else:
            assert g2 is not None  # two views (checked above)
            part, gate = two_view_partial_loss(
                g1, g2, lo, hi, tau=spec.tau, weince=spec.method == "WeiNCE", world=world
            )
        value = world.sum(part.detach().to(torch.float64))
        return StepLoss(part * world.size, value, gate)

    def _hcl_part(self, g1, g2, yg, lo, hi, generator) -> torch.Tensor:
        spec = self.spec
        N = g1.shape[0]
        dev = g1.device
        kw = dict(
            setting=_SETTINGS[spec.method],
            beta=spec.beta,
            tau=spec.tau,
            estimator=spec.estimator,
            num_negatives=spec.num_negatives,
            generator=generator,
        )
        if g2 is None:
            return hcl_partial_loss(g1, yg, torch.arange(lo, hi, device=dev), **kw)  # type: ignore[arg-type]
        z = torch.cat([g1, g2])
        y = torch.cat([yg, yg])
        groups = None if kw["setting"] == "supervised" else torch.arange(N, device=dev).repeat(2)
        anchors = torch.cat([torch.arange(lo, hi, device=dev), torch.arange(N + lo, N + hi, device=dev)])
        return hcl_partial_loss(z, y, anchors, groups=groups, **kw)  # type: ignore[arg-type]

    def _single(self, z1, z2, labels, generator) -> StepLoss:
        spec = self.spec
        if spec.method in _SETTINGS:
            from theory.hcl import contrastive_loss

            kw = dict(
                setting=_SETTINGS[spec.method],
                beta=spec.beta,
                tau=spec.tau,
                psi="mean",
                estimator=spec.estimator,
                num_negatives=spec.num_negatives,
                generator=generator,
            )
            if z2 is None:
                loss = contrastive_loss(z1, labels, **kw)  # type: ignore[arg-type]
            else:
                y = torch.cat([labels, labels])
                groups = None
                if kw["setting"] == "unsupervised":
                    groups = torch.arange(z1.shape[0], device=z1.device).repeat(2)
                loss = contrastive_loss(torch.cat([z1, z2]), y, positive_groups=groups, **kw)  # type: ignore[arg-type]
            return StepLoss(loss, loss.detach().to(torch.float64))
        if spec.method == "InfoNCE":
            from theory.infonce import info_nce

            loss = info_nce(z1, z2, tau=spec.tau)
            return StepLoss(loss, loss.detach().to(torch.float64))
        assert self.criterion is not None
        loss = self.criterion(z1, z2)
        diag = self.criterion.last_diagnostics
        gate = {"lambda": diag.lam, "lambda_rho": diag.lam_rho, "lambda_aic": diag.lam_aic, "daic": diag.dAIC}
        extra = None if diag.beta_t is None else {"beta_t": diag.beta_t}
        return StepLoss(
            loss, loss.detach().to(torch.float64), {k: v.detach() for k, v in gate.items()}, extra
        )


def _slice_gate(
    gate: dict[str, torch.Tensor] | None, lo: int, hi: int, N: int
) -> dict[str, torch.Tensor] | None:
    if gate is None:
        return None
    idx = torch.cat([torch.arange(lo, hi), torch.arange(N + lo, N + hi)])
    return {k: v[idx.to(v.device)] for k, v in gate.items()}


def build_loss(config: Any, world: World = SINGLE, mode: str = "local") -> Objective:
    """The :class:`Objective` of a :class:`realdata.training.config.TrainConfig` (or a :class:`LossSpec`)."""
    spec = config if isinstance(config, LossSpec) else LossSpec.from_config(config)
    return Objective(spec, world, mode)
