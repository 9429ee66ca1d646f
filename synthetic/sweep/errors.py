"""Errors of a sweep: an unreachable scheduler, and a sweep stopped by Ctrl-C or SIGTERM.

:class:`SweepInterrupted` ends a sweep (exit status 130 / 143) after everything finished so far
is stored; :class:`TerminationRequested` is raised by the command line's SIGTERM handler.
"""

from __future__ import annotations

from synthetic.store.errors import StoreError

__all__ = ["SchedulerUnreachable", "SweepInterrupted", "TerminationRequested"]


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
