"""Streaming per-class statistics for datasets too large to hold in memory.

Chan, Golub & LeVeque (1979) pairwise merges of per-class means and scatter; the covariances are
then formed by the same kernel as the batch metrics (:mod:`theory.collapse.stats`) and NC1 / CDNV
by the same functions (:mod:`theory.collapse.standard`). Notation: :mod:`theory.collapse`.
"""

from __future__ import annotations

import torch

from theory.collapse.standard import _cdnv, _nc1_from_cov
from theory.collapse.stats import (
    _F64,
    _between_from_means,
    _check_num_classes,
    _covariance_from_scatter,
    _features,
    _labels,
)
from theory.validation import integer

__all__ = ["ClassStatsAccumulator"]


class ClassStatsAccumulator:
    """Streaming per-class statistics in float64, for datasets too large to hold in memory.

    Pass 1 (``update`` on every mini-batch) keeps per-class counts ``n_c``, per-class means
    ``mu_c`` (sums = ``n_c mu_c``), per-class scalar scatter ``sum_{i in c} ||z_i - mu_c||^2`` and,
    if ``covariance=True``, the pooled within-class scatter matrix
    ``S_W = sum_i (z_i - mu_{y_i})(z_i - mu_{y_i})^T`` ``(d, d)``. Batches are merged with the
    pairwise update of Chan, Golub & LeVeque (1979) per class,
    ``S <- S + S_batch + (n_a n_b / (n_a + n_b)) delta delta^T`` with ``delta`` the difference
    of the class means, so no raw second moment is ever differenced (no cancellation near
    collapse). Memory ``O(C d + d^2)``. This gives :meth:`class_means`, :meth:`global_mean`,
    :meth:`within_class_covariance`, :meth:`between_class_covariance`, :meth:`nc1` and
    :meth:`nc1_cdnv`, equal to the full-matrix functions up to round-off.

    Pass 2 (``update_distances`` on every mini-batch again) is needed only for
    :meth:`within_class_variation` ("paper" P5): a mean of Euclidean **distances** is not a
    function of first and second moments, so it is accumulated against the class means frozen
    at the end of pass 1. The first ``update_distances`` call freezes the means (a later
    ``update`` raises ``RuntimeError``); :meth:`within_class_variation` checks that pass 2 saw
    exactly as many samples per class as pass 1. Example::

        acc = ClassStatsAccumulator(num_classes=C)
        for z, y in loader:
            acc.update(z, y)
        mu, nc1 = acc.class_means(), acc.nc1()
        for z, y in loader:            # second pass, same data, any batching/order
            acc.update_distances(z, y)
        p5 = acc.within_class_variation()

    Args:
        num_classes: ``C`` (labels must lie in ``[0, C)``).
        dim: ``d``; default taken from the first batch.
        covariance: keep the ``(d, d)`` within-class scatter matrix (needed by :meth:`nc1` and
            :meth:`within_class_covariance`).

    State is held on the device of the first batch.
    """

    def __init__(self, num_classes: int, dim: int | None = None, covariance: bool = True) -> None:
        C = _check_num_classes(num_classes)
        if C is None:
            raise ValueError("num_classes must be a positive integer, got None")
        self.num_classes = C
        self.dim = None if dim is None else integer("dim", dim, lo=1)
        self.covariance = bool(covariance)
        self._counts: torch.Tensor | None = None
        self._means: torch.Tensor | None = None
        self._class_ss: torch.Tensor | None = None
        self._scatter: torch.Tensor | None = None
        self._frozen = False
        self._dist_sum: torch.Tensor | None = None
        self._dist_counts: torch.Tensor | None = None

    # -- helpers -----------------------------------------------------------------------------

    def _batch(self, z, labels) -> tuple[torch.Tensor, torch.Tensor]:
        zt = _features(z, "z")
        if self.dim is not None and zt.shape[1] != self.dim:
            raise ValueError(f"z has dimension d = {zt.shape[1]} but the accumulator has d = {self.dim}")
        device = zt.device if self._counts is None else self._counts.device
        zt = zt.to(device)
        y, _ = _labels(labels, zt.shape[0], self.num_classes, device)
        return zt, y

    def _init_state(self, d: int, device) -> None:
        C = self.num_classes
        self.dim = d
        self._counts = torch.zeros(C, dtype=torch.int64, device=device)
        self._means = torch.zeros(C, d, dtype=_F64, device=device)
        self._class_ss = torch.zeros(C, dtype=_F64, device=device)
        if self.covariance:
            self._scatter = torch.zeros(d, d, dtype=_F64, device=device)

    def _require_data(self) -> None:
        if self._counts is None:
            raise RuntimeError("ClassStatsAccumulator: no batch has been added (call update first)")
        empty = torch.nonzero(self._counts == 0).flatten()
        if empty.numel() > 0:
            raise ValueError(
                f"labels: class(es) {empty[:10].tolist()} received no sample "
                f"(C = {self.num_classes}); their class mean is undefined"
            )

    # -- pass 1 ------------------------------------------------------------------------------

    def update(self, z, labels) -> "ClassStatsAccumulator":
        """Add a mini-batch ``z`` ``(B, d)`` with ``labels`` ``(B,)`` (pass 1). Returns self."""
        if self._frozen:
            raise RuntimeError(
                "ClassStatsAccumulator: class means are frozen by update_distances; "
                "start a new accumulator for new data"
            )
        zt, y = self._batch(z, labels)
        if self._counts is None:
            self._init_state(zt.shape[1], zt.device)
        C = self.num_classes
        nb = torch.bincount(y, minlength=C)
        nb64 = nb.to(_F64)
        sums = torch.zeros(C, self.dim, dtype=_F64, device=zt.device).index_add_(0, y, zt)
        mb = sums / nb64.clamp_min(1.0).unsqueeze(1)  # batch class means (0 for absent classes)
        r = zt - mb[y]
        ss_b = torch.zeros(C, dtype=_F64, device=zt.device).index_add_(0, y, (r * r).sum(dim=1))
        na64 = self._counts.to(_F64)
        n64 = na64 + nb64
        present = nb > 0
        delta = torch.where(present.unsqueeze(1), mb - self._means, torch.zeros_like(mb))
        w = torch.where(present, na64 * nb64 / n64.clamp_min(1.0), torch.zeros_like(n64))
        if self.covariance:
            self._scatter += r.T @ r + (delta * w.unsqueeze(1)).T @ delta
        self._class_ss += ss_b + w * (delta * delta).sum(dim=1)
        frac = torch.where(present, nb64 / n64.clamp_min(1.0), torch.zeros_like(n64))
        self._means += delta * frac.unsqueeze(1)
        self._counts += nb
        return self

    @property
    def counts(self) -> torch.Tensor:
        """Per-class sample counts ``n_c`` ``(C,)`` (int64)."""
        if self._counts is None:
            raise RuntimeError("ClassStatsAccumulator: no batch has been added (call update first)")
        return self._counts.clone()

    def class_sums(self) -> torch.Tensor:
        """Per-class sums ``n_c mu_c`` ``(C, d)`` float64."""
        self._require_data()
        return self._means * self._counts.to(_F64).unsqueeze(1)

    def class_means(self) -> torch.Tensor:
        """Uncentred class means ``(C, d)`` float64 (as :func:`class_means`)."""
        self._require_data()
        return self._means.clone()

    def global_mean(self) -> torch.Tensor:
        """Sample mean ``mu_G = sum_c n_c mu_c / N`` ``(d,)`` float64."""
        self._require_data()
        n = self._counts.to(_F64)
        return (self._means * n.unsqueeze(1)).sum(dim=0) / n.sum()

    def within_class_covariance(self) -> torch.Tensor:
        """``Sigma_W = S_W / N`` ``(d, d)`` float64 (as :func:`within_class_covariance`)."""
        self._require_data()
        if not self.covariance:
            raise RuntimeError("ClassStatsAccumulator(covariance=False) keeps no scatter matrix")
        return _covariance_from_scatter(self._scatter, float(self._counts.sum()))

    def between_class_covariance(self) -> torch.Tensor:
        """``Sigma_B`` ``(d, d)`` float64, centred at the sample mean (as the full function)."""
        self._require_data()
        return _between_from_means(self._means, self.global_mean())

    def nc1(self, rtol: float | None = None) -> float:
        """NC1 = Tr(Sigma_W Sigma_B^+)/C, exactly as :func:`nc1`."""
        if self.num_classes < 2:
            raise ValueError(f"nc1 needs at least 2 classes, got C = {self.num_classes}")
        return _nc1_from_cov(
            self.within_class_covariance(), self.between_class_covariance(), self.num_classes, rtol
        )

    def nc1_cdnv(self) -> float:
        """CDNV, exactly as :func:`nc1_cdnv`."""
        if self.num_classes < 2:
            raise ValueError(f"nc1_cdnv needs at least 2 classes, got C = {self.num_classes}")
        self._require_data()
        return _cdnv(self._means, self._class_ss / self._counts.to(_F64))

    # -- pass 2 ------------------------------------------------------------------------------

    def update_distances(self, z, labels) -> "ClassStatsAccumulator":
        """Pass 2: add ``||z_i - mu_{y_i}||`` against the frozen pass-1 means. Returns self."""
        if self._counts is None:
            raise RuntimeError("ClassStatsAccumulator: run pass 1 (update) before update_distances")
        zt, y = self._batch(z, labels)
        if not self._frozen:
            self._frozen = True
            self._dist_sum = torch.zeros(self.num_classes, dtype=_F64, device=zt.device)
            self._dist_counts = torch.zeros(self.num_classes, dtype=torch.int64, device=zt.device)
        dist = torch.linalg.vector_norm(zt - self._means[y], dim=1)
        self._dist_sum.index_add_(0, y, dist)
        self._dist_counts += torch.bincount(y, minlength=self.num_classes)
        return self

    def within_class_variation(self) -> float:
        """"Paper" P5 (as :func:`within_class_variation`), after a complete second pass."""
        self._require_data()
        if not self._frozen:
            raise RuntimeError(
                "within_class_variation needs a second pass: call update_distances on every batch"
            )
        if not torch.equal(self._dist_counts, self._counts):
            bad = torch.nonzero(self._dist_counts != self._counts).flatten()[:10].tolist()
            raise ValueError(
                f"update_distances saw different per-class counts than update for classes {bad}: "
                "pass 2 must visit exactly the samples of pass 1"
            )
        return float((self._dist_sum / self._counts.to(_F64)).mean())
