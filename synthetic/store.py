"""Results store of a sweep: one file per finished run, written atomically, and a tidy table.

Layout of a results folder (DESIGN.md "Results")::

    <folder>/runs/<run_key>.csv     one finished run: one row per epoch,
                                    config columns, then ``run_key``, ``epoch``, metric columns
    <folder>/table.csv              all runs, one row per (run, epoch), sorted deterministically

A run's identity is the hash of its resolved config (``RunConfig.key()``), so the file name is
the key and a run can never be stored twice. Every file is written to a temporary file in the same
folder, flushed and ``fsync``-ed, then moved into place with :func:`os.replace` (atomic on POSIX and
Windows), and the folder itself is ``fsync``-ed. A sweep killed at any moment (even with SIGKILL)
therefore leaves only complete run files plus, at worst, a leftover ``.*.tmp`` file, which every
reader ignores (:func:`temp_files`, :func:`remove_temp_files`).

Numbers are written as CSV with Python's shortest round-trip float representation and read back
with ``float_precision="round_trip"``, so a float64 survives the store bit for bit.
"""

from __future__ import annotations

import io
import os
import re
import time
from collections.abc import Iterable
from pathlib import Path

import pandas as pd

__all__ = [
    "RUNS_SUBDIR",
    "TABLE_FILE",
    "RUN_KEY",
    "EPOCH",
    "atomic_write_text",
    "run_path",
    "finished_keys",
    "write_run",
    "read_run",
    "load_table",
    "sort_table",
    "config_columns",
    "write_table",
    "read_table",
    "temp_files",
    "remove_temp_files",
]

RUNS_SUBDIR = "runs"
TABLE_FILE = "table.csv"
RUN_KEY = "run_key"
EPOCH = "epoch"
_RUN_SUFFIX = ".csv"
_TEMP_SUFFIX = ".tmp"
_KEY_RE = re.compile(r"^[A-Za-z0-9_\-]{1,128}$")


def _as_folder(folder: str | os.PathLike) -> Path:
    if not isinstance(folder, (str, os.PathLike)) or str(folder) == "":
        raise ValueError(f"folder must be a non-empty path, got {folder!r}")
    return Path(folder)


def _check_key(key: str) -> str:
    if not isinstance(key, str) or not _KEY_RE.match(key):
        raise ValueError(f"key must be 1-128 characters from [A-Za-z0-9_-] (a config hash), got {key!r}")
    return key


def _fsync_dir(path: Path) -> None:
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


def atomic_write_text(path: str | os.PathLike, text: str) -> Path:
    """Write ``text`` to ``path`` atomically: temp file in the same folder, fsync, rename.

    A reader sees either the old file (or no file) or the complete new one, never a prefix.

    Args:
        path: destination file; its parent folder is created if needed.
        text: the full content (UTF-8).

    Returns:
        The destination path.
    """
    if not isinstance(text, str):
        raise ValueError(f"text must be a str, got {type(text).__name__}")
    dest = _as_folder(path)
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = dest.parent / f".{dest.name}.{os.getpid()}.{time.monotonic_ns()}{_TEMP_SUFFIX}"
    try:
        with open(tmp, "w", encoding="utf-8", newline="") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, dest)
    except BaseException:
        try:
            tmp.unlink()
        except OSError:
            pass
        raise
    _fsync_dir(dest.parent)
    return dest


def run_path(folder: str | os.PathLike, key: str) -> Path:
    """Path of the file that holds the finished run ``key`` in the results ``folder``."""
    return _as_folder(folder) / RUNS_SUBDIR / f"{_check_key(key)}{_RUN_SUFFIX}"


def finished_keys(folder: str | os.PathLike) -> set[str]:
    """Keys of the runs stored in ``folder`` (temporary files are ignored)."""
    runs = _as_folder(folder) / RUNS_SUBDIR
    if not runs.is_dir():
        return set()
    return {
        p.name[: -len(_RUN_SUFFIX)]
        for p in runs.iterdir()
        if p.name.endswith(_RUN_SUFFIX) and not p.name.startswith(".") and p.is_file()
    }


