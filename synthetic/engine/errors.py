"""How a run fails: the one exception type between the training engine and the sweep.

A run that cannot produce a result raises :class:`RunFailed` (a diverging run:
:class:`NonFiniteRun`, built by :func:`non_finite`). The sweep catches it per run, stores a
failure record (``failures/<key>.json``: config, reason, epoch, traceback summary) and never
stores the run as a result.
"""

from __future__ import annotations

from typing import Any

__all__ = ["RunFailed", "NonFiniteRun", "non_finite"]


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


def non_finite(config: Any, what: str, epoch: int) -> NonFiniteRun:
    """The :class:`NonFiniteRun` of a run (``config.key()``) whose ``what`` became non-finite at ``epoch``."""
    return NonFiniteRun(
        f"non-finite {what}; the run diverged and is not recorded", key=config.key(), epoch=epoch
    )
