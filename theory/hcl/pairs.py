"""The (anchor, positive) pairs of a batch, and the compact group ids they are built from.

Notation (docs/README.md#notation): a batch of ``B`` members, or ``R`` stacked runs of ``B``
members each (``labels`` ``(R, B)``); ``groups`` the integer ids that define positives (``labels``,
or ``positive_groups``). ``Pos(i) = {j : groups[j] == groups[i]}`` within the anchor's run, minus
``i`` itself when ``self_positive=False`` (docs/hcl.md#pairs-and-the-self-pair).

The pair order, used by ``reduction="none"`` and by the sampled estimator's draws
(docs/hcl.md#reductions): runs ascending, then anchors ascending, then positives ascending.

Group ids are relabelled compactly by sorting (never by a ``bincount`` over the raw values), so
labels such as ``{0, 10**8}`` or ``{0, 2**40}`` cost O(B log B) time and O(B) memory. Nothing here
reads tensor data on the host: only the final pair list, whose length ``P`` is data-dependent,
needs ``P`` (one implicit synchronisation inside ``repeat_interleave`` for device tensors).
"""

from __future__ import annotations

from typing import Any, NamedTuple

import torch

from theory.validation import as_tensor, integer_tensor

__all__ = ["Pairs", "positive_pairs"]


class Pairs(NamedTuple):
    """The ``P`` (anchor, positive) pairs of a batch, in pair order (docs/hcl.md#reductions).

    Attributes:
        run: ``(P,)`` run index ``r`` of each pair (all 0 for a single ``(B,)`` batch).
        anchor: ``(P,)`` anchor index ``i`` within its run.
        positive: ``(P,)`` positive index ``j`` within its run.
    """

    run: torch.Tensor
    anchor: torch.Tensor
    positive: torch.Tensor


class _Groups(NamedTuple):
    """Compact ids of ``R`` runs of ``B`` keys (flattened run-major to ``N = R B`` members).

    Attributes:
        ids: ``(N,)`` group id of each member, in ``[0, G)``; members of different runs never
            share an id.
        counts: ``(N,)`` size of group ``g`` at position ``g`` (zeros beyond ``G``).
        starts: ``(N,)`` first sorted position of group ``g`` at position ``g``.
        order: ``(N,)`` members sorted by (run, key, index), as flat (run-major) indices: group
            ``g`` occupies ``order[starts[g] : starts[g] + counts[g]]``, ascending.
        local: ``order`` as positions within the run (``order mod B``).
    """

    ids: torch.Tensor
    counts: torch.Tensor
    starts: torch.Tensor
    order: torch.Tensor
    local: torch.Tensor


def _compact(keys: torch.Tensor) -> _Groups:
    """Compact group ids of ``keys`` ``(R, B)`` int64, per run, by a stable sort (O(N log N))."""
    R, B = keys.shape
    N = R * B
    device = keys.device
    sorted_keys, local = torch.sort(keys, dim=1, stable=True)
    new = torch.ones(R, B, dtype=torch.bool, device=device)
    torch.ne(sorted_keys[:, 1:], sorted_keys[:, :-1], out=new[:, 1:])
    gid_sorted = torch.cumsum(new.view(-1), 0).sub_(1)  # every run starts a new group: ids never cross runs
    order = local.view(-1) if R == 1 else (local + torch.arange(R, device=device)[:, None] * B).view(-1)
    ids = torch.empty(N, dtype=torch.long, device=device).index_put_((order,), gid_sorted)
    one = torch.ones(1, dtype=torch.long, device=device).expand(N)
    counts = torch.zeros(N, dtype=torch.long, device=device).index_add_(0, gid_sorted, one)
    starts = torch.cumsum(counts, 0).sub_(counts)
    return _Groups(ids, counts, starts, order, local.view(-1))


def _pair_list(g: _Groups, self_positive: bool) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``(rows, cols, npos)``: the pairs (flat anchor, positive's position in the run), positives per member.

    ``rows`` ascending, ``cols`` ascending within a row; ``self_positive=False`` skips the anchor's
    own position in its group (no mask, no second pass).
    """
    N = g.ids.numel()
    device = g.ids.device
    npos = g.counts.index_select(0, g.ids)
    if not self_positive:
        npos = npos - 1
    rows = torch.repeat_interleave(torch.arange(N, device=device), npos)
    # Pair k of anchor a reads the sorted position starts[ids[a]] + k (the k-th member of its group).
    base = g.starts.index_select(0, g.ids).sub_(torch.cumsum(npos, 0).sub_(npos))
    pos = base.index_select(0, rows).add_(torch.arange(rows.numel(), device=device))
    if not self_positive:  # skip the anchor's own sorted position
        own = torch.empty(N, dtype=torch.long, device=device).index_put_(
            (g.order,), torch.arange(N, device=device)
        )
        pos = pos + (pos >= own.index_select(0, rows)).long()
    return rows, g.local.index_select(0, pos), npos


def positive_pairs(labels: Any, *, positive_groups: Any = None, self_positive: bool = True) -> Pairs:
    """The (anchor, positive) pairs of a batch or of ``R`` stacked runs, in pair order.

    The pairs over which :func:`theory.hcl.contrastive_loss` averages, and the order of its
    ``reduction="none"`` values (docs/hcl.md#reductions): ``Pos(i) = {j : groups[j] == groups[i]}``
    within the run (``groups`` = ``positive_groups`` if given, else ``labels``), without ``i``
    itself when ``self_positive=False``. Only equality of the ids matters (any integer values).

    Args:
        labels: ``(B,)`` or ``(R, B)`` integer labels (the input rule of docs/README.md#conventions).
        positive_groups: optional ids of the same shape defining positives instead of ``labels``.
        self_positive: the anchor is one of its own positives (the authors' choice).

    Returns:
        :class:`Pairs` ``(run, anchor, positive)``, each ``(P,)`` int64 on the device of ``labels``.

    Shape:
        ``(B,)`` or ``(R, B)`` -> three ``(P,)``.

    Raises:
        ValueError: non-integer ids, or ``positive_groups`` whose shape differs from ``labels``.
    """
    lab = integer_tensor(as_tensor(labels, "labels"), "labels")
    if lab.dim() not in (1, 2):
        raise ValueError(f"labels must have shape (B,) or (R, B), got {tuple(lab.shape)}")
    keys = lab
    if positive_groups is not None:
        keys = integer_tensor(
            as_tensor(positive_groups, "positive_groups", device=lab.device), "positive_groups"
        )
        if keys.shape != lab.shape:
            raise ValueError(
                f"positive_groups must have the shape of labels {tuple(lab.shape)}, got {tuple(keys.shape)}"
            )
    keys2 = keys.reshape(-1, keys.shape[-1])
    B = keys2.shape[1]
    rows, cols, _ = _pair_list(_compact(keys2), self_positive)
    return Pairs(rows // B if B else rows, rows % B if B else rows, cols)