def temp_files(folder: str | os.PathLike) -> list[Path]:
    """Leftover temporary files (from a write interrupted by a kill) under ``folder``, sorted."""
    base = _as_folder(folder)
    found: list[Path] = []
    for sub in (base, base / RUNS_SUBDIR):
        if sub.is_dir():
            found.extend(p for p in sub.iterdir() if p.name.startswith(".") and p.name.endswith(_TEMP_SUFFIX))
    return sorted(found)


def remove_temp_files(folder: str | os.PathLike, *, older_than_s: float = 3600.0) -> list[Path]:
    """Delete leftover temporary files older than ``older_than_s`` seconds; return them.

    Younger files are left alone because another sweep may still be writing them.
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


def config_columns(frame: pd.DataFrame) -> list[str]:
    """The config columns of a run frame or table: every column before ``run_key``."""
    if RUN_KEY not in frame.columns:
        raise ValueError(f"frame must have a {RUN_KEY!r} column, got columns {list(frame.columns)}")
    cols = list(frame.columns)
    return cols[: cols.index(RUN_KEY)]


def _to_csv(frame: pd.DataFrame) -> str:
    # float32 (and float16) columns are widened first: their float64 repr reads back exactly.
    narrow = [
        c for c in frame.columns if pd.api.types.is_float_dtype(frame[c]) and frame[c].dtype.itemsize < 8
    ]
    if narrow:
        frame = frame.astype({c: "float64" for c in narrow})
    buf = io.StringIO()
    frame.to_csv(buf, index=False, lineterminator="\n")
    return buf.getvalue()


# pandas >= 3 parses floats round-trip by default and deprecates the option.
_READ_KW = {} if int(pd.__version__.split(".")[0]) >= 3 else {"float_precision": "round_trip"}


def _read_csv(path: Path) -> pd.DataFrame:
    try:
        return pd.read_csv(path, keep_default_na=True, **_READ_KW)
    except pd.errors.EmptyDataError:  # an empty file (e.g. an old empty table.csv): no rows
        return pd.DataFrame()


def _normalise_run_frame(frame: pd.DataFrame, key: str | None) -> tuple[pd.DataFrame, str]:
    if not isinstance(frame, pd.DataFrame):
        raise ValueError(f"frame must be a pandas DataFrame, got {type(frame).__name__}")
    if len(frame) == 0:
        raise ValueError("frame must have at least one row (one per epoch), got an empty frame")
    for col in (RUN_KEY, EPOCH):
        if col not in frame.columns:
            raise ValueError(f"frame must have a {col!r} column, got columns {list(frame.columns)}")
    keys = frame[RUN_KEY].astype(str).unique()
    if len(keys) != 1:
        raise ValueError(f"frame must hold exactly one run, got run_key values {list(keys)}")
    if key is None:
        key = str(keys[0])
    elif str(keys[0]) != key:
        raise ValueError(f"key {key!r} differs from the frame's run_key {keys[0]!r}")
    _check_key(key)
    if frame[EPOCH].duplicated().any():
        raise ValueError(f"frame must have one row per epoch, got repeated epochs in run {key}")
    cols = list(frame.columns)
    config = [c for c in cols[: cols.index(RUN_KEY)] if c != EPOCH]
    metrics = [c for c in cols if c not in config and c not in (RUN_KEY, EPOCH)]
    out = frame[config + [RUN_KEY, EPOCH] + metrics].sort_values(EPOCH, kind="mergesort")
    return out.reset_index(drop=True), key


def write_run(folder: str | os.PathLike, frame: pd.DataFrame, *, key: str | None = None) -> Path:
    """Store one finished run atomically as ``<folder>/runs/<key>.csv``.

    Args:
        folder: the results folder.
        frame: one row per epoch: config columns, ``run_key``, ``epoch``, metric columns
            (the output of ``synthetic.train.train_run``). Columns before ``run_key`` are the
            config columns; the rows are written sorted by epoch.
        key: the run's config hash; defaults to the frame's (single) ``run_key`` value and must
            equal it when given.

    Returns:
        The path written. Writing the same run twice replaces the file (same content for a
        deterministic run), so a run is never duplicated.
    """
    out, key = _normalise_run_frame(frame, key)
    return atomic_write_text(run_path(folder, key), _to_csv(out))


def read_run(folder: str | os.PathLike, key: str) -> pd.DataFrame:
    """Read the stored run ``key`` from ``folder``; raises FileNotFoundError naming the path."""
    path = run_path(folder, key)
    if not path.is_file():
        raise FileNotFoundError(f"no stored run {key!r}: expected the file {path}")
    return _read_csv(path)


def sort_table(table: pd.DataFrame) -> pd.DataFrame:
    """Sort a tidy table deterministically: by the config columns in order, then by epoch.

    Numeric columns sort numerically with missing values (NaN) last; other columns sort by
    their string form, a missing value counting as the empty string (so it sorts first);
    ``run_key`` breaks remaining ties. The index is reset.
    """
    cols = [c for c in config_columns(table) if c != EPOCH] + [RUN_KEY, EPOCH]

    def _key(s: pd.Series) -> pd.Series:
        if pd.api.types.is_numeric_dtype(s) and not pd.api.types.is_bool_dtype(s):
            return s
        return s.map(lambda v: "" if v is None or (isinstance(v, float) and v != v) else str(v))

    return table.sort_values(cols, key=_key, kind="mergesort", na_position="last").reset_index(drop=True)


def load_table(folder: str | os.PathLike, keys: Iterable[str] | None = None) -> pd.DataFrame:
    """Assemble the tidy table of the runs stored in ``folder``: one row per (run, epoch).

    Args:
        folder: the results folder.
        keys: restrict to these run keys (every one must be stored); default all stored runs.

    Returns:
        Config columns, ``run_key``, ``epoch``, metric columns, sorted by :func:`sort_table`.
        An empty DataFrame when nothing is stored. The result does not depend on the order in
        which runs finished.
    """
    stored = finished_keys(folder)
    if keys is None:
        wanted = sorted(stored)
    else:
        wanted = sorted({_check_key(k) for k in keys})
        missing = [k for k in wanted if k not in stored]
        if missing:
            raise ValueError(f"keys not stored in {folder}: {missing[:5]} ({len(missing)} in all)")
    if not wanted:
        return pd.DataFrame()
    frames = [read_run(folder, k) for k in wanted]
    config: list[str] = []
    others: list[str] = []
    for f in frames:
        for c in config_columns(f):
            if c not in config:
                config.append(c)
        for c in f.columns[len(config_columns(f)) :]:
            if c not in others and c not in (RUN_KEY, EPOCH):
                others.append(c)
    table = pd.concat(frames, ignore_index=True, sort=False)
    table = table[config + [RUN_KEY, EPOCH] + others]
    return sort_table(table)


def write_table(folder: str | os.PathLike, table: pd.DataFrame | None = None) -> Path | None:
    """Write the consolidated ``<folder>/table.csv`` atomically (default: :func:`load_table`).

    Returns:
        The path written, or None for an empty table: then nothing is written and a stale
        ``table.csv`` is removed (an empty CSV cannot be read back as a table).
    """
    if table is None:
        table = load_table(folder)
    if not isinstance(table, pd.DataFrame):
        raise ValueError(f"table must be a pandas DataFrame, got {type(table).__name__}")
    path = _as_folder(folder) / TABLE_FILE
    if len(table) == 0:
        path.unlink(missing_ok=True)
        return None
    return atomic_write_text(path, _to_csv(table))


def read_table(folder: str | os.PathLike) -> pd.DataFrame:
    """Read ``<folder>/table.csv`` if present, else assemble the table from the run files."""
    path = _as_folder(folder) / TABLE_FILE
    if path.is_file():
        table = _read_csv(path)
        stored = finished_keys(folder)
        if RUN_KEY in table.columns and set(table[RUN_KEY].astype(str)) == stored:
            return table  # up to date with the run files
    if not (_as_folder(folder) / RUNS_SUBDIR).is_dir():
        raise FileNotFoundError(
            f"no results in {folder}: expected {path} or run files in {Path(folder) / RUNS_SUBDIR}"
        )
    return load_table(folder)
