"""The consolidated table of a results folder: ``table.csv``, trusted only while its record matches.

``table.csv`` holds every complete run of the folder, one row per (run, epoch), sorted
deterministically (``synthetic.store.schema.sort_table``), so it does not depend on the order in which
runs finished. Its record ``table.json`` holds the table's sha256 and the sha256 of every run
file it was built from; :func:`read_table` uses ``table.csv`` only while both still match (a run
file changed, added, removed or set aside makes it stale) and otherwise rebuilds the table from
the run files. Incomplete, corrupt or unverified run files are never in a table: they are listed
in ``table.attrs["excluded"]`` and named by a :class:`StoreWarning`; runs whose file is missing
behind its completion record are listed in ``table.attrs["missing"]``
(``synthetic.store.runs.MissingRun.as_dict``, with the config its record holds) and named too.
"""

from __future__ import annotations

import hashlib
import json
import os
import warnings
from collections.abc import Iterable
from pathlib import Path

import pandas as pd

from synthetic.store.folders import (
    RUNS_SUBDIR,
    TABLE_FILE,
    TABLE_RECORD,
    as_folder,
    atomic_write_bytes,
    atomic_write_text,
)
from synthetic.store.runs import StoreScan, check_key, check_run_file, parse_csv, scan_store, to_csv
from synthetic.store.schema import EPOCH, RUN_KEY, config_columns, sort_table

__all__ = ["TABLE_FORMAT", "StoreWarning", "load_table", "write_table", "table_is_current", "read_table"]

TABLE_FORMAT = "synthetic-table/1"


class StoreWarning(UserWarning):
    """Runs left out of a table: incomplete, corrupt or unverified files, or missing behind their record."""


def _warn_excluded(scan: StoreScan) -> None:
    if scan.bad:
        warnings.warn(
            f"{len(scan.bad)} run file(s) of {scan.folder} left out (the next sweep sets aside and "
            "reruns those it cannot verify): " + "; ".join(scan.excluded()),
            StoreWarning,
            stacklevel=3,
        )
    if scan.missing:
        warnings.warn(
            f"{len(scan.missing)} run(s) of {scan.folder} missing behind their completion record (the "
            "next sweep of their grid trains them again): " + "; ".join(m.describe() for m in scan.missing),
            StoreWarning,
            stacklevel=3,
        )


def _left_out(table: pd.DataFrame, scan: StoreScan) -> pd.DataFrame:
    table.attrs["excluded"] = scan.excluded()
    table.attrs["missing"] = [m.as_dict() for m in scan.missing]
    return table


def load_table(
    folder: str | os.PathLike, keys: Iterable[str] | None = None, *, scan: StoreScan | None = None
) -> pd.DataFrame:
    """Assemble the tidy table of the complete runs stored in ``folder``: one row per (run, epoch).

    Args:
        folder: the results folder.
        keys: restrict to these run keys (every one must be stored and complete); default all
            complete runs.
        scan: a :func:`scan_store` of ``folder`` made just before (default: scan now).

    Returns:
        Config columns, ``run_key``, ``epoch``, metric columns, sorted by :func:`sort_table`.
        An empty DataFrame when nothing is stored. The result does not depend on the order in
        which runs finished. ``table.attrs["excluded"]`` lists the run files left out
        (``"<path>: <reason>"``), ``table.attrs["missing"]`` the runs missing behind their
        completion record; a :class:`StoreWarning` names them too.
    """
    scan = scan if scan is not None else scan_store(folder)
    if keys is None:
        wanted = sorted(scan.ok)
        _warn_excluded(scan)
    else:
        wanted = sorted({check_key(k) for k in keys})
        missing = [k for k in wanted if k not in scan.ok]
        if missing:
            bad = {c.key: c for c in scan.bad}
            why = [bad[k].describe() for k in missing if k in bad]
            raise ValueError(
                f"keys not stored in {folder}: {missing[:5]} ({len(missing)} in all)"
                + (f"; incomplete or corrupt: {why[:3]}" if why else "")
            )
    if not wanted:
        return _left_out(pd.DataFrame(), scan)
    frames = []
    for k in wanted:
        data = scan.ok[k].path.read_bytes()
        if hashlib.sha256(data).hexdigest() != scan.ok[k].sha256:  # replaced since the scan
            again = check_run_file(scan.ok[k].path)
            if not again.ok:
                raise ValueError(f"stored run {again.describe()} (it changed while the table was read)")
            data = again.path.read_bytes()
        frames.append(parse_csv(data))
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
    table = sort_table(table[config + [RUN_KEY, EPOCH] + others])
    return _left_out(table, scan)


