"""Batch losses of the hard-negative paper: SCL / HSCL / UCL / HUCL.

Notation (DESIGN.md): ``z`` embeddings ``(B, d)``, ``labels`` ``(B,)`` ints in ``[0, C)``,
``beta`` hardness, ``tau`` temperature, ``K`` (``num_negatives``) negatives per
(anchor, positive) pair, ``S = z z^T`` similarities.

The batched loss (spec/hcl.md §2.5, the authors' ``nce_supervised_hard``), generalised over psi:

    L = (1/P) sum_i sum_{j in Pos(i)} psi( {S[i, n_r] - S[i, j]}_{r=1..K} ),   n_r ~ q_i i.i.d.,

with ``q_i(n) ∝ exp(beta S[i, n])`` over the allowed negatives of anchor ``i`` and ``P`` the number
of (anchor, positive) pairs. psi forms (spec/hcl.md §2.1, :func:`theory.hcl.psi.apply_psi`), all
applied to ``t / tau``:

* ``"mean"`` (the authors' form): ``log(1 + (1/K) sum_r exp(t_r / tau))``;
* ``"sum"``: ``log(1 + sum_r exp(t_r / tau))``;
* ``"triplet"``: ``(1/K) sum_r max(0, t_r / tau + margin)``.

``estimator="sampled"`` is the authors' Monte Carlo: K negatives drawn from ``q_i`` per pair.
``estimator="expectation"`` (deterministic) replaces the K-sample average *inside* psi by its
exact expectation under ``q_i``: ``log(1 + E_q exp(t / tau))`` for ``"mean"`` (``K`` times it for
``"sum"``). This is the K -> infinity limit of the sampled loss, not its expectation: by Jensen it
lies above ``E[sampled]`` for the mean form (spec/hcl.md §3.6; :mod:`theory.hcl.optima` gives both
closed forms). For ``"triplet"`` psi is linear in the draws and the two agree in expectation. The
sampling weights ``q_i`` are detached by default, as in the authors' code.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from theory.hcl._expectation import _ExpectedPsi
from theory.hcl.psi import apply_psi
from theory.hcl.sampling import expected_hinge, log_expected_exp, sample_negatives, tilted_log_weights
from theory.options import ESTIMATORS, HCL_TAU, MARGIN, METHODS, NUM_NEGATIVES, PSI_FORMS, SETTINGS
from theory.validation import as_float_tensor, as_labels, integer, one_of, real

__all__ = [
    "contrastive_loss",
    "two_view_contrastive_loss",
    "SCL",
    "HSCL",
    "UCL",
    "HUCL",
]


def contrastive_loss(
    z: torch.Tensor,
    labels: torch.Tensor,
    *,
    setting: str,
    beta: float = 0.0,
    tau: float = HCL_TAU,
    psi: str = "mean",
    estimator: str = "expectation",
    num_negatives: int = NUM_NEGATIVES,
    margin: float = MARGIN,
    self_positive: bool = True,
    self_negative: bool = True,
    generator: torch.Generator | None = None,
    num_classes: int | None = None,
    detach_weights: bool = True,
    positive_groups: torch.Tensor | None = None,
) -> torch.Tensor:
    """SCL / HSCL (``setting="supervised"``) or UCL / HUCL (``"unsupervised"``) batch loss.

    Implements spec/hcl.md §2.5 (the authors' batched loss) for any psi of §2.1.

    Args:
        z: embeddings ``(B, d)`` (already normalised by the model, if at all). float16/bfloat16
            inputs are computed in float32; float64 stays float64.
        labels: ``(B,)`` integer labels in ``[0, C)``.
        setting: ``"supervised"``: negatives are batch members with another label;
            ``"unsupervised"``: negatives are drawn from the whole batch (class collisions).
        beta: hardness ``>= 0`` of the tilt ``q_i(n) ∝ exp(beta z_i.z_n)``; 0 gives SCL / UCL.
        tau: temperature ``> 0``; psi is applied to ``t / tau``.
        psi: ``"mean"``, ``"sum"`` or ``"triplet"`` (see the module docstring).
        estimator: ``"expectation"`` (exact, deterministic) or ``"sampled"`` (K draws per pair).
        num_negatives: K, the number of negatives per (anchor, positive) pair.
        margin: triplet margin ``>= 0`` (``psi="triplet"`` only).
        self_positive: the anchor counts as one of its own positives (authors' code).
        self_negative: unsupervised only: the anchor may be drawn as its own negative.
        generator: ``torch.Generator`` for the sampled estimator (reproducible draws).
        num_classes: optional ``C``; labels must then be ``< C``.
        detach_weights: no gradient through ``q_i`` (authors' code). ``False`` differentiates the
            exact expectation through the weights too (expectation estimator only).
        positive_groups: optional ``(B,)`` integer ids defining positives instead of ``labels``
            (members with the same id are positives), e.g. instance ids of two augmented views,
            while ``labels`` still define the supervised negatives. Members of one group must
            share a label.

    Returns:
        Scalar tensor: the mean over all ``P`` (anchor, positive) pairs.

    Raises:
        ValueError: ``tau <= 0``, ``beta < 0``, unknown option, shape mismatch, labels out of
            range, no (anchor, positive) pair in the batch, or an anchor with a pair but an
            empty negative set.
    """
    one_of("setting", setting, SETTINGS)
    one_of("psi", psi, PSI_FORMS)
    one_of("estimator", estimator, ESTIMATORS)
    tau = real("tau", tau, lo=0.0, lo_open=True)
    beta_is_tensor = isinstance(beta, torch.Tensor) and beta.dim() == 1
    if isinstance(beta, torch.Tensor) and beta.dim() > 1:
        raise ValueError(f"beta must be a scalar or a (B,) tensor, got shape {tuple(beta.shape)}")
    if beta_is_tensor:
        if bool((beta < 0).any()) or not bool(torch.isfinite(beta).all()):
            raise ValueError("beta must be finite and >= 0 for every anchor")
    else:
        beta = real("beta", beta, lo=0.0)
    num_negatives = integer("num_negatives", num_negatives, lo=1)
    margin = real("margin", margin, lo=0.0, allow_inf=True)
    if not isinstance(z, torch.Tensor) or z.dim() != 2:
        raise ValueError("z must be a 2-D tensor (B, d)")
    z = as_float_tensor(z)
    B = z.shape[0]
    labels = as_labels(labels, B, z.device, num_classes)
    if beta_is_tensor and beta.shape != (B,):
        raise ValueError(f"a per-anchor beta must have shape ({B},), got {tuple(beta.shape)}")

    groups = labels if positive_groups is None else as_labels(positive_groups, B, z.device, None)
    rows, cols = _positive_pairs(groups, self_positive)  # the P (anchor, positive) pairs
    num_pairs = rows.numel()
    if num_pairs == 0:
        raise ValueError(
            "no (anchor, positive) pair in the batch: every class is a singleton and "
            "self_positive=False; the loss is undefined"
        )
    if positive_groups is not None and bool((labels[rows] != labels[cols]).any()):
        raise ValueError("positive_groups must not put members with different labels in one group")
    # Negative sets: `allowed` (B, B) bool, or None when every batch member is allowed.
    if setting == "supervised":
        class_size = torch.bincount(labels)[labels]
        starving = class_size[rows] == B
        allowed = labels[:, None] != labels[None, :]
    else:
        starving = torch.full_like(rows, B == 1 and not self_negative, dtype=torch.bool)
        allowed = None if self_negative else ~torch.eye(B, dtype=torch.bool, device=z.device)
    if bool(starving.any()):
        i = int(rows[starving][0])
        raise ValueError(
            f"anchor {i} (label {int(labels[i])}) has an empty negative set in setting={setting!r} "
            "(a batch with a single class?); the loss is undefined"
        )

    S = z @ z.T
    beta_w = beta.to(S.dtype)[:, None] if beta_is_tensor else beta
    if estimator == "expectation" and psi != "triplet" and detach_weights:
        shift = math.log(num_negatives) if psi == "sum" else 0.0
        return _ExpectedPsi.apply(S, rows, cols, allowed, beta_w, tau, shift)

    if allowed is None:
        allowed = torch.ones(B, B, dtype=torch.bool, device=z.device)
    S_w = S.detach() if detach_weights else S
    logq = tilted_log_weights(S_w, allowed, beta_w if not beta_is_tensor else beta_w[:, 0])
    if estimator == "expectation":
        if psi == "triplet":
            c = S / tau - margin  # c[i, j]: hinge threshold of pair (i, j)
            per_pair = expected_hinge(torch.exp(logq), S / tau, c)[rows, cols]
        else:  # weights differentiated too (detach_weights=False)
            m = log_expected_exp(logq, S, tau)
            shift = math.log(num_negatives) if psi == "sum" else 0.0
            per_pair = F.softplus(m[rows] + shift - S[rows, cols] / tau)
        return per_pair.sum() / num_pairs

    if not detach_weights:
        raise ValueError("detach_weights=False is only defined for estimator='expectation'")
    flat_idx = sample_negatives(logq, rows, num_negatives, generator, flat=True)  # (P, K)
    # (P, K) sampled differences S[i, n_r] - S[i, j]; gradients flow through S, never a (P, K, d).
    t = torch.take(S, flat_idx) - S[rows, cols][:, None]
    per_pair = apply_psi(t, psi, tau=tau, margin=margin)
    return per_pair.sum() / num_pairs


def _positive_pairs(groups: torch.Tensor, self_positive: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """All (anchor, positive) index pairs ``(i, j)`` with ``groups[i] == groups[j]``.

    Rows ascending, columns ascending within a row (the order of ``nonzero`` on the pair mask),
    built in O(P) from the sorted groups instead of a ``(B, B)`` mask. ``self_positive=False``
    drops ``j == i``.
    """
    B = groups.numel()
    device = groups.device
    order = torch.argsort(groups, stable=True)
    counts = torch.bincount(groups)
    starts = torch.cumsum(counts, 0) - counts
    per_anchor = counts[groups]
    rows = torch.repeat_interleave(torch.arange(B, device=device), per_anchor)
    block_start = torch.cumsum(per_anchor, 0) - per_anchor
    offsets = torch.arange(rows.numel(), device=device) - block_start[rows]
    cols = order[starts[groups[rows]] + offsets]
    if not self_positive:
        keep = rows != cols
        rows, cols = rows[keep], cols[keep]
    return rows, cols


def two_view_contrastive_loss(
    z1: torch.Tensor, z2: torch.Tensor, labels: torch.Tensor, **kwargs
) -> torch.Tensor:
    """SCL / UCL family on two augmented views with labels.

    The ``2B`` embeddings ``cat(z1, z2)`` with labels ``cat(labels, labels)`` go through
    :func:`contrastive_loss`; each view's other view is then one of its positives (SupCon-style).
    ``kwargs`` are those of :func:`contrastive_loss` (``setting`` required).
    """
    if not isinstance(z1, torch.Tensor) or not isinstance(z2, torch.Tensor) or z1.shape != z2.shape:
        raise ValueError("z1 and z2 must be tensors of the same shape (B, d)")
    labels = torch.as_tensor(labels, device=z1.device)
    return contrastive_loss(torch.cat([z1, z2]), torch.cat([labels, labels]), **kwargs)


def _named(name: str, doc: str):
    """The loss function of method ``name`` of :data:`theory.options.METHODS`: its setting, and
    beta = 0 (SCL, UCL) or a required beta > 0 (HSCL, HUCL)."""
    setting, hard = METHODS[name]
    default_beta = None if hard else 0.0

    def loss(z, labels, beta: float | None = None, **kwargs):
        if beta is None:
            if default_beta is None:
                raise ValueError(f"{name} needs beta > 0 (hardness)")
            beta = default_beta
        if default_beta == 0.0 and float(beta) != 0.0:
            raise ValueError(f"{name} has beta = 0; use H{name} for beta > 0")
        if default_beta is None and not float(beta) > 0.0:
            raise ValueError(f"{name} needs beta > 0 (hardness), got {beta}; use {name[1:]} for beta = 0")
        return contrastive_loss(z, labels, setting=setting, beta=beta, **kwargs)

    loss.__name__ = name
    loss.__qualname__ = name
    loss.__doc__ = doc
    return loss


SCL = _named("SCL", "Supervised contrastive loss: ``contrastive_loss(setting='supervised', beta=0)``.")
HSCL = _named("HSCL", "Hard-negative SCL: ``contrastive_loss(setting='supervised', beta=beta)``, beta > 0.")
UCL = _named("UCL", "Unsupervised contrastive loss: ``contrastive_loss(setting='unsupervised', beta=0)``.")
HUCL = _named("HUCL", "Hard-negative UCL: ``contrastive_loss(setting='unsupervised', beta=beta)``, beta > 0.")
