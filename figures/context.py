"""The shared state of the main job's stages and the stage interface.

A stage is any object with a ``name``, ``units(ctx)`` (its share of the overall progress bar) and
``run(ctx) -> str`` (a one-line summary; it raises on failure); it reads and fills the
:class:`Context`: tables for the figures, claim records for the report, the figures' outcomes.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import pandas as pd

from figures import commands, sources
from figures.cache import FORMAT, StageCache, source_key
from figures.progress import Progress
from figures.registry import FigureSpec

__all__ = ["FigureResult", "StageResult", "Context", "Stage"]


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
    """One stage's outcome: ``status`` ``"ok"`` or ``"failed"``; ``detail`` a one-line summary."""

    name: str
    status: str
    seconds: float
    detail: str = ""
    error: str = ""


@dataclass
class Context:
    """Everything the stages share.

    Args:
        scale: ``"quick"``, ``"default"`` or ``"paper"``.
        results: the results folder (read; the cache lives in ``results/cache/figures``).
        out: the output folder of figures and report.
        figures: the selected figures.
        jobs: worker processes for rendering (1 = in this process).
        scheduler: dask scheduler address for stages that train (recorded; see ``--help``).
        seed: seed of the theory checks and producers.
        refresh: ignore cached results (recompute and overwrite them).
        progress: the progress display.
        argv: the command line, for the report.
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
    tables: dict[str, pd.DataFrame] = field(default_factory=dict)
    records: list[Any] = field(default_factory=list)
    rendered: list[FigureResult] = field(default_factory=list)
    stages: list[StageResult] = field(default_factory=list)
    report_paths: dict[str, Path] = field(default_factory=dict)
    started: float = field(default_factory=time.perf_counter)

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

    @property
    def cache_root(self) -> Path:
        """``<results>/cache/figures``."""
        return self.results / "cache" / "figures"

    def cache(self, stage: str, package: str = "theory") -> StageCache:
        """The cache of ``stage``, keyed by the scale, the seed and the sources of ``package``."""
        key = source_key(sources.source_paths(package), self.scale, str(self.seed), FORMAT)
        return StageCache(self.cache_root, stage, self.scale, key, enabled=not self.refresh)

    def add(self, records: Sequence[Any]) -> None:
        """Add claim records."""
        self.records.extend(records)

    def tick(self, what: str = "") -> None:
        """One unit done."""
        assert self.progress is not None
        self.progress.advance(1, what)


class Stage(Protocol):
    """The stage interface."""

    name: str

    def units(self, ctx: Context) -> int:
        """Progress units of the stage."""

    def run(self, ctx: Context) -> str:
        """Run; return a one-line summary; raise on failure."""
