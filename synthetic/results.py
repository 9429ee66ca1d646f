"""Results of the synthetic runs: the one table layout, the atomic store, and reading results back.

**Table layout** (DESIGN.md "Results"): one row per (run, epoch); the config columns
(:func:`config_columns`: the ``RunConfig`` fields, in order), then :data:`RUN_KEY`, :data:`EPOCH`,
then the metric columns (:data:`METRIC_COLUMNS`, as ``synthetic.train.train_run`` writes them).
A table read from several grid folders (:func:`load_results`) carries a leading :data:`GRID`
column, the folder's name; it is a label, not a config column.

**Store.** Layout of a results folder::

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

import dataclasses
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
    "GRID",
    "METRIC_COLUMNS",
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
    "final_epoch",
    "load_results",
]

RUNS_SUBDIR = "runs"
TABLE_FILE = "table.csv"
RUN_KEY = "run_key"
EPOCH = "epoch"
#: Label column of a table read from several grid folders (:func:`load_results`).
GRID = "grid"
#: Metric columns of a run frame, in order, after :data:`RUN_KEY` and :data:`EPOCH` (written by
#: ``synthetic.train.train_run``; defined in docs/metrics.md). With ``record_means`` a
#: ``class_means`` column follows them.
METRIC_COLUMNS = (
    "loss",
    "skipped_steps",
    "full_loss",
    "optimum",
    "gap_to_optimum",
    "full_gap",
    "unit_norm",
    "zero_sum",
    "etf_mean",
    "etf_max",
    "within_class_variation",
    "nc1",
    "nc2_equinorm",
    "nc2_equiangularity",
    "etf_error",
    "effective_rank",
    "rankme",
    "spectrum_min",
    "mean_norm",
    "ncm_acc",
    "train_ncm_acc",
)
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


def config_columns(frame: pd.DataFrame | None = None) -> list[str]:
    """The config columns of the table layout (the one definition used by every module).

    Args:
        frame: a run frame or a table; default none.

    Returns:
        Without ``frame``: the ``synthetic.config.RunConfig`` fields in order (the columns
        ``train_run`` writes before ``run_key``). With ``frame``: its columns before ``run_key``,
        less ``epoch`` and the :data:`GRID` label (a stored run keeps the fields of the config
        that wrote it, so the frame decides).
    """
    if frame is None:
        from synthetic.config import RunConfig

        return [f.name for f in dataclasses.fields(RunConfig)]
    if RUN_KEY not in frame.columns:
        raise ValueError(f"frame must have a {RUN_KEY!r} column, got columns {list(frame.columns)}")
    cols = list(frame.columns)
    return [c for c in cols[: cols.index(RUN_KEY)] if c not in (EPOCH, GRID)]


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
    config = config_columns(frame)
    metrics = [c for c in frame.columns if c not in config and c not in (RUN_KEY, EPOCH)]
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
    cols = config_columns(table) + [RUN_KEY, EPOCH]
    if GRID in table.columns[: table.columns.get_loc(RUN_KEY)]:
        cols = [GRID, *cols]  # the label of a table read from grid folders sorts first

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
        f_config = config_columns(f)
        for c in f_config:
            if c not in config:
                config.append(c)
        for c in f.columns:
            if c not in f_config and c not in others and c not in (RUN_KEY, EPOCH):
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


# --------------------------------------------------------------------------------------------
# Reading results back
# --------------------------------------------------------------------------------------------


def final_epoch(table: pd.DataFrame) -> pd.DataFrame:
    """The last-epoch row of every run of a tidy table (sorted like the table).

    Runs are told apart by ``(grid, run_key)`` when the table has a ``grid`` column (a parent
    folder: the same config may be stored in several grid folders), else by ``run_key``.
    """
    if not isinstance(table, pd.DataFrame) or RUN_KEY not in table or EPOCH not in table:
        raise ValueError("table must be a tidy results table with run_key and epoch columns")
    by = [GRID, RUN_KEY] if GRID in table.columns else RUN_KEY
    idx = table.groupby(by, sort=False)[EPOCH].idxmax()
    return table.loc[sorted(idx.values)].reset_index(drop=True)


def load_results(folder: str | os.PathLike) -> pd.DataFrame:
    """Load results for claims: one results folder, or a folder of per-grid result folders.

    A folder with ``runs/`` is read as one table with a leading ``grid`` column holding the
    folder's name; otherwise every sub-folder holding ``runs/`` is read and the tables are
    concatenated with a leading ``grid`` column (the sub-folder name). Folder names keep their
    scale suffix (``s3_hucl_beta-paper``): :func:`synthetic.claims.evaluate_claims` matches a claim grid with or
    without it and reports each scale apart.
    """
    base = Path(folder)
    if (base / RUNS_SUBDIR).is_dir():
        t = read_table(base)
        if len(t) and GRID not in t.columns:
            t.insert(0, GRID, base.resolve().name)
        return t
    subs = sorted(p for p in base.iterdir() if (p / RUNS_SUBDIR).is_dir()) if base.is_dir() else []
    if not subs:
        raise FileNotFoundError(
            f"no results under {base}: expected {base / RUNS_SUBDIR} or sub-folders <grid>/{RUNS_SUBDIR}"
        )
    frames = []
    for p in subs:
        t = read_table(p)
        if len(t):
            t.insert(0, GRID, p.name)
            frames.append(t)
    return pd.concat(frames, ignore_index=True, sort=False) if frames else pd.DataFrame()
