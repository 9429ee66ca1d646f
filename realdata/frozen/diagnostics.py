"""WeiNCE's extreme-value diagnostics on a trained encoder: the one adapter to ``theory.weince`` EVT.

* :func:`pot_scores` (claim W1), as the WeiNCE analysis notebook: the frozen encoder in eval mode;
  the training images through the run's **training** views (SimCLR augmentation for two-view runs,
  none for label views); shuffled ``drop_last`` batches of ``batch`` images (257 = K + 1); only the
  first view; ``z`` = the L2-normalised projector output; the strict lower triangle of ``z z^T``
  (``batch (batch - 1) / 2`` negative similarities per batch); ``repeats`` batches; seed 42.
* :func:`link_candidates` (claim W2): frozen two-view candidate rows ``[S_i,p(i), S_i,negatives]``
  of ``batches`` batches of ``pairs`` images (cosine similarities), for the likelihood link
  selection of ``theory.weince.links.link_select``.
* :func:`pot_summary` / :func:`link_summary`: the fits (``theory.weince.gpd.pot_fit``,
  ``threshold_stability``; ``link_select``) as plain dicts for the claim records.

docs/weince.md describes the fits; docs/realdata.md the files these feed.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from realdata.inputs.pipeline import Views
from synthetic.engine.data import epoch_batches
from theory.weince.gpd import pot_fit, threshold_stability
from theory.weince.links import link_select, two_view_link_candidates

__all__ = ["pot_scores", "link_candidates", "pot_summary", "link_summary", "POT_QUANTILES"]

#: Threshold quantiles of the shape-stability scan (the notebook's).
POT_QUANTILES = (0.98, 0.985, 0.99, 0.992, 0.995)


def _first_view(views: Views, images: torch.Tensor, gen: torch.Generator) -> torch.Tensor:
    x = views.train_views(images, gen)
    return x[: images.shape[0]]


@torch.no_grad()
def pot_scores(
    model: nn.Module,
    dataset: Any,
    views: Views,
    *,
    batch: int = 257,
    repeats: int = 64,
    seed: int = 42,
    device: torch.device | str = "cpu",
) -> np.ndarray:
    """Negative-pair similarity scores of a frozen encoder (see the module docstring).

    Returns:
        float64 array of ``repeats * batch * (batch - 1) / 2`` scores.
    """
    dev = torch.device(device)
    was = model.training
    model.eval()
    n = len(dataset.train)
    b = min(batch, n)
    order = torch.Generator().manual_seed(seed)
    gen = torch.Generator(device=dev).manual_seed(seed)
    i, j = torch.tril_indices(b, b, offset=-1, device=dev)
    out: list[torch.Tensor] = []
    try:
        while len(out) < repeats:
            for idx in epoch_batches(n, b, order):
                x = _first_view(views, dataset.train.images[idx.to(dataset.train.images.device)].to(dev), gen)
                z = F.normalize(model(x)[1].float(), dim=1)
                out.append((z @ z.T)[i, j].double().cpu())
                if len(out) == repeats:
                    break
    finally:
        model.train(was)
    return torch.cat(out).numpy()


@torch.no_grad()
def link_candidates(
    model: nn.Module,
    dataset: Any,
    views: Views,
    *,
    pairs: int = 256,
    batches: int = 8,
    seed: int = 43,
    device: torch.device | str = "cpu",
) -> list[np.ndarray]:
    """Frozen two-view candidate rows ``(2 n, 2 n - 1)`` per batch, positive in column 0."""
    if views.count != 2:
        raise ValueError("link candidates need two-view (simclr) training views")
    dev = torch.device(device)
    was = model.training
    model.eval()
    n = min(pairs, len(dataset.train))
    order = torch.Generator().manual_seed(seed)
    gen = torch.Generator(device=dev).manual_seed(seed)
    out: list[np.ndarray] = []
    try:
        while len(out) < batches:
            for idx in epoch_batches(len(dataset.train), n, order):
                x = views.train_views(dataset.train.images[idx.to(dataset.train.images.device)].to(dev), gen)
                z = model(x)[1].float()
                z1, z2 = z.chunk(2)
                out.append(two_view_link_candidates(z1.cpu(), z2.cpu()))
                if len(out) == batches:
                    break
    finally:
        model.train(was)
    return out


def pot_summary(scores: np.ndarray, q: float = 0.99) -> dict[str, Any]:
    """GPD fit above the ``q`` quantile and the shape at :data:`POT_QUANTILES` (plain values)."""
    r = pot_fit(scores, q)
    stab = threshold_stability(scores, POT_QUANTILES, min_exceed=100)
    return {
        **r.numbers(),
        "n_scores": int(np.asarray(scores).size),
        "stability_xi": [float(v) for v in stab["xi"]],
        "stability_q": [float(v) for v in stab["q"]],
    }


def link_summary(cands: list[np.ndarray], tau: float | None = 0.5) -> dict[str, Any]:
    """Maximum-likelihood lambda-hat with its likelihood-ratio test of lambda = 0 (plain values)."""
    r = link_select(cands, tau=tau)
    return {
        "lam_hat": r.lam_hat,
        "tau_hat": r.tau_hat,
        "loglik": r.loglik,
        "loglik0": r.loglik0,
        "lr_stat": r.lr_stat,
        "p_chi2": r.p_chi2,
        "p_boundary": r.p_boundary,
        "n_rows": r.n_rows,
    }
