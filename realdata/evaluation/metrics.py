"""The metric row of a real-data encoder at a recorded epoch (``theory.collapse.metric_row``).

:func:`epoch_metrics` embeds the training and test splits in eval mode without augmentation (the
deterministic view the run trains on: the HCL authors' normalisation for label views, ``x / 255``
for SimCLR views) and computes the metric row of the projections ``z`` of the training split
(:func:`theory.collapse.metric_row`, the row of both experiment stacks; docs/metrics.md and
docs/realdata.md): the paper's conditions, NC1-NC2, ranks and the class-mean spectrum, and NCM
accuracy as the authors (raw inner product with the un-normalised training class means):
``ncm_acc`` / ``ncm_top5`` on the test split, ``train_ncm_acc`` on the training split.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch import nn

from realdata.evaluation.features import extract_features
from theory.collapse import MetricRow, metric_row

__all__ = ["epoch_metrics"]


def epoch_metrics(
    model: nn.Module,
    dataset: Any,
    *,
    preprocess: Callable[[torch.Tensor], torch.Tensor],
    device: torch.device,
    batch_size: int = 1024,
    autocast_bf16: bool = False,
) -> MetricRow:
    """The metric row of ``model`` on ``dataset`` (see the module docstring).

    Args:
        model: returns ``(h, z)``.
        dataset: an :class:`realdata.datasets.ImageDataset` (any device).
        preprocess: the deterministic training view (uint8 batch -> model input).
        device: where the model runs.
        batch_size: images per forward pass.
        autocast_bf16: forward under bf16 autocast (``z`` comes back float32).

    Returns:
        The :class:`theory.collapse.MetricRow` (values, class means, spectrum).

    Raises:
        FloatingPointError: a non-finite embedding (the run must be recorded as failed).
    """
    kw = dict(
        batch_size=batch_size,
        device=device,
        preprocess=preprocess,
        autocast_bf16=autocast_bf16,
        progress=False,
    )
    tr = extract_features(model, dataset.train.images, dataset.train.labels, **kw)  # type: ignore[arg-type]
    te = extract_features(model, dataset.test.images, dataset.test.labels, **kw)  # type: ignore[arg-type]
    for name, f in (("train", tr), ("test", te)):
        if not bool(torch.isfinite(f.z).all()) or not bool(torch.isfinite(f.h).all()):
            raise FloatingPointError(f"non-finite embeddings on the {name} split")
    assert tr.labels is not None and te.labels is not None
    return metric_row(tr.z, tr.labels, int(dataset.num_classes), te.z, te.labels)
