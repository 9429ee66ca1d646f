"""Contrastive losses: SCL / HSCL / UCL / HUCL batch losses and two-view InfoNCE (NT-Xent).

Notation (DESIGN.md): ``z`` embeddings ``(B, d)``, ``labels`` ``(B,)`` ints in ``[0, C)``,
``beta`` hardness, ``tau`` temperature, ``K`` (``num_negatives``) negatives per
(anchor, positive) pair, ``S = z z^T`` similarities.

The batched loss (spec/hcl.md §2.5, the authors' ``nce_supervised_hard``), generalised over psi:

    L = (1/P) sum_i sum_{j in Pos(i)} psi( {S[i, n_r] - S[i, j]}_{r=1..K} ),   n_r ~ q_i i.i.d.,

with ``q_i(n) ∝ exp(beta S[i, n])`` over the allowed negatives of anchor ``i`` and ``P`` the number
of (anchor, positive) pairs. psi forms (spec/hcl.md §2.1), all applied to ``t / tau``:

* ``"mean"`` (the authors' form): ``log(1 + (1/K) sum_r exp(t_r / tau))``;
* ``"sum"``: ``log(1 + sum_r exp(t_r / tau))``;
* ``"triplet"``: ``(1/K) sum_r max(0, t_r / tau + margin)``.

``estimator="sampled"`` is the authors' Monte Carlo: K negatives drawn from ``q_i`` per pair.
``estimator="expectation"`` (deterministic) replaces the K-sample average *inside* psi by its
exact expectation under ``q_i``: ``log(1 + E_q exp(t / tau))`` for ``"mean"`` (``K`` times it for
``"sum"``). This is the K -> infinity limit of the sampled loss, not its expectation: by Jensen it
lies above ``E[sampled]`` for the mean form (spec/hcl.md §3.6; ``theory.bounds`` gives both closed
forms). For ``"triplet"`` psi is linear in the draws and the two agree in expectation. The
sampling weights ``q_i`` are detached by default, as in the authors' code.
"""

from __future__ import annotations

import functools
import math

import torch
import torch.nn.functional as F

from theory.geometry import as_float_tensor
from theory.sampling import expected_hinge, log_expected_exp, sample_negatives, tilted_log_weights
from theory.validation import integer, real

__all__ = [
    "SETTINGS",
    "PSI_FORMS",
    "ESTIMATORS",
    "contrastive_loss",
    "two_view_contrastive_loss",
    "info_nce",
    "two_view_candidates",
    "apply_psi",
    "SCL",
    "HSCL",
    "UCL",
    "HUCL",
    "METHODS",
]

SETTINGS = ("supervised", "unsupervised")
PSI_FORMS = ("mean", "sum", "triplet")
ESTIMATORS = ("expectation", "sampled")


def apply_psi(t: torch.Tensor, form: str = "mean", *, tau: float = 1.0, margin: float = 1.0) -> torch.Tensor:
    """The psi family of spec/hcl.md §2.1 applied to ``t / tau``, over the last axis.

    Shapes: ``t`` ``(..., K)`` differences ``S[i, n_r] - S[i, j]`` -> ``(...)``.

    * ``"mean"``: ``log(1 + (1/K) sum_r exp(t_r / tau))`` (the authors' form);
    * ``"sum"``: ``log(1 + sum_r exp(t_r / tau))``;
    * ``"triplet"``: ``(1/K) sum_r max(0, t_r / tau + margin)``.

    Log-sum-exp throughout (finite for any finite ``t`` and ``tau > 0``).

    Raises:
        ValueError: unknown ``form``, ``tau <= 0``, ``margin < 0`` or ``t`` without a last axis.
    """
    if form not in PSI_FORMS:
        raise ValueError(f"form must be one of {PSI_FORMS}, got {form!r}")
    tau = real("tau", tau, lo=0.0, lo_open=True)
    margin = real("margin", margin, lo=0.0, allow_inf=True)
    if not isinstance(t, torch.Tensor) or t.dim() < 1 or t.shape[-1] < 1:
        raise ValueError("t must be a tensor with a non-empty last axis (..., K)")
    if form == "triplet":
        return torch.relu(t / tau + margin).mean(dim=-1)
    lse = torch.logsumexp(t / tau, dim=-1)
    if form == "mean":
        lse = lse - math.log(t.shape[-1])
    return F.softplus(lse)


