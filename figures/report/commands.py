"""The command that produces each claim's results (shown for a claim no stage produced a record of).

Every record a stage produces carries its producer's own command (``python -m theory``, the
synthetic package's ``synthetic.claims.criteria.command``, the real-data package's
``realdata.claims.grids.group_command``); :func:`command_for` gives the same command lines for every id of
the catalogue (``theory.claims.CATALOGUE``), so that the report names one for a claim without any
record too. A test compares them with the producers' own commands, so a change of those
interfaces shows up there and is made here.
"""

from __future__ import annotations

import os
import re

__all__ = [
    "SCALES",
    "CHECK_IDS",
    "OPEN_IDS",
    "SYNTHETIC_GRIDS",
    "REALDATA_GROUPS",
    "CLAIM_COMMANDS",
    "command_for",
]

#: The check ids of the claims catalogue (theory.claims.CHECK_IDS; a test keeps them equal).
CHECK_IDS = ("T1", "T2", "T3", "T4", "T5", "T6", "T7", "T8", "W-law")

#: The open problems ``python -m theory`` searches (theory.claims.OPEN_IDS).
OPEN_IDS = ("O1", "O1b", "O1c")

#: The scales of the main job.
SCALES = ("quick", "default", "paper")

#: The grid of each claim the synthetic package judges (``synthetic.claims.criteria.CLAIM_GRIDS``).
SYNTHETIC_GRIDS = {
    "S1": "s1_scl_hscl_nc",
    "S2": "s2_ucl_positives",
    "S3": "s3_hucl_beta",
    "S4": "s4_no_normalisation",
    "R1s": "r1r3_analogue",
    "R2s": "r1r3_analogue",
    "R3s": "r1r3_analogue",
    "R4": "r4_near_nc",
    "R5": "r5_batch_size",
}

#: The real-data claim group (``python -m realdata claims GROUP``) of the real-data claims.
REALDATA_GROUPS = {"R1": "r1-r3", "R2": "r1-r3", "R3": "r1-r3", "W1": "w1-w3", "W2": "w1-w3", "W3": "w1-w3"}

_SYNTHETIC = (
    "python -m synthetic sweep {grid}{scale} --results {results}/synthetic && "
    "python -m synthetic claims {results}/synthetic"
)
_REALDATA = "python -m realdata claims {group} --root DATA --results {results} --device cuda"

#: The command of each catalogue id. ``{results}`` is the results folder (W5 and the theory
#: checks read nothing from it and do not name it: their results depend on the scale only), ``{quick}`` is
#: `` --quick`` at the quick scale and ``{scale}`` `` --scale NAME`` at a scale other than the
#: default. R4 and R5 name the synthetic grids (their producer in the catalogue); the real-data
#: package also judges them at its digits scale. R1-R3 and W1-W3 name the real-data paper scale
#: (CIFAR-100 on a GPU; ``DATA`` is the datasets folder), whatever the job's scale.
CLAIM_COMMANDS: dict[str, str] = {
    **{cid: "python -m theory{quick}" for cid in CHECK_IDS + OPEN_IDS},
    **{cid: _SYNTHETIC.replace("{grid}", grid) for cid, grid in SYNTHETIC_GRIDS.items()},
    **{cid: _REALDATA.replace("{group}", group) for cid, group in REALDATA_GROUPS.items()},
    "W4": "python -m benchmarks.gpu_check --out {results}/bench/gpu_check.json (on a GPU)",
    "W5": "python -m figures --only noise_floor{scale}",
    # the open problem read from every synthetic grid's settled runs (synthetic.claims.open_map)
    "O2": "python -m synthetic sweep synthetic/grids/*.toml{scale} --results {results}/synthetic && "
    "python -m synthetic claims {results}/synthetic",
}


def command_for(claim_id: str, *, results: str | os.PathLike = "results", scale: str = "default") -> str:
    """The command that produces ``claim_id``'s results, for a results folder and scale.

    Args:
        claim_id: a catalogue id.
        results: the results folder of the main job (named by the commands whose claims read it).
        scale: one of :data:`SCALES`, or the name of a grid file's own ``[scale.NAME]`` (the
            synthetic grids may define more scales than the main job).

    Raises:
        ValueError: unknown claim id, or a scale that is not a plain name.
    """
    if claim_id not in CLAIM_COMMANDS:
        raise ValueError(f"claim_id must be one of {list(CLAIM_COMMANDS)}, got {claim_id!r}")
    if not isinstance(scale, str) or not re.match(r"^[A-Za-z0-9_]+$", scale):
        raise ValueError(f"scale must be one of {SCALES} or a grid scale name, got {scale!r}")
    return CLAIM_COMMANDS[claim_id].format(
        results=str(results),
        quick=" --quick" if scale == "quick" else "",
        scale="" if scale == "default" else f" --scale {scale}",
    )
