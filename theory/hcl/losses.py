"""Batch losses of the hard-negative paper: SCL / HSCL / UCL / HUCL as functions.

Jiang, Nguyen, Aeron, Ishwar, TMLR 2025 (arXiv 2311.05139); docs/hcl.md#the-batched-loss.
Notation (docs/README.md#notation): ``z`` embeddings ``(B, d)``, or ``(R, B, d)`` for ``R`` stacked
runs; ``labels`` ``(B,)`` or ``(R, B)``; ``beta`` hardness; ``tau`` temperature; ``K``
(``num_negatives``) negatives per (anchor, positive) pair; ``S = z z^T`` per run.

The batched loss, generalised over psi (docs/hcl.md#the-batched-loss):

    L = (1/P) sum_i sum_{j in Pos(i)} psi( {S[i, n_r] - S[i, j]}_{r=1..K} ),   n_r ~ q_i i.i.d.,

with ``q_i(n) ∝ exp(beta S[i, n])`` over the allowed negatives of anchor ``i`` and ``P`` the number
of (anchor, positive) pairs; the reductions of :data:`theory.options.REDUCTIONS` combine the
per-pair values differently (docs/hcl.md#reductions). ``estimator="sampled"`` is the authors'
Monte Carlo (K draws from ``q_i`` per pair); ``estimator="expectation"`` (deterministic) replaces
the K-sample average inside psi by its exact expectation under ``q_i``
(docs/hcl.md#the-two-estimators).

The run-batched kernel (docs/hcl.md#the-batched-kernel): a ``(B, d)`` batch is the ``R = 1`` case
of the ``(R, B, d)`` program: ``N = R B`` anchor rows, each against the ``B`` members of its own
run, one pair list over all runs, one stream seed for all runs (or one per run). Run ``r``'s value equals the
call on ``z[r]`` alone. The nn.Module forms are in :mod:`theory.hcl.modules`.

A reference batch (docs/hcl.md#reference-batches-anchors): with ``anchors`` (a ``(B, d)`` batch)
only the terms of those anchors are computed, against every member of the batch, and normalised
as the whole batch's loss, so that the values over a partition of the anchors add up to the loss
of the batch (the multi-GPU path: local anchors against the gathered batch).
"""

from __future__ import annotations

from typing import Any

import torch

from theory.hcl._estimators import Generators, _per_pair, _Reduction, _reduction, _Selection
from theory.hcl._options import _check_beta_range, _Options, _options, _scalar_beta
from theory.hcl.pairs import _compact, _pair_list
from theory.infonce import _anchor_index
from theory.options import HCL_TAU, MARGIN, NUM_NEGATIVES
from theory.validation import (
    as_float_tensor,
    as_tensor,
    check_embeddings,
    check_label_range,
    integer_tensor,
)

__all__ = ["contrastive_loss", "two_view_contrastive_loss"]


