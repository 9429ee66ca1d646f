"""The processes the main job starts: a guard against orphans, a prompt exit, the device line.

:func:`worker_init` makes a child ignore Ctrl-C and exit when the main job is gone;
:func:`run_in_child` runs a function there and stops joblib's idle workers before the child
exits; :func:`device_description` describes the device for the report.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

from synthetic.sweep.backends import watch_parent

__all__ = ["worker_init", "run_in_child", "device_description"]


def worker_init(parent_pid: int) -> None:
    """Initializer of a child process the figures start: it exits once ``parent_pid`` is gone.

    The synthetic package's worker guard (``synthetic.sweep.backends.watch_parent``: SIGINT ignored,
    the parent checked twice a second), so that a killed main job leaves no process behind.
    """
    watch_parent(parent_pid)


def run_in_child(fn: Callable[..., Any], *args: Any) -> Any:
    """``fn(*args)`` in a child process the figures started, then its joblib workers stopped.

    A process started by :mod:`multiprocessing` waits at its exit for its own child processes,
    and joblib's loky pool keeps idle workers alive for 300 s: without this, the child that ran
    the real-data digits scale with ``jobs > 1`` took five minutes to exit after its work was done.
    """
    import sys

    try:
        return fn(*args)
    finally:
        if "joblib.externals.loky" in sys.modules:  # a pool can only exist if loky was imported
            from joblib.externals.loky import get_reusable_executor

            get_reusable_executor(reuse=True).shutdown(wait=True)


def device_description() -> str:
    """The compute device in words: CPU cores, and the GPU when torch sees one."""
    import platform

    cpu = f"CPU: {os.cpu_count()} logical cores ({platform.machine()}, {platform.system()})"
    try:
        import torch

        threads = torch.get_num_threads()
        cpu += f", torch threads {threads}"
        if torch.cuda.is_available():
            names = ", ".join(torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count()))
            return f"{cpu}; GPU: {names} (not used by these stages)"
    except Exception:
        pass
    return cpu + "; no GPU used"
