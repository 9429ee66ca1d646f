"""Errors of a results store: a folder that cannot be used as asked, not writable, or locked.

``python -m synthetic`` prints a :class:`StoreError` as one line (exit status 2).
"""

from __future__ import annotations

__all__ = ["StoreError", "StoreNotWritable", "StoreLocked"]


class StoreError(Exception):
    """A results folder that cannot be used as asked (the message names the folder and the cause)."""


class StoreNotWritable(StoreError, PermissionError):
    """The results folder (or a file in it) cannot be written; nothing was trained."""


class StoreLocked(StoreError):
    """Another sweep holds the results folder's lock; the message names it (pid, host, start time)."""
