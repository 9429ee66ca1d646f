"""The results folder on disk: its layout, atomic writes, the writability check, leftovers.

Layout of a results folder (the run files and their records: :mod:`synthetic.store.runs`; the table:
:mod:`synthetic.store.tables`; failures: :mod:`synthetic.store.failures`; the lock: :mod:`synthetic.store.locking`)::

    <folder>/runs/<key>.csv         one finished run (one row per recorded epoch)
    <folder>/runs/<key>.json        its completion record
    <folder>/table.csv              all runs, one row per (run, epoch), sorted deterministically
    <folder>/table.json             the table's record (its sha256, the sha256 of every run in it)
    <folder>/failures/<key>.json    a run that failed: config, reason, epoch, traceback summary
    <folder>/states/<lineage>.pt    where the longest run of a lineage ended (synthetic.sweep.extend)
    <folder>/quarantine/            incomplete, corrupt or foreign run and state files set aside (never deleted)
    <folder>/.sweep.lock            the lock of the sweep writing the folder (and .sweep.lock.json, its holder)

Every file is written to a temporary file in the same folder, flushed and ``fsync``-ed, then
moved into place with :func:`os.replace` (atomic on POSIX and Windows), and the folder is
``fsync``-ed: a reader sees the old file (or none) or the complete new one, never a prefix. A kill
at any moment leaves at worst a ``.*.tmp`` file, which every reader ignores.
"""

from __future__ import annotations

import datetime as _dt
import os
import socket
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import BinaryIO

from synthetic.store.errors import StoreError, StoreNotWritable

__all__ = [
    "RUNS_SUBDIR",
    "TABLE_FILE",
    "TABLE_RECORD",
    "FAILURES_SUBDIR",
    "QUARANTINE_SUBDIR",
    "as_folder",
    "fsync_dir",
    "atomic_write",
    "atomic_write_bytes",
    "atomic_write_text",
    "check_writable",
    "set_aside",
    "temp_files",
    "remove_temp_files",
]

RUNS_SUBDIR = "runs"
TABLE_FILE = "table.csv"
TABLE_RECORD = "table.json"
FAILURES_SUBDIR = "failures"
QUARANTINE_SUBDIR = "quarantine"
TEMP_SUFFIX = ".tmp"


def as_folder(folder: str | os.PathLike) -> Path:
    """``folder`` as a Path; ValueError for an empty or non-path argument."""
    if not isinstance(folder, (str, os.PathLike)) or str(folder) == "":
        raise ValueError(f"folder must be a non-empty path, got {folder!r}")
    return Path(folder)


def fsync_dir(path: Path) -> None:
    """Flush a directory entry to disk (best effort: not every platform allows it)."""
    try:
        fd = os.open(str(path), os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def atomic_write(path: str | os.PathLike, write: Callable[[BinaryIO], object]) -> Path:
    """Write ``path`` atomically: ``write(file)`` into a temporary file in the same folder, fsync, rename.

    The one atomic write of the project (run files, tables, records, caches, checkpoints, figures,
    reports): a reader sees either the old file (or no file) or the complete new one, never a
    prefix; a write that raises leaves no temporary file. The parent folder is created if needed
    and ``fsync``-ed after the rename. Returns the destination path.

    Args:
        path: the destination.
        write: called with the temporary file opened for binary writing (``fh.write(data)``,
            ``torch.save(obj, fh)``, ``fig.savefig(fh, ...)``, ``np.savez(fh, ...)``).
    """
    if not callable(write):
        raise ValueError(f"write must be callable, got {write!r}")
    dest = as_folder(path)
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = dest.parent / f".{dest.name}.{os.getpid()}.{time.monotonic_ns()}{TEMP_SUFFIX}"
    try:
        with open(tmp, "wb") as fh:
            write(fh)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, dest)
    except BaseException:
        try:
            tmp.unlink()
        except OSError:
            pass
        raise
    fsync_dir(dest.parent)
    return dest


def atomic_write_bytes(path: str | os.PathLike, data: bytes) -> Path:
    """:func:`atomic_write` of ``data``."""
    if not isinstance(data, (bytes, bytearray)):
        raise ValueError(f"data must be bytes, got {type(data).__name__}")
    return atomic_write(path, lambda fh: fh.write(data))


def atomic_write_text(path: str | os.PathLike, text: str) -> Path:
    """:func:`atomic_write_bytes` of ``text`` encoded as UTF-8."""
    if not isinstance(text, str):
        raise ValueError(f"text must be a str, got {type(text).__name__}")
    return atomic_write_bytes(path, text.encode("utf-8"))


