"""One progress display across all stages of the main job.

On a terminal: one tqdm bar whose total is the sum of the stages' units (theory checks, tables,
figures, ...), its description the current stage. Not on a terminal (a log file, CI): periodic
one-line messages on stderr -- at every stage start and end, and otherwise at most every
``interval`` seconds -- such as ``[figures 12.4 s] 14/31 (45 %) render: spectrum_scl``.
"""

from __future__ import annotations

import sys
import time
from typing import TextIO

__all__ = ["Progress"]


class Progress:
    """Overall progress of the main job.

    Args:
        total: total number of units (>= 0).
        stream: where to write (default ``sys.stderr``).
        bar: force the tqdm bar on (True) or off (False); default: on when ``stream`` is a terminal.
        interval: seconds between periodic lines when there is no bar (> 0).
        quiet: print nothing at all.

    Raises:
        ValueError: a negative total or a non-positive interval.
    """

    def __init__(
        self,
        total: int,
        *,
        stream: TextIO | None = None,
        bar: bool | None = None,
        interval: float = 10.0,
        quiet: bool = False,
    ) -> None:
        if isinstance(total, bool) or not isinstance(total, int) or total < 0:
            raise ValueError(f"total must be a non-negative integer, got {total!r}")
        if not interval > 0:
            raise ValueError(f"interval must be > 0, got {interval!r}")
        self.stream = stream if stream is not None else sys.stderr
        tty = bool(getattr(self.stream, "isatty", lambda: False)())
        self.quiet = quiet
        self.use_bar = (tty if bar is None else bar) and not quiet
        self.interval = float(interval)
        self.total = total
        self.done = 0
        self.stage_name = ""
        self.t0 = time.perf_counter()
        self._last = self.t0
        self._bar = None
        if self.use_bar:
            from tqdm import tqdm

            self._bar = tqdm(
                total=total, desc="figures", unit="step", file=self.stream, dynamic_ncols=True, leave=True
            )

    def _line(self, text: str) -> None:
        if self.quiet or self.use_bar:
            return
        pct = f" ({100 * self.done / self.total:.0f} %)" if self.total else ""
        print(
            f"[figures {time.perf_counter() - self.t0:.1f} s] {self.done}/{self.total}{pct} {text}",
            file=self.stream,
            flush=True,
        )
        self._last = time.perf_counter()

    def add_total(self, n: int) -> None:
        """Grow the total by ``n`` units (a stage that learns its size late)."""
        self.total += int(n)
        if self._bar is not None:
            self._bar.total = self.total
            self._bar.refresh()

    def stage(self, name: str) -> None:
        """A stage starts."""
        self.stage_name = name
        if self._bar is not None:
            self._bar.set_description(f"figures: {name}")
        self._line(f"stage {name} ...")

    def advance(self, n: int = 1, what: str = "") -> None:
        """``n`` units are done (``what``: the unit just finished, for the periodic line)."""
        self.done += n
        if self._bar is not None:
            self._bar.update(n)
            if what:
                self._bar.set_postfix_str(what[:40], refresh=False)
        elif time.perf_counter() - self._last >= self.interval:
            self._line(f"{self.stage_name}: {what}" if what else self.stage_name)

    def stage_done(self, name: str, status: str, seconds: float) -> None:
        """A stage ended with ``status`` after ``seconds``."""
        if self._bar is not None:
            self._bar.write(f"  {name}: {status} ({seconds:.1f} s)", file=self.stream)
        else:
            self._line(f"stage {name}: {status} ({seconds:.1f} s)")

    def close(self) -> None:
        """Finish the bar."""
        if self._bar is not None:
            self._bar.close()
            self._bar = None