def contrastive_loss(
    z: torch.Tensor,
    labels: torch.Tensor,
    *,
    setting: str,
    beta: float | torch.Tensor = 0.0,
    tau: float = HCL_TAU,
    psi: str = "mean",
    estimator: str = "expectation",
    num_negatives: int = NUM_NEGATIVES,
    margin: float = MARGIN,
    reduction: str = "mean",
    self_positive: bool = True,
    self_negative: bool = True,
    generator: Generators = None,
    num_classes: int | None = None,
    detach_weights: bool = True,
    positive_groups: torch.Tensor | None = None,
    anchors: torch.Tensor | None = None,
    check_inputs: bool = True,
) -> torch.Tensor:
    """SCL / HSCL (``setting="supervised"``) or UCL / HUCL (``"unsupervised"``) batch loss.

    ``L = (1/P) sum_{(i, j)} psi({S[i, n_r] - S[i, j]}_r)`` with ``n_r ~ q_i(n) ∝ exp(beta S[i, n])``
    over the allowed negatives: the authors' batched loss for any psi (arXiv 2311.05139;
    docs/hcl.md#the-batched-loss), for one batch or ``R`` stacked runs at once
    (docs/hcl.md#the-batched-kernel).

    Args:
        z: embeddings ``(B, d)``, or ``(R, B, d)`` for ``R`` runs (already normalised by the
            model, if at all). float16/bfloat16 inputs are computed in float32; float64 stays
            float64; integer inputs are promoted (docs/README.md#conventions).
        labels: ``(B,)`` integer labels, or ``(R, B)`` (per run) or ``(B,)`` (shared) for a 3-D
            ``z``. Only their equality matters (any integer values; relabelled compactly).
        setting: ``"supervised"``: negatives are batch members with another label;
            ``"unsupervised"``: negatives are drawn from the whole batch (class collisions).
        beta: hardness ``>= 0`` of the tilt ``q_i(n) ∝ exp(beta z_i.z_n)``; 0 gives SCL / UCL. A
            scalar, a ``(B,)`` tensor (one per anchor) for a 2-D ``z``, or an ``(R,)`` (one per
            run) or ``(R, B)`` tensor for a 3-D ``z``. ``beta + 1/tau`` must be a finite number
            of the compute dtype (``beta`` up to about 3.4e38 for float32 and half embeddings,
            1.8e308 for float64); any such ``beta`` is computed correctly, up to the
            hardest-negative limit (docs/hcl.md#numerical-safeguards).
        tau: temperature ``> 0``; psi is applied to ``t / tau``.
        psi: ``"mean"``, ``"sum"`` or ``"triplet"`` (docs/hcl.md#the-psi-family).
        estimator: ``"expectation"`` (exact, deterministic) or ``"sampled"`` (K draws per pair).
        num_negatives: K, the number of negatives per (anchor, positive) pair.
        margin: triplet margin ``>= 0`` (``psi="triplet"`` only).
        reduction: ``"mean"`` (over the P pairs, the authors' normalisation), ``"sum"``,
            ``"none"`` (the per-pair values in pair order, see
            :func:`theory.hcl.positive_pairs`) or ``"anchor_mean"`` (SupCon's per-anchor average);
            docs/hcl.md#reductions.
        self_positive: the anchor counts as one of its own positives (authors' code).
        self_negative: unsupervised only: the anchor may be drawn as its own negative.
        generator: the sampled estimator's randomness (docs/hcl.md#sampled-estimator): one
            ``torch.Generator`` gives one seed per call (:func:`theory.hcl.draw_seed`) and draw
            ``k`` of pair ``p`` (pair order over all runs) is uniform ``p K + k`` of that seed's
            SplitMix64 stream (:func:`theory.hcl.stream_uniforms`); a sequence of ``R``
            generators gives one seed per run and counts run ``r``'s pairs from 0 (so run ``r``
            equals the separate call with ``generator[r]``; it reads the per-run pair counts on
            the host). ``None``: torch's default generator.
        num_classes: optional ``C``; labels must then lie in ``[0, C)`` (checked with
            ``check_inputs``).
        detach_weights: no gradient through ``q_i`` (authors' code). ``False`` differentiates the
            exact expectation through the weights too (expectation estimator only).
        positive_groups: optional integer ids of the shape of ``labels`` defining positives
            instead of ``labels`` (members with the same id are positives), e.g. instance ids of
            two augmented views, while ``labels`` still define the supervised negatives. Members of
            one group must share a label.
        anchors: optional ``(b,)`` sorted, unique integer row indices of a 2-D ``z`` (the
            reference batch; docs/hcl.md#reference-batches-anchors). Only the terms of those
            anchors are computed, against every member of the batch (similarities ``(b, B)``), and
            normalised as the loss of the whole batch: ``"mean"`` divides by the ``P`` of the
            whole batch, ``"anchor_mean"`` by its number of anchors with a positive, ``"sum"``
            sums, ``"none"`` returns the selected anchors' pairs in pair order. The values (and
            gradients) over a partition of the anchors add up to the loss of the batch. The
            sampled estimator's pairs keep the stream counters of their places among all ``P``
            pairs, so the draws are those of the call on the whole batch. The checks of the batch (labels,
            negatives, ``z``) still cover the whole batch.
        check_inputs: run the data-dependent checks (finite ``z`` whose similarities cannot
            overflow, label range, a tensor ``beta`` finite and ``>= 0``, consistent groups, no
            anchor with a pair but no negative, no run without a pair, sorted, unique ``anchors``
            in range). They read tensor data on the host (a synchronisation for device tensors);
            with ``False`` the forward pass reads nothing (the pair count ``P`` aside) and an
            invalid input gives NaN or inf.

    Returns:
        Reductions ``"mean"``, ``"sum"``, ``"anchor_mean"``: a scalar for a 2-D ``z``, ``(R,)``
        for a 3-D ``z``. ``"none"``: ``(P,)`` per-pair values (all runs, in pair order; with
        ``anchors``, the values of the selected anchors' pairs only).

    Shape:
        ``z`` ``(B, d)`` or ``(R, B, d)``; ``labels`` ``(B,)`` or ``(R, B)``; ``anchors`` ``(b,)``
        -> ``()`` or ``(R,)`` (``(P,)`` with ``reduction="none"``).

    Raises:
        ValueError: an invalid option (named), ``beta`` too large for the compute dtype (named),
            a shape mismatch, an empty batch, labels out of range, no (anchor, positive) pair, an anchor with a pair but an empty negative set
            (naming the run and the anchor), ``z`` non-finite or too large for its dtype, or
            invalid ``anchors`` (not integers, not 1-D, empty, unsorted, repeated, out of range,
            or given with a 3-D ``z``).
    """
    opts = _options(
        setting=setting,
        tau=tau,
        psi=psi,
        estimator=estimator,
        num_negatives=num_negatives,
        margin=margin,
        reduction=reduction,
        self_positive=self_positive,
        self_negative=self_negative,
        detach_weights=detach_weights,
        num_classes=num_classes,
        check_inputs=check_inputs,
    )
    return _loss(opts, z, labels, beta, positive_groups=positive_groups, generator=generator, anchors=anchors)


