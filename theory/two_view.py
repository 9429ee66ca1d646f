"""The two-view (anchor, positive) losses by method name: where the experiments look them up.

:data:`TWO_VIEW_LOSSES` maps every method of :data:`theory.options.TWO_VIEW_METHODS` to its loss,
a function ``loss(z1, z2, *, tau, anchors=None) -> Tensor`` of two views ``(N, d)`` (InfoNCE,
:func:`theory.infonce.info_nce`; WeiNCE's core recipe, :func:`theory.weince.weince_loss`). The
synthetic engine and the real-data objective call :func:`two_view_loss`, so a new two-view loss
needs its function, its entry here and its row in :data:`theory.options.METHODS`
(CONTRIBUTING.md#how-to-add-a-loss). The real-data runs of WeiNCE use the module form
(:class:`theory.weince.WeiNCELoss`) for the released recipe's state and the gate diagnostics.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from theory.infonce import info_nce
from theory.options import TWO_VIEW_METHODS
from theory.validation import one_of
from theory.weince.loss import weince_loss

__all__ = ["TWO_VIEW_LOSSES", "two_view_loss"]

#: method name -> ``loss(z1, z2, *, tau, anchors=None)``.
TWO_VIEW_LOSSES: dict[str, Callable[..., torch.Tensor]] = {
    "InfoNCE": info_nce,
    "WeiNCE": weince_loss,
}


def two_view_loss(method: str, z1: Any, z2: Any, *, tau: float, anchors: Any = None) -> torch.Tensor:
    """The two-view loss of ``method`` on views ``z1``, ``z2`` (docs/weince.md#the-loss).

    Args:
        method: one of :data:`theory.options.TWO_VIEW_METHODS`.
        z1: first views ``(N, d)``.
        z2: second views ``(N, d)``.
        tau: temperature ``> 0``.
        anchors: optional indices of some of the ``2N`` anchors of ``cat(z1, z2)``: their terms,
            normalised as the whole batch's loss (docs/hcl.md#reference-batches-anchors).

    Returns:
        The scalar loss.

    Shape:
        ``z1``, ``z2`` ``(N, d)`` -> scalar.

    Raises:
        ValueError: an unknown method, and every error of the loss.
    """
    one_of("method", method, TWO_VIEW_METHODS)
    return TWO_VIEW_LOSSES[method](z1, z2, tau=tau, anchors=anchors)
