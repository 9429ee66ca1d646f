"""Input validators shared by the ``theory`` modules.

Every public function of the package validates its arguments at the boundary and raises
``ValueError`` naming the argument and the bad value (DESIGN.md, conventions). These helpers are
the single implementation of that rule for real and integer scalars, option literals, floating
tensors and integer label vectors::

    tau = real("tau", tau, lo=0, lo_open=True)        # finite, > 0
    q = real("q", q, lo=0, hi=1)                       # finite, in [0, 1]
    K = integer("num_negatives", num_negatives, lo=1)  # int >= 1, bool rejected
    psi = one_of("psi", psi, PSI_FORMS)                # one of theory.options.PSI_FORMS
    z = as_float_tensor(z)                             # floating tensor, >= float32
    labels = as_labels(labels, B, z.device)            # (B,) int64 in [0, num_classes)
    y = as_finite_1d("y", y)                           # float64 numpy (n,), finite, non-empty

Messages read ``"<name> must be <condition>, got <value>"``, e.g. ``"tau must be > 0, got 0"``,
``"eps must be in (0, 0.5], got 0.7"``, ``"tau must be a finite real number, got inf"``,
``"num_negatives must be an integer >= 1, got True"``,
``"psi must be one of ('mean', 'sum', 'triplet'), got 'max'"``.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Collection
from typing import Any

import numpy as np
import torch

__all__ = ["real", "integer", "one_of", "as_float_tensor", "as_labels", "as_finite_1d"]


def _interval(lo, lo_open: bool, hi, hi_open: bool) -> str:
    """Human-readable range: ``"> 0"``, ``"<= 1"`` or ``"in [0, 1)"``; empty without bounds."""
    if lo is not None and hi is not None:
        return f"in {'(' if lo_open else '['}{lo}, {hi}{')' if hi_open else ']'}"
    if lo is not None:
        return f"{'>' if lo_open else '>='} {lo}"
    if hi is not None:
        return f"{'<' if hi_open else '<='} {hi}"
    return ""


def real(
    name: str,
    value,
    *,
    lo: float | None = None,
    lo_open: bool = False,
    hi: float | None = None,
    hi_open: bool = False,
    allow_inf: bool = False,
) -> float:
    """Validate a real scalar and return it as a Python ``float``.

    Accepts Python and numpy real numbers and one-element tensors (anything ``float()`` takes except
    ``bool``, strings and bytes, which are rejected).
    NaN is always rejected; ``+-inf`` only passes with ``allow_inf=True`` (and the bounds).

    Args:
        name: argument name used in the error message.
        value: the value to check.
        lo: lower bound, or ``None`` for none; ``value >= lo`` (``> lo`` if ``lo_open``).
        lo_open: exclude ``lo`` itself.
        hi: upper bound, or ``None`` for none; ``value <= hi`` (``< hi`` if ``hi_open``).
        hi_open: exclude ``hi`` itself.
        allow_inf: accept ``+-inf`` (still subject to ``lo``/``hi``).

    Returns:
        ``float(value)``.

    Raises:
        ValueError: ``value`` is not a real number, is NaN, is infinite without ``allow_inf``,
            or lies outside the bounds; the message names ``name`` and ``value``.
    """
    if isinstance(value, (bool, str, bytes, np.bool_)):
        raise ValueError(f"{name} must be a real number, got {value!r}")
    try:
        v = float(value)
    except (TypeError, ValueError, RuntimeError) as exc:  # RuntimeError: multi-element tensors
        raise ValueError(f"{name} must be a real number, got {value!r}") from exc
    if math.isnan(v):
        raise ValueError(f"{name} must be a {'real number (not NaN)' if allow_inf else 'finite real number'}, "
                         f"got {value!r}")
    if math.isinf(v) and not allow_inf:
        raise ValueError(f"{name} must be a finite real number, got {value!r}")
    if (lo is not None and (v < lo or (lo_open and v == lo))) or (
        hi is not None and (v > hi or (hi_open and v == hi))
    ):
        raise ValueError(f"{name} must be {_interval(lo, lo_open, hi, hi_open)}, got {value!r}")
    return v


def integer(name: str, value, *, lo: int | None = None, hi: int | None = None) -> int:
    """Validate an integer scalar and return it as a Python ``int``.

    Accepts Python ints and any ``numbers.Integral`` (numpy integers included); rejects ``bool``,
    floats (even integral ones such as ``3.0``), strings and tensors.

    Args:
        name: argument name used in the error message.
        value: the value to check.
        lo: inclusive lower bound, or ``None``.
        hi: inclusive upper bound, or ``None``.

    Returns:
        ``int(value)``.

    Raises:
        ValueError: ``value`` is not an integer or lies outside ``[lo, hi]``; the message names
            ``name`` and ``value``.
    """
    ok = isinstance(value, numbers.Integral) and not isinstance(value, bool)
    if ok:
        v = int(value)
        ok = (lo is None or v >= lo) and (hi is None or v <= hi)
    if not ok:
        rng = _interval(lo, False, hi, False)
        raise ValueError(f"{name} must be an integer{' ' + rng if rng else ''}, got {value!r}")
    return v


def one_of(name: str, value: Any, options: Collection) -> Any:
    """Validate an option literal: ``value`` must be one of ``options`` (a :mod:`theory.options`
    tuple or table).

    Returns:
        ``value`` unchanged.

    Raises:
        ValueError: ``"<name> must be one of <options>, got <value>"``.
    """
    try:
        ok = value in options
    except TypeError:  # unhashable value against a dict / set of options
        ok = False
    if not ok:
        raise ValueError(f"{name} must be one of {tuple(options)}, got {value!r}")
    return value


def as_float_tensor(z, name: str = "z", min_dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """Return ``z`` as a floating torch tensor of at least ``min_dtype`` precision.

    Half-precision inputs (float16, bfloat16) are promoted to float32 so statistics are never
    computed in 16 bits; float64 stays float64; integer and bool inputs become the default float
    dtype. numpy arrays are converted without copying where possible.

    Raises:
        ValueError: ``z`` cannot be converted to a tensor, or is complex.
    """
    if not isinstance(z, torch.Tensor):
        try:
            z = torch.as_tensor(z)
        except Exception as exc:  # pragma: no cover - defensive
            raise ValueError(f"{name} must be a tensor or array, got {type(z).__name__}") from exc
    if z.is_complex():
        raise ValueError(f"{name} must be real, got dtype {z.dtype}")
    if not z.is_floating_point():
        z = z.to(torch.get_default_dtype())
    if z.dtype in (torch.float16, torch.bfloat16) or (
        z.dtype == torch.float32 and min_dtype == torch.float64
    ):
        z = z.to(min_dtype)
    return z


def as_labels(labels, B: int, device, num_classes: int | None = None) -> torch.Tensor:
    """Integer labels of a batch of ``B`` embeddings as an int64 tensor on ``device``.

    Shapes: ``labels`` ``(B,)`` -> ``(B,)`` int64.

    Raises:
        ValueError: wrong shape, a non-integer dtype, a negative label, or a label
            ``>= num_classes`` when ``num_classes`` is given.
    """
    labels = torch.as_tensor(labels, device=device)
    if labels.dim() != 1 or labels.shape[0] != B:
        raise ValueError(f"labels must have shape ({B},) to match z, got {tuple(labels.shape)}")
    if labels.is_floating_point() or labels.is_complex() or labels.dtype == torch.bool:
        raise ValueError(f"labels must be integers, got dtype {labels.dtype}")
    labels = labels.long()
    if B and int(labels.min()) < 0:
        raise ValueError(f"labels must be >= 0, got min {int(labels.min())}")
    if num_classes is not None and B and int(labels.max()) >= num_classes:
        raise ValueError(
            f"labels must lie in [0, num_classes={num_classes}), got max {int(labels.max())}"
        )
    return labels


def as_finite_1d(name: str, x) -> np.ndarray:
    """``x`` (tensor, array or sequence, any shape) flattened to a finite float64 numpy array.

    Raises:
        ValueError: ``x`` is empty or holds NaN / inf.
    """
    if isinstance(x, torch.Tensor):
        x = x.detach().cpu().double().numpy()
    a = np.asarray(x, dtype=np.float64).reshape(-1)
    if a.size == 0:
        raise ValueError(f"{name} must be non-empty")
    if not np.all(np.isfinite(a)):
        raise ValueError(f"{name} must be finite (found NaN or inf)")
    return a
