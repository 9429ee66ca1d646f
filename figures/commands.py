"""The command that produces each claim's results (shown for every NOT RUN claim and figure).

One place for the command lines of the other packages (``python -m theory``, ``python -m
synthetic``, ``python -m realdata``), so that a change of their interface is made here only.
"""

from __future__ import annotations

import os
import re

__all__ = ["SCALES", "CHECK_IDS", "CLAIM_COMMANDS", "command_for"]

#: The check ids of the claims catalogue (theory.claims.CHECK_IDS; a test keeps them equal).
CHECK_IDS = ("T1", "T2", "T3", "T4", "T5", "T6", "T7", "T8", "W-law")

#: The scales of the main job.
SCALES = ("quick", "default", "paper")

#: The command that produces each claim's results. ``{results}`` is the results folder and
#: ``{quick}`` is `` --quick`` at the quick scale; ``{scale}`` the scale's grid option.
CLAIM_COMMANDS: dict[str, str] = {
    **{cid: "python -m theory{quick}" for cid in CHECK_IDS},
    "S1": "python -m synthetic sweep s1_scl_hscl_nc{scale} --results {results}/synthetic && "
    "python -m synthetic claims {results}/synthetic",
    "S2": "python -m synthetic sweep s2_ucl_positives{scale} --results {results}/synthetic && "
    "python -m synthetic claims {results}/synthetic",
    "S3": "python -m synthetic sweep s3_hucl_beta{scale} --results {results}/synthetic && "
    "python -m synthetic claims {results}/synthetic",
    "S4": "python -m synthetic sweep s4_no_normalisation{scale} --results {results}/synthetic && "
    "python -m synthetic claims {results}/synthetic",
    "R5": "python -m synthetic sweep r5_batch_size{scale} --results {results}/synthetic && "
    "python -m synthetic claims {results}/synthetic",
    "R4": "python -m synthetic sweep r4_near_nc{scale} --results {results}/synthetic "
    "(near-NC-initialisation grid: not shipped yet)",
    "R1": "python -m realdata train --dataset cifar100 --method HSCL --beta B --normalization ball "
    "--results {results}/realdata, B in 0 2 5 10 30 (real-data package: not available yet)",
    "R2": "python -m realdata train --dataset cifar100 --method HSCL --beta B --normalization ball "
    "--results {results}/realdata, B in 0 2 5 10 30 (real-data package: not available yet)",
    "R3": "python -m realdata train --dataset cifar100 --method HUCL --beta B --normalization ball "
    "--results {results}/realdata, B in 0 2 5 10 30 (real-data package: not available yet)",
    "W1": "python -m realdata train --dataset cifar100 --method WeiNCE --results {results}/realdata, then "
    "its POT scores into {results}/weince/pot_scores.csv (real-data package: not available yet)",
    "W2": "python -m realdata train --dataset cifar100 --method WeiNCE --results {results}/realdata, then "
    "its link candidates into {results}/weince/link_candidates.npz (real-data package: not available yet)",
    "W3": "python -m realdata train --dataset cifar100 --arch resnet18 --method InfoNCE|WeiNCE "
    "--results {results}/realdata && python -m realdata eval ... (real-data package: not available yet)",
    "W4": "python -m benchmarks.bench_weince (step-time overhead; the GPU check of the real-data package "
    "is not available yet)",
    "W5": "python -m figures --only noise_floor{scale}",
}


def command_for(claim_id: str, *, results: str | os.PathLike = "results", scale: str = "default") -> str:
    """The command that produces ``claim_id``'s results, for a results folder and scale.

    Args:
        claim_id: a catalogue id.
        results: the results folder of the main job.
        scale: one of :data:`SCALES`, or the name of a grid file's own ``[scale.NAME]`` (the
            synthetic grids may define more scales than the main job).

    Raises:
        ValueError: unknown claim id, or a scale that is not a plain name.
    """
    if claim_id not in CLAIM_COMMANDS:
        raise ValueError(f"claim_id must be one of {list(CLAIM_COMMANDS)}, got {claim_id!r}")
    if not isinstance(scale, str) or not re.match(r"^[A-Za-z0-9_]+$", scale):
        raise ValueError(f"scale must be one of {SCALES} or a grid scale name, got {scale!r}")
    grid_scale = "" if scale == "default" else f" --scale {scale}"
    return CLAIM_COMMANDS[claim_id].format(
        results=str(results), quick=" --quick" if scale == "quick" else "", scale=grid_scale
    )
