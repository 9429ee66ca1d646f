"""Input validation shared by the evaluation modules (ValueError naming the argument)."""

from __future__ import annotations

import torch

from theory.options import FEATURES
from theory.validation import one_of


def check_features(x, name: str) -> torch.Tensor:
    """Validate a non-empty floating ``(N, d)`` tensor; half precision is promoted to float32."""
    if not isinstance(x, torch.Tensor) or x.ndim != 2:
        raise ValueError(f"{name} must be a 2-D tensor (N, d), got {getattr(x, 'shape', type(x))!r}")
    if not x.is_floating_point():
        raise ValueError(f"{name} must be floating, got {x.dtype}")
    if x.shape[0] == 0 or x.shape[1] == 0:
        raise ValueError(f"{name} must not be empty, got shape {tuple(x.shape)}")
    if not bool(torch.isfinite(x).all()):
        raise ValueError(f"{name} contains non-finite values")
    return x.float() if x.dtype in (torch.float16, torch.bfloat16) else x


def check_labels(labels, n: int, name: str, num_classes: int | None = None) -> torch.Tensor:
    """Validate integer labels ``(n,)`` in ``[0, num_classes)``; returns them as int64."""
    if not isinstance(labels, torch.Tensor) or labels.shape != (n,):
        raise ValueError(f"{name} must have shape ({n},), got {getattr(labels, 'shape', type(labels))!r}")
    if labels.is_floating_point() or labels.is_complex() or labels.dtype == torch.bool:
        raise ValueError(f"{name} must be integers, got {labels.dtype}")
    labels = labels.long()
    lo, hi = int(labels.min()), int(labels.max())
    if lo < 0 or (num_classes is not None and hi >= num_classes):
        bound = f"[0, {num_classes})" if num_classes is not None else ">= 0"
        raise ValueError(f"{name} must lie in {bound}, got range [{lo}, {hi}]")
    return labels


def check_features_name(features: str) -> str:
    """``features`` must be ``h`` (backbone output) or ``z`` (projection)."""
    return one_of("features", features, FEATURES)


def check_positive_int(name: str, value) -> int:
    """``value`` must be an integer >= 1."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{name} must be an integer >= 1, got {value!r}")
    return value
