"""Run the compiled CPU kernels on torch's own OpenMP team (docs/hcl.md#sampled-estimator).

Torch runs its CPU operations on an OpenMP team (libgomp in the Linux wheels), whose workers keep
spinning for a while after each parallel operation, waiting for the next. A second thread pool
(numba's, or Python threads) then competes with them for the cores: measured, two Python threads
on the sampled estimator's kernels gained nothing inside a training step. Started instead as one
more parallel region of that same team (``GOMP_parallel`` of the libgomp the process has
loaded), the kernels take over the idle workers: no thread is added and none competes. The
workers claim chunks of rows or pairs from a shared counter (:mod:`theory.hcl._kernels`), so the
results do not depend on the number of threads.

:func:`run` starts a worker there when the process has such a team (Linux, torch's parallel backend
OpenMP, a libgomp mapped into the process, ``torch.get_num_threads() > 1``) and otherwise returns
``False``: the caller then runs the serial kernel on its own thread (the same results).
"""

from __future__ import annotations

import ctypes
import functools
import os
import sys
from typing import Any

import numpy as np
import torch

__all__ = ["run", "available"]


@functools.cache
def _gomp_parallel() -> Any:
    """``GOMP_parallel`` of the libgomp torch runs on, or None (cached per process)."""
    if not sys.platform.startswith("linux") or "OpenMP" not in torch.__config__.parallel_info():
        return None
    try:
        with open("/proc/self/maps", encoding="utf-8") as f:
            paths = [line.split()[-1] for line in f if "/libgomp" in line]
    except OSError:
        return None
    torch_lib = os.path.join(os.path.dirname(torch.__file__), "")
    # torch's own copy first: another library may have mapped a second libgomp (another team)
    for path in sorted(dict.fromkeys(paths), key=lambda p: not p.startswith(torch_lib)):
        try:  # RTLD_NOLOAD: the library already mapped, never a second copy
            lib = ctypes.CDLL(path, mode=os.RTLD_NOLOAD | ctypes.RTLD_GLOBAL)
            fn = lib.GOMP_parallel
        except (OSError, AttributeError):
            continue
        fn.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_uint, ctypes.c_uint]
        fn.restype = None
        return fn
    return None


def available() -> bool:
    """Whether :func:`run` would start the workers on torch's team (else the kernels run serially)."""
    return torch.get_num_threads() > 1 and _gomp_parallel() is not None


def run(worker: int, params: np.ndarray) -> bool:
    """Run the compiled worker at address ``worker`` on every thread of torch's team.

    ``params`` (int64, C-contiguous) is the worker's argument block; its first entry is the chunk
    counter the workers share (set to 0 here). Returns ``False`` without running anything when
    there is no team (:func:`available`). The call releases the GIL and returns when every worker
    has finished.
    """
    if not available():
        return False
    params[0] = 0
    _gomp_parallel()(worker, params.ctypes.data, torch.get_num_threads(), 0)
    return True
