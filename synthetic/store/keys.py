"""The canonical run key: a run's identity is the hash of its resolved config.

:func:`run_key` hashes the canonical JSON of a config's ``identity_dict()`` (SHA-1, 16 hex
digits); :func:`canonical_value` makes equal values hash equally: ``-0.0`` becomes ``0.0``, numpy
scalars become Python scalars, an integer in a field whose reference value is a float becomes
that float, and NaN or infinite values are rejected (a key of NaN would never equal itself).
Values that were already canonical hash exactly as before, so the keys of stored runs do not
change. Both training stacks use it (``RunConfig.key()``, ``TrainConfig.key()``).
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Mapping
from typing import Any

__all__ = ["canonical_value", "canonical_identity", "run_key"]

#: Length of a run key (hex digits of the SHA-1 of the canonical identity).
KEY_LENGTH = 16


def canonical_value(value: Any, like: Any = None, *, name: str = "value") -> Any:
    """The canonical form of one config value, as hashed by :func:`run_key`.

    Args:
        value: a JSON-like value (None, bool, int, float, str, list/tuple, dict; numpy scalars).
        like: a reference value of the same field (e.g. its default): an int ``value`` becomes a
            float when ``like`` is a float, so ``beta = 2`` and ``beta = 2.0`` hash equally.
        name: the field's name in error messages.

    Returns:
        ``-0.0`` -> ``0.0``; numpy scalars -> Python scalars; lists and tuples -> lists;
        dict keys -> str; everything else unchanged.

    Raises:
        ValueError: a NaN or infinite number, or a value of another type.
    """
    if hasattr(value, "item") and not isinstance(value, (str, bytes, list, tuple, dict)):
        value = value.item()  # numpy scalar
    if value is None or isinstance(value, (bool, str)):
        return value
    if isinstance(value, int):
        if isinstance(like, float) and not isinstance(like, bool):
            return canonical_value(float(value), name=name)
        return int(value)
    if isinstance(value, float):
        if not math.isfinite(value):
            raise ValueError(f"{name} must be a finite number in a run key, got {value!r}")
        return value + 0.0  # -0.0 + 0.0 == +0.0; every other float is unchanged
    if isinstance(value, (list, tuple)):
        return [canonical_value(v, name=f"{name}[{i}]") for i, v in enumerate(value)]
    if isinstance(value, Mapping):
        return {str(k): canonical_value(v, name=f"{name}.{k}") for k, v in value.items()}
    raise ValueError(f"{name} must be None, a bool, a number, a string or a list, got {type(value).__name__}")


def canonical_identity(identity: Mapping[str, Any], reference: Mapping[str, Any] | None = None) -> dict:
    """:func:`canonical_value` of every field of ``identity`` (``reference``: values of the same fields)."""
    if not isinstance(identity, Mapping):
        raise ValueError(f"identity must be a mapping, got {type(identity).__name__}")
    ref = reference if reference is not None else {}
    return {str(k): canonical_value(v, ref.get(k), name=str(k)) for k, v in identity.items()}


def run_key(identity: Mapping[str, Any], reference: Mapping[str, Any] | None = None) -> str:
    """The run key: 16 hex digits of the SHA-1 of the sorted-key canonical JSON of ``identity``.

    Args:
        identity: the fields that decide what a run computes (a config's ``identity_dict()``).
        reference: values of the same fields (a config class's defaults): an integer given for
            a field whose reference value is a float is hashed as that float.

    ``RunConfig.key()`` is ``run_key(self.identity_dict(), RunConfig defaults)`` and
    ``TrainConfig.key()`` is ``run_key(self.identity_dict())``. For an identity that is already
    canonical this equals the historical hash, so stored runs keep their keys.
    """
    blob = json.dumps(canonical_identity(identity, reference), sort_keys=True, separators=(",", ":"))
    return hashlib.sha1(blob.encode("utf-8")).hexdigest()[:KEY_LENGTH]
