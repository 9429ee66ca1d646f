"""Progress of a sweep (one display across all grids of a command): a tqdm bar or periodic lines.

On a terminal a tqdm bar counts the runs to train (runs already stored are taken off its total,
so its rate and ETA describe training only) and shows the failures. When stderr is not a terminal
(a log file, a batch job) one line is printed every ``interval`` seconds and at the end::

    progress: 12/40 runs trained, 1 failed, 30 stored before; elapsed 1m02s, ETA 3m10s

The ETA is weighted by cost when every run still to train has a measured cost (:meth:`weigh`;
``python -m synthetic sweep`` measures its tasks before it starts, ``synthetic.sweep.cost``): the
time so far per unit of cost finished, times the cost left. Runs of very different cost (a C = 100
stack beside C = 10 runs, a continued run beside a new one) then do not skew it. Otherwise (no
estimate, or several grids of which only the current one is measured) it is by run count.
"""

from __future__ import annotations

import sys
import time
from typing import Any, TextIO

__all__ = ["SweepProgress", "format_seconds"]

MODES = ("bar", "lines", "off")


def format_seconds(seconds: float) -> str:
    """``"42s"``, ``"3m05s"``, ``"2h03m"``."""
    s = max(0, round(seconds))
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    return f"{s // 3600}h{(s % 3600) // 60:02d}m"


class SweepProgress:
    """Counts of one command's sweeps and their display.

    Args:
        total: runs of all grids (stored ones are taken off with :meth:`already_done`).
        mode: ``"bar"`` (tqdm), ``"lines"`` (periodic one-line messages), ``"off"``; None: a bar
            when ``stream`` is a terminal, else lines.
        interval: seconds between two progress lines (``"lines"`` mode).
        stream: where to write (default ``sys.stderr``).
        clock: time source (tests).
    """

    def __init__(
        self,
        total: int = 0,
        *,
        mode: str | None = None,
        interval: float = 30.0,
        stream: TextIO | None = None,
        clock: Any = time.monotonic,
    ) -> None:
        if not isinstance(total, int) or total < 0:
            raise ValueError(f"total must be an int >= 0, got {total!r}")
        if not isinstance(interval, (int, float)) or interval < 0:
            raise ValueError(f"interval must be a number of seconds >= 0, got {interval!r}")
        self.stream = stream if stream is not None else sys.stderr
        if mode is None:
            mode = "bar" if bool(getattr(self.stream, "isatty", lambda: False)()) else "lines"
        if mode not in MODES:
            raise ValueError(f"mode must be one of {MODES} or None, got {mode!r}")
        self.mode = mode
        self.interval = float(interval)
        self.clock = clock
        self.total = total
        self.done = 0
        self.failed = 0
        self.stored_before = 0
        self.start = clock()
        self._last_line = self.start
        self._weights: dict[str, float] = {}
        self._work_done = 0.0
        self._weighed_done = 0
        self._bar: Any = None
        if mode == "bar":
            from tqdm.auto import tqdm

            self._bar = tqdm(total=total, unit="run", desc="sweep", file=self.stream, dynamic_ncols=True)

    @property
    def to_run(self) -> int:
        """Runs of the total that need training (stored ones taken off)."""
        return self.total - self.stored_before

    def add(self, n: int) -> None:
        """Add ``n`` runs to the total (a grid that was not counted at the start)."""
        self.total += n
        if self._bar is not None:
            self._bar.total = self.to_run
            self._bar.refresh()

    def already_done(self, n: int) -> None:
        """``n`` runs of the total need no training (already stored, or failed and not retried)."""
        self.stored_before += n
        if self._bar is not None:
            self._bar.total = self.to_run
            self._bar.refresh()

    def weigh(self, weights: dict[str, float]) -> None:
        """The measured cost (seconds) of runs still to train, by run key (see the module docstring)."""
        for k, w in weights.items():
            if not (isinstance(w, (int, float)) and w >= 0):
                raise ValueError(f"weights[{k!r}] must be a number >= 0, got {w!r}")
            self._weights[str(k)] = float(w)

    def advance(self, ok: bool = True, key: str | None = None) -> None:
        """One run finished (``ok``) or failed; ``key`` names it (its weight counts as done)."""
        if key is not None and key in self._weights:
            self._work_done += self._weights.pop(key)
            self._weighed_done += 1
        if ok:
            self.done += 1
        else:
            self.failed += 1
        if self._bar is not None:
            self._bar.update(1)
            if self.failed:
                self._bar.set_postfix(failed=self.failed, refresh=False)
        elif self.mode == "lines" and self.clock() - self._last_line >= self.interval:
            self.line()

    def eta(self) -> float | None:
        """Seconds left at the rate so far (None before the first run finishes)."""
        finished = self.done + self.failed
        if finished == 0:
            return None
        elapsed = max(self.clock() - self.start, 1e-9)
        left = max(self.to_run - finished, 0)
        weighed = finished == self._weighed_done and len(self._weights) == left
        if weighed and self._work_done > 0:
            return elapsed / self._work_done * sum(self._weights.values())
        return left / (finished / elapsed)

    def text(self) -> str:
        """The one-line progress message."""
        finished = self.done + self.failed
        eta = self.eta()
        parts = [f"progress: {finished}/{self.to_run} runs trained"]
        if self.failed:
            parts.append(f"{self.failed} failed")
        if self.stored_before:
            parts.append(f"{self.stored_before} stored before")
        timing = f"elapsed {format_seconds(self.clock() - self.start)}"
        if eta is not None and finished < self.to_run:
            timing += f", ETA {format_seconds(eta)}"
        return ", ".join(parts) + "; " + timing

    def line(self) -> None:
        """Print the progress line now (``"lines"`` mode)."""
        self._last_line = self.clock()
        if self.mode == "lines":
            print(self.text(), file=self.stream, flush=True)

    def close(self) -> None:
        """Close the bar, or print a last line when anything was trained."""
        if self._bar is not None:
            self._bar.close()
            self._bar = None
        elif self.mode == "lines" and self.done + self.failed:
            self.line()

    def __enter__(self) -> SweepProgress:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
