"""The lock of a results folder: one sweep writes a folder at a time.

:class:`SweepLock` holds ``<folder>/.sweep.lock`` with :class:`filelock.FileLock` (``flock`` where
the file system has it; filelock's own soft lock, which reclaims markers of dead processes on the
same host, where it does not) for the whole sweep, and records its holder (pid, host, start time,
command) in ``<folder>/.sweep.lock.json``. A second sweep on the same folder either waits for the
lock (``wait=True``, ``python -m synthetic sweep --wait``) or stops at once with
:class:`synthetic.store.errors.StoreLocked`, whose message names the holder. A lock file or
holder record that is a folder stops the sweep with one :class:`~synthetic.store.errors.StoreError`
line naming it.

Stale locks: the operating system releases an ``flock`` when its process dies, even by SIGKILL,
so a dead sweep never blocks the next one; the holder record it leaves behind is detected (its
process is gone) and reported by the next sweep (:attr:`SweepLock.stale`) before being replaced.
Readers (``summary``, ``claims``) take no lock: every file is replaced atomically and the table
is checked against its record.
"""

from __future__ import annotations

import datetime as _dt
import json
import os
import socket
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from synthetic.store.errors import StoreError, StoreLocked
from synthetic.store.folders import as_folder, atomic_write_text

__all__ = ["LOCK_FILE", "HOLDER_FILE", "SweepLock", "describe_holder", "process_alive"]

LOCK_FILE = ".sweep.lock"
HOLDER_FILE = ".sweep.lock.json"


def process_alive(pid: int) -> bool:
    """True if a process with this pid exists on this host (a zombie counts as dead)."""
    try:
        import psutil

        try:
            return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
        except psutil.Error:
            return False
    except ImportError:  # pragma: no cover - psutil ships with the environment
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            return True
        return True


def _read_holder(path: Path) -> dict[str, Any] | None:
    try:
        info = json.loads(path.read_text(encoding="utf-8"))
        return info if isinstance(info, dict) else None
    except (OSError, ValueError):
        return None


def describe_holder(info: dict[str, Any] | None) -> str:
    """``"pid 123 on host h since 2024-01-01 12:00:00 UTC (python -m synthetic sweep ...)"``."""
    if not info:
        return "an unknown process (no holder record)"
    cmd = info.get("command")
    return f"pid {info.get('pid', '?')} on host {info.get('host', '?')} since {info.get('started', '?')}" + (
        f" ({cmd})" if cmd else ""
    )


class SweepLock:
    """Context manager holding a results folder's lock for one sweep.

    Args:
        folder: the results folder (created if needed).
        wait: False: raise :class:`StoreLocked` at once when another process holds the lock;
            True: wait as long as it takes; a number: wait at most that many seconds.
        on_wait: called once with a one-line message when the lock is busy and we wait.
        poll: seconds between attempts while waiting.

    Attributes:
        stale: the holder record of a previous holder that died without releasing the lock
            (detected and replaced), else None.
    """

    def __init__(
        self,
        folder: str | os.PathLike,
        *,
        wait: bool | float = False,
        on_wait: Callable[[str], None] | None = None,
        poll: float = 0.2,
    ) -> None:
        if isinstance(wait, bool):
            self.timeout: float = -1.0 if wait else 0.0
        elif isinstance(wait, (int, float)) and wait >= 0:
            self.timeout = float(wait)
        else:
            raise ValueError(f"wait must be True, False or a number of seconds >= 0, got {wait!r}")
        self.folder = as_folder(folder)
        self.on_wait = on_wait
        self.poll = poll
        self.stale: dict[str, Any] | None = None
        self._lock: Any = None

    @property
    def lock_path(self) -> Path:
        """The lock file."""
        return self.folder / LOCK_FILE

    @property
    def holder_path(self) -> Path:
        """The holder record."""
        return self.folder / HOLDER_FILE

    def holder(self) -> dict[str, Any] | None:
        """The current holder record (None if none)."""
        return _read_holder(self.holder_path)

    def acquire(self) -> SweepLock:
        """Take the lock (see the class docstring); returns self.

        Raises:
            StoreLocked: another process holds the lock (and ``wait`` does not wait it out).
            StoreError: the lock file or its holder record is a folder (or not a regular file).
        """
        from filelock import FileLock, Timeout

        self.folder.mkdir(parents=True, exist_ok=True)
        for path in (self.lock_path, self.holder_path):
            if path.exists() and not path.is_file():
                kind = "a folder" if path.is_dir() else "not a regular file"
                raise StoreError(
                    f"lock file {path} is {kind}: remove it (a sweep writes it as a file), "
                    "or use another --results folder"
                )
        lock = FileLock(str(self.lock_path))
        try:
            lock.acquire(timeout=0, poll_interval=self.poll)
        except Timeout:
            info = self.holder()
            if self.timeout == 0:
                raise StoreLocked(self._busy_message(info)) from None
            if self.on_wait is not None:
                self.on_wait(f"waiting for the lock of {self.folder}, held by {describe_holder(info)}")
            try:
                lock.acquire(timeout=self.timeout, poll_interval=self.poll)
            except Timeout:
                raise StoreLocked(self._busy_message(self.holder(), waited=self.timeout)) from None
        self._lock = lock
        previous = self.holder()
        if previous and not (
            previous.get("pid") == os.getpid() and previous.get("host") == socket.gethostname()
        ):
            self.stale = previous  # we hold the lock, so its recorded holder died without releasing it
        atomic_write_text(
            self.holder_path,
            json.dumps(
                {
                    "pid": os.getpid(),
                    "host": socket.gethostname(),
                    "started": _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC"),
                    "started_unix": time.time(),
                    "command": " ".join(sys.argv) if sys.argv and sys.argv[0] else "",
                }
            )
            + "\n",
        )
        return self

    def _busy_message(self, info: dict[str, Any] | None, waited: float | None = None) -> str:
        dead = ""
        if info and info.get("host") == socket.gethostname() and not process_alive(int(info.get("pid", -1))):
            dead = " (that process has exited; a process it started may still hold the lock)"
        after = f" after waiting {waited:g} s" if waited else ""
        return (
            f"results folder {self.folder} is in use by another sweep{after}: {describe_holder(info)}{dead}; "
            "wait for it with --wait, or use another --results folder"
        )

    def release(self) -> None:
        """Release the lock (its holder record is removed first)."""
        if self._lock is None:
            return
        try:
            info = self.holder()
            if info and info.get("pid") == os.getpid() and info.get("host") == socket.gethostname():
                self.holder_path.unlink(missing_ok=True)
        except OSError:
            pass
        finally:
            self._lock.release()
            self._lock = None

    def __enter__(self) -> SweepLock:
        return self.acquire()

    def __exit__(self, *exc: object) -> None:
        self.release()
