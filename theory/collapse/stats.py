"""The statistics kernel of the collapse metrics: per-class statistics and the covariances.

Papyan, Han & Donoho (PNAS 2020); docs/metrics.md#shared-statistics. Notation:
:mod:`theory.collapse`.

Every metric of the package either takes statistics (class means ``mu``, a :class:`ClassStats`)
or computes them here, and the streaming
:class:`~theory.collapse.streaming.ClassStatsAccumulator` folds per-batch :class:`ClassStats`
with :func:`merge_class_stats`: there is one implementation of each formula.

* :func:`class_stats` -- the sufficient statistics of a labelled batch: counts ``n_c``, means
  ``mu_c``, within-class sums of squares ``sum_{i in c} ||z_i - mu_c||^2`` and (optionally) the
  pooled within-class scatter ``S_W = sum_i (z_i - mu_{y_i})(z_i - mu_{y_i})^T``.
* :func:`merge_class_stats` -- the pairwise update of Chan, Golub & LeVeque (1979).
* :func:`within_class_covariance_from_stats` (``Sigma_W = S_W / N``) and
  :func:`between_class_covariance_from_stats` (``Sigma_B``, centred at the sample mean), and their
  raw-input forms :func:`within_class_covariance`, :func:`between_class_covariance`.
* :func:`class_counts`, :func:`class_means`, :func:`global_mean` on raw inputs.

Everything is computed in float64 on the device of the features. The raw-input functions compute
the statistics of ``z / s`` (``s`` a power of two, :func:`theory.collapse._geometry.pow2_scale`)
and multiply back, so no square overflows or underflows on the way; a statistic that is not a
finite float64 in the units of ``z`` raises ``ValueError`` naming ``z`` (docs/metrics.md#scale).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np
import torch

from theory.collapse._geometry import pow2_scale, rescaled, symmetrised
from theory.collapse._inputs import F64, ArrayLike, as_tensor, batch, features, labels_of
from theory.validation import real

__all__ = [
    "SPECTRUM_FLOOR",
    "ClassStats",
    "class_stats",
    "merge_class_stats",
    "class_counts",
    "class_means",
    "global_mean",
    "within_class_covariance",
    "between_class_covariance",
    "within_class_covariance_from_stats",
    "between_class_covariance_from_stats",
]

#: Default floor of the spectra: a singular value below ``SPECTRUM_FLOOR * sigma_max`` (in
#: particular an exact zero) is reported as ``log(SPECTRUM_FLOOR)`` = -69.08 instead of -inf.
#: The authors plot the spectrum on [-35, 2]; float64 round-off of a rank-deficient covariance
#: sits near 1e-32 relative (squared singular values of the centred means), so "at the floor"
#: means "zero to working precision".
SPECTRUM_FLOOR = 1e-30

_check_floor = functools.partial(real, "floor", lo=0, hi=1, hi_open=True)


# --------------------------------------------------------------------------------------------
# The statistics
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True, eq=False)
class ClassStats:
    """Sufficient per-class statistics of labelled features, in float64 on one device.

    Row ``k`` of every per-class field belongs to the class whose label value is
    ``classes[k]``. A class with no sample (possible only when ``num_classes`` was given) is
    *missing*: its count is 0, its mean a row of NaN (never a zero row) and its sum of squares 0.
    Metrics that average over classes raise ``ValueError`` on missing classes; :meth:`present`
    excludes them explicitly.

    Attributes:
        counts: ``n_c``, int64 ``(C,)``.
        means: ``mu_c = (1/n_c) sum_{i: y_i = c} z_i``, float64 ``(C, d)``; NaN rows for missing
            classes.
        within_ss: ``sum_{i: y_i = c} ||z_i - mu_c||^2``, float64 ``(C,)`` (the within-class sum of
            squares, the trace of class ``c``'s scatter; CDNV needs it).
        scatter: ``S_W = sum_i (z_i - mu_{y_i})(z_i - mu_{y_i})^T``, float64 ``(d, d)``, pooled
            over classes (NC1 needs it), or ``None`` when computed with ``covariance=False``.
            Per-class scatter matrices (``O(C d^2)``) are not kept.
        classes: the label value of each row, int64 ``(C,)``.
    """

    counts: torch.Tensor
    means: torch.Tensor
    within_ss: torch.Tensor
    scatter: torch.Tensor | None
    classes: torch.Tensor

    def __post_init__(self) -> None:
        if self.means.dim() != 2 or self.means.dtype != F64:
            raise ValueError(
                f"means must be a float64 (C, d) tensor, got {self.means.dtype} {tuple(self.means.shape)}"
            )
        C, d = self.means.shape
        expect: dict[str, tuple[torch.Tensor | None, tuple[int, ...], torch.dtype]] = {
            "counts": (self.counts, (C,), torch.int64),
            "within_ss": (self.within_ss, (C,), F64),
            "scatter": (self.scatter, (d, d), F64),
            "classes": (self.classes, (C,), torch.int64),
        }
        for name, (t, shape, dtype) in expect.items():
            if t is None:
                continue
            if tuple(t.shape) != shape or t.dtype != dtype:
                raise ValueError(f"{name} must be {dtype} of shape {shape}, got {t.dtype} {tuple(t.shape)}")
            if t.device != self.means.device:
                raise ValueError(f"{name} is on {t.device} but means is on {self.means.device}")

    @property
    def num_classes(self) -> int:
        """``C``, the number of rows (missing classes included)."""
        return int(self.means.shape[0])

    @property
    def dim(self) -> int:
        """``d``, the feature dimension."""
        return int(self.means.shape[1])

    @property
    def device(self) -> torch.device:
        """The device every field lives on."""
        return self.means.device

    @property
    def num_samples(self) -> int:
        """``N = sum_c n_c``."""
        return int(self.counts.sum())

    @property
    def missing(self) -> torch.Tensor:
        """Label values of the classes with no sample, int64 ``(m,)`` (empty if none)."""
        return self.classes[self.counts == 0]

    @property
    def sums(self) -> torch.Tensor:
        """``n_c mu_c`` ``(C, d)`` float64 (0 for a missing class)."""
        return _nan_to_zero(self.means * self.counts.to(F64).unsqueeze(1))

    @property
    def global_mean(self) -> torch.Tensor:
        """Sample mean ``mu_G = (1/N) sum_i z_i = sum_c n_c mu_c / N`` ``(d,)`` (Papyan et al.).

        The centre of :func:`between_class_covariance_from_stats` and NC1. Scale-safe: the sum
        is formed in units of a power of two of the means (no overflow).
        """
        s = pow2_scale(_nan_to_zero(self.means))
        sums = _nan_to_zero(self.means / s * self.counts.to(F64).unsqueeze(1))
        return sums.sum(dim=0) / self.counts.sum().to(F64) * s

    @property
    def mean_of_class_means(self) -> torch.Tensor:
        """``(1/C) sum_c mu_c`` ``(d,)``: the centre the NC2 functions default to.

        Equal to :attr:`global_mean` only for balanced classes (docs/metrics.md pitfall 3); NaN
        when a class is missing.
        """
        return self.means.mean(dim=0)

    @property
    def class_variances(self) -> torch.Tensor:
        """``sigma_c^2 = within_ss_c / n_c`` ``(C,)`` (NaN for a missing class)."""
        n = self.counts.to(F64)
        return torch.where(n > 0, self.within_ss / n, torch.full_like(n, float("nan")))

    def present(self) -> ClassStats:
        """The statistics restricted to the classes with at least one sample (explicit exclusion).

        ``scatter`` is pooled over samples and is unchanged.
        """
        keep = self.counts > 0
        return ClassStats(
            counts=self.counts[keep],
            means=self.means[keep],
            within_ss=self.within_ss[keep],
            scatter=self.scatter,
            classes=self.classes[keep],
        )

    def to(self, device: torch.device | str) -> ClassStats:
        """A copy on ``device``."""
        return ClassStats(
            counts=self.counts.to(device),
            means=self.means.to(device),
            within_ss=self.within_ss.to(device),
            scatter=None if self.scatter is None else self.scatter.to(device),
            classes=self.classes.to(device),
        )


def _nan_to_zero(t: torch.Tensor) -> torch.Tensor:
    return torch.where(torch.isnan(t), torch.zeros_like(t), t)


def _divided(stats: ClassStats, s: float | torch.Tensor) -> ClassStats:
    """The statistics of the features divided by ``s`` (means ``/ s``, second moments ``/ s^2``).

    Exact for a power of two ``s`` (unless an entry underflows: it is then negligible).
    """
    return ClassStats(
        stats.counts,
        stats.means / s,
        stats.within_ss / s / s,
        None if stats.scatter is None else stats.scatter / s / s,
        stats.classes,
    )


def _normalised(stats: ClassStats) -> ClassStats:
    """``stats`` divided by the power of two of its largest finite class-mean entry.

    For the scale-invariant metrics of statistics (NC1, CDNV): their squares and products of
    means then neither overflow nor underflow, whatever the units of the features.
    """
    return _divided(stats, pow2_scale(_nan_to_zero(stats.means)))


def _unscaled(stats: ClassStats, s: float | torch.Tensor, name: str) -> ClassStats:
    """Statistics of ``z / s`` back in the units of ``z``.

    ``ValueError`` naming ``name`` if a second moment leaves the float64 range there (the means
    cannot: ``|mu| <= max |z|``).
    """
    return ClassStats(
        stats.counts,
        stats.means * s,
        rescaled(stats.within_ss, s, 2, name, "the within-class sum of squares"),
        None if stats.scatter is None else rescaled(stats.scatter, s, 2, name, "the within-class scatter"),
        stats.classes,
    )


def _scaled_stats(
    zt: torch.Tensor, y: torch.Tensor, C: int, classes: torch.Tensor, covariance: bool
) -> tuple[ClassStats, float]:
    """``(statistics of zt / s, s)`` with ``s = pow2_scale(zt)`` (the scale-safe kernel)."""
    s = pow2_scale(zt)
    return _stats_of(zt / s, y, C, classes, covariance), s


def _stats_of(
    zt: torch.Tensor, y: torch.Tensor, C: int, classes: torch.Tensor, covariance: bool
) -> ClassStats:
    """The kernel: :class:`ClassStats` of validated float64 features and row indices."""
    d = zt.shape[1]
    counts = torch.bincount(y, minlength=C)
    n = counts.to(F64).unsqueeze(1)
    sums = torch.zeros(C, d, dtype=F64, device=zt.device).index_add_(0, y, zt)
    means = torch.where(n > 0, sums / n.clamp_min(1.0), torch.full_like(sums, float("nan")))
    r = zt - means[y]  # every indexed row belongs to a present class
    within_ss = torch.zeros(C, dtype=F64, device=zt.device).index_add_(0, y, (r * r).sum(dim=1))
    return ClassStats(counts, means, within_ss, r.T @ r if covariance else None, classes)


def class_stats(
    z: ArrayLike, labels: ArrayLike, num_classes: int | None = None, *, covariance: bool = True
) -> ClassStats:
    """Sufficient per-class statistics of a labelled batch, the input of every ``*_from_stats``.

    ``n_c``, ``mu_c = (1/n_c) sum_{i: y_i = c} z_i``, ``sum_{i in c} ||z_i - mu_c||^2`` and the
    pooled scatter ``S_W = sum_i (z_i - mu_{y_i})(z_i - mu_{y_i})^T``, from the residuals to the
    class means (two-pass, no cancellation). Papyan, Han & Donoho (PNAS 2020);
    docs/metrics.md#shared-statistics.

    Args:
        z: features ``(N, d)``, any real dtype (computed in float64 on ``z``'s device).
        labels: integer labels ``(N,)``, ``>= 0``.
        num_classes: ``C``. Given: labels must lie in ``[0, C)`` and row ``c`` is label ``c``
            (classes without a sample are missing: NaN mean, count 0). ``None``: the labels are
            relabelled compactly, row ``k`` is the ``k``-th smallest distinct label
            (``ClassStats.classes``), and no class is missing.
        covariance: also form the ``(d, d)`` scatter (needed by NC1 and ``Sigma_W``).

    Returns:
        :class:`ClassStats` on ``z``'s device.

    Shape:
        ``z`` ``(N, d)``, ``labels`` ``(N,)`` -> ``means`` ``(C, d)``, ``counts`` ``(C,)``.

    Raises:
        ValueError: bad shapes or dtypes, NaN/inf in ``z``, labels negative or ``>= num_classes``;
            a sum of squares beyond the float64 range (``|z|`` near 1e154 or more; naming ``z``:
            the metrics of raw ``z`` rescale it themselves).
    """
    zt, y, C, classes = batch(z, labels, num_classes)
    st, s = _scaled_stats(zt, y, C, classes, bool(covariance))
    return _unscaled(st, s, "z")


def merge_class_stats(a: ClassStats, b: ClassStats) -> ClassStats:
    """Statistics of the union of two disjoint sets of samples (Chan, Golub & LeVeque 1979).

    Per class, with ``n = n_a + n_b`` and ``delta = mu_b - mu_a``: ``mu = mu_a + delta n_b / n``,
    ``ss = ss_a + ss_b + (n_a n_b / n) ||delta||^2`` and
    ``S_W = S_a + S_b + sum_c (n_a n_b / n) delta delta^T``. No raw second moment is differenced,
    so nothing cancels near collapse. Missing classes stay missing unless the other side has
    them. The result lives on ``a``'s device; ``scatter`` is ``None`` unless both have one.

    Args:
        a: statistics of the first set.
        b: statistics of the second set (same ``classes`` and ``d``).

    Returns:
        The merged :class:`ClassStats`.

    Shape:
        ``(C, d)`` statistics and ``(C, d)`` statistics -> ``(C, d)`` statistics.

    Raises:
        ValueError: different dimension or classes (compactly relabelled batches with different
            label sets cannot be merged: pass ``num_classes``).
    """
    if b.device != a.device:
        b = b.to(a.device)
    if a.dim != b.dim:
        raise ValueError(f"b has dimension d = {b.dim} but a has d = {a.dim}")
    if a.num_classes != b.num_classes or not torch.equal(a.classes, b.classes):
        raise ValueError(
            "b has other classes than a (compactly relabelled batches with different label sets "
            "cannot be merged; pass num_classes so that row c is label c)"
        )
    na, nb = a.counts.to(F64), b.counts.to(F64)
    n = na + nb
    both = (na > 0) & (nb > 0)
    delta = torch.where(both.unsqueeze(1), b.means - a.means, torch.zeros_like(a.means))
    w = torch.where(both, na * nb / n.clamp_min(1.0), torch.zeros_like(n))
    frac = (nb / n.clamp_min(1.0)).unsqueeze(1)
    means = torch.where(
        (nb == 0).unsqueeze(1), a.means, torch.where((na == 0).unsqueeze(1), b.means, a.means + delta * frac)
    )
    within_ss = a.within_ss + b.within_ss + w * (delta * delta).sum(dim=1)
    scatter = None
    if a.scatter is not None and b.scatter is not None:
        scatter = a.scatter + b.scatter + (delta * w.unsqueeze(1)).T @ delta
    return ClassStats(a.counts + b.counts, means, within_ss, scatter, a.classes)


# --------------------------------------------------------------------------------------------
# Checks and small helpers shared by the metric modules
# --------------------------------------------------------------------------------------------


def _require_complete(stats: ClassStats, name: str, what: str, min_classes: int = 2) -> None:
    """``ValueError`` (naming ``name``) if ``stats`` has fewer than ``min_classes`` or a missing class."""
    if not isinstance(stats, ClassStats):
        raise ValueError(f"{name} must be a ClassStats (see class_stats), got {type(stats).__name__}")
    C = stats.num_classes
    if C < min_classes:
        raise ValueError(f"{name}: {what} needs at least {min_classes} classes, got C = {C}")
    missing = stats.missing
    if missing.numel() > 0:
        shown = missing[:10].tolist()
        raise ValueError(
            f"{name}: class(es) {shown}{' ...' if missing.numel() > 10 else ''} have no sample "
            f"(C = {C}); {what} is undefined with a missing class (pass num_classes=None to "
            "relabel the present classes compactly, or use ClassStats.present())"
        )


def _distance_sums(zt: torch.Tensor, y: torch.Tensor, means: torch.Tensor) -> torch.Tensor:
    """``sum_{i in c} ||z_i - mu_c||_2`` per class ``(C,)`` (the "paper" P5 numerator)."""
    dist = torch.linalg.vector_norm(zt - means[y], dim=1)
    return torch.zeros(means.shape[0], dtype=F64, device=zt.device).index_add_(0, y, dist)


# --------------------------------------------------------------------------------------------
# Covariances from statistics, and the raw-input forms
# --------------------------------------------------------------------------------------------


def within_class_covariance_from_stats(stats: ClassStats) -> torch.Tensor:
    """``Sigma_W = S_W / N`` ``(d, d)`` float64, symmetrised (docs/metrics.md#notation).

    Papyan, Han & Donoho (PNAS 2020). A missing class contributes nothing (``Sigma_W`` is a sum
    over samples).

    Args:
        stats: statistics with a scatter (``covariance=True``).

    Returns:
        float64 tensor ``(d, d)`` on ``stats``' device.

    Shape:
        ``stats`` of ``(C, d)`` -> ``(d, d)``.

    Raises:
        ValueError: ``stats`` has no scatter matrix.
    """
    if not isinstance(stats, ClassStats):
        raise ValueError(f"stats must be a ClassStats (see class_stats), got {type(stats).__name__}")
    if stats.scatter is None:
        raise ValueError("stats has no within-class scatter (it was computed with covariance=False)")
    return symmetrised(stats.scatter / stats.counts.sum().to(F64))


def _between(means: torch.Tensor, centre: torch.Tensor, name: str) -> torch.Tensor:
    """``Sigma_B`` about ``centre``, formed in units of a power of two ``s`` and times ``s^2``."""
    s = pow2_scale(means, centre)
    c = means / s - centre / s
    return rescaled(symmetrised(c.T @ c / means.shape[0]), s, 2, name, "Sigma_B")


def between_class_covariance_from_stats(stats: ClassStats) -> torch.Tensor:
    """``Sigma_B = (1/C) sum_c (mu_c - mu_G)(mu_c - mu_G)^T`` ``(d, d)`` float64, symmetrised.

    Centred at the **sample** mean ``mu_G`` (:attr:`ClassStats.global_mean`, Papyan, Han &
    Donoho, PNAS 2020); rank ``<= C - 1``. docs/metrics.md#notation.

    Args:
        stats: statistics without missing classes.

    Returns:
        float64 tensor ``(d, d)`` on ``stats``' device.

    Shape:
        ``stats`` of ``(C, d)`` -> ``(d, d)``.

    Raises:
        ValueError: a class is missing (the average over classes is undefined).
    """
    _require_complete(stats, "stats", "Sigma_B", min_classes=1)
    return _between(stats.means, stats.global_mean, "stats")


def class_counts(labels: ArrayLike, num_classes: int | None = None) -> torch.Tensor:
    """Per-class sample counts ``n_c = #{i : labels_i = c}``, an int64 tensor ``(C,)``.

    With ``num_classes`` given, entry ``c`` counts label ``c`` (missing classes count 0); without,
    the distinct labels in increasing order (every count ``>= 1``), as :func:`class_stats`.

    Args:
        labels: integer labels ``(N,)``, ``>= 0``.
        num_classes: ``C``, or ``None`` for the compact relabelling.

    Returns:
        int64 tensor ``(C,)`` on ``labels``' device.

    Shape:
        ``labels`` ``(N,)`` -> ``(C,)``.

    Raises:
        ValueError: non-1-D or non-integer labels, labels out of range, or no label at all.
    """
    t = as_tensor(labels, "labels")
    y, C, _ = labels_of(t, t.shape[0] if t.dim() >= 1 else -1, num_classes, t.device)
    return torch.bincount(y, minlength=C)


def class_means(z: ArrayLike, labels: ArrayLike, num_classes: int | None = None) -> torch.Tensor | np.ndarray:
    """Uncentred class means ``mu_c = (1/n_c) sum_{i: labels_i = c} z_i`` ("paper" and standard).

    Sums are accumulated in float64 (:func:`class_stats`); the result has the container type of
    ``z`` (a torch tensor on the same device, or a numpy array) and its float dtype (half
    precision and integers are returned as float32). The HCL authors average the
    unit-ball-normalised projector outputs of the training set (docs/metrics.md#which-tensor).

    Args:
        z: features ``(N, d)``.
        labels: integer labels ``(N,)``, ``>= 0``.
        num_classes: ``C`` (row ``c`` = label ``c``; a class without a sample gets a row of NaN),
            or ``None`` (compact relabelling: rows in increasing label order, none missing).

    Returns:
        ``(C, d)`` tensor or array.

    Shape:
        ``z`` ``(N, d)``, ``labels`` ``(N,)`` -> ``(C, d)``.

    Raises:
        ValueError: bad shapes or dtypes, NaN/inf in ``z``, labels out of range.
    """
    zt, y, C, classes = batch(z, labels, num_classes)
    st, s = _scaled_stats(zt, y, C, classes, covariance=False)
    mu = st.means * s  # |mu_c| <= max |z|: no overflow (nor do the sums of z / s)
    if isinstance(z, torch.Tensor):
        out_dtype = z.dtype if z.dtype in (torch.float32, torch.float64) else torch.float32
        return mu.to(out_dtype)
    z_np = np.asarray(z)
    np_dtype = z_np.dtype if z_np.dtype in (np.float32, np.float64) else np.dtype(np.float32)
    return mu.cpu().numpy().astype(np_dtype, copy=False)


def global_mean(z: ArrayLike) -> torch.Tensor:
    """Sample mean ``mu_G = (1/N) sum_i z_i`` of the features, a float64 tensor ``(d,)``.

    Papyan et al. (2020); equals the mean of the class means only for balanced classes
    (docs/metrics.md#pitfalls, 3). Both are on :class:`ClassStats` (``global_mean``,
    ``mean_of_class_means``).

    Args:
        z: features ``(N, d)``.

    Returns:
        float64 tensor ``(d,)`` on ``z``'s device.

    Shape:
        ``z`` ``(N, d)`` -> ``(d,)``.
    """
    zt = features(z, "z")
    s = pow2_scale(zt)
    return (zt / s).mean(dim=0) * s


def within_class_covariance(z: ArrayLike, labels: ArrayLike, num_classes: int | None = None) -> torch.Tensor:
    """``Sigma_W = (1/N) sum_i (z_i - mu_{y_i})(z_i - mu_{y_i})^T`` of raw inputs.

    :func:`within_class_covariance_from_stats` of :func:`class_stats` (Papyan, Han & Donoho,
    PNAS 2020).

    Args:
        z: features ``(N, d)``.
        labels: integer labels ``(N,)``.
        num_classes: ``C`` or ``None`` (as :func:`class_stats`).

    Returns:
        float64 tensor ``(d, d)`` on ``z``'s device, symmetrised.

    Shape:
        ``z`` ``(N, d)``, ``labels`` ``(N,)`` -> ``(d, d)``.

    Raises:
        ValueError: as :func:`class_stats`; ``Sigma_W`` beyond the float64 range (naming ``z``).
    """
    zt, y, C, classes = batch(z, labels, num_classes)
    st, s = _scaled_stats(zt, y, C, classes, covariance=True)
    return rescaled(within_class_covariance_from_stats(st), s, 2, "z", "Sigma_W")


def between_class_covariance(z: ArrayLike, labels: ArrayLike, num_classes: int | None = None) -> torch.Tensor:
    """``Sigma_B = (1/C) sum_c (mu_c - mu_G)(mu_c - mu_G)^T`` of raw inputs, ``mu_G`` the sample mean.

    :func:`between_class_covariance_from_stats` of :func:`class_stats` (Papyan, Han & Donoho,
    PNAS 2020).

    Args:
        z: features ``(N, d)``.
        labels: integer labels ``(N,)``.
        num_classes: ``C`` or ``None`` (as :func:`class_stats`); a missing class raises.

    Returns:
        float64 tensor ``(d, d)`` on ``z``'s device, symmetrised.

    Shape:
        ``z`` ``(N, d)``, ``labels`` ``(N,)`` -> ``(d, d)``.

    Raises:
        ValueError: as :func:`class_stats`; a missing class; ``Sigma_B`` beyond the float64
            range (naming ``z``).
    """
    zt, y, C, classes = batch(z, labels, num_classes)
    st, s = _scaled_stats(zt, y, C, classes, covariance=False)
    _require_complete(st, "labels", "Sigma_B", min_classes=1)
    return rescaled(_between(st.means, st.global_mean, "z"), s, 2, "z", "Sigma_B")
