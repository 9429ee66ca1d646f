"""The shared state of the main job's stages and the stage interface.

A stage is any object with a ``name``, ``units(ctx)`` (its share of the overall progress bar) and
``run(ctx) -> str`` (a one-line summary; it raises on failure), and optionally ``after`` (the
names of the stages it waits for; without it, a stage waits for every stage listed before it).
It reads and fills the :class:`Context`: tables for the figures, claim records for the report,
the figures' outcomes. Stages may run at the same time in threads (:mod:`figures.pipeline.runner`), so the
context's mutators take a lock, and the records are kept in stage order whatever the timing.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import pandas as pd

from figures.pipeline import produce_theory
from figures.pipeline.cache import FORMAT, StageCache, source_key
from figures.pipeline.progress import Progress
from figures.plots.spec import FigureSpec
from figures.report import commands

__all__ = [
    "FigureResult",
    "StageResult",
    "StageFailure",
    "Cancelled",
    "Context",
    "Stage",
    "current_stage",
    "set_current_stage",
]


@dataclass
class FigureResult:
    """What happened to one figure: ``status`` is ``"rendered"``, ``"not available"`` or ``"failed"``."""

    id: str
    title: str
    claims: tuple[str, ...]
    status: str
    reason: str = ""
    produce: str = ""
    files: dict[str, str] = field(default_factory=dict)
    seconds: float = 0.0
    description: str = ""
    style_note: str = ""
    reused: bool = False


@dataclass
class StageResult:
    """One stage's outcome: ``status`` ``"ok"`` or ``"failed"``; ``detail`` a one-line summary.

    ``seconds`` is the stage's wall time and ``start`` when it began, in seconds after the job
    started (stages that run at the same time overlap).
    """

    name: str
    status: str
    seconds: float
    detail: str = ""
    error: str = ""
    start: float = 0.0


class StageFailure(RuntimeError):
    """Raised by a stage that did its work but must report a failure (e.g. runs that failed)."""


class Cancelled(KeyboardInterrupt):
    """Raised in a stage's thread once the job is interrupted (Ctrl-C while stages run at once).

    :meth:`Context.tick` and :meth:`Context.check_cancelled` raise it, so a stage stops at its
    next unit of progress; the producers treat it as the Ctrl-C it stands for (the synthetic
    sweep keeps every finished run and stops its workers).
    """


_local = threading.local()


def current_stage() -> str:
    """The name of the stage running in this thread ("" outside a stage)."""
    return str(getattr(_local, "stage", ""))


def set_current_stage(name: str) -> None:
    """Mark this thread as running stage ``name`` (the runner does this)."""
    _local.stage = name


@dataclass
class Context:
    """Everything the stages share.

    Args:
        scale: ``"quick"``, ``"default"`` or ``"paper"``.
        results: the results folder (read; the cache lives in ``results/cache/figures``).
        out: the output folder of figures and report.
        figures: the selected figures.
        jobs: worker processes of the stages that train or render; with more than one, the
            independent stages also run at the same time.
        scheduler: dask scheduler address on which the synthetic runs train.
        seed: seed of the theory checks and producers.
        refresh: ignore cached results (recompute and overwrite them).
        progress: the progress display.
        argv: the command line, for the report.
        only: True when ``--only`` chose the figures: the stages then train only what a chosen
            figure needs (stored results are still judged).
    """

    scale: str
    results: Path
    out: Path
    figures: list[FigureSpec]
    jobs: int = 1
    scheduler: str | None = None
    seed: int = 0
    refresh: bool = False
    progress: Progress | None = None
    argv: Sequence[str] = ()
    only: bool = False
    tables: dict[str, pd.DataFrame] = field(default_factory=dict)
    records: list[Any] = field(default_factory=list)
    rendered: list[FigureResult] = field(default_factory=list)
    stages: list[StageResult] = field(default_factory=list)
    report_paths: dict[str, Path] = field(default_factory=dict)
    started: float = field(default_factory=time.perf_counter)
    stage_order: list[str] = field(default_factory=list)
    cancelled: threading.Event = field(default_factory=threading.Event, repr=False)
    _lock: Any = field(default_factory=threading.RLock, repr=False)
    _by_stage: dict[str, list[Any]] = field(default_factory=dict, repr=False)
    _ticks: dict[str, int] = field(default_factory=dict, repr=False)

    def __post_init__(self) -> None:
        if self.scale not in commands.SCALES:
            raise ValueError(f"scale must be one of {commands.SCALES}, got {self.scale!r}")
        if isinstance(self.jobs, bool) or not isinstance(self.jobs, int) or self.jobs < 1:
            raise ValueError(f"jobs must be a positive integer, got {self.jobs!r}")
        self.results = Path(self.results)
        self.out = Path(self.out)
        if self.progress is None:
            self.progress = Progress(0, quiet=True)

    def needs(self, table: str) -> bool:
        """True when a selected figure reads ``table``."""
        return any(table in s.table_names for s in self.figures)

    def wants(self, *tables: str) -> bool:
        """Should a stage train the results behind ``tables``?

        Always, unless ``--only`` chose figures none of which reads one of them.
        """
        return not self.only or any(self.needs(t) for t in tables)

    @property
    def cache_root(self) -> Path:
        """``<results>/cache/figures``."""
        return self.results / "cache" / "figures"

    def cache(self, stage: str, package: str = "theory") -> StageCache:
        """The cache of ``stage``, keyed by the scale, the seed and the sources of ``package``."""
        key = source_key(produce_theory.source_paths(package), self.scale, str(self.seed), FORMAT)
        return StageCache(self.cache_root, stage, self.scale, key, enabled=not self.refresh)

    def add(self, records: Sequence[Any]) -> None:
        """Add claim records (kept in stage order: ``stage_order``, then the order of the calls)."""
        with self._lock:
            self._by_stage.setdefault(current_stage(), []).extend(records)
            order = ["", *self.stage_order]
            names = order + [n for n in self._by_stage if n not in order]
            self.records[:] = [r for n in names for r in self._by_stage.get(n, [])]

    def put(self, name: str, table: pd.DataFrame) -> None:
        """Set the table ``name``."""
        with self._lock:
            self.tables[name] = table

    def tick(self, what: str = "", n: int = 1, *, stage: str | None = None) -> None:
        """``n`` units of ``stage`` done (default: the stage running in this thread).

        Name the stage when the call may come from another thread (a producer's callback).

        Raises:
            Cancelled: the job is being interrupted.
        """
        self.check_cancelled()
        assert self.progress is not None
        with self._lock:
            stage = current_stage() if stage is None else stage
            self._ticks[stage] = self._ticks.get(stage, 0) + n
        self.progress.advance(n, what)

    def check_cancelled(self) -> None:
        """Raise :class:`Cancelled` once the job is being interrupted (``cancelled`` is set)."""
        if self.cancelled.is_set():
            raise Cancelled("the main job is being interrupted")

    def ticks(self, stage: str) -> int:
        """Units the stage ``stage`` has ticked so far."""
        with self._lock:
            return self._ticks.get(stage, 0)


class Stage(Protocol):
    """The stage interface (``after``, the stages waited for, is optional)."""

    name: str

    def units(self, ctx: Context) -> int:
        """Progress units of the stage."""

    def run(self, ctx: Context) -> str:
        """Run; return a one-line summary; raise on failure."""
