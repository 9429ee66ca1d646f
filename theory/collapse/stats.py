"""The statistics kernel of the collapse metrics: validated inputs, class counts and means, the
global mean, Sigma_W and Sigma_B (notation: :mod:`theory.collapse`).

Papyan, Han & Donoho (PNAS 2020), spec/metrics.md §0. The batch metrics
(:mod:`~theory.collapse.paper`, :mod:`~theory.collapse.standard`) and the streaming
:class:`~theory.collapse.streaming.ClassStatsAccumulator` compute their covariances with the same
kernels (:func:`_covariance_from_scatter`, :func:`_between_from_means`), so both paths share every
operation after the per-class statistics.

Every statistic is computed in float64 on the input's device.
"""

from __future__ import annotations

import functools

import numpy as np
import torch

from theory.validation import integer, real

__all__ = [
    "SPECTRUM_FLOOR",
    "class_means",
    "class_counts",
    "global_mean",
    "within_class_covariance",
    "between_class_covariance",
]

#: Default floor of the spectra: a singular value below ``SPECTRUM_FLOOR * sigma_max`` (in
#: particular an exact zero) is reported as ``log(SPECTRUM_FLOOR)`` = -69.08 instead of -inf.
#: The authors plot the spectrum on [-35, 2]; float64 round-off of a rank-deficient covariance
#: sits near 1e-32 relative (squared singular values of the centred means), so "at the floor"
#: means "zero to working precision".
SPECTRUM_FLOOR = 1e-30

_F64 = torch.float64
_EPS64 = float(np.finfo(np.float64).eps)


# --------------------------------------------------------------------------------------------
# Input handling
# --------------------------------------------------------------------------------------------


def _to_tensor(x, name: str) -> torch.Tensor:
    if isinstance(x, torch.Tensor):
        return x.detach()
    if isinstance(x, np.ndarray):
        return torch.from_numpy(np.ascontiguousarray(x))
    try:
        return torch.as_tensor(np.asarray(x))
    except Exception as exc:
        raise ValueError(f"{name} must be a torch tensor or numpy array, got {type(x).__name__}") from exc


def _features(x, name: str = "z", min_rows: int = 1) -> torch.Tensor:
    """``x`` as a 2-D float64 torch tensor (same device), validated."""
    t = _to_tensor(x, name)
    if t.dim() != 2:
        raise ValueError(f"{name} must be 2-D (rows, d), got shape {tuple(t.shape)}")
    if t.dtype == torch.bool or t.is_complex():
        raise ValueError(f"{name} must be a real floating array, got dtype {t.dtype}")
    t = t.to(_F64)
    if t.shape[0] < min_rows:
        raise ValueError(f"{name} needs at least {min_rows} rows, got shape {tuple(t.shape)}")
    if t.shape[1] < 1:
        raise ValueError(f"{name} must have at least one column, got shape {tuple(t.shape)}")
    if not bool(torch.isfinite(t).all()):
        raise ValueError(f"{name} contains non-finite values (NaN or inf)")
    return t


def _check_num_classes(num_classes) -> int | None:
    return None if num_classes is None else integer("num_classes", num_classes, lo=1)


def _labels(labels, n: int, num_classes, device, name: str = "labels") -> tuple[torch.Tensor, int]:
    """Validated int64 labels of length ``n`` and the number of classes ``C``."""
    num_classes = _check_num_classes(num_classes)
    y = _to_tensor(labels, name)
    if y.dim() != 1:
        raise ValueError(f"{name} must be 1-D (N,), got shape {tuple(y.shape)}")
    if y.dtype == torch.bool or y.is_floating_point() or y.is_complex():
        raise ValueError(f"{name} must hold integers, got dtype {y.dtype}")
    if y.shape[0] != n:
        raise ValueError(f"{name} has length {y.shape[0]} but the features have {n} rows")
    y = y.to(device=device, dtype=torch.int64)
    if n == 0:
        raise ValueError(f"{name} is empty")
    lo, hi = int(y.min()), int(y.max())
    if lo < 0:
        raise ValueError(f"{name} must be >= 0, got a label {lo}")
    C = hi + 1 if num_classes is None else num_classes
    if hi >= C:
        raise ValueError(f"{name} must be < num_classes = {C}, got a label {hi}")
    return y, C