def _run_ids(x: Any, name: str, R: int, B: int, single: bool, device: torch.device) -> torch.Tensor:
    """Integer ids ``(R, B)`` from ``(B,)`` (or ``(R, B)`` for stacked runs); shape errors name ``name``."""
    t = integer_tensor(as_tensor(x, name, device=device), name)
    if single:
        if t.shape != (B,):
            raise ValueError(f"{name} must have shape ({B},) to match z, got {tuple(t.shape)}")
        return t[None]
    if t.shape == (B,):
        return t[None].expand(R, B)
    if t.shape != (R, B):
        raise ValueError(f"{name} must have shape ({R}, {B}) or ({B},) to match z, got {tuple(t.shape)}")
    return t


def _beta_rows(
    beta: Any, R: int, B: int, single: bool, z: torch.Tensor, check: bool, tau: float
) -> torch.Tensor:
    """A tensor ``beta`` as one value per anchor row ``(R B,)`` in ``z``'s dtype and device."""
    b = as_tensor(beta, "beta", device=z.device)
    if b.is_complex() or b.dtype == torch.bool:
        raise ValueError(f"beta must be real, got dtype {b.dtype}")
    shapes = [(B,)] if single else [(R,), (R, B)]
    if tuple(b.shape) not in shapes:
        raise ValueError(
            f"beta must be a scalar or a tensor of shape {' or '.join(map(str, shapes))}, got {tuple(b.shape)}"
        )
    if check:  # on the given values, before the cast to z's dtype (which could round them to inf)
        b64 = b.detach().to(torch.float64)
        ok, top = torch.stack([(torch.isfinite(b64).all() & (b64 >= 0).all()).double(), b64.max()]).tolist()
        if not ok:
            raise ValueError("beta must be finite and >= 0 for every run and anchor")
        _check_beta_range(top, z.dtype, tau, per_anchor=True)
    b = b.to(z.dtype)
    if not single and b.shape == (R,):
        b = b[:, None].expand(R, B)
    return b.reshape(-1)


def _where(run: int, single: bool) -> str:
    return "" if single else f"run {run}: "


