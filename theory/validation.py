"""Scalar-argument validators shared by the ``theory`` modules.

Every public function of the package validates its scalar arguments at the boundary and raises
``ValueError`` naming the argument and the bad value (DESIGN.md, conventions). These two helpers
are the single implementation of that rule for real and integer scalars::

    tau = real("tau", tau, lo=0, lo_open=True)        # finite, > 0
    q = real("q", q, lo=0, hi=1)                       # finite, in [0, 1]
    K = integer("num_negatives", num_negatives, lo=1)  # int >= 1, bool rejected

Messages read ``"<name> must be <condition>, got <value>"``, e.g. ``"tau must be > 0, got 0"``,
``"eps must be in (0, 0.5], got 0.7"``, ``"tau must be a finite real number, got inf"``,
``"num_negatives must be an integer >= 1, got True"``.
"""

from __future__ import annotations

import math
import numbers

import numpy as np

__all__ = ["real", "integer"]


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