def _validate_labels(labels, B: int, device, num_classes: int | None) -> torch.Tensor:
    labels = torch.as_tensor(labels, device=device)
    if labels.dim() != 1 or labels.shape[0] != B:
        raise ValueError(f"labels must have shape ({B},) to match z, got {tuple(labels.shape)}")
    if labels.is_floating_point() or labels.is_complex() or labels.dtype == torch.bool:
        raise ValueError(f"labels must be integers, got dtype {labels.dtype}")
    labels = labels.long()
    if B and int(labels.min()) < 0:
        raise ValueError(f"labels must be >= 0, got min {int(labels.min())}")
    if num_classes is not None and B and int(labels.max()) >= num_classes:
        raise ValueError(
            f"labels must lie in [0, num_classes={num_classes}), got max {int(labels.max())}"
        )
    return labels


def contrastive_loss(
    z: torch.Tensor,
    labels: torch.Tensor,
    *,
    setting: str,
    beta: float = 0.0,
    tau: float = 1.0,
    psi: str = "mean",
    estimator: str = "expectation",
    num_negatives: int = 256,
    margin: float = 1.0,
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
    if setting not in SETTINGS:
        raise ValueError(f"setting must be one of {SETTINGS}, got {setting!r}")
    if psi not in PSI_FORMS:
        raise ValueError(f"psi must be one of {PSI_FORMS}, got {psi!r}")
    if estimator not in ESTIMATORS:
        raise ValueError(f"estimator must be one of {ESTIMATORS}, got {estimator!r}")
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
    labels = _validate_labels(labels, B, z.device, num_classes)
    if beta_is_tensor and beta.shape != (B,):
        raise ValueError(f"a per-anchor beta must have shape ({B},), got {tuple(beta.shape)}")

    groups = labels if positive_groups is None else _validate_labels(positive_groups, B, z.device, None)
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


class _ExpectedPsi(torch.autograd.Function):
    """Fused exact-expectation InfoNCE (psi ``"mean"`` / ``"sum"``) with detached tilt weights.

    Forward: ``A_i = logsumexp_n(beta S_in)`` and ``B_i = logsumexp_n((beta + 1/tau) S_in)`` over
    the allowed ``n``, ``m_i = B_i - A_i = log E_{q_i} exp(S_in / tau)``, and
    ``L = (1/P) sum_pairs softplus(m_i + shift - S_ij / tau)``.
    Backward (``q`` held fixed): ``dL/dS_in = g_i r_in`` with ``r_i = softmax_n((beta + 1/tau) S_in)``
    and ``g_i = (1/(P tau)) sum_{j in Pos(i)} sigmoid(.)``, minus ``sigmoid(.)/(P tau)`` at the
    pairs. A handful of passes over ``(B, B)``, no ``(B, B)`` softplus and no mask of pairs.
    """

    @staticmethod
    def forward(ctx, S, rows, cols, allowed, beta, tau, shift):  # noqa: D102
        B = S.shape[0]
        scalar_zero_beta = not isinstance(beta, torch.Tensor) and beta == 0.0
        if scalar_zero_beta:
            count = allowed.sum(dim=1).to(S.dtype) if allowed is not None else S.new_full((B,), float(B))
            A = torch.log(count)
            Y = S * (1.0 / tau)
        else:
            Y = S * beta
        if allowed is not None:
            Y.masked_fill_(~allowed, float("-inf"))
        if not scalar_zero_beta:
            A = torch.logsumexp(Y, dim=1)
            Y.add_(S, alpha=1.0 / tau)
        Bv = torch.logsumexp(Y, dim=1)
        Bv = torch.where(torch.isfinite(Bv), Bv, torch.zeros_like(Bv))  # rows without negatives
        arg = (Bv - A)[rows] + shift - S[rows, cols] / tau
        ctx.save_for_backward(Y, Bv, rows, cols, torch.sigmoid(arg))
        ctx.scale = 1.0 / (rows.numel() * tau)
        return F.softplus(arg).sum() / rows.numel()

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, grad_out):  # noqa: D102
        Y, Bv, rows, cols, sig = ctx.saved_tensors
        gp = sig * (grad_out * ctx.scale)
        gm = torch.zeros_like(Bv).index_add_(0, rows, gp)
        grad = (Y - Bv[:, None]).exp_().mul_(gm[:, None])  # Y stays intact (retain_graph)
        grad.index_put_((rows, cols), -gp, accumulate=True)
        return grad, None, None, None, None, None, None


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