def _table_record_of(scan: StoreScan) -> dict[str, str]:
    return {k: str(c.sha256) for k, c in sorted(scan.ok.items())}


def write_table(
    folder: str | os.PathLike, table: pd.DataFrame | None = None, *, scan: StoreScan | None = None
) -> Path | None:
    """Write ``<folder>/table.csv`` (default: :func:`load_table`) and its record atomically.

    Returns:
        The path written, or None for an empty table: then nothing is written and a stale
        ``table.csv`` (and record) is removed (an empty CSV cannot be read back as a table).
    """
    scan = scan if scan is not None else scan_store(folder)
    if table is None:
        table = load_table(folder, keys=sorted(scan.ok), scan=scan) if scan.ok else pd.DataFrame()
    if not isinstance(table, pd.DataFrame):
        raise ValueError(f"table must be a pandas DataFrame, got {type(table).__name__}")
    base = as_folder(folder)
    path, rec = base / TABLE_FILE, base / TABLE_RECORD
    if len(table) == 0:
        rec.unlink(missing_ok=True)
        path.unlink(missing_ok=True)
        return None
    body = to_csv(table).encode("utf-8")
    record = {
        "format": TABLE_FORMAT,
        "sha256": hashlib.sha256(body).hexdigest(),
        "rows": len(table),
        "runs": _table_record_of(scan),
    }
    rec.unlink(missing_ok=True)  # a table without a record is never trusted
    atomic_write_bytes(path, body)
    atomic_write_text(rec, json.dumps(record, separators=(",", ":"), sort_keys=True) + "\n")
    return path


def table_is_current(folder: str | os.PathLike, scan: StoreScan | None = None) -> bool:
    """True when ``table.csv`` is exactly the table of the complete runs now stored (by sha256)."""
    base = as_folder(folder)
    scan = scan if scan is not None else scan_store(base)
    path, rec = base / TABLE_FILE, base / TABLE_RECORD
    if not path.is_file() or not rec.is_file():
        return not scan.ok and not path.exists()
    try:
        record = json.loads(rec.read_text(encoding="utf-8"))
        if record.get("format") != TABLE_FORMAT:
            return False
        if record.get("runs") != _table_record_of(scan):
            return False
        return hashlib.sha256(path.read_bytes()).hexdigest() == record.get("sha256")
    except (OSError, ValueError, AttributeError):
        return False


def read_table(folder: str | os.PathLike) -> pd.DataFrame:
    """The table of ``folder``: ``table.csv`` while current (:func:`table_is_current`), else rebuilt.

    ``attrs["excluded"]`` and ``attrs["missing"]`` list the runs left out (see :func:`load_table`).

    Raises:
        FileNotFoundError: neither ``table.csv`` nor ``runs/`` exists.
    """
    base = as_folder(folder)
    path = base / TABLE_FILE
    if not (base / RUNS_SUBDIR).is_dir():
        if path.is_file():
            raise FileNotFoundError(f"no run files in {base / RUNS_SUBDIR}: {path} cannot be checked")
        raise FileNotFoundError(
            f"no results in {folder}: expected {path} or run files in {base / RUNS_SUBDIR}"
        )
    scan = scan_store(base)
    if scan.ok and table_is_current(base, scan):
        table = _left_out(parse_csv(path.read_bytes()), scan)
        _warn_excluded(scan)
        return table
    return load_table(base, scan=scan)
