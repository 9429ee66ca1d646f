"""One progress display across all stages of the main job.

On a terminal: one tqdm bar whose total is the sum of the stages' units (theory checks, synthetic
runs, tables, figures, ...), its description the stages running. Not on a terminal (a log file,
CI): one-line messages on stderr -- at every stage start and end, and otherwise every
``interval`` seconds, also while a long step reports nothing -- such as
``[figures 12.4 s] 14/310 (5 %) synthetic, realdata: synthetic runs``. Stages may report from
several threads at once; the counters take a lock.
"""

from __future__ import annotations

import sys
import threading
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
        self.running: list[str] = []
        self.t0 = time.perf_counter()
        self._last = self.t0
        self._bar = None
        self._lock = threading.RLock()
        self._stop = threading.Event()
        self._beat: threading.Thread | None = None
        if self.use_bar:
            from tqdm import tqdm

            self._bar = tqdm(
                total=total, desc="figures", unit="step", file=self.stream, dynamic_ncols=True, leave=True
            )

    def _line(self, text: str) -> None:
        if self.quiet or self.use_bar:
            return
        with self._lock:
            pct = f" ({100 * self.done / self.total:.0f} %)" if self.total else ""
            print(
                f"[figures {time.perf_counter() - self.t0:.1f} s] {self.done}/{self.total}{pct} {text}",
                file=self.stream,
                flush=True,
            )
            self._last = time.perf_counter()

    def _heartbeat(self) -> None:
        while not self._stop.wait(max(0.05, min(self.interval, 1.0))):
            if time.perf_counter() - self._last >= self.interval:
                self._line(f"{', '.join(self.running) or self.stage_name}: running")

    def add_total(self, n: int) -> None:
        """Grow the total by ``n`` units (a stage that learns its size late)."""
        with self._lock:
            self.total += int(n)
            if self._bar is not None:
                self._bar.total = self.total
                self._bar.refresh()

    def stage(self, name: str) -> None:
        """A stage starts."""
        with self._lock:
            self.stage_name = name
            self.running.append(name)
            if self._bar is not None:
                self._bar.set_description(f"figures: {', '.join(self.running)}")
        self._line(f"stage {name} ...")
        if not (self.quiet or self.use_bar) and self._beat is None:
            self._beat = threading.Thread(target=self._heartbeat, name="figures-progress", daemon=True)
            self._beat.start()

    def advance(self, n: int = 1, what: str = "") -> None:
        """``n`` units are done (``what``: the unit just finished, for the periodic line)."""
        with self._lock:
            self.done += n
            if self._bar is not None:
                self._bar.update(n)
                if what:
                    self._bar.set_postfix_str(what[:40], refresh=False)
                return
            due = time.perf_counter() - self._last >= self.interval
        if due:
            self._line(f"{', '.join(self.running) or self.stage_name}: {what}".rstrip(": "))

    def stage_done(self, name: str, status: str, seconds: float) -> None:
        """A stage ended with ``status`` after ``seconds``."""
        with self._lock:
            if name in self.running:
                self.running.remove(name)
            if self._bar is not None:
                self._bar.set_description(f"figures: {', '.join(self.running) or name}")
                self._bar.write(f"  {name}: {status} ({seconds:.1f} s)", file=self.stream)
                return
        self._line(f"stage {name}: {status} ({seconds:.1f} s)")

    def close(self) -> None:
        """Finish the bar and stop the periodic lines."""
        self._stop.set()
        if self._beat is not None:
            self._beat.join(timeout=2.0)
            self._beat = None
        with self._lock:
            if self._bar is not None:
                self._bar.close()
                self._bar = None
