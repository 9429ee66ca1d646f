"""Producers of the real-data stage: the digits scale of the main job, its progress and spectra.

:func:`run_digits` trains (or reuses) the digits runs (``realdata.claims.run.run_digits``: it
writes the records, tables and WeiNCE score files the later stages read); :func:`digits_progress`
counts the finished runs for the progress bar; :func:`realdata_spectrum` gives the class-mean
spectra of every stored real-data run.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pandas as pd

from figures.pipeline.produce_synthetic import spectrum_table
from figures.pipeline.produce_theory import _check_scale

__all__ = ["DIGITS_SCALE", "run_digits", "digits_progress", "realdata_spectrum"]

#: The digits scale run by the main job at each of its scales (the real-data paper scale needs
#: CIFAR-100 / Tiny-ImageNet and a GPU: ``python -m realdata claims ...``; its results are picked up).
DIGITS_SCALE = {"quick": "quick", "default": "default", "paper": "default"}


def run_digits(results: str | os.PathLike, jobs: int = 1, scale: str = "default") -> dict[str, Any]:
    """The real-data digits scale (``realdata.claims.run.run_digits``): cached and resumable.

    Trains (or reuses) the digits runs, evaluates the frozen two-view encoders, writes the POT
    scores and link candidates of the trained InfoNCE encoder (``RESULTS/weince/``), the records
    ``RESULTS/records/R*.json`` and ``W*.json`` and the tables ``RESULTS/tables/*.csv``.

    Args:
        results: the main job's results folder.
        jobs: parallel training processes.
        scale: the main job's scale (mapped by :data:`DIGITS_SCALE`).

    Returns:
        ``{"trained", "cached", "failed", "seconds", "numbers"}`` (plain data, picklable).
    """
    _check_scale(scale)
    # lazy: torch and torchvision load only when the real-data stage runs
    from realdata.claims.run import run_digits as _run

    s = _run(str(results), jobs=jobs, scale=DIGITS_SCALE[scale], progress=False)
    return {
        "trained": s.trained,
        "cached": s.cached,
        "failed": list(s.failed),
        "seconds": s.seconds,
        "numbers": dict(s.numbers),
    }


def digits_progress(results: str | os.PathLike, scale: str = "default") -> tuple[int, int]:
    """``(finished, total)`` digits runs of the main job's ``scale`` (the real-data stage's progress).

    ``finished`` counts the runs of the digits scale (:data:`DIGITS_SCALE`) stored complete under
    ``RESULTS/realdata``, ``total`` how many runs that scale has.

    Raises:
        ValueError: bad scale.
    """
    _check_scale(scale)
    # lazy: torch and torchvision load only when the real-data stage runs
    from realdata.claims.grids import digits_runs

    # lazy: torch and torchvision load only when the real-data stage runs
    from realdata.claims.records import DIGITS_HCL, DIGITS_TWO, realdata_folder

    # lazy: torch and torchvision load only when the real-data stage runs
    from realdata.training.store import done_keys

    hcl, two = digits_runs(DIGITS_SCALE[scale])
    base = realdata_folder(Path(results))
    done = 0
    for folder, configs in ((base / DIGITS_HCL, hcl), (base / DIGITS_TWO, two)):
        keys = done_keys(folder)
        done += sum(c.resolved().key() in keys for c in configs)
    return done, len(hcl) + len(two)


def realdata_spectrum(results: str | os.PathLike) -> pd.DataFrame:
    """Class-mean spectra of every real-data run stored under ``RESULTS/realdata/<folder>``.

    The real-data stores keep each recorded epoch's class means (``realdata.claims.records.load_folder``);
    the spectrum is computed as for the synthetic runs (:func:`spectrum_table`). The ``grid``
    column names the store folder, as in ``RESULTS/tables/realdata.csv``.
    """
    # lazy: torch and torchvision load only when the real-data stage runs
    from realdata.claims.records import load_folder, realdata_folder

    base = realdata_folder(Path(results))
    frames = []
    for folder in sorted(p for p in base.iterdir() if (p / "runs").is_dir()) if base.is_dir() else []:
        t = load_folder(folder)
        if len(t) and "class_means" in t.columns:
            frames.append(spectrum_table(t.assign(grid=folder.name)))
    frames = [f for f in frames if len(f)]
    return pd.concat(frames, ignore_index=True, sort=False) if frames else pd.DataFrame()
