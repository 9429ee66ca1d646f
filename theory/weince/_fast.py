"""The switch between numpy SIMD kernels and the torch-only code path of the WeiNCE modules.

Use numpy's SIMD kernels (the row sort, partitions, the float64 tail fits) for CPU tensors. The torch-only branch (used
on GPU) computes the same quantities; tests switch :data:`_NUMPY_FAST` off to cover it on CPU
(``monkeypatch.setattr(theory.weince._fast, "_NUMPY_FAST", False)``).
"""

from __future__ import annotations

import torch

__all__: list[str] = []

#: numpy fast paths on CPU tensors (read at call time by :func:`_np_ok`).
_NUMPY_FAST = True


def _np_ok(t: torch.Tensor) -> bool:
    """True when ``t`` is a CPU tensor and the numpy fast paths are on."""
    return _NUMPY_FAST and t.device.type == "cpu"
