"""The training objective of R runs at one step: embeddings of the batch and their R losses.

:func:`step_losses` is the one place where the engine (:mod:`synthetic.engine.train`) turns R runs'
mini-batches into R losses, and :func:`batched_contrastive_loss` the one place where it calls the
contrastive loss of the hard-negative paper (docs/hcl.md#the-batched-loss) on run-batched tensors:
``z`` ``(R, B, d)``, ``labels`` ``(R, B)``, ``beta`` ``(R,)`` -> ``(R,)``. A single run is the
R = 1 case of both.

**How each method consumes a batch** ``idx`` ``(R, B)`` (labels ``y``):

* SCL/HSCL/UCL/HUCL, ``positives="label"``: the authors' batched loss, every same-label batch
  member (the anchor included) is a positive.
* SCL/HSCL/UCL/HUCL, ``positives="noise"``: the 2B embeddings ``cat(f(x), f(x + noise))`` with
  labels ``cat(y, y)`` and positive groups ``cat(arange(B), arange(B))``, no self-positive: the
  only positive of a view is its noisy copy, while the labels still define the supervised
  negatives and the unsupervised negatives are all 2B members (anchor included).
* InfoNCE/WeiNCE: two views ``z1 = f(x_idx)`` and ``z2`` = a uniformly random other sample of the
  same class (``"label"``, :func:`synthetic.engine.data.same_class_partners`) or ``f(x_idx + noise)``
  (``"noise"``); ``theory.infonce.info_nce`` / ``theory.weince.weince_loss(recipe="core")``, one
  call per run.
* ``f(x + noise)``: noise ``N(0, noise_std^2)`` added to the encoder input (linear/MLP) or to the
  raw pre-normalisation feature (free features).

**Random draws** of run r come from run r's own ``"step"`` generator, in this order: the positives'
noise or partners, then the sampled negatives (inside the loss). A run whose step is skipped
(``active[r]`` False) draws nothing and gets no loss. This is the order of the sequential
reference trainer, so a run's draws do not depend on the runs stacked with it.

**The loss kernel.** ``theory.hcl.contrastive_loss`` takes one run (``(B, d)``). Until it accepts
run-batched tensors, :func:`batched_contrastive_loss` evaluates the exact-expectation estimator of
the mean / sum psi forms (the case of every default-scale grid) with a run-batched fused kernel of
the same mathematics (``_FusedExpectation``, tested against ``contrastive_loss`` run by run,
values and gradients), and every other case (the sampled estimator, the triplet psi) with one
``contrastive_loss`` call per run. Switching to the theory kernel changes this function only.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import torch
import torch.nn.functional as F

from synthetic.engine.config import RunConfig
from synthetic.engine.data import noise_like, same_class_partners
from theory.hcl import contrastive_loss
from theory.infonce import info_nce
from theory.options import HCL_METHODS, SETTINGS
from theory.validation import one_of
from theory.weince import weince_loss

__all__ = ["CHUNK_ELEMENTS", "batched_contrastive_loss", "step_losses"]

#: Similarity entries per fused-kernel call: runs are processed in chunks of about this many
#: ``(B, B)`` entries, which keeps each block cache-sized and bounds the memory of a full batch.
CHUNK_ELEMENTS = 1 << 20


def batched_contrastive_loss(
    z: torch.Tensor,
    labels: torch.Tensor,
    beta: torch.Tensor,
    *,
    setting: str,
    tau: float = 1.0,
    psi: str = "mean",
    estimator: str = "expectation",
    num_negatives: int = 256,
    margin: float = 0.0,
    self_positive: bool = True,
    positive_groups: torch.Tensor | None = None,
    generators: Sequence[torch.Generator | None] | None = None,
    num_classes: int | None = None,
) -> torch.Tensor:
    """R batch losses of the hard-negative paper (SCL/HSCL/UCL/HUCL), one per run.

    ``L_r = (1/P_r) sum_{(i, j) pos} psi({S_r[i, n] - S_r[i, j]}_n)`` with negatives from the
    tilted law ``q_ri(n) ∝ exp(beta_r S_r[i, n])`` (docs/hcl.md#the-batched-loss; unsupervised negatives
    include the anchor, as in the authors' code); ``theory.hcl.contrastive_loss`` run by run.

    Args:
        z: embeddings ``(R, B, d)``.
        labels: ``(R, B)`` integer labels.
        beta: ``(R,)`` hardness per run (>= 0).
        setting: ``"supervised"`` or ``"unsupervised"``.
        tau: temperature > 0.
        psi: ``"mean"``, ``"sum"`` or ``"triplet"``.
        estimator: ``"expectation"`` or ``"sampled"``.
        num_negatives: K (the sum form's ``log K`` and the sampled draws).
        margin: triplet margin.
        self_positive: the anchor counts as one of its own positives.
        positive_groups: optional ``(R, B)`` positive ids (see ``contrastive_loss``).
        generators: R generators of the sampled negatives (one per run).
        num_classes: optional C (labels are checked against it).

    Returns:
        ``(R,)`` losses.

    Shape:
        ``z`` ``(R, B, d)``, ``labels`` ``(R, B)``, ``beta`` ``(R,)`` -> ``(R,)``.

    Raises:
        ValueError: bad option or shape, a run without any pair, or an anchor with a pair and
            no negative.
    """
    one_of("setting", setting, SETTINGS)
    if z.dim() != 3 or labels.shape != z.shape[:2]:
        raise ValueError(
            f"z must be (R, B, d) and labels (R, B), got {tuple(z.shape)} / {tuple(labels.shape)}"
        )
    R = z.shape[0]
    beta = torch.as_tensor(beta, dtype=z.dtype, device=z.device)
    if beta.shape != (R,) or bool((beta < 0).any()):
        raise ValueError(f"beta must be a non-negative (R,) = ({R},) tensor, got {tuple(beta.shape)}")
    if estimator == "expectation" and psi in ("mean", "sum"):
        return _fused_expectation(
            z, labels, beta, setting, tau, psi, num_negatives, self_positive, positive_groups
        )

    gens = list(generators) if generators is not None else [None] * R
    if len(gens) != R:
        raise ValueError(f"generators must hold R = {R} generators, got {len(gens)}")
    return torch.stack(
        [
            contrastive_loss(
                z[r],
                labels[r],
                setting=setting,
                beta=float(beta[r]),
                tau=tau,
                psi=psi,
                estimator=estimator,
                num_negatives=num_negatives,
                margin=margin,
                self_positive=self_positive,
                positive_groups=None if positive_groups is None else positive_groups[r],
                generator=gens[r],
                num_classes=num_classes,
            )
            for r in range(R)
        ]
    )


# ------------------------------------------------------------------ run-batched fused kernel


def _fused_expectation(z, labels, beta, setting, tau, psi, num_negatives, self_positive, positive_groups):
    if not float(tau) > 0:
        raise ValueError(f"tau must be > 0, got {tau!r}")
    R, B, _ = z.shape
    same = labels[:, :, None] == labels[:, None, :]
    if positive_groups is None:
        pos = same
    else:
        pos = positive_groups[:, :, None] == positive_groups[:, None, :]
    if not self_positive:
        pos = pos & ~torch.eye(B, dtype=torch.bool, device=z.device)
    num_pairs = pos.sum(dim=(1, 2))
    if not (self_positive and positive_groups is None) and bool((num_pairs == 0).any()):
        raise ValueError("a run has no (anchor, positive) pair in its batch; the loss is undefined")
    forbidden = None
    if setting == "supervised":
        single = labels.amax(dim=1) == labels.amin(dim=1)
        if bool(single.any()):
            r = int(torch.nonzero(single)[0])
            raise ValueError(
                f"run {r}: a single-class batch leaves every anchor without negatives; the "
                "supervised loss is undefined"
            )
        forbidden = same  # supervised negatives: other-label members only
    shift = math.log(num_negatives) if psi == "sum" else 0.0
    chunk = max(1, CHUNK_ELEMENTS // (B * B))
    pairs = num_pairs.to(z.dtype)
    if chunk >= R:
        return _FusedExpectation.apply(z, pos, forbidden, beta, float(tau), shift, pairs)
    out = []
    for s in range(0, R, chunk):
        sl = slice(s, s + chunk)
        f = None if forbidden is None else forbidden[sl]
        out.append(_FusedExpectation.apply(z[sl], pos[sl], f, beta[sl], float(tau), shift, pairs[sl]))
    return torch.cat(out)


class _FusedExpectation(torch.autograd.Function):
    """Run-batched exact-expectation InfoNCE (mean / sum psi) with detached tilt weights.

    The mathematics of ``theory.hcl._expectation._ExpectedPsi`` on ``(R, B, B)`` blocks with a
    per-run ``beta`` and per-run pair counts, differentiated with respect to ``z``:
    ``u = beta S' + S / tau`` over the allowed negatives (``forbidden``: the same-label entries
    for the supervised setting, none otherwise; ``S'`` = ``S`` detached),
    ``m_i = LSE_n(u) - LSE_n(beta S')``, ``x_ij = m_i + shift - S_ij / tau``,
    ``L_r = (1/P_r) sum_pairs softplus(x_ij)``; with ``w = softmax_n(u)`` and
    ``sigma = sigmoid(x) * pos``: ``dL_r/dS_in = (g_i w_in - sigma_in) / (P_r tau)``,
    ``g_i = sum_j sigma_ij``, and ``dL_r/dz = (G + G^T) z``.
    """

    @staticmethod
    def forward(ctx: Any, z, pos_mask, forbidden, beta, tau, shift, num_pairs):
        S = torch.bmm(z, z.transpose(1, 2))
        a = S if tau == 1.0 else S / tau
        tilt = beta[:, None, None] * S
        if forbidden is not None:
            tilt = tilt.masked_fill_(forbidden, float("-inf"))
        u = tilt + a
        lse_u = torch.logsumexp(u, dim=2, keepdim=True)
        m = lse_u - torch.logsumexp(tilt, dim=2, keepdim=True)
        x = (m - a) if shift == 0.0 else (m + shift) - a
        posf = pos_mask.to(z.dtype)
        loss = (F.softplus(x) * posf).sum(dim=(1, 2)) / num_pairs
        ctx.save_for_backward(z, u, lse_u, x, posf, num_pairs)
        ctx.tau = tau
        return loss

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx: Any, grad_out):
        z, u, lse_u, x, posf, num_pairs = ctx.saved_tensors
        scale = (grad_out / num_pairs)[:, None, None]
        sig = torch.sigmoid(x).mul_(posf)
        g = sig.sum(dim=2, keepdim=True)
        G = torch.exp(u - lse_u).mul_(g).sub_(sig).mul_(scale / ctx.tau)
        dz = torch.bmm(G + G.transpose(1, 2), z)
        return dz, None, None, None, None, None, None


# ------------------------------------------------------------------ one step of R runs


def _two_view_loss(config: RunConfig, z1: torch.Tensor, z2: torch.Tensor) -> torch.Tensor:
    if config.method == "InfoNCE":
        return info_nce(z1, z2, tau=config.tau)

    return weince_loss(z1, z2, tau=config.tau, recipe="core")


def step_losses(
    configs: Sequence[RunConfig],
    model: Any,
    inputs: torch.Tensor,
    labels: torch.Tensor,
    idx: torch.Tensor,
    generators: Sequence[torch.Generator],
    betas: torch.Tensor,
    *,
    y_pool: torch.Tensor,
    pool_inputs: torch.Tensor | None,
    active: Sequence[bool] | None = None,
    estimator: str | None = None,
) -> torch.Tensor:
    """The losses of the active runs at one step (see the module docstring).

    Args:
        configs: the R runs (one stack: equal shapes; methods may differ in setting).
        model: a :class:`synthetic.engine.models.StackedModel` of the R runs.
        inputs: ``(R, B)`` indices (free features) or ``(R, B, D)`` inputs of the batch.
        labels: ``(R, B)`` labels of the batch.
        idx: ``(R, B)`` sample indices of the batch.
        generators: R ``"step"`` generators.
        betas: ``(R,)`` hardness per run.
        y_pool: ``(R, N)`` labels of the whole training set (partners of two-view label positives).
        pool_inputs: ``(R, N, D)`` training inputs (None for free features).
        active: R bools; inactive (skipped) runs draw nothing and get no loss (default: all).
        estimator: override the runs' estimator (the evaluation uses ``"expectation"``).

    Returns:
        ``(A,)`` losses of the A active runs, in run order.
    """
    cfg = configs[0]
    R, B = idx.shape
    runs = list(range(R)) if active is None else [r for r in range(R) if active[r]]
    free = cfg.encoder == "free"
    dtype, device = cfg.torch_dtype, idx.device
    noise_dim = cfg.embed_dim if free else cfg.input_dim
    if cfg.method not in HCL_METHODS:
        out = []
        for r in runs:
            c = configs[r]
            z1 = model.run(r, inputs[r])
            if c.positives == "label":
                partner = same_class_partners(y_pool[r], idx[r], generator=generators[r])
                z2 = model.run(r, partner if pool_inputs is None else pool_inputs[r][partner])
            else:
                noise = noise_like(
                    (B, noise_dim), c.noise_std, generator=generators[r], dtype=dtype, device=device
                )
                z2 = model.run(r, inputs[r], noise)
            out.append(_two_view_loss(c, z1, z2))
        return torch.stack(out)

    if cfg.positives == "label":
        z, y, groups = model(inputs), labels, None
    else:
        noise = torch.zeros(R, B, noise_dim, dtype=dtype, device=device)
        for r in runs:
            noise[r] = noise_like(
                (B, noise_dim), cfg.noise_std, generator=generators[r], dtype=dtype, device=device
            )
        z = torch.cat([model(inputs), model(inputs, noise)], dim=1)
        y = torch.cat([labels, labels], dim=1)
        groups = torch.arange(B, device=device).repeat(R, 2)
    est = cfg.estimator if estimator is None else estimator
    settings = [str(configs[r].setting) for r in runs]
    losses: list[torch.Tensor | None] = [None] * len(runs)
    for setting in dict.fromkeys(settings):
        pick = [k for k, s in enumerate(settings) if s == setting]
        sel = [runs[k] for k in pick]
        if len(sel) == R:
            zs, ys, bs, gs = z, y, betas, groups
        else:
            t = torch.tensor(sel, device=device)
            zs, ys, bs = z[t], y[t], betas[t]
            gs = None if groups is None else groups[t]
        val = batched_contrastive_loss(
            zs,
            ys,
            bs,
            setting=setting,
            tau=cfg.tau,
            psi=cfg.psi,
            estimator=est,
            num_negatives=cfg.num_negatives,
            margin=cfg.margin,
            self_positive=groups is None,
            positive_groups=gs,
            generators=[generators[r] for r in sel],
        )
        for k, v in zip(pick, val, strict=True):
            losses[k] = v
    if len(dict.fromkeys(settings)) == 1:
        return val
    return torch.stack([v for v in losses if v is not None])