def _loss(
    opts: _Options,
    z: Any,
    labels: Any,
    beta: Any,
    *,
    positive_groups: Any = None,
    generator: Generators = None,
    anchors: Any = None,
) -> torch.Tensor:
    """The loss for validated options; every call path (functions, modules) goes through here."""
    zt = as_float_tensor(z, "z")
    if zt.dim() not in (2, 3):
        raise ValueError(f"z must be a 2-D (B, d) or 3-D (R, B, d) tensor, got shape {tuple(zt.shape)}")
    single = zt.dim() == 2
    z3 = zt[None] if single else zt
    R, B, _ = z3.shape
    if B == 0 or R == 0:
        raise ValueError(f"z must hold at least one embedding per run (B >= 1), got shape {tuple(zt.shape)}")
    if anchors is not None and not single:
        raise ValueError(
            "anchors are supported for a 2-D z (one reference batch) only, got a 3-D z of "
            f"{R} stacked runs; call each run separately"
        )
    index = None if anchors is None else _anchor_index(anchors, B, z3.device, check_values=opts.check_inputs)
    beta_f = _scalar_beta(beta)
    if beta_f is not None:
        _check_beta_range(beta_f, z3.dtype, opts.tau)
    beta_t = None if beta_f is not None else _beta_rows(beta, R, B, single, z3, opts.check_inputs, opts.tau)
    lab = _run_ids(labels, "labels", R, B, single, z3.device)
    grp = (
        None
        if positive_groups is None
        else _run_ids(positive_groups, "positive_groups", R, B, single, z3.device)
    )
    check = opts.check_inputs
    if check:
        check_label_range(lab, "labels", opts.num_classes)
        check_embeddings(z3, "z", scale=1.0 / opts.tau)
    N = R * B
    by_label = _compact(lab.reshape(R, B))
    by_group = by_label if grp is None else _compact(grp.reshape(R, B))
    rows, cols, npos = _pair_list(by_group, opts.self_positive)
    if rows.numel() == 0:
        raise ValueError(
            "no (anchor, positive) pair in the batch: every positive group is a singleton and "
            "self_positive=False; the loss is undefined"
        )
    lab_flat = lab.reshape(-1)
    pair_flat = rows * B + cols  # cols: the positive's position within the run
    if check and grp is not None:
        same_run_cols = rows - rows % B + cols  # flat index of the positive
        if bool((lab_flat.index_select(0, rows) != lab_flat.index_select(0, same_run_cols)).any()):
            raise ValueError("positive_groups must not put members with different labels in one group")
    # The excluded negatives, as flat positions of the (N, B) similarity rows.
    if opts.setting == "supervised":
        if grp is None and opts.self_positive:  # the excluded negatives are the pairs themselves
            blocked: torch.Tensor | None = pair_flat
        else:
            same_rows, same_cols, _ = _pair_list(by_label, True)
            blocked = same_rows * B + same_cols
        n_allowed = B - by_label.counts.index_select(0, by_label.ids)
    else:
        a = torch.arange(N, device=z3.device)
        blocked = None if opts.self_negative else a * B + a % B  # the anchors themselves
        n_allowed = torch.full((N,), B if opts.self_negative else B - 1, device=z3.device)
    if check:
        _check_negatives(n_allowed, npos, lab_flat, R, B, single, opts.setting)
        if not single:
            empty = npos.view(R, B).sum(dim=1) == 0
            if bool(empty.any()):
                r = int(torch.nonzero(empty)[0])
                raise ValueError(
                    f"run {r} has no (anchor, positive) pair (every positive group a singleton and "
                    "self_positive=False); its loss is undefined: leave the run out of the stack"
                )
    red = _reduction(opts.reduction, rows, npos, R, B, z3.dtype)
    if index is None:
        out = _per_pair(opts, z3, rows, pair_flat, blocked, n_allowed, beta_f, beta_t, npos, generator, red)
    else:
        sel, rows, pair_flat, blocked, red = _select(index, B, rows, cols, blocked, red)
        n_allowed = n_allowed.index_select(0, index)
        beta_t = None if beta_t is None else beta_t.index_select(0, index)
        out = _per_pair(
            opts, z3, rows, pair_flat, blocked, n_allowed, beta_f, beta_t, npos, generator, red, sel
        )
    return out[0] if single and red is not None else out


