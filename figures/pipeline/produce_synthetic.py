"""Producers of the synthetic stage: the claim grids, trained or reused, their tables and records.

:func:`run_synthetic` runs (or reuses) the grids of S1-S4, R1s-R3s, R4, R5 at a scale through the synthetic
package's sweep; :func:`load_synthetic` reads every stored run; :func:`spectrum_table` decodes the
class means into the spectrum table; :func:`synthetic_claims` returns the synthetic package's own
records and :func:`synthetic_criteria` the declared criteria.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from figures.pipeline.produce_theory import _check_scale
from synthetic.claims.criteria import CLAIM_GRIDS, criteria
from synthetic.claims.records import judge
from synthetic.store.read import load_results, missing_line
from synthetic.store.schema import decode_class_means
from synthetic.sweep.grids import load_grid
from synthetic.sweep.progress import SweepProgress
from synthetic.sweep.run import run_sweep
from theory import claims
from theory.collapse import class_mean_spectrum

__all__ = [
    "synthetic_folder",
    "synthetic_runs",
    "run_synthetic",
    "find_synthetic_results",
    "load_synthetic",
    "spectrum_table",
    "synthetic_claims",
    "synthetic_criteria",
]

#: Folders (under the results folder) searched for synthetic grid results, in order.
SYNTHETIC_DIRS = ("synthetic", "claims", ".")


def synthetic_folder(results: str | os.PathLike) -> Path:
    """``RESULTS/synthetic``: where the main job stores the synthetic claim grids."""
    return Path(results) / "synthetic"


def _claim_grids(scale: str) -> list[Any]:
    """The claim grids the main job trains at ``scale``, each once (R1s-R3s share one).

    Left out: the grids whose ``main_job_scales`` omit ``scale`` (too costly for the job's budget
    there; their stored runs are still judged).
    """
    grids = [load_grid(name, scale=scale) for name in dict.fromkeys(CLAIM_GRIDS.values())]
    return [g for g in grids if g.spec["main_job_scales"] is None or scale in g.spec["main_job_scales"]]


def synthetic_runs(scale: str = "default") -> int:
    """How many runs the shipped claim grids hold at ``scale`` (the synthetic stage's progress units)."""
    _check_scale(scale)
    return sum(len(g) for g in _claim_grids(scale))


def run_synthetic(
    results: str | os.PathLike,
    scale: str = "default",
    jobs: int = 1,
    scheduler: str | None = None,
    progress: Callable[[int], None] | None = None,
) -> dict[str, Any]:
    """Run the synthetic claim grids at ``scale`` (stored runs are reused), into ``RESULTS/synthetic``.

    Every grid of ``synthetic.claims.criteria.CLAIM_GRIDS`` is swept with the synthetic package's public
    ``synthetic.sweep.run.run_sweep`` into ``RESULTS/synthetic/<grid>[-<scale>]`` (the folders of
    ``python -m synthetic sweep GRID --results RESULTS/synthetic``), stacking compatible runs as
    that command does; a finished run is never trained again.

    Args:
        results: the main job's results folder.
        scale: ``"quick"``, ``"default"`` or ``"paper"`` (the grids' own scales).
        jobs: local worker processes (ignored with ``scheduler``).
        scheduler: a dask scheduler address; the runs then train on that cluster.
        progress: called with the number of runs finished (or found stored) since the last call.

    Returns:
        ``{"runs", "trained", "stored", "failed", "seconds"}``, ``failed`` the ``"<grid>/<key>:
        <reason>"`` of the runs that failed now or before.

    Raises:
        ValueError: bad scale or jobs.
    """
    _check_scale(scale)
    if isinstance(jobs, bool) or not isinstance(jobs, int) or jobs < 1:
        raise ValueError(f"jobs must be a positive integer, got {jobs!r}")
    import time

    class _Forward(SweepProgress):
        def already_done(self, n: int) -> None:
            super().already_done(n)
            if progress is not None and n:
                progress(n)

        def advance(self, ok: bool = True, key: str | None = None) -> None:
            super().advance(ok, key)
            if progress is not None:
                progress(1)

    t0 = time.perf_counter()
    grids = _claim_grids(scale)
    bar = _Forward(sum(len(g) for g in grids), mode="off")
    out: dict[str, Any] = {"runs": 0, "trained": 0, "stored": 0, "failed": []}
    base = synthetic_folder(results)
    for g in sorted(grids, key=len, reverse=True):  # the largest grids first: shorter tails
        folder = base / (g.name if scale == "default" else f"{g.name}-{scale}")
        s = run_sweep(g, folder, n_jobs=jobs, scheduler=scheduler, stack=True, progress=bar)
        out["runs"] += s.n_runs
        out["trained"] += s.n_done
        out["stored"] += s.n_skipped
        out["failed"] += [f"{folder.name}/{k}: {v.get('reason', v)}" for k, v in s.failures.items()]
        out["failed"] += [f"{folder.name}/{k}: failed before" for k in s.failed_before]
    out["seconds"] = time.perf_counter() - t0
    return out


def find_synthetic_results(results: str | os.PathLike) -> list[Path]:
    """Folders under ``results`` holding synthetic grid folders (``<grid>/runs/``), in search order.

    Searched: ``results/synthetic``, ``results/claims`` (the README's sweep folder) and
    ``results`` itself; each folder is returned once.
    """
    base = Path(results)
    found: list[Path] = []
    for sub in SYNTHETIC_DIRS:
        d = (base / sub).resolve() if sub != "." else base.resolve()
        if not d.is_dir() or d in found:
            continue
        if (d / "runs").is_dir() or any((p / "runs").is_dir() for p in d.iterdir() if p.is_dir()):
            found.append(d)
    return found


def load_synthetic(results: str | os.PathLike) -> pd.DataFrame:
    """All synthetic results under ``results`` as one tidy table with a ``grid`` column.

    Uses the synthetic package's loader (only complete runs; one table per grid folder); an
    empty frame when nothing is stored. ``attrs["left_out"]`` lists the run files it left out
    (incomplete, corrupt, failed or missing runs, as the loader names them) and ``attrs["missing"]``
    the runs missing behind their completion record (``synthetic.store.read.load_results``).
    """
    import warnings

    frames, left_out, missing = [], [], []
    seen: set[str] = set()
    for folder in find_synthetic_results(results):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # named in attrs["left_out"], shown by the stage
            t = load_results(folder)
        left_out += list(t.attrs.get("excluded", [])) + list(t.attrs.get("failed", []))
        new = [m for m in t.attrs.get("missing", []) if str(m.get("grid")) not in seen]
        missing += new
        left_out += [missing_line(m) for m in new]
        if len(t) == 0:
            continue
        if "grid" in t.columns:
            t = t[~t["grid"].astype(str).isin(seen)]
            seen |= set(t["grid"].astype(str))
        frames.append(t)
    if not frames:
        out = pd.DataFrame()
    else:
        out = pd.concat(frames, ignore_index=True, sort=False)
        cols = list(out.columns)
        if "grid" in cols:  # keep grid first and the config columns before run_key
            cols.remove("grid")
            out = out[["grid"] + cols]
    out.attrs["left_out"] = left_out
    out.attrs["missing"] = missing  # the synthetic judges name the missing seeds in their records
    return out


def synthetic_claims(
    table: pd.DataFrame, *, results: str | os.PathLike = "results", scale: str = "default"
) -> list[claims.Claim]:
    """Claims S1-S4, R1s-R3s, R4, R5 and O2 as the synthetic package judges them (``synthetic.claims.records.judge``).

    Each record comes straight from its producer: verdict, evidence with seed spread, one
    sub-check per setting, the setting, the criterion declared in the grid file and the command
    (``RESULTS/synthetic``); NOT RUN with the command for a claim without stored runs.

    Args:
        table: :func:`load_synthetic` of the results folder (may be empty).
        results: the main job's results folder.
        scale: the main job's scale (its records come first, and NOT RUN commands name it).

    Returns:
        One record per claim and stored grid scale.
    """
    t = table if isinstance(table, pd.DataFrame) and len(table) else pd.DataFrame({"grid": []})
    if isinstance(table, pd.DataFrame) and t is not table:
        t.attrs["missing"] = list(table.attrs.get("missing", []))
    return judge(t, results=str(synthetic_folder(results)), scale=scale)


def synthetic_criteria() -> pd.DataFrame:
    """The declared criteria of the synthetic claims as a long table ``claim, key, value``.

    Numbers only (thresholds such as ``nc_etf``, ``dc_fraction``), read from the grid files'
    ``[claim]`` tables through ``synthetic.claims.criteria.criteria``; figures draw them as reference lines.
    """
    rows = []
    for cid in CLAIM_GRIDS:
        for k, v in criteria(cid).items():
            if isinstance(v, (int, float)) and not isinstance(v, bool):
                rows.append({"claim": cid, "key": k, "value": float(v)})
    return pd.DataFrame(rows)


_SPEC_KEEP = (
    "grid",
    "dataset",
    "arch",
    "method",
    "beta",
    "normalization",
    "encoder",
    "batch_size",
    "positives",
    "num_classes",
    "estimator",
    "epochs",
    "eval_every",
    "lr",
    "init",
    "seed",
)


def spectrum_table(table: pd.DataFrame) -> pd.DataFrame:
    """The sorted normalised class-mean spectrum per (run, epoch, index) of a results table.

    From the wide columns ``spectrum_0, spectrum_1, ...`` that the synthetic engine records at
    every recorded epoch (the authors' P4 / N1 curve: ``log(sigma_i / sigma_max)`` of the
    covariance of the C class means, the first ``min(C - 1, d)`` values), else from a
    ``class_means`` column (JSON ``(C, d)`` per row, as the real-data store records) through
    ``theory``'s class-mean spectrum.

    Returns:
        Columns: the config columns of :data:`_SPEC_KEEP` present, ``run_key``, ``epoch``,
        ``index``, ``log_ratio``. Empty when the table records neither.
    """
    if not isinstance(table, pd.DataFrame) or len(table) == 0:
        return pd.DataFrame()
    keep = [c for c in _SPEC_KEEP if c in table.columns] + [
        c for c in ("run_key", "epoch") if c in table.columns
    ]
    wide = sorted(
        (c for c in table.columns if c.startswith("spectrum_") and c[9:].isdigit()), key=lambda c: int(c[9:])
    )
    if wide:
        long = table[keep + wide].melt(
            id_vars=keep, value_vars=wide, var_name="index", value_name="log_ratio"
        )
        long["index"] = long["index"].str[9:].astype(int)
        return long.dropna(subset=["log_ratio"]).reset_index(drop=True)
    if "class_means" not in table.columns:
        return pd.DataFrame()
    import torch

    rows = []
    sub = table[table["class_means"].notna()]
    base = sub[keep].to_dict("records")
    for rec, cell in zip(base, sub["class_means"], strict=True):
        mu = decode_class_means(cell)
        if not np.isfinite(mu).all() or mu.shape[0] < 2:
            continue
        r = min(mu.shape[0] - 1, mu.shape[1])
        spec = class_mean_spectrum(torch.from_numpy(mu))[:r]
        for i, v in enumerate(spec):
            rows.append({**rec, "index": i, "log_ratio": float(v)})
    return pd.DataFrame(rows)
