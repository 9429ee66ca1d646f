"""Streaming per-class statistics for data sets too large to hold in memory.

Each mini-batch is reduced to a :class:`~theory.collapse.stats.ClassStats` by the batch kernel
and folded into the running statistics with :func:`~theory.collapse.stats.merge_class_stats`
(Chan, Golub & LeVeque 1979); every result is then the batch path's ``*_from_stats`` function of
those statistics (docs/metrics.md#streaming-accumulation). Notation: :mod:`theory.collapse`.
"""

from __future__ import annotations

import torch

from theory.collapse._geometry import pow2_scale_tensor, rescaled
from theory.collapse._inputs import F64, ArrayLike, batch, check_class_memory, check_num_classes
from theory.collapse.standard import _cdnv, _check_rtol, _nc1_stats
from theory.collapse.stats import (
    ClassStats,
    _distance_sums,
    _divided,
    _require_complete,
    _stats_of,
    _unscaled,
    between_class_covariance_from_stats,
    merge_class_stats,
    within_class_covariance_from_stats,
)
from theory.validation import integer

__all__ = ["ClassStatsAccumulator"]


class ClassStatsAccumulator:
    """Streaming per-class statistics in float64, for data sets too large to hold in memory.

    Pass 1 (:meth:`update` on every mini-batch) keeps a :class:`ClassStats`: per-class counts
    ``n_c``, means ``mu_c``, within-class sums of squares ``sum_{i in c} ||z_i - mu_c||^2`` and,
    if ``covariance=True``, the pooled within-class scatter
    ``S_W = sum_i (z_i - mu_{y_i})(z_i - mu_{y_i})^T`` ``(d, d)``. A batch is reduced by the batch
    kernel (:func:`class_stats`) and merged with the pairwise update of Chan, Golub & LeVeque
    (1979), ``S <- S_a + S_b + (n_a n_b / (n_a + n_b)) delta delta^T`` with ``delta`` the
    difference of the class means (:func:`merge_class_stats`), so no raw second moment is ever
    differenced (no cancellation near collapse). Memory ``O(C d + d^2)``. Every result equals
    the batch function on the concatenated data up to round-off (about 1e-15 relative).

    Pass 2 (:meth:`update_distances` on every mini-batch again) is needed only for
    :meth:`within_class_variation` ("paper" P5): a mean of Euclidean **distances** is not a
    function of first and second moments, so it is accumulated against the class means frozen
    at the end of pass 1. The first ``update_distances`` call freezes the means (a later
    ``update`` raises ``RuntimeError``); :meth:`within_class_variation` checks that pass 2 saw
    exactly as many samples per class as pass 1. Example::

        acc = ClassStatsAccumulator(num_classes=C)
        for z, y in loader:              # z on any device, any float dtype (bf16 included)
            acc.update(z, y)
        mu, nc1 = acc.class_means(), acc.nc1()
        stats = acc.stats()              # for any *_from_stats function
        for z, y in loader:              # second pass, same data, any batching/order
            acc.update_distances(z, y)
        p5 = acc.within_class_variation()

    Scale: the state holds the statistics of ``z / s`` with ``s`` the power of two of the largest
    ``|z|`` seen so far (the state is divided exactly when a batch raises it), so no square
    overflows or underflows; the scale-invariant results (NC1, CDNV) are computed in those units
    and the others multiplied back, raising ``ValueError`` naming ``z`` when a value is beyond
    the float64 range (docs/metrics.md#scale).

    Device: the state lives on the device of the first batch; later batches are reduced on
    their own device and their statistics moved there. Features are converted to float64
    before any arithmetic. Labels must lie in ``[0, num_classes)``; a class that has received no
    sample has a NaN mean (:meth:`class_means`) and makes the class-averaged metrics raise
    ``ValueError``.

    Args:
        num_classes: ``C`` (labels must lie in ``[0, C)``; row ``c`` is label ``c``).
        dim: ``d``; default taken from the first batch.
        covariance: keep the ``(d, d)`` within-class scatter matrix (needed by :meth:`nc1` and
            :meth:`within_class_covariance`).

    Raises:
        ValueError: ``num_classes`` is not an integer ``>= 1``, ``dim`` not ``>= 1``, or the
            ``O(C d + d^2)`` state cannot be allocated (:func:`theory.validation.check_size`; with
            ``dim=None`` checked for ``d = 1`` here and for the batch's ``d`` at :meth:`update`).
    """

    def __init__(self, num_classes: int, dim: int | None = None, covariance: bool = True) -> None:
        C = check_num_classes(num_classes)
        if C is None:
            raise ValueError("num_classes must be a positive integer, got None")
        self.num_classes = C
        self.dim = None if dim is None else integer("dim", dim, lo=1)
        self.covariance = bool(covariance)
        # refused now rather than at the first update (d = 1 when not given: a lower bound)
        check_class_memory(C, self.dim or 1, None, self.covariance)
        self._stats: ClassStats | None = None  # of z / self._scale
        self._scale = torch.ones((), dtype=F64)  # a power of two, on the state's device
        self._frozen = False
        self._dist_sum: torch.Tensor | None = None
        self._dist_counts: torch.Tensor | None = None

    # -- helpers -----------------------------------------------------------------------------

    def _batch(self, z: ArrayLike, labels: ArrayLike) -> tuple[torch.Tensor, torch.Tensor]:
        zt, y, _, _ = batch(z, labels, self.num_classes)
        if self.dim is not None and zt.shape[1] != self.dim:
            raise ValueError(f"z has dimension d = {zt.shape[1]} but the accumulator has d = {self.dim}")
        return zt, y

    def _scaled(self) -> ClassStats:
        """The accumulated statistics of ``z / s`` (the internal units)."""
        if self._stats is None:
            raise RuntimeError("ClassStatsAccumulator: no batch has been added (call update first)")
        return self._stats

    def stats(self) -> ClassStats:
        """The accumulated :class:`ClassStats` (pass 1), for any ``*_from_stats`` function.

        Raises:
            RuntimeError: no batch has been added.
            ValueError: a second moment is beyond the float64 range in the units of ``z``.
        """
        return _unscaled(self._scaled(), self._scale, "z")

    def _complete(self, what: str, min_classes: int = 2) -> ClassStats:
        st = self._scaled()
        _require_complete(st, "labels", what, min_classes)
        return st

    # -- pass 1 ------------------------------------------------------------------------------

    def update(self, z: ArrayLike, labels: ArrayLike) -> ClassStatsAccumulator:
        """Add a mini-batch (pass 1).

        Args:
            z: features ``(B, d)``, any real dtype, any device.
            labels: integer labels ``(B,)`` in ``[0, num_classes)``.

        Returns:
            ``self``.

        Raises:
            ValueError: as :func:`class_stats`, or a dimension other than the accumulator's.
            RuntimeError: the means are frozen by :meth:`update_distances`.
        """
        if self._frozen:
            raise RuntimeError(
                "ClassStatsAccumulator: class means are frozen by update_distances; "
                "start a new accumulator for new data"
            )
        zt, y = self._batch(z, labels)
        self.dim = zt.shape[1]
        s = pow2_scale_tensor(zt)  # on the device: no host read beyond the batch's validation
        if self._stats is None:
            self._scale = s
        else:  # the state in the units of the larger scale (an exact division; by 1 if unchanged)
            new = torch.maximum(self._scale, s.to(self._scale.device))
            self._stats = _divided(self._stats, new / self._scale)
            self._scale = new
        cls = torch.arange(self.num_classes, device=zt.device)
        b = _stats_of(zt / self._scale.to(zt.device), y, self.num_classes, cls, self.covariance)
        self._stats = b if self._stats is None else merge_class_stats(self._stats, b)
        return self

    @property
    def counts(self) -> torch.Tensor:
        """Per-class sample counts ``n_c`` ``(C,)`` (int64)."""
        return self._scaled().counts.clone()

    def class_sums(self) -> torch.Tensor:
        """Per-class sums ``n_c mu_c`` ``(C, d)`` float64 (0 for a class without sample).

        Raises:
            ValueError: a sum beyond the float64 range (naming ``z``).
        """
        return rescaled(self._scaled().sums, self._scale, 1, "z", "a class sum")

    def class_means(self) -> torch.Tensor:
        """Uncentred class means ``(C, d)`` float64, as :func:`class_means`.

        A class without a sample has a row of NaN.
        """
        return self._scaled().means * self._scale

    def global_mean(self) -> torch.Tensor:
        """Sample mean ``mu_G = sum_c n_c mu_c / N`` ``(d,)`` float64."""
        return self._scaled().global_mean * self._scale

    def within_class_covariance(self) -> torch.Tensor:
        """``Sigma_W = S_W / N`` ``(d, d)`` float64 (as :func:`within_class_covariance`).

        Raises:
            ValueError: ``Sigma_W`` beyond the float64 range (naming ``z``).
        """
        if not self.covariance:
            raise RuntimeError("ClassStatsAccumulator(covariance=False) keeps no scatter matrix")
        return rescaled(within_class_covariance_from_stats(self._scaled()), self._scale, 2, "z", "Sigma_W")

    def between_class_covariance(self) -> torch.Tensor:
        """``Sigma_B`` ``(d, d)`` float64, centred at the sample mean (as the batch function).

        Raises:
            ValueError: a missing class, or ``Sigma_B`` beyond the float64 range (naming ``z``).
        """
        sb = between_class_covariance_from_stats(self._complete("Sigma_B", min_classes=1))
        return rescaled(sb, self._scale, 2, "z", "Sigma_B")

    def nc1(self, rtol: float | None = None) -> float:
        """NC1 = Tr(Sigma_W Sigma_B^+)/C, exactly as :func:`nc1_from_stats`."""
        rtol = _check_rtol(rtol)
        if not self.covariance:
            raise RuntimeError("ClassStatsAccumulator(covariance=False) keeps no scatter matrix")
        return _nc1_stats(self._complete("nc1"), rtol, "z")

    def nc1_cdnv(self) -> float:
        """CDNV, exactly as :func:`nc1_cdnv_from_stats`."""
        return _cdnv(self._complete("nc1_cdnv"))

    # -- pass 2 ------------------------------------------------------------------------------

    def update_distances(self, z: ArrayLike, labels: ArrayLike) -> ClassStatsAccumulator:
        """Pass 2: add ``||z_i - mu_{y_i}||`` against the frozen pass-1 means.

        Args:
            z: features ``(B, d)``.
            labels: integer labels ``(B,)``.

        Returns:
            ``self``.

        Raises:
            RuntimeError: pass 1 saw no batch.
        """
        st = self._scaled()
        zt, y = self._batch(z, labels)
        zt, y = zt.to(st.device) / self._scale, y.to(st.device)  # the units of the frozen means
        if self._dist_sum is None or self._dist_counts is None:
            self._frozen = True
            self._dist_sum = torch.zeros(self.num_classes, dtype=F64, device=st.device)
            self._dist_counts = torch.zeros(self.num_classes, dtype=torch.int64, device=st.device)
        self._dist_sum += _distance_sums(zt, y, st.means)
        self._dist_counts += torch.bincount(y, minlength=self.num_classes)
        return self

    def within_class_variation(self) -> float:
        """The "paper" P5 (as :func:`within_class_variation`), after a complete second pass."""
        st = self._complete("within_class_variation", min_classes=1)
        if self._dist_sum is None or self._dist_counts is None:
            raise RuntimeError(
                "within_class_variation needs a second pass: call update_distances on every batch"
            )
        if not torch.equal(self._dist_counts, st.counts):
            bad = torch.nonzero(self._dist_counts != st.counts).flatten()[:10].tolist()
            raise ValueError(
                f"update_distances saw different per-class counts than update for classes {bad}: "
                "pass 2 must visit exactly the samples of pass 1"
            )
        mean = (self._dist_sum / st.counts.to(F64)).mean()
        return float(rescaled(mean, self._scale, 1, "z", "within_class_variation"))
