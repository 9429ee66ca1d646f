"""Per-epoch collapse metrics of a real-data encoder: the one adapter to ``theory.collapse``.

:func:`epoch_metrics` embeds the training split in eval mode without augmentation (the
deterministic view the run trains on: the HCL authors' normalisation for label views, ``x / 255``
for SimCLR views), streams the projections ``z`` through
:class:`theory.collapse.ClassStatsAccumulator` (pass 1: class means, within-class scatter; pass 2
over the same batches: distances to the class means) and returns one row of metric columns
(docs/metrics.md, docs/realdata.md):

* the "paper" variant of the HCL authors: ``unit_norm``, ``zero_sum``, ``etf_mean``, ``etf_max``,
  ``within_class_variation``; the class-mean spectrum ``log(sigma_i / sigma_max)``, its
  ``spectrum_min`` (over the first ``min(C - 1, d)`` values) and the numerical ranks
  ``numerical_rank_1e2`` / ``numerical_rank_1e4`` (how many ``sigma_i / sigma_max`` exceed
  1e-2 / 1e-4);
* the standard ``nc1``, ``nc2_equinorm``, ``nc2_equiangularity``, ``etf_error``,
  ``effective_rank`` (of the class-mean matrix), ``rankme`` (of ``Z``), ``mean_norm``;
* NCM accuracy as the authors (raw inner product with the un-normalised training class means):
  ``ncm_acc`` / ``ncm_top5`` on the test split, ``train_ncm_acc`` on the training split.

:func:`closed_form_optimum` gives the NC value of the training loss (``theory.hcl.optima``).
Every call into :mod:`theory.collapse` and :mod:`theory.hcl.optima` made by the real-data package
lives here.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch import nn

from realdata.evaluation.features import extract_features, ncm_classify

__all__ = ["METRIC_COLUMNS", "EpochMetrics", "epoch_metrics", "closed_form_optimum", "encode_means"]

#: Metric columns of a results row, in order (after ``run_key`` and ``epoch``).
METRIC_COLUMNS = (
    "loss",
    "skipped_steps",
    "optimum",
    "gap_to_optimum",
    "unit_norm",
    "zero_sum",
    "etf_mean",
    "etf_max",
    "within_class_variation",
    "nc1",
    "nc2_equinorm",
    "nc2_equiangularity",
    "etf_error",
    "effective_rank",
    "rankme",
    "spectrum_min",
    "numerical_rank_1e2",
    "numerical_rank_1e4",
    "mean_norm",
    "ncm_acc",
    "ncm_top5",
    "train_ncm_acc",
    "lambda_mean",
    "lambda_rho_mean",
    "lambda_aic_mean",
    "daic_median",
    "beta_t",
    "epoch_seconds",
    "views_per_second",
)


def _safe(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> float:
    try:
        return float(fn(*args, **kwargs))
    except (ValueError, RuntimeError):
        return float("nan")


@dataclass
class EpochMetrics:
    """The collapse metrics of one state and its class means / spectrum."""

    values: dict[str, float]
    class_means: np.ndarray
    spectrum: np.ndarray


def encode_means(mu: np.ndarray) -> str:
    """The ``class_means`` cell: JSON of the ``(C, d)`` list (figures decode it for spectra)."""
    return json.dumps(np.asarray(mu, dtype=np.float64).tolist())


def epoch_metrics(
    model: nn.Module,
    dataset: Any,
    *,
    preprocess: Callable[[torch.Tensor], torch.Tensor],
    device: torch.device,
    batch_size: int = 1024,
    autocast_bf16: bool = False,
) -> EpochMetrics:
    """Collapse metrics of ``model`` on ``dataset`` (see the module docstring).

    Args:
        model: returns ``(h, z)``.
        dataset: an :class:`realdata.datasets.ImageDataset` (any device).
        preprocess: the deterministic training view (uint8 batch -> model input).
        device: where the model runs.
        batch_size: images per forward pass (and per accumulator batch).
        autocast_bf16: forward under bf16 autocast (``z`` comes back float32).

    Returns:
        :class:`EpochMetrics`.

    Raises:
        FloatingPointError: a non-finite embedding (the run must be recorded as failed).
    """
    from theory import collapse as col

    C = int(dataset.num_classes)
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
    z, y = tr.z, tr.labels
    assert y is not None and te.labels is not None
    acc = col.ClassStatsAccumulator(num_classes=C)
    chunks = list(range(0, z.shape[0], batch_size))
    for s in chunks:
        acc.update(z[s : s + batch_size], y[s : s + batch_size])
    for s in chunks:
        acc.update_distances(z[s : s + batch_size], y[s : s + batch_size])
    mu = acc.class_means()
    cond = col.paper_conditions(mu)
    d = mu.shape[1]
    r = min(C - 1, d)
    spec = col.class_mean_spectrum(mu)
    head = spec[:r]
    out = {
        "unit_norm": float(cond["unit_norm"]),
        "zero_sum": float(cond["zero_sum"]),
        "etf_mean": float(cond["etf_mean"]),
        "etf_max": float(cond["etf_max"]),
        "within_class_variation": _safe(acc.within_class_variation),
        "nc1": _safe(acc.nc1),
        "nc2_equinorm": _safe(col.nc2_equinorm, mu),
        "nc2_equiangularity": _safe(col.nc2_equiangularity, mu),
        "etf_error": _safe(col.etf_error, mu),
        "effective_rank": _safe(col.effective_rank, mu),
        "rankme": _safe(col.rankme, z),
        "spectrum_min": float(head[-1]) if r >= 1 else float("nan"),
        "numerical_rank_1e2": float((head > math.log(1e-2)).sum()),
        "numerical_rank_1e4": float((head > math.log(1e-4)).sum()),
        "mean_norm": float(torch.linalg.vector_norm(z.double(), dim=1).mean()),
    }
    test = ncm_classify(z, y, te.z, te.labels, num_classes=C)
    train = ncm_classify(z, y, z, y, num_classes=C)
    out.update(ncm_acc=test.top1, ncm_top5=test.top5, train_ncm_acc=train.top1)
    return EpochMetrics(out, mu.cpu().numpy(), np.asarray(spec, dtype=np.float64))


def closed_form_optimum(config: Any, num_classes: int) -> float:
    """NC value of the training loss of a resolved :class:`realdata.training.config.TrainConfig`.

    L*_SCL for SCL/HSCL (attained at NC for every beta), L*_UCL for UCL/HUCL (the binomial value
    for the sampled estimator, its ``K -> infinity`` plug-in for the expectation estimator; a lower
    bound, not attained, for HUCL at beta > 0); NaN for InfoNCE/WeiNCE, for
    ``normalization="none"`` and for ``d < C - 1`` (docs/hcl.md).
    """
    c = config.resolved(num_classes)
    C = int(num_classes)
    if c.setting is None or c.normalization == "none" or c.out_dim is None:
        return float("nan")
    if c.out_dim < C - 1:
        return float("nan")
    from theory.hcl import plugin_value, scl_optimum, ucl_optimum

    kw = dict(psi="mean", tau=float(c.tau), num_negatives=c.num_negatives)
    if c.setting == "supervised":
        return float(scl_optimum(C, **kw))  # type: ignore[arg-type]
    if c.estimator == "sampled":
        return float(ucl_optimum(C, **kw))  # type: ignore[arg-type]
    return float(plugin_value(1.0 / C, C, **kw))  # type: ignore[arg-type]
