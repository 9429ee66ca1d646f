"""Slow, obviously-correct references shared by the tests and the benchmarks.

* :func:`psi_ref`: the psi family with Python floats.
* :func:`loop_loss`: the hard-negative batch loss written per anchor, in the structure of the
  authors' ``nce_supervised_hard`` (docs/hcl.md#the-authors-released-code): for each anchor, build
  the positive and negative masks, the tilted law of its negatives, then either the exact
  expectation or ``npos * K`` draws with numpy's ``Generator.choice`` (or given draws), gather,
  average over the K draws inside the log, and sum. Direct formulas (``exp``, ``log``), no
  log-sum-exp shifts, no fused gradient, no alias tables: independent of the code under test.
  :mod:`benchmarks.bench_losses` times the same function as the authors' loop structure.
* :func:`splitmix64_uniforms`: the sampled estimator's uniform stream, by iterating SplitMix64's
  state as published (the code under test computes each uniform from its counter).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import torch

# ---------------------------------------------------------------------------------------------
# slow references


def psi_ref(t, psi, tau=1.0, margin=1.0):
    """psi of theory.hcl.psi.apply_psi, written with Python floats."""
    K = len(t)
    if psi == "mean":
        return math.log(1 + sum(math.exp(x / tau) for x in t) / K)
    if psi == "sum":
        return math.log(1 + sum(math.exp(x / tau) for x in t))
    return sum(max(0.0, x / tau + margin) for x in t) / K


def loop_loss(
    z: torch.Tensor,
    labels,
    *,
    setting: str = "supervised",
    beta: float | Sequence[float] = 0.0,
    tau: float = 1.0,
    psi: str = "mean",
    K: int = 256,
    margin: float = 1.0,
    self_positive: bool = True,
    self_negative: bool = True,
    detach_weights: bool = True,
    groups=None,
    estimator: str = "expectation",
    rng: np.random.Generator | None = None,
    draws: dict[int, torch.Tensor] | None = None,
    reduction: str = "mean",
):
    """The batch loss of one ``(B, d)`` batch, anchor by anchor.

    Args:
        z: ``(B, d)`` embeddings (gradients flow as through any torch expression).
        labels: ``(B,)`` labels (negatives, and positives unless ``groups``).
        setting, beta, tau, psi, margin, self_positive, self_negative, detach_weights: as
            ``theory.hcl.contrastive_loss``; ``beta`` may be a per-anchor sequence.
        K: negatives per (anchor, positive) pair.
        groups: optional positive ids (``positive_groups``).
        estimator: ``"expectation"`` (exact weighted average over the negatives) or ``"sampled"``.
        rng: numpy Generator for the sampled draws: per anchor one ``choice`` of ``npos * K``
            indices among its negatives with the tilted probabilities (the authors' structure).
        draws: alternatively the draws themselves: ``draws[i]`` an ``(npos_i, K)`` tensor of batch
            column indices for anchor ``i`` (its pairs in ascending positive order).
        reduction: ``"mean"``, ``"sum"``, ``"none"`` (per-pair values in pair order) or
            ``"anchor_mean"``.

    Returns:
        A scalar tensor, or the ``(P,)`` per-pair values for ``reduction="none"``.
    """
    B = z.shape[0]
    labels = torch.as_tensor(labels)
    groups = labels if groups is None else torch.as_tensor(groups)
    S = z @ z.T
    idx = torch.arange(B)
    betas = [float(b) for b in beta] if isinstance(beta, Sequence | torch.Tensor) else [float(beta)] * B
    per_pair, per_anchor = [], []
    for i in range(B):
        b = betas[i]
        if setting == "supervised":
            neg_mask = labels != labels[i]
        else:
            neg_mask = torch.ones(B, dtype=torch.bool) if self_negative else idx != i
        pos_mask = groups == groups[i]
        if not self_positive:
            pos_mask = pos_mask & (idx != i)
        npos = int(pos_mask.sum())
        if npos == 0:
            continue
        s = S[i]
        s_pos, s_neg = s[pos_mask], s[neg_mask]
        w = torch.softmax(b * (s_neg.detach() if detach_weights else s_neg), dim=0)
        if estimator == "expectation":
            t = (s_neg[None, :] - s_pos[:, None]) / tau  # (npos, nneg)
            if psi == "triplet":
                vals = (torch.relu(t + margin) * w).sum(dim=1)
            else:
                avg = (torch.exp(t) * w).sum(dim=1)
                vals = torch.log(1 + (K if psi == "sum" else 1) * avg)
        else:
            if draws is not None:
                neg_cols = torch.nonzero(neg_mask).flatten()
                lookup = torch.full((B,), -1, dtype=torch.long)
                lookup[neg_cols] = torch.arange(neg_cols.numel())
                pick = lookup[draws[i]]
                assert (pick >= 0).all(), "a draw outside the anchor's negatives"
            else:
                p = w.detach().double().numpy()
                assert rng is not None, "the sampled reference needs an rng"
                pick = torch.from_numpy(
                    rng.choice(s_neg.shape[0], size=npos * K, replace=True, p=p / p.sum())
                )
                pick = pick.view(npos, K)
            t = (s_neg[pick] - s_pos[:, None]) / tau  # (npos, K)
            if psi == "triplet":
                vals = torch.relu(t + margin).mean(dim=1)
            elif psi == "mean":
                vals = torch.log1p(torch.exp(t).mean(dim=1))
            else:
                vals = torch.log1p(torch.exp(t).sum(dim=1))
        per_pair.append(vals)
        if reduction == "anchor_mean":
            per_anchor.append(vals.mean())
    values = torch.cat(per_pair)
    if reduction == "none":
        return values
    if reduction == "sum":
        return values.sum()
    if reduction == "anchor_mean":
        return torch.stack(per_anchor).mean()
    return values.sum() / values.numel()


def splitmix64_uniforms(seed: int, first: int, num: int) -> list[float]:
    """Uniforms ``first .. first + num - 1`` of SplitMix64 seeded with ``seed``, one step at a time.

    The generator as published (Vigna's splitmix64.c): ``state += 0x9E3779B97F4A7C15``, then the
    output ``z = state; z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9; z = (z ^ (z >> 27)) *
    0x94D049BB133111EB; z ^ (z >> 31)`` (64-bit wrapping, here Python integers modulo 2^64), as a
    uniform ``(z >> 11) / 2^53``. Iterates the state from the seed (not by counter arithmetic).
    """
    mask = (1 << 64) - 1
    state = seed & mask
    out = []
    for n in range(first + num):
        state = (state + 0x9E3779B97F4A7C15) & mask
        z = state
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & mask
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & mask
        z ^= z >> 31
        if n >= first:
            out.append((z >> 11) / 2.0**53)
    return out
