"""Exceptions of the synthetic package shared by the training engine, the store and the sweeps.

The contract between the training engine (``synthetic.train`` / ``synthetic.stacked``) and the
sweep (``synthetic.sweep``) is one exception type: a run that cannot produce a result raises
:class:`RunFailed` (a diverging run: :class:`NonFiniteRun`). The sweep catches it per run, stores
a failure record (``failures/<key>.json``: config, reason, epoch, traceback summary) and never
stores the run as a result. Any other exception from a runner is stored the same way; these types
only give the record a precise reason and epoch.

The store and the command line raise :class:`StoreError` subclasses, which ``python -m synthetic``
prints as one line (exit status 2); :class:`SweepInterrupted` ends a sweep on Ctrl-C / SIGTERM
(exit status 130 / 143) after everything finished so far is stored.
"""

from __future__ import annotations

__all__ = [
    "RunFailed",
    "NonFiniteRun",
    "StoreError",
    "StoreNotWritable",
    "StoreLocked",
    "SchedulerUnreachable",
    "SweepInterrupted",
    "TerminationRequested",
]


class RunFailed(RuntimeError):
    """A run that cannot produce a result; stored as a failure, never as a result.

    Args:
        reason: one line saying what went wrong (e.g. ``"non-finite parameters"``).
        key: the run's config hash (``RunConfig.key()``), when known.
        epoch: the epoch in which it happened (0 = before training), when known.
    """

    def __init__(self, reason: str, *, key: str | None = None, epoch: int | None = None) -> None:
        self.reason = str(reason)
        self.key = key
        self.epoch = epoch
        where = " ".join(
            p for p in (f"run {key}" if key else "", f"epoch {epoch}" if epoch is not None else "") if p
        )
        super().__init__(f"{where}: {self.reason}" if where else self.reason)

    def __reduce__(self):  # picklable across processes and dask workers with its attributes
        return (_rebuild, (type(self), self.reason, self.key, self.epoch))


class NonFiniteRun(RunFailed, FloatingPointError):
    """Parameters, embeddings or the loss of a run became non-finite (NaN or inf): the run diverged.

    It is also a :class:`FloatingPointError`, so code that catches the engine's historical
    ``FloatingPointError`` keeps working.
    """


def _rebuild(cls: type, reason: str, key: str | None, epoch: int | None) -> RunFailed:
    return cls(reason, key=key, epoch=epoch)


class StoreError(Exception):
    """A results folder that cannot be used as asked (the message names the folder and the cause)."""


class StoreNotWritable(StoreError, PermissionError):
    """The results folder (or a file in it) cannot be written; nothing was trained."""


class StoreLocked(StoreError):
    """Another sweep holds the results folder's lock; the message names it (pid, host, start time)."""


class SchedulerUnreachable(StoreError, ConnectionError):
    """The dask scheduler (or cluster) could not be reached within the connect timeout."""


class SweepInterrupted(KeyboardInterrupt):
    """A sweep stopped by Ctrl-C (SIGINT) or SIGTERM after storing every run that had finished.

    Attributes:
        stored: runs of the sweep stored in its folder (now and before); total: runs of the sweep;
        folder: the results folder; signal_name: ``"SIGINT"`` or ``"SIGTERM"``.
    """

    def __init__(self, stored: int, total: int, folder: str, signal_name: str = "SIGINT") -> None:
        self.stored, self.total, self.folder, self.signal_name = stored, total, folder, signal_name
        super().__init__(f"interrupted: {stored} of {total} runs stored in {folder}")


class TerminationRequested(KeyboardInterrupt):
    """Raised by the command line's SIGTERM handler (a batch system ending the job) to stop a sweep."""
