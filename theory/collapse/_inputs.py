"""The input rule of the collapse metrics: arrays, devices, dtypes, finiteness and labels.

One rule for every public function of :mod:`theory.collapse` (docs/metrics.md, "Inputs, labels
and missing classes"):

* **containers**: torch tensors, numpy arrays, or anything :func:`numpy.asarray` turns into a
  numeric array. A numpy array is wrapped with :func:`torch.from_numpy` (no copy; only arrays
  with negative strides or a non-native byte order are copied). Tensors are detached.
* **devices**: statistics are computed on the device of the primary argument (``z``, ``mu``,
  ``matrix`` or ``train_z``); the other arguments are moved there. Meta tensors carry no data and
  are rejected (``ValueError`` naming the argument), as are sparse tensors.
* **dtypes**: features may be any real floating or integer dtype (half precision included); they
  are converted to float64 before any arithmetic. ``bool`` and complex dtypes are rejected.
* **finiteness**: one fused check per feature tensor (``torch.isfinite(x).all()``, fetched in the
  same host transfer as the label range); NaN or inf raise ``ValueError`` naming the argument.
* **labels**: 1-D integers ``>= 0``. With ``num_classes`` given, labels must lie in
  ``[0, num_classes)`` and row ``c`` of every per-class result belongs to label ``c`` (a class
  without a sample is *missing*). Without it, the labels are relabelled compactly to
  ``0..C-1`` in increasing order of their values (``torch.unique``), so ``C`` is the number of
  distinct labels, no class is missing, and the memory is ``O(N)`` whatever the label values
  ({0, 2**40} costs nothing).

This module is private to :mod:`theory.collapse`; the shared :mod:`theory.validation` scalar
validators (:func:`~theory.validation.integer`, :func:`~theory.validation.real`) are reused.
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from typing import Any, TypeAlias

import numpy as np
import numpy.typing as npt
import torch

from theory.validation import check_size, integer

__all__ = [
    "ArrayLike",
    "F64",
    "EPS64",
    "as_tensor",
    "features",
    "labels_of",
    "check_num_classes",
    "check_class_memory",
]

#: What the public functions accept as a tensor argument.
ArrayLike: TypeAlias = torch.Tensor | npt.NDArray[Any] | Sequence[Any]

F64 = torch.float64
EPS64 = float(np.finfo(np.float64).eps)


def as_tensor(x: object, name: str) -> torch.Tensor:
    """``x`` as a detached torch tensor (numpy wrapped without copy where numpy allows).

    Raises:
        ValueError: ``x`` is not array-like, is a meta or sparse tensor, or has a dtype torch
            cannot represent (object, string, ...); the message names ``name``.
    """
    if isinstance(x, torch.Tensor):
        t = x.detach()
    else:
        try:
            a = x if isinstance(x, np.ndarray) else np.asarray(x)
        except (ValueError, TypeError) as exc:
            raise ValueError(f"{name} must be a torch tensor or numpy array, got {type(x).__name__}") from exc
        if a.dtype.kind not in "biufc":
            raise ValueError(f"{name} must hold numbers, got a numpy array of dtype {a.dtype}")
        try:
            with warnings.catch_warnings():  # read-only arrays: nothing here writes to the input
                warnings.simplefilter("ignore", UserWarning)
                t = torch.from_numpy(a)
        except (ValueError, TypeError):  # negative strides, non-native byte order, ...
            try:
                t = torch.from_numpy(np.ascontiguousarray(a, dtype=a.dtype.newbyteorder("=")))
            except (ValueError, TypeError) as exc:
                raise ValueError(f"{name} has a dtype torch cannot represent: {a.dtype}") from exc
    if t.is_meta:
        raise ValueError(f"{name} is a meta tensor (it holds no data); pass a tensor on a real device")
    if t.layout != torch.strided:
        raise ValueError(f"{name} must be a dense (strided) tensor, got layout {t.layout}")
    return t


def _real_dtype(t: torch.Tensor, name: str, what: str) -> None:
    if t.dtype == torch.bool or t.is_complex():
        raise ValueError(f"{name} must be a real {what} array, got dtype {t.dtype}")


def _shape2d(t: torch.Tensor, name: str, min_rows: int) -> None:
    if t.dim() != 2:
        raise ValueError(f"{name} must be 2-D (rows, d), got shape {tuple(t.shape)}")
    if t.shape[0] < min_rows:
        raise ValueError(f"{name} needs at least {min_rows} row(s), got shape {tuple(t.shape)}")
    if t.shape[1] < 1:
        raise ValueError(f"{name} must have at least one column, got shape {tuple(t.shape)}")


def _raise_non_finite(name: str) -> None:
    raise ValueError(f"{name} contains non-finite values (NaN or inf)")


def features(
    x: object, name: str = "z", min_rows: int = 1, device: torch.device | None = None
) -> torch.Tensor:
    """``x`` as a validated 2-D float64 tensor (on ``device`` if given, else its own).

    Raises:
        ValueError: not 2-D, too few rows, no column, bool/complex dtype, NaN or inf, meta tensor.
    """
    t = as_tensor(x, name)
    _real_dtype(t, name, "floating")
    _shape2d(t, name, min_rows)
    t = t.to(device=device, dtype=F64)
    if not bool(torch.isfinite(t).all()):
        _raise_non_finite(name)
    return t


def vector(x: object, name: str, length: int, device: torch.device) -> torch.Tensor:
    """A finite float64 vector of shape ``(length,)``; a scalar is broadcast to it."""
    t = as_tensor(x, name)
    _real_dtype(t, name, "floating")
    if t.dim() == 0:
        t = t.expand(length)
    if t.dim() != 1 or t.shape[0] != length:
        raise ValueError(f"{name} must have shape ({length},) (or be a scalar), got {tuple(t.shape)}")
    t = t.to(device=device, dtype=F64)
    if not bool(torch.isfinite(t).all()):
        _raise_non_finite(name)
    return t


def check_num_classes(num_classes: object) -> int | None:
    """``None`` or a validated integer ``>= 1``."""
    return None if num_classes is None else integer("num_classes", num_classes, lo=1)


def check_class_memory(C: int, d: int, device: torch.device | str | None, covariance: bool = False) -> None:
    """``ValueError`` naming ``num_classes`` when the per-class statistics cannot be allocated.

    The statistics kernel holds about three ``(C, d)`` float64 matrices (sums, means, a work copy)
    and four ``(C,)`` vectors, plus the ``(d, d)`` scatter with ``covariance``
    (:func:`theory.validation.check_size`).
    """
    nbytes = 8 * (3 * C * d + 4 * C + (d * d if covariance else 0))
    check_size("num_classes", C, nbytes, what=f"per-class float64 statistics ({C}, {d})", device=device)


def labels_of(
    labels: object,
    n: int,
    num_classes: object,
    device: torch.device,
    name: str = "labels",
    finite: torch.Tensor | None = None,
    finite_name: str = "z",
) -> tuple[torch.Tensor, int, torch.Tensor]:
    """Validated labels as ``(y, C, classes)``: int64 row indices ``y`` ``(n,)`` in ``[0, C)``.

    ``classes`` ``(C,)`` int64 holds the label value of each row: ``arange(C)`` when
    ``num_classes`` is given, the sorted distinct labels otherwise (compact relabelling).

    ``finite`` (optional, a 0-d bool tensor ``isfinite(z).all()``) is fetched in the same host
    transfer as the label range, so a validated batch costs one device synchronisation.

    Raises:
        ValueError: not 1-D integers, wrong length, empty, negative, ``>= num_classes``; or
            ``finite`` false (naming ``finite_name``).
    """
    C = check_num_classes(num_classes)
    if C is not None:
        check_size("num_classes", C, 16 * C, what="per-class int64 counts and label values", device=device)
    y = as_tensor(labels, name)
    if y.dim() != 1:
        raise ValueError(f"{name} must be 1-D (N,), got shape {tuple(y.shape)}")
    if y.dtype == torch.bool or y.is_floating_point() or y.is_complex():
        raise ValueError(f"{name} must hold integers, got dtype {y.dtype}")
    if y.shape[0] != n:
        raise ValueError(f"{name} has length {y.shape[0]} but the features have {n} rows")
    if n == 0:
        raise ValueError(f"{name} is empty (no sample)")
    y = y.to(device=device, dtype=torch.int64)
    parts = [y.min(), y.max()]
    if finite is not None:
        parts.append(finite.to(device=device, dtype=torch.int64))
    host = torch.stack(parts).tolist()  # one host transfer
    if finite is not None and not host[2]:
        _raise_non_finite(finite_name)
    lo, hi = int(host[0]), int(host[1])
    if lo < 0:
        raise ValueError(f"{name} must be >= 0, got a label {lo}")
    if C is not None:
        if hi >= C:
            raise ValueError(f"{name} must be < num_classes = {C}, got a label {hi}")
        return y, C, torch.arange(C, device=device)
    classes, inverse = torch.unique(y, sorted=True, return_inverse=True)
    return inverse, int(classes.numel()), classes


def batch(
    z: object, labels: object, num_classes: object, name: str = "z", labels_name: str = "labels"
) -> tuple[torch.Tensor, torch.Tensor, int, torch.Tensor]:
    """A validated labelled batch ``(zt, y, C, classes)`` with one device synchronisation.

    ``zt`` float64 ``(N, d)`` on the device of ``z``; ``y``, ``C``, ``classes`` as
    :func:`labels_of`.
    """
    t = as_tensor(z, name)
    _real_dtype(t, name, "floating")
    _shape2d(t, name, 1)
    t = t.to(F64)
    C_given = check_num_classes(num_classes)
    if C_given is not None:
        check_class_memory(C_given, t.shape[1], t.device)
    y, C, classes = labels_of(
        labels, t.shape[0], num_classes, t.device, labels_name, torch.isfinite(t).all(), name
    )
    return t, y, C, classes