def check_writable(folder: str | os.PathLike) -> Path:
    """Make sure ``folder`` and ``folder/runs`` exist and files can be created in them.

    Returns:
        The folder.

    Raises:
        StoreError: ``folder`` (or a parent, or ``runs``) is a file.
        StoreNotWritable: a file cannot be created there (read-only file system, permissions,
            disk full); the message is one line naming the folder.
    """
    base = as_folder(folder)
    for p in (base, *base.parents):
        if p.exists() and not p.is_dir():
            raise StoreError(f"results folder {base} cannot be used: {p} is a file, not a folder")
        if p.is_dir():
            break
    try:
        (base / RUNS_SUBDIR).mkdir(parents=True, exist_ok=True)
    except FileExistsError:
        raise StoreError(f"results folder {base} cannot be used: {base / RUNS_SUBDIR} is a file") from None
    except OSError as exc:
        raise StoreNotWritable(f"results folder {base} is not writable: {exc.strerror or exc}") from None
    for d in (base, base / RUNS_SUBDIR):
        probe = d / f".write-probe.{os.getpid()}.{time.monotonic_ns()}{TEMP_SUFFIX}"
        try:
            fd = os.open(probe, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
            try:
                os.write(fd, b"x")
                os.fsync(fd)
            finally:
                os.close(fd)
            probe.unlink()
        except OSError as exc:
            try:
                probe.unlink()
            except OSError:
                pass
            raise StoreNotWritable(f"results folder {d} is not writable: {exc.strerror or exc}") from None
    return base


# --------------------------------------------------------------------------------------------


def _stamp() -> str:
    return _dt.datetime.now(_dt.timezone.utc).strftime("%Y%m%dT%H%M%S.%fZ")


def set_aside(
    path: str | os.PathLike,
    quarantine_dir: str | os.PathLike,
    reason: str,
    *,
    with_files: Iterable[Path] = (),
) -> Path:
    """Move a bad file into ``quarantine_dir`` (never delete it) with a note saying why.

    The one way the project sets a file aside (run files of the store, entries of the figures
    cache): ``path`` becomes ``<quarantine_dir>/<UTC time>-<name>`` beside a ``<that name>.why``
    note (``"<path>: <reason>"``, when, by which process on which host); each of ``with_files``
    (e.g. the file's completion record) that exists is moved beside it under the same time stamp.

    Returns:
        The new path of ``path``.

    Raises:
        OSError: the file cannot be moved (the caller says what to do then).
    """
    src, dest_dir = Path(path), as_folder(quarantine_dir)
    dest_dir.mkdir(parents=True, exist_ok=True)
    stamp = _stamp()
    dest = dest_dir / f"{stamp}-{src.name}"
    atomic_write_text(
        dest.with_name(dest.name + ".why"),
        f"{src}: {reason}\nset aside at {stamp} by pid {os.getpid()} on {socket.gethostname()}\n",
    )
    os.replace(src, dest)
    for other in with_files:
        if Path(other).is_file():
            os.replace(other, dest_dir / f"{stamp}-{Path(other).name}")
    fsync_dir(dest_dir)
    fsync_dir(src.parent)
    return dest


def temp_files(folder: str | os.PathLike) -> list[Path]:
    """Leftover temporary files (from a write interrupted by a kill) under ``folder``, sorted."""
    base = as_folder(folder)
    found: list[Path] = []
    for sub in (base, base / RUNS_SUBDIR, base / FAILURES_SUBDIR, base / QUARANTINE_SUBDIR):
        if sub.is_dir():
            found.extend(p for p in sub.iterdir() if p.name.startswith(".") and p.name.endswith(TEMP_SUFFIX))
    return sorted(found)


def remove_temp_files(folder: str | os.PathLike, *, older_than_s: float = 3600.0) -> list[Path]:
    """Delete leftover temporary files older than ``older_than_s`` seconds; return them.

    Younger files are left alone because another process may still be writing them.
    """
    if not isinstance(older_than_s, (int, float)) or older_than_s < 0:
        raise ValueError(f"older_than_s must be a non-negative number, got {older_than_s!r}")
    now = time.time()
    removed = []
    for p in temp_files(folder):
        try:
            if now - p.stat().st_mtime >= older_than_s:
                p.unlink()
                removed.append(p)
        except FileNotFoundError:
            continue
    return removed
