"""Reading results back for summaries, claims and figures: one grid folder or a folder of them.

:func:`load_results` reads one results folder, or a parent of grid folders, as one table with a
``grid`` label column; the runs it leaves out (incomplete, corrupt or failed) are listed in
``table.attrs["excluded"]`` and ``table.attrs["failed"]`` so no caller uses a partial result
silently. :func:`find_result_folders` finds the folders holding ``runs/`` below a path.
"""

from __future__ import annotations

import os
import warnings
from pathlib import Path

import pandas as pd

from synthetic.store.failures import failure_line, read_failures
from synthetic.store.folders import RUNS_SUBDIR
from synthetic.store.schema import GRID
from synthetic.store.tables import StoreWarning, read_table

__all__ = ["find_result_folders", "load_results", "missing_line"]


def find_result_folders(base: str | os.PathLike, max_depth: int = 3) -> list[Path]:
    """Folders holding ``runs/`` at or below ``base`` (at most ``max_depth`` levels down), sorted."""
    root = Path(base)
    found: list[Path] = []
    level = [root] if root.is_dir() else []
    for _ in range(max_depth + 1):
        nxt: list[Path] = []
        for d in level:
            if (d / RUNS_SUBDIR).is_dir():
                found.append(d)
                continue
            try:
                nxt.extend(p for p in sorted(d.iterdir()) if p.is_dir() and not p.name.startswith("."))
            except OSError:
                continue
        level = nxt
    return sorted(found)


def _no_results_error(base: Path) -> FileNotFoundError:
    if not base.exists():
        return FileNotFoundError(f"no results under {base}: the folder does not exist")
    if not base.is_dir():
        return FileNotFoundError(f"no results under {base}: it is a file, not a results folder")
    deeper = find_result_folders(base)
    if deeper:
        parents = sorted({p.parent for p in deeper})
        best = max(parents, key=lambda p: sum(q.parent == p for q in deeper))
        names = sorted(q.name for q in deeper if q.parent == best)
        shown = ", ".join(names[:4]) + (", ..." if len(names) > 4 else "")
        return FileNotFoundError(
            f"no results directly under {base}: the grid folders are in {best} ({len(names)}: {shown}); "
            f"give {best} instead"
        )
    if base.name == RUNS_SUBDIR:
        return FileNotFoundError(
            f"no results under {base}: this is a runs folder; give its parent {base.parent}"
        )
    return FileNotFoundError(
        f"no results under {base}: expected {base / RUNS_SUBDIR} or sub-folders <grid>/{RUNS_SUBDIR}"
    )


def _failed_lines(folder: Path) -> list[str]:
    return [f"{folder.name}/{failure_line(k, info)}" for k, info in read_failures(folder).items()]


def load_results(folder: str | os.PathLike) -> pd.DataFrame:
    """Load results for claims: one results folder, or a folder of per-grid result folders.

    A folder with ``runs/`` is read as one table with a leading ``grid`` column holding the
    folder's name; otherwise every sub-folder holding ``runs/`` is read and the tables are
    concatenated with a leading ``grid`` column (the sub-folder name). Folder names keep their
    scale suffix (``s3_hucl_beta-paper``): :func:`synthetic.claims.records.evaluate_claims` matches a
    claim grid with or without it and reports each scale apart.

    Only complete runs are read. ``attrs["excluded"]`` lists the run files left out (``"<path>:
    <reason>"``: incomplete, corrupt, foreign or unverified files), ``attrs["failed"]`` the runs
    recorded as failed (``"<grid>/<key>: <exception> at epoch <e>: <reason>"``) and
    ``attrs["missing"]`` the runs whose file is missing behind its completion record (dicts with
    ``grid``, ``run_key``, ``record`` and ``config``, the config its record holds or None): a
    summary names their seeds (``synthetic.store.summary.summarize``).

    Raises:
        FileNotFoundError: no results there; when the grid folders are one or more levels
            further down (e.g. ``results/`` given for ``results/claims``), the message says where.
    """
    base = Path(folder)
    if (base / RUNS_SUBDIR).is_dir():
        folders = [base]
    else:
        folders = sorted(p for p in base.iterdir() if (p / RUNS_SUBDIR).is_dir()) if base.is_dir() else []
        if not folders:
            raise _no_results_error(base)
    frames, excluded, failed = [], [], []
    missing: list[dict] = []
    for p in folders:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", StoreWarning)  # reported once below, for all folders
            t = read_table(p)
        grid = p.resolve().name if p == base else p.name
        excluded.extend(t.attrs.get("excluded", []))
        failed.extend(_failed_lines(p))
        missing.extend({"grid": grid, **m} for m in t.attrs.get("missing", []))
        if len(t):
            t = t.copy()
            if GRID not in t.columns:
                t.insert(0, GRID, grid)
            frames.append(t)
    out = pd.concat(frames, ignore_index=True, sort=False) if frames else pd.DataFrame()
    out.attrs["excluded"] = excluded
    out.attrs["failed"] = failed
    out.attrs["missing"] = missing
    if excluded:
        warnings.warn(
            f"{len(excluded)} run file(s) under {base} left out (the next sweep sets aside and reruns "
            "those it cannot verify): " + "; ".join(excluded),
            StoreWarning,
            stacklevel=2,
        )
    if missing:
        warnings.warn(
            f"{len(missing)} run(s) under {base} missing behind their completion record (the next sweep "
            "of their grid trains them again): " + "; ".join(missing_line(m) for m in missing),
            StoreWarning,
            stacklevel=2,
        )
    return out


def missing_line(missing: dict) -> str:
    """``"<grid>/<key> (seed S): run file missing behind its completion record"`` of one ``attrs["missing"]`` entry."""
    config = missing.get("config") or {}
    seed = f" (seed {config['seed']})" if "seed" in config else ""
    where = f"{missing['grid']}/" if missing.get("grid") else ""
    return f"{where}{missing['run_key']}{seed}: run file missing behind its completion record {missing.get('record', '')}"
