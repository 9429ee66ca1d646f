"""The synthetic claims, their grids and their criteria, declared before the runs.

:data:`CLAIM_GRIDS` names the grid of each claim (S1-S4; R1s-R3s, the synthetic analogues of the
CIFAR claims R1-R3; R4, R5); :func:`criteria` reads the claim's table of the grid file (its
thresholds and verdict texts: never tuned after the runs) -- ``[claim]`` for a grid of one claim,
``[claim.<id>]`` for a grid shared by several (r1r3_analogue) --, :func:`criterion_text` writes it
as the record's criterion, :func:`command` is the exact command that produces and judges a claim.
"""

from __future__ import annotations

from typing import Any

import tomllib

from synthetic.sweep.grids import grid_files
from theory import claims as records

__all__ = ["CLAIM_GRIDS", "CLAIMS", "claim_table", "criteria", "command"]

#: The grid of each synthetic claim, in report order. R1s, R2s, R3s (the synthetic analogues of
#: R1-R3, the project's design) share one grid.
CLAIM_GRIDS = {
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


#: ``{claim: (statement, grid)}`` (statements from the catalogue of ``theory.claims``).
CLAIMS = {cid: (records.statement(cid), grid) for cid, grid in CLAIM_GRIDS.items()}


_FIGURES = {
    "S1": ("spectrum_scl", "conditions_scl", "vs_beta_scl", "within_class_scl", "normalization_scl"),
    "S2": ("ucl_positives", "conditions_ucl"),
    "S3": ("vs_beta_ucl", "conditions_ucl", "spectrum_ucl", "hucl_at_nc"),
    "S4": ("normalization_scl", "spectrum_scl", "normalization_ucl"),
    "R1s": ("ncm_scl", "ncm_ucl"),
    "R2s": ("spectrum_scl", "vs_beta_scl", "ncm_scl"),
    "R3s": ("ncm_ucl", "spectrum_ucl", "vs_beta_ucl"),
    "R4": ("near_nc_init",),
    "R5": ("batch_size",),
}


def claim_table(table: dict[str, Any], claim_id: str) -> dict[str, Any] | None:
    """The criteria of ``claim_id`` in a grid's ``[claim]`` table, or None when it has none.

    ``[claim]`` with ``id = claim_id`` (a grid of one claim), or its sub-table ``[claim.<claim_id>]``
    (a grid shared by several claims; its ``id``, when written, must be ``claim_id``).
    """
    if table.get("id") == claim_id:
        return dict(table)
    sub = table.get(claim_id)
    if isinstance(sub, dict) and sub.get("id", claim_id) == claim_id:
        return {**sub, "id": claim_id}
    return None


def criteria(claim_id: str) -> dict[str, Any]:
    """The claim's table of its shipped grid file (thresholds and verdict texts).

    ``[claim]`` (``id = claim_id``) or ``[claim.<claim_id>]`` (:func:`claim_table`).

    Raises:
        ValueError: unknown claim id, or a grid file without a ``[claim]`` table for it.
    """
    if claim_id not in CLAIM_GRIDS:
        raise ValueError(f"claim_id must be one of {list(CLAIM_GRIDS)}, got {claim_id!r}")

    path = grid_files()[CLAIM_GRIDS[claim_id]]
    table = claim_table(tomllib.loads(path.read_text(encoding="utf-8")).get("claim", {}), claim_id)
    if table is None:
        raise ValueError(f"grid {path} has no [claim] table for {claim_id}")
    return table


def criterion_text(crit: dict[str, Any]) -> str:
    """The verdict rule of a ``[claim]`` table as one paragraph (the record's ``criterion``)."""
    parts = []
    for key in ("nc", "gain", "closer", "dc", "interior", "worse", "grows", "hindered", "premise"):
        if key in crit:
            parts.append(str(crit[key]))
    for key, name in (
        ("reproduced", "REPRODUCED"),
        ("partly", "PARTLY"),
        ("not_reproduced", "NOT REPRODUCED"),
    ):
        if key in crit:
            parts.append(f"{name}: {crit[key]}")
    for key in ("versus_r2", "abstract", "collision", "cliff", "analogue"):
        if key in crit:
            parts.append(f"Also: {crit[key]}")
    if "aggregation" in crit:
        parts.append(f"Aggregation: {crit['aggregation']}")
    return ". ".join(p.rstrip(".") for p in parts) + "."


def command(claim_id: str, *, results: str = "results", scale: str = "default") -> str:
    """The exact command that produces and judges ``claim_id`` at ``scale``."""
    grid = CLAIM_GRIDS[claim_id]
    sc = "" if scale == "default" else f" --scale {scale}"
    return f"python -m synthetic sweep {grid}{sc} --results {results} && python -m synthetic claims {results}"
