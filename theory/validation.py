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
    x = as_tensor(x, "x", device=z.device)             # the input rule below
    check_embeddings(z, scale=1 / tau)                 # finite, similarities cannot overflow
    check_size("num_negatives", K, P * K * 24, what="(P, K) draws", device=z.device)

The input rule for tensor arguments (docs/README.md#conventions), implemented once in
:func:`as_tensor`: torch tensors, numpy arrays (converted with ``torch.as_tensor``, without a
copy) and nested Python sequences of numbers are accepted; results live on the device of the main
tensor argument (``z``), and the other tensor arguments are moved there; meta tensors (which hold
no data to validate; accepted only by the losses with ``check_inputs=False``, whose device path reads
no values) and complex tensors are rejected with a ``ValueError`` naming the argument.

Messages read ``"<name> must be <condition>, got <value>"``, e.g. ``"tau must be > 0, got 0"``,
``"eps must be in (0, 0.5], got 0.7"``, ``"tau must be a finite real number, got inf"``,
``"num_negatives must be an integer >= 1, got True"``,
``"psi must be one of ('mean', 'sum', 'triplet'), got 'max'"``.
"""

from __future__ import annotations

import math
import numbers
import os
from collections.abc import Collection
from typing import Any

import numpy as np
import torch

from theory import options

__all__ = [
    "real",
    "integer",
    "one_of",
    "as_float_tensor",
    "as_labels",
    "as_finite_1d",
    "as_tensor",
    "integer_tensor",
    "check_label_range",
    "check_embeddings",
    "floating_dtype",
    "memory_limit",
    "check_size",
]


def _interval(lo: float | None, lo_open: bool, hi: float | None, hi_open: bool) -> str:
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
    value: Any,
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
        raise ValueError(
            f"{name} must be a {'real number (not NaN)' if allow_inf else 'finite real number'}, "
            f"got {value!r}"
        )
    if math.isinf(v) and not allow_inf:
        raise ValueError(f"{name} must be a finite real number, got {value!r}")
    if (lo is not None and (v < lo or (lo_open and v == lo))) or (
        hi is not None and (v > hi or (hi_open and v == hi))
    ):
        raise ValueError(f"{name} must be {_interval(lo, lo_open, hi, hi_open)}, got {value!r}")
    return v


def integer(name: str, value: Any, *, lo: int | None = None, hi: int | None = None) -> int:
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


def one_of(name: str, value: Any, options: Collection[Any]) -> Any:
    """Validate an option literal: ``value`` must be one of ``options``.

    ``options`` is a :mod:`theory.options` tuple or table.

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


def as_float_tensor(
    z: Any, name: str = "z", min_dtype: torch.dtype = torch.float32, *, allow_meta: bool = False
) -> torch.Tensor:
    """Return ``z`` as a floating torch tensor of at least ``min_dtype`` precision.

    The input rule of :func:`as_tensor` (tensors, numpy arrays without a copy, sequences; meta
    and complex tensors rejected), then: half-precision inputs (float16, bfloat16) are promoted to
    float32 so statistics are never computed in 16 bits; float64 stays float64; integer and bool
    inputs are promoted to the default floating dtype (``torch.get_default_dtype()``).

    Raises:
        ValueError: ``z`` cannot be converted to a tensor, is on the meta device, or is complex.
    """
    t = as_tensor(z, name, allow_meta=allow_meta)
    if not t.is_floating_point():
        t = t.to(torch.get_default_dtype())
    if t.dtype in (torch.float16, torch.bfloat16) or (
        t.dtype == torch.float32 and min_dtype == torch.float64
    ):
        t = t.to(min_dtype)
    return t


def as_labels(
    labels: Any,
    B: int,
    device: torch.device | str | None,
    num_classes: int | None = None,
    *,
    name: str = "labels",
    check: bool = True,
) -> torch.Tensor:
    """Integer labels of a batch of ``B`` embeddings as an int64 tensor on ``device``.

    The input rule of :func:`as_tensor`; then the shape and dtype checks (no data read) and, with
    ``check=True``, the value checks (``>= 0``, ``< num_classes``), which read the data (one
    host synchronisation for device tensors).

    Shapes: ``labels`` ``(B,)`` -> ``(B,)`` int64.

    Raises:
        ValueError: wrong shape, a non-integer dtype, a negative label, or a label
            ``>= num_classes`` when ``num_classes`` is given; the message names ``name``.
    """
    t = as_tensor(labels, name, device=device)
    if t.dim() != 1 or t.shape[0] != B:
        raise ValueError(f"{name} must have shape ({B},) to match z, got {tuple(t.shape)}")
    t = integer_tensor(t, name)
    if check:
        check_label_range(t, name, num_classes)
    return t


def as_finite_1d(name: str, x: Any) -> np.ndarray:
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


# ---------------------------------------------------------------------------------------------
# the input rule for tensor arguments, and the data checks of embeddings and labels


def as_tensor(
    x: Any, name: str, *, device: torch.device | str | None = None, allow_meta: bool = False
) -> torch.Tensor:
    """Apply the project's input rule to a tensor argument (docs/README.md#conventions).

    * ``torch.Tensor``: used as is (moved to ``device`` if given);
    * ``numpy.ndarray``: converted with ``torch.as_tensor`` (no copy on the CPU);
    * nested Python sequences and numbers: ``torch.as_tensor``.

    Meta tensors are rejected (they hold no data, so no value check could run) unless
    ``allow_meta`` (the losses with ``check_inputs=False``, whose device path reads no values),
    and so are complex tensors. The dtype is left unchanged (see :func:`as_float_tensor`, :func:`integer_tensor`).

    Args:
        x: the argument.
        name: its name, for the error messages.
        device: where the result must live (the device of ``z``), or ``None`` to keep it.
        allow_meta: accept a meta tensor (shape only); for callers that read no values.

    Returns:
        ``x`` as a tensor on ``device``.

    Raises:
        ValueError: ``x`` is not convertible to a tensor, is on the meta device, or is complex.
    """
    if isinstance(x, torch.Tensor):
        t = x
    else:
        if isinstance(x, np.ndarray) and x.dtype.kind not in "biufc":
            raise ValueError(f"{name} must be a numeric array, got numpy dtype {x.dtype}")
        try:
            t = torch.as_tensor(x)
        except (TypeError, ValueError, RuntimeError) as exc:
            raise ValueError(
                f"{name} must be a torch tensor, a numpy array or a sequence of numbers, got {type(x).__name__}"
            ) from exc
    if t.is_meta and not allow_meta:
        raise ValueError(
            f"{name} is a meta tensor (shape {tuple(t.shape)}, no data); pass a tensor with data "
            "(only the losses with check_inputs=False accept meta tensors)"
        )
    if t.is_complex():
        raise ValueError(f"{name} must be real, got dtype {t.dtype}")
    if device is not None and t.device != torch.device(device):
        t = t.to(device)
    return t


def integer_tensor(x: torch.Tensor, name: str) -> torch.Tensor:
    """``x`` as int64 after checking that its dtype is an integer type (bool rejected).

    Raises:
        ValueError: ``x`` has a floating, complex or bool dtype.
    """
    if x.is_floating_point() or x.is_complex() or x.dtype == torch.bool:
        raise ValueError(f"{name} must be integers, got dtype {x.dtype}")
    return x.long()


def check_label_range(labels: torch.Tensor, name: str = "labels", num_classes: int | None = None) -> None:
    """Data check of integer labels: ``>= 0`` and, if ``num_classes`` is given, ``< num_classes``.

    Reads the data (one host synchronisation for device tensors).

    Raises:
        ValueError: a negative label or a label ``>= num_classes``; the message names ``name``.
    """
    if labels.numel() == 0:
        return
    lo, hi = (int(v) for v in torch.stack([labels.min(), labels.max()]).tolist())
    if lo < 0:
        raise ValueError(f"{name} must be >= 0, got min {lo}")
    if num_classes is not None and hi >= num_classes:
        raise ValueError(f"{name} must lie in [0, num_classes={num_classes}), got max {hi}")


def floating_dtype(dtype: Any, name: str = "dtype") -> torch.dtype:
    """Validate a floating ``torch.dtype`` argument (float16, bfloat16, float32, float64).

    Raises:
        ValueError: ``dtype`` is not a torch dtype or not a floating one (e.g. ``torch.int64``).
    """
    if not isinstance(dtype, torch.dtype) or not dtype.is_floating_point:
        raise ValueError(f"{name} must be a floating torch dtype, got {dtype!r}")
    return dtype


def check_embeddings(z: torch.Tensor, name: str = "z", *, scale: float = 1.0) -> None:
    """Data check of embeddings whose similarities ``z_i . z_n`` a loss will form.

    One fused pass: the largest row norm, computed in float64 (so it cannot overflow for float32
    or half inputs), read on the host once. Raises if ``z`` holds NaN or inf, or if the scaled
    similarity differences ``scale * (z_i.z_n - z_i.z_m)`` (at most ``2 scale max_i ||z_i||^2``)
    could overflow the dtype of ``z`` (float32 for half inputs): a loss computed from them would
    be inf or NaN. ``scale`` is the largest factor the loss applies to similarities, e.g.
    ``1 / tau``.

    Args:
        z: embeddings ``(..., d)`` (already promoted to the compute dtype).
        name: the argument name for the messages.
        scale: the factor the loss applies to similarity differences (``>= 1`` is assumed safe
            to use as is; smaller values are raised to 1).

    Raises:
        ValueError: ``z`` holds NaN or inf, or its norms are too large for its dtype (the message
            gives the largest squared norm and the remedy).
    """
    if z.numel() == 0:
        return
    top = float(torch.linalg.vector_norm(z.detach(), dim=-1, dtype=torch.float64).amax())
    if not math.isfinite(top) and not bool(torch.isfinite(z).all()):
        raise ValueError(f"{name} must be finite (found NaN or inf)")
    limit = torch.finfo(z.dtype).max / 16.0
    if not math.isfinite(top) or 2.0 * max(1.0, scale) * top * top > limit:
        raise ValueError(
            f"{name} is too large for {z.dtype}: max ||{name}_i||^2 = {top * top:.3g}, so the similarities "
            f"(times {max(1.0, scale):.3g}) overflow; normalise {name} (theory.geometry.normalize) or pass float64"
        )


# ---------------------------------------------------------------------------------------------
# sizes that cannot be allocated


def _total_memory(device: torch.device) -> int | None:
    """The device's total memory in bytes (physical RAM for the CPU), or None if unknown."""
    if device.type == "cuda":
        return int(torch.cuda.get_device_properties(device).total_memory)
    if device.type == "cpu":
        try:
            return int(os.sysconf("SC_PHYS_PAGES")) * int(os.sysconf("SC_PAGE_SIZE"))
        except (AttributeError, ValueError, OSError):  # not a POSIX system
            return None
    return None


def memory_limit(device: torch.device | str | None = None) -> int:
    """The most one call of ``theory`` may allocate on ``device`` (bytes), for :func:`check_size`.

    ``min(theory.options.MEMORY_LIMIT, theory.options.MEMORY_FRACTION * total)`` with ``total`` the
    device's total memory (the physical RAM for the CPU, the GPU's memory for CUDA): 16 GiB, or
    half of a smaller machine. A fixed cap as well as a fraction, so that a size the package can
    never need is refused on every machine alike, and a large machine is not filled by one call;
    the total (not the currently free) memory, so that the verdict does not depend on what else
    runs (a call just under the limit can still fail in the allocator when memory is in use).
    """
    cap = int(options.MEMORY_LIMIT)  # read at call time: a session may change it
    total = _total_memory(torch.device(device if device is not None else "cpu"))
    return cap if total is None else min(cap, int(options.MEMORY_FRACTION * total))


def _bytes(n: int) -> str:
    """``"7.45 GiB"``, ``"1,430 GiB"``, ``"512 MiB"``."""
    gib = n / 2**30
    if gib >= 100:
        return f"{gib:,.0f} GiB"
    return f"{gib:.3g} GiB" if n >= 2**30 else f"{n / 2**20:.3g} MiB"


def check_size(
    name: str, value: Any, nbytes: int, *, what: str, device: torch.device | str | None = None
) -> None:
    """``ValueError`` when a call would allocate more than :func:`memory_limit` on ``device``.

    Args:
        name: the argument whose size decides (``"num_negatives"``, ``"num_classes"``, ...).
        value: its value (shown in the message), e.g. ``10**9`` or ``"(100000, 100000)"``.
        nbytes: the bytes the call would allocate (its dominant buffers).
        what: what those buffers are, e.g. ``"the (P, K) float64 uniforms and indices"``.
        device: where they would live (default the CPU).

    Raises:
        ValueError: ``"num_negatives = 1000000000 needs 44.7 GiB (2 pairs x 1000000000 draws:
            int64 indices and float64 uniforms), over the memory limit of 11.8 GiB (the smaller of
            theory.options.MEMORY_LIMIT = 16 GiB and 0.5 x the 23.5 GiB of the device); pass a
            smaller num_negatives"``.
    """
    limit = memory_limit(device)
    if nbytes > limit:
        total = _total_memory(torch.device(device if device is not None else "cpu"))
        of_total = (
            "" if total is None else f" and {options.MEMORY_FRACTION:g} x the {_bytes(total)} of the device"
        )
        raise ValueError(
            f"{name} = {value} needs {_bytes(nbytes)} ({what}), over the memory limit of {_bytes(limit)} "
            f"(the smaller of theory.options.MEMORY_LIMIT = {_bytes(int(options.MEMORY_LIMIT))}{of_total}); "
            f"pass a smaller {name}"
        )
