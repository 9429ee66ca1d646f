"""The metric row of a training run: every NC / DC metric of one evaluated state, one name each.

Both experiment stacks (the synthetic engine and the real-data loop) record, at every recorded
epoch, the row :func:`metric_row` computes from the embeddings of the training set (and of the
held-out set for NCM accuracy). Its columns, in order, are :data:`ROW_COLUMNS` and then the
class-mean spectrum ``spectrum_0 .. spectrum_{r-1}`` (:func:`spectrum_columns`,
``r = min(C - 1, d)``); docs/metrics.md#columns-of-the-result-tables defines each:

* the "paper" conditions of the HCL authors (Jiang et al., arXiv 2311.05139): ``unit_norm``,
  ``zero_sum``, ``etf_mean``, ``etf_max`` (:func:`theory.collapse.paper_conditions`) and
  ``within_class_variation``;
* the standard metrics ``nc1`` (Papyan et al. 2020), ``nc2_equinorm``, ``nc2_equiangularity``,
  ``etf_error`` (Zhu et al. 2021);
* ranks and spectra: ``effective_rank`` of the class-mean matrix (Roy & Vetterli 2007),
  ``rankme`` of ``z`` (Garrido et al. 2023), the numerical ranks ``rank_1e-2`` and ``rank_1e-4``
  of the centred class means (Dimensional Collapse as a count, :func:`numerical_ranks`),
  ``spectrum_min`` and the whole spectrum (the authors' DC curve,
  :func:`theory.collapse.class_mean_spectrum`);
* ``mean_norm`` (mean row norm of ``z``) and nearest-class-mean accuracy with the authors'
  raw inner product: ``ncm_acc`` and ``ncm_top5`` on the held-out set (NaN without one),
  ``train_ncm_acc`` on the training set.

Every metric is computed without gradient in float64. A metric that is undefined at a state
(e.g. NC1 when all class means coincide) is NaN. To add a column: its function in this
subpackage, its name in :data:`ROW_COLUMNS` and its line in :func:`metric_row` (and its
definition in docs/metrics.md).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt
import torch

from theory.collapse._geometry import pow2_scale, row_norms, safe_mean
from theory.collapse.paper import class_mean_spectrum, ncm_accuracy, paper_conditions, within_class_variation
from theory.collapse.rank import effective_rank, rankme
from theory.collapse.standard import etf_error, nc1, nc2_equiangularity, nc2_equinorm
from theory.collapse.stats import class_means

__all__ = [
    "RANK_THRESHOLDS",
    "RANK_COLUMNS",
    "ROW_COLUMNS",
    "NCM_TOP_K",
    "numerical_ranks",
    "spectrum_columns",
    "MetricRow",
    "metric_row",
]

#: Relative thresholds t of the numerical rank ``#{i : s_i / s_1 > t}`` of the centred class means.
RANK_THRESHOLDS = (1e-2, 1e-4)
#: The columns of the numerical ranks at :data:`RANK_THRESHOLDS`.
RANK_COLUMNS = ("rank_1e-2", "rank_1e-4")
#: ``k`` of ``ncm_top5`` (``min(k, C)``: every point is correct when ``C <= k``).
NCM_TOP_K = 5
#: The metric columns of a row, in order (then ``spectrum_i``, :func:`spectrum_columns`).
ROW_COLUMNS = (
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
    *RANK_COLUMNS,
    "spectrum_min",
    "mean_norm",
    "ncm_acc",
    "ncm_top5",
    "train_ncm_acc",
)


def numerical_ranks(mu: torch.Tensor, thresholds: tuple[float, ...] = RANK_THRESHOLDS) -> list[int]:
    """Numerical ranks of the centred class means at relative thresholds.

    ``r_t = #{i <= min(C-1, d) : s_i / s_1 > t}`` with ``s_1 >= s_2 >= ...`` the singular values
    of the class-mean matrix centred by its average (the centring of the authors' spectrum):
    **singular values**, not the covariance eigenvalues ``s_i^2 / (C - 1)`` of the spectrum
    columns, so ``t = 1e-2`` is ``log(sigma_i / sigma_max) > 2 log(1e-2) = -9.21`` on the authors'
    curve (docs/metrics.md#numerical-ranks-rank_1e-2-and-rank_1e-4). ``C - 1`` at a simplex ETF
    with ``d >= C - 1``; 0 when every mean coincides.

    Shape:
        ``mu`` ``(C, d)`` -> a list of ``len(thresholds)`` ints.
    """
    m = mu.to(torch.float64)
    m = m / pow2_scale(m)  # ranks are scale-invariant (docs/metrics.md#scale)
    m = m - m.mean(dim=0, keepdim=True)
    s = torch.linalg.svdvals(m)[: min(m.shape[0] - 1, m.shape[1])]
    if s.numel() == 0 or not float(s[0]) > 0:
        return [0 for _ in thresholds]
    ratio = s / s[0]
    return [int((ratio > t).sum()) for t in thresholds]


def spectrum_columns(num_classes: int, d: int) -> list[str]:
    """The names ``spectrum_0 .. spectrum_{r-1}`` of the spectrum columns, ``r = min(C - 1, d)``."""
    return [f"spectrum_{i}" for i in range(min(num_classes - 1, d))]


@dataclass(frozen=True)
class MetricRow:
    """The metric row of one state.

    Attributes:
        values: :data:`ROW_COLUMNS` then the ``spectrum_i`` columns, as floats (NaN: undefined).
        class_means: the ``(C, d)`` float64 class means of the training embeddings.
        spectrum: the whole class-mean spectrum ``log(sigma_i / sigma_1)``, length ``d``.
    """

    values: dict[str, float]
    class_means: npt.NDArray[np.float64]
    spectrum: npt.NDArray[np.float64]


def _safe(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> float:
    """``float(fn(...))``, NaN where the metric is undefined at this state."""
    try:
        return float(fn(*args, **kwargs))
    except (ValueError, torch.linalg.LinAlgError):
        return math.nan


def metric_row(
    z: torch.Tensor,
    labels: torch.Tensor,
    num_classes: int,
    test_z: torch.Tensor | None = None,
    test_labels: torch.Tensor | None = None,
) -> MetricRow:
    """Every metric of the row (the module docstring) of training embeddings ``z``.

    Args:
        z: the (normalised) training embeddings ``(N, d)``.
        labels: their labels ``(N,)`` in ``[0, C)``; every class present.
        num_classes: ``C``.
        test_z: held-out embeddings ``(M, d)`` for ``ncm_acc`` / ``ncm_top5`` (NaN without).
        test_labels: their labels ``(M,)``.

    Returns:
        A :class:`MetricRow`.

    Shape:
        ``z`` ``(N, d)``, ``labels`` ``(N,)``; ``test_z`` ``(M, d)``, ``test_labels`` ``(M,)``.
    """
    with torch.no_grad():
        z64 = z.detach().to(torch.float64)
        mu = torch.as_tensor(class_means(z64, labels, num_classes))
        cond = paper_conditions(mu)
        C, d = mu.shape
        r = min(C - 1, d)
        spectrum = class_mean_spectrum(mu)
        head = {name: float(v) for name, v in zip(spectrum_columns(C, d), spectrum[:r], strict=True)}
        values: dict[str, float] = {
            "unit_norm": cond["unit_norm"],
            "zero_sum": cond["zero_sum"],
            "etf_mean": cond["etf_mean"],
            "etf_max": cond["etf_max"],
            "within_class_variation": within_class_variation(z64, labels, num_classes),
            "nc1": _safe(nc1, z64, labels, num_classes),
            "nc2_equinorm": _safe(nc2_equinorm, mu),
            "nc2_equiangularity": _safe(nc2_equiangularity, mu),
            "etf_error": _safe(etf_error, mu),
            "effective_rank": _safe(effective_rank, mu),
            "rankme": _safe(rankme, z64),
        }
        values.update(zip(RANK_COLUMNS, (float(v) for v in numerical_ranks(mu)), strict=True))
        values["spectrum_min"] = head[f"spectrum_{r - 1}"] if r >= 1 else math.nan
        values["mean_norm"] = safe_mean(row_norms(z64, "z"), "z", "mean_norm")
        if test_z is not None and test_labels is not None and test_z.shape[0] > 0:
            t64 = test_z.detach().to(torch.float64)
            values["ncm_acc"] = _safe(ncm_accuracy, z64, labels, t64, test_labels, num_classes=num_classes)
            values["ncm_top5"] = _safe(
                ncm_accuracy, z64, labels, t64, test_labels, top_k=min(NCM_TOP_K, C), num_classes=num_classes
            )
        else:
            values["ncm_acc"] = values["ncm_top5"] = math.nan
        values["train_ncm_acc"] = _safe(ncm_accuracy, z64, labels, z64, labels, num_classes=num_classes)
        values = {c: values[c] for c in ROW_COLUMNS} | head
    return MetricRow(values, mu.cpu().numpy(), np.asarray(spectrum, dtype=np.float64))