def _means64(z: torch.Tensor, y: torch.Tensor, C: int, name: str = "labels"):
    """Per-class counts ``(C,)`` and float64 means ``(C, d)``; ValueError on an empty class."""
    counts = torch.bincount(y, minlength=C)
    empty = torch.nonzero(counts == 0).flatten()
    if empty.numel() > 0:
        shown = empty[:10].tolist()
        raise ValueError(
            f"{name}: class(es) {shown}{' ...' if empty.numel() > 10 else ''} have no sample "
            f"(C = {C}); their class mean is undefined"
        )
    sums = torch.zeros(C, z.shape[1], dtype=_F64, device=z.device).index_add_(0, y, z)
    return counts, sums / counts.to(_F64).unsqueeze(1)


def _class_means_input(mu, name: str = "mu", min_classes: int = 2) -> torch.Tensor:
    t = _features(mu, name)
    if t.shape[0] < min_classes:
        raise ValueError(f"{name} needs at least {min_classes} classes (rows), got shape {tuple(t.shape)}")
    return t


def _global_mean(mu: torch.Tensor, global_mean) -> torch.Tensor:
    if global_mean is None:
        return mu.mean(dim=0)
    g = _to_tensor(global_mean, "global_mean")
    if g.dim() != 1 or g.shape[0] != mu.shape[1]:
        raise ValueError(
            f"global_mean must have shape ({mu.shape[1]},) to match mu, got {tuple(g.shape)}"
        )
    g = g.to(device=mu.device, dtype=_F64)
    if not bool(torch.isfinite(g).all()):
        raise ValueError("global_mean contains non-finite values")
    return g


_check_floor = functools.partial(real, "floor", lo=0, hi=1, hi_open=True)


def _unit_rows(m: torch.Tensor) -> torch.Tensor:
    """Rows divided by their norm; an exactly-zero row stays zero (its cosines are 0)."""
    norms = torch.linalg.vector_norm(m, dim=1, keepdim=True)
    return m / torch.where(norms > 0, norms, torch.ones_like(norms))


def _offdiag(a: torch.Tensor) -> torch.Tensor:
    C = a.shape[0]
    return a[~torch.eye(C, dtype=torch.bool, device=a.device)]


# --------------------------------------------------------------------------------------------
# The kernel: per-class statistics -> covariances (shared by the batch and streaming paths)
# --------------------------------------------------------------------------------------------


def _symmetrised(m: torch.Tensor) -> torch.Tensor:
    """``(m + m^T) / 2``: exactly symmetric (and the identity on an exactly symmetric ``m``)."""
    return (m + m.T) / 2


def _covariance_from_scatter(scatter: torch.Tensor, n: int | float) -> torch.Tensor:
    """``Sigma_W = S_W / N`` from the within-class scatter ``S_W = sum_i r_i r_i^T``, symmetrised."""
    return _symmetrised(scatter / n)


def _between_from_means(mu: torch.Tensor, mu_g: torch.Tensor) -> torch.Tensor:
    """``Sigma_B = (1/C) sum_c (mu_c - mu_G)(mu_c - mu_G)^T`` ``(d, d)``, symmetrised."""
    c = mu - mu_g
    return _symmetrised(c.T @ c / mu.shape[0])


def _batch_stats(z, labels, num_classes) -> tuple[torch.Tensor, torch.Tensor, int, torch.Tensor, torch.Tensor]:
    """Validated ``(zt, y, C, counts, mu)`` of a labelled batch (float64 features and means)."""
    zt = _features(z, "z")
    y, C = _labels(labels, zt.shape[0], num_classes, zt.device)
    counts, mu = _means64(zt, y, C)
    return zt, y, C, counts, mu


