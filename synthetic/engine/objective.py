"""The training objective of R runs at one step: embeddings of the batch and their R losses.

:func:`step_losses` is the one place where the engine (:mod:`synthetic.engine.train`) turns R runs'
mini-batches into R losses. The hard-negative family is one call of the theory loss
(:func:`theory.hcl.contrastive_loss`, docs/hcl.md#the-batched-kernel) on run-batched tensors:
``z`` ``(R, B, d)``, ``labels`` ``(R, B)``, ``beta`` ``(R,)`` -> ``(R,)``, with run ``r``'s
sampled negatives drawn from run ``r``'s generator. A single run is the R = 1 case.

**How each method consumes a batch** ``idx`` ``(R, B)`` (labels ``y``):

* SCL/HSCL/UCL/HUCL, ``positives="label"``: the authors' batched loss, every same-label batch
  member (the anchor included) is a positive.
* SCL/HSCL/UCL/HUCL, ``positives="noise"``: the 2B embeddings ``cat(f(x), f(x + noise))`` with
  labels ``cat(y, y)`` and positive groups ``cat(arange(B), arange(B))``, no self-positive: the
  only positive of a view is its noisy copy, while the labels still define the supervised
  negatives and the unsupervised negatives are all 2B members (anchor included).
* InfoNCE/WeiNCE (every two-view method): two views ``z1 = f(x_idx)`` and ``z2`` = a uniformly
  random other sample of the same class (``"label"``, :func:`synthetic.engine.data.same_class_partners`)
  or ``f(x_idx + noise)`` (``"noise"``); the method's loss of :func:`theory.two_view.two_view_loss`
  (WeiNCE: the core recipe), one call per run.
* ``f(x + noise)``: noise ``N(0, noise_std^2)`` added to the encoder input (linear/MLP) or to the
  raw pre-normalisation feature (free features).

**Random draws** of run r come from run r's own ``"step"`` generator, in this order: the positives'
noise or partners, then the sampled negatives (inside the loss). A run whose step is skipped
(``active[r]`` False) draws nothing and gets no loss. This is the order of the sequential
reference trainer, so a run's draws do not depend on the runs stacked with it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from synthetic.engine.config import RunConfig
from synthetic.engine.data import noise_like, same_class_partners
from theory.hcl import contrastive_loss
from theory.options import HCL_METHODS
from theory.two_view import two_view_loss

__all__ = ["step_losses", "skipped_steps"]

# ------------------------------------------------------------------ one step of R runs


def skipped_steps(configs: Sequence[RunConfig], labels: torch.Tensor) -> torch.Tensor:
    """Bool ``(S, R)``: the steps whose loss is undefined for a run (labels ``(S, R, B)``).

    A supervised (SCL/HSCL) batch holding a single class leaves every anchor without negatives:
    that run skips the step (training and the evaluation loss alike).
    """
    sup = torch.tensor([c.setting == "supervised" for c in configs], device=labels.device)
    return sup[None, :] & (labels.amax(dim=-1) == labels.amin(dim=-1))


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
            out.append(two_view_loss(c.method, z1, z2, tau=c.tau))
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
        val = contrastive_loss(
            zs,
            ys,
            setting=setting,
            beta=bs,
            tau=cfg.tau,
            psi=cfg.psi,
            estimator=est,
            num_negatives=cfg.num_negatives,
            margin=cfg.margin,
            self_positive=groups is None,
            positive_groups=gs,
            generator=[generators[r] for r in sel],
            check_inputs=False,  # the engine checks its runs (skipped steps, non-finite values)
        )
        for k, v in zip(pick, val, strict=True):
            losses[k] = v
    if len(dict.fromkeys(settings)) == 1:
        return val
    return torch.stack([v for v in losses if v is not None])