@functools.lru_cache(maxsize=32)
def _candidate_index(N: int, device: torch.device) -> torch.Tensor:
    """Column index ``(2N, 2N-1)``: positive ``(i+N) mod 2N`` first, then negatives ascending."""
    A = 2 * N
    i = torch.arange(A, device=device)[:, None]
    p = (i + N) % A
    lo, hi = torch.minimum(i, p), torch.maximum(i, p)
    r = torch.arange(A - 2, device=device)[None, :]
    c = r + (r >= lo).long()
    c = c + (c >= hi).long()
    return torch.cat([p, c], dim=1)


def two_view_candidates(
    z1: torch.Tensor, z2: torch.Tensor, *, normalize: bool = True
) -> tuple[torch.Tensor, torch.Tensor]:
    """Similarities and per-anchor candidate rows of the two-view (NT-Xent) problem.

    ``z = cat(z1, z2)`` (``2N`` anchors), L2-normalised row-wise when ``normalize`` (cosine
    similarity), ``S = z z^T``. Row ``i`` of ``cand`` is ``[S[i, p(i)], S[i, negatives]]`` with
    ``p(i) = (i + N) mod 2N`` and the ``2N - 2`` negatives (all but ``i`` and ``p(i)``) in
    ascending column order (spec/weince.md §2.1). Computed in float32 for half inputs.

    Shapes: ``z1, z2`` ``(N, d)`` -> ``S`` ``(2N, 2N)``, ``cand`` ``(2N, 2N - 1)``.
    """
    if not isinstance(z1, torch.Tensor) or not isinstance(z2, torch.Tensor):
        raise ValueError("z1 and z2 must be torch tensors")
    if z1.dim() != 2 or z1.shape != z2.shape:
        raise ValueError(
            f"z1 and z2 must be 2-D with the same shape (N, d), got {tuple(z1.shape)} and {tuple(z2.shape)}"
        )
    N = z1.shape[0]
    if N < 2:
        raise ValueError(f"need N >= 2 pairs (at least one negative per anchor), got N={N}")
    z = as_float_tensor(torch.cat([z1, z2]))
    if normalize:
        z = F.normalize(z, dim=1, eps=1e-12)
    S = z @ z.T
    return S, torch.gather(S, 1, _candidate_index(N, z.device))


def info_nce(z1: torch.Tensor, z2: torch.Tensor, tau: float = 0.5, *, normalize: bool = True) -> torch.Tensor:
    """Two-view InfoNCE / NT-Xent (SimCLR, Chen et al. 2020).

    ``L = mean_i -log( exp(S[i,p(i)]/tau) / sum_{k != i} exp(S[i,k]/tau) )`` over the ``2N``
    anchors of ``cat(z1, z2)``, cosine similarities when ``normalize``. Shapes ``(N, d)`` each ->
    scalar. Equal, bit for bit, to WeiNCE with ``lambda = 0`` (both use
    :func:`two_view_candidates`).
    """
    tau = real("tau", tau, lo=0.0, lo_open=True)
    _, cand = two_view_candidates(z1, z2, normalize=normalize)
    target = torch.zeros(cand.shape[0], dtype=torch.long, device=cand.device)
    return F.cross_entropy(cand / tau, target)


def _named(setting: str, default_beta: float | None, name: str, doc: str):
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


SCL = _named("supervised", 0.0, "SCL", "Supervised contrastive loss: ``contrastive_loss(setting='supervised', beta=0)``.")
HSCL = _named("supervised", None, "HSCL", "Hard-negative SCL: ``contrastive_loss(setting='supervised', beta=beta)``, beta > 0.")
UCL = _named("unsupervised", 0.0, "UCL", "Unsupervised contrastive loss: ``contrastive_loss(setting='unsupervised', beta=0)``.")
HUCL = _named("unsupervised", None, "HUCL", "Hard-negative UCL: ``contrastive_loss(setting='unsupervised', beta=beta)``, beta > 0.")

#: method name -> (setting, whether beta > 0 is required)
METHODS = {
    "SCL": ("supervised", False),
    "HSCL": ("supervised", True),
    "UCL": ("unsupervised", False),
    "HUCL": ("unsupervised", True),
}