# --------------------------------------------------------------------------------------------
# Public statistics
# --------------------------------------------------------------------------------------------


def class_means(z, labels, num_classes: int | None = None):
    """Uncentred class means ``mu_c = (1/n_c) sum_{i: labels_i = c} z_i`` ("paper" and standard).

    Shapes: ``z`` ``(N, d)``, ``labels`` ``(N,)`` -> ``(C, d)``.

    Sums are accumulated in float64; the result has the container type of ``z`` (torch tensor on
    the same device, or numpy array) and its float dtype (half precision is returned as float32).
    The HCL authors average the unit-ball-normalised projector outputs of the training set
    (spec/hcl.md §5.4, the ``feature_bank`` entries).

    Args:
        z: features ``(N, d)``.
        labels: integer labels ``(N,)`` in ``[0, C)``.
        num_classes: ``C``; default ``labels.max() + 1``.

    Raises:
        ValueError: non-2-D ``z``, length mismatch, labels out of range, or an empty class.
    """
    zt = _features(z, "z")
    y, C = _labels(labels, zt.shape[0], num_classes, zt.device)
    _, mu = _means64(zt, y, C)
    if isinstance(z, torch.Tensor):
        out_dtype = z.dtype if z.dtype in (torch.float32, torch.float64) else torch.float32
        return mu.to(out_dtype)
    z_np = np.asarray(z)
    out_dtype = z_np.dtype if z_np.dtype in (np.float32, np.float64) else np.float32
    return mu.cpu().numpy().astype(out_dtype, copy=False)


def class_counts(labels, num_classes: int | None = None) -> torch.Tensor:
    """Per-class sample counts ``n_c = #{i : labels_i = c}``, an int64 tensor ``(C,)``.

    Shapes: ``labels`` ``(N,)`` -> ``(C,)``. Classes without a sample count 0 (no error).

    Args:
        labels: integer labels ``(N,)`` in ``[0, C)``.
        num_classes: ``C``; default ``labels.max() + 1``.

    Raises:
        ValueError: non-1-D or non-integer labels, labels out of range, or no label at all.
    """
    t = _to_tensor(labels, "labels")
    y, C = _labels(t, t.shape[0] if t.dim() >= 1 else -1, num_classes, t.device)
    return torch.bincount(y, minlength=C)


def global_mean(z) -> torch.Tensor:
    """Sample mean ``mu_G = (1/N) sum_i z_i`` of the features, a float64 tensor ``(d,)``.

    Papyan et al. (2020); equals the mean of the class means only for balanced classes
    (spec/metrics.md pitfall 3). Shapes: ``z`` ``(N, d)`` -> ``(d,)``.
    """
    return _features(z, "z").mean(dim=0)


def within_class_covariance(z, labels, num_classes: int | None = None) -> torch.Tensor:
    """``Sigma_W = (1/N) sum_i (z_i - mu_{y_i})(z_i - mu_{y_i})^T``, ``(d, d)`` float64 tensor.

    Papyan, Han & Donoho (PNAS 2020), spec/metrics.md §0. Symmetrised.
    """
    zt, y, _, _, mu = _batch_stats(z, labels, num_classes)
    r = zt - mu[y]
    return _covariance_from_scatter(r.T @ r, zt.shape[0])


def between_class_covariance(z, labels, num_classes: int | None = None) -> torch.Tensor:
    """``Sigma_B = (1/C) sum_c (mu_c - mu_G)(mu_c - mu_G)^T``, ``(d, d)`` float64 tensor.

    ``mu_G`` is the sample mean of ``z`` (Papyan et al. 2020), spec/metrics.md §0. Symmetrised.
    """
    zt, _, _, _, mu = _batch_stats(z, labels, num_classes)
    return _between_from_means(mu, zt.mean(dim=0))