def _select(
    anchors: torch.Tensor,
    B: int,
    rows: torch.Tensor,
    cols: torch.Tensor,
    blocked: torch.Tensor | None,
    red: _Reduction | None,
) -> tuple[_Selection, torch.Tensor, torch.Tensor, torch.Tensor | None, _Reduction | None]:
    """The pairs, excluded negatives and reduction weights of ``anchors`` in their ``(b, B)`` rows.

    From those of the whole batch (``R = 1``): the selected anchors' pairs keep their pair order
    and their weights (normalised over the whole batch); rows are renumbered ``0..b-1``.
    Returns ``(selection, rows, pair_flat, blocked, red)``.
    """
    local = torch.full((B,), -1, dtype=torch.long, device=anchors.device)
    local[anchors] = torch.arange(anchors.shape[0], device=anchors.device)
    row_local = local.index_select(0, rows)
    pairs = torch.nonzero(row_local >= 0).squeeze(1)  # the selected anchors' pairs, in pair order
    sel_rows = row_local.index_select(0, pairs)
    sel_flat = sel_rows * B + cols.index_select(0, pairs)
    sel_blocked = None
    if blocked is not None:
        blocked_row = local.index_select(0, torch.div(blocked, B, rounding_mode="floor"))
        kept = torch.nonzero(blocked_row >= 0).squeeze(1)
        sel_blocked = blocked_row.index_select(0, kept) * B + blocked.index_select(0, kept) % B
    sel_red = None
    if red is not None:
        sel_red = _Reduction(red.run.index_select(0, pairs), red.weight.index_select(0, pairs), red.num_runs)
    selection = _Selection(anchors, pairs)
    return selection, sel_rows, sel_flat, sel_blocked, sel_red


def _check_negatives(
    n_allowed: torch.Tensor,
    npos: torch.Tensor,
    labels: torch.Tensor,
    R: int,
    B: int,
    single: bool,
    setting: str,
) -> None:
    starving = (n_allowed == 0) & (npos > 0)
    if bool(starving.any()):
        a = int(torch.nonzero(starving)[0])
        r, i = divmod(a, B)
        raise ValueError(
            f"{_where(r, single)}anchor {i} (label {int(labels[a])}) has an empty negative set in "
            f"setting={setting!r} (a batch with a single class?); the loss is undefined"
            + ("" if single else ": leave the run out of the stack")
        )


def two_view_contrastive_loss(z1: Any, z2: Any, labels: Any, **kwargs: Any) -> torch.Tensor:
    """SCL / UCL family on two augmented views with labels (docs/hcl.md#instance-positives-and-two-views).

    The embeddings ``cat(z1, z2)`` (along the batch axis) with labels ``cat(labels, labels)`` go
    through :func:`contrastive_loss`; each view's other view is then one of its positives
    (SupCon-style), and the pair order is that of the concatenated batch. ``anchors`` (in
    ``kwargs``) index the ``2B`` rows of ``cat(z1, z2)`` (row ``i < B`` is ``z1[i]``, row
    ``B + i`` is ``z2[i]``).

    Args:
        z1: first views ``(B, d)`` or ``(R, B, d)``.
        z2: second views, the shape of ``z1``.
        labels: ``(B,)`` (or ``(R, B)`` for stacked runs).
        **kwargs: those of :func:`contrastive_loss` (``setting`` required).

    Returns:
        As :func:`contrastive_loss` on the ``2B`` embeddings.

    Raises:
        ValueError: ``z1`` and ``z2`` differ in shape, and every error of :func:`contrastive_loss`.
    """
    a = as_float_tensor(z1, "z1")
    b = as_float_tensor(z2, "z2")
    if a.shape != b.shape or a.dim() not in (2, 3):
        raise ValueError(
            f"z1 and z2 must be tensors of the same shape (B, d) or (R, B, d), got {tuple(a.shape)} and {tuple(b.shape)}"
        )
    if kwargs.get("check_inputs", True):
        for name, t in (("z1", a), ("z2", b)):
            if not bool(torch.isfinite(t).all()):
                raise ValueError(f"{name} must be finite (found NaN or inf)")
    lab = as_tensor(labels, "labels", device=a.device)
    return contrastive_loss(torch.cat([a, b], dim=-2), torch.cat([lab, lab], dim=-1), **kwargs)
