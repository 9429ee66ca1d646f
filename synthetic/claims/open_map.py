"""Open problem O2 (beyond the paper): Dimensional Collapse avoided without Neural Collapse.

The hard-negative paper leaves open the conditions under which Dimensional Collapse (DC) can be
avoided without reaching full Neural Collapse (NC). :func:`judge_o2` reads every **decided**
setting of the synthetic claim grids of one scale (every seed settled under its grid's
convergence rule, :mod:`synthetic.claims.undecided`; runs from a random initialisation, so R4's
near-NC starts are left out) and sorts each into one cell of a map, by seed means at the final
epoch and the thresholds of :data:`CRITERIA` (declared here before the map was first read, the
same as the grids' NC and DC criteria):

* ``NC``: ``etf_mean < 0.05`` and ``within_class_variation < 0.1``;
* ``DC``: the numerical rank at ``1e-2`` of the centred class means at most 0.8 x
  ``min(rank at epoch 0, C - 1)`` (as S1 and S4);
* ``rank kept, no NC``: neither (the class means keep their dimensions, but their geometry or the
  within-class spread is not NC).

The same configuration stored in two grid folders (S2's and S3's UCL with label positives share
their run keys) is one setting of the map, named by both grids; a setting whose rank was not
recorded is ``rank unknown`` and never counts as found. The record's verdict answers the first
question: FOUND when some decided setting keeps its rank without NC (the undecided ones cannot
undo it), NOT FOUND when none does and every setting is decided, UNDECIDED when none does but
some setting is undecided (it could); a sub-check answers the second (DC without hard negatives:
a beta = 0 setting in DC) by the same rule. Each setting of the map is a sub-check
with its etf_mean, within-class variation and rank as seed mean ± std; the notes state the map in a
few lines, by grid, method and beta, normalisation, encoder and C. A scale with no stored synthetic
run reads NOT RUN with the command; one whose settings are all undecided reads UNDECIDED.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import pandas as pd

from synthetic.claims.rows import (
    aggregate,
    evidence,
    is_dc,
    is_nc,
    rank_column,
    setting_columns,
    with_available,
)
from synthetic.store.schema import GRID, RUN_KEY
from theory import claims as records

__all__ = ["CLAIM_ID", "CRITERIA", "CELLS", "classify", "judge_o2", "command"]

#: The claim id of the open problem in the catalogue.
CLAIM_ID = "O2"

#: The thresholds of the map, declared before it was read (the grids' NC and DC criteria).
CRITERIA: dict[str, Any] = {
    "nc_etf": 0.05,
    "nc_wcv": 0.1,
    "dc_fraction": 0.8,
    "threshold": 1e-2,
    "map": "per decided setting of the synthetic claim grids at one scale (every seed settled; "
    "random initialisation), seed means at the final epoch: NC = etf_mean < 0.05 and "
    "within_class_variation < 0.1; DC = rank_1e-2 of the centred class means <= 0.8 x "
    "min(rank_1e-2 at epoch 0, C - 1); otherwise 'rank kept, no NC'",
    "found": "FOUND when some decided setting keeps its class-mean rank without NC; NOT FOUND when "
    "none does and no setting is undecided (an undecided one could still, so then UNDECIDED); a "
    "setting whose rank was not recorded is 'rank unknown' and never FOUND; beside it (a "
    "sub-check, the same rule): DC without hard negatives, FOUND when some beta = 0 setting is in DC",
}

#: The cells of the map, in reading order ("rank unknown": a rank not recorded, never FOUND).
CELLS = ("NC", "DC", "rank kept, no NC", "rank unknown")

#: The columns a map line names (those present and varying).
_MAP_COLUMNS = (
    GRID,
    "method",
    "beta",
    "normalization",
    "encoder",
    "num_classes",
    "positives",
    "batch_size",
)


def command(results: str = "results", scale: str = "default") -> str:
    """The command that produces and reads the map: every claim grid, then the claims."""
    sc = "" if scale == "default" else f" --scale {scale}"
    return (
        f"python -m synthetic sweep synthetic/grids/*.toml{sc} --results {results} "
        f"&& python -m synthetic claims {results}"
    )


def classify(runs: pd.DataFrame, crit: dict[str, Any] | None = None) -> pd.DataFrame:
    """The map: one row per decided setting with its seed aggregates and its ``cell``.

    Args:
        runs: a run summary of decided runs (``synthetic.claims.rows.run_summary``, split by
            ``synthetic.claims.undecided.split``) with a ``grid`` column.
        crit: thresholds (default :data:`CRITERIA`).

    Raises:
        ValueError: ``runs`` is not a DataFrame or lacks the columns the map reads.
    """
    crit = dict(CRITERIA if crit is None else crit)
    if not isinstance(runs, pd.DataFrame):
        raise ValueError(f"runs must be a run summary DataFrame, got {type(runs).__name__}")
    t = float(crit["threshold"])
    need = {"etf_mean", "within_class_variation", rank_column(t), f"init_{rank_column(t)}", "num_classes"}
    missing = sorted(need - set(runs.columns))
    if missing:
        raise ValueError(f"runs must carry the columns {missing} (a run summary of synthetic runs)")
    runs = with_available(runs, (t,))
    # one setting once: the same config in two grid folders (S2's and S3's UCL, say) is one run key
    if RUN_KEY in runs.columns:
        grids = (
            runs.groupby(RUN_KEY, sort=False)[GRID].agg(lambda g: "+".join(dict.fromkeys(map(str, g))))
            if GRID in runs.columns
            else None
        )
        runs = runs.drop_duplicates(RUN_KEY).copy()
        if grids is not None:
            runs[GRID] = runs[RUN_KEY].map(grids)
    keys = setting_columns(runs)
    agg = aggregate(runs, keys)
    if GRID in runs.columns:
        where = runs.groupby(keys, sort=False, dropna=False)[GRID].agg(
            lambda g: "+".join(dict.fromkeys("+".join(g).split("+")))
        )
        agg.insert(0, GRID, list(where))
    cells = []
    for _, r in agg.iterrows():
        dc = is_dc(r, t, crit)
        if dc is None:
            cells.append("rank unknown")
        elif dc:
            cells.append("DC")
        else:
            cells.append("NC" if is_nc(r, crit) else "rank kept, no NC")
    agg["cell"] = cells
    return agg.reset_index(drop=True)


def _line(row: pd.Series, cols: Sequence[str]) -> str:
    parts = [
        f"{c}={row[c]:g}" if isinstance(row[c], float) else f"{c}={row[c]}" for c in cols if c in row.index
    ]
    return ", ".join(parts)


def judge_o2(
    decided: pd.DataFrame, undecided: pd.DataFrame, *, results: str = "results", scale: str = "default"
) -> records.Claim:
    """The record of O2 from the decided and undecided runs of one scale's claim grids.

    Args:
        decided: run summary of the decided runs (every seed of their setting settled).
        undecided: run summary of the others (counted in the record, never read for the map).
        results: the results folder named in the command.
        scale: the scale of the grids read.
    """
    cmd = command(results, scale)
    crit_text = f"{CRITERIA['map']}. {CRITERIA['found']}"
    # the map is of runs from a random initialisation: R4's near-NC starts answer another question
    decided, undecided = (
        f[f["init"].astype(str) != "nc"] if "init" in f.columns else f for f in (decided, undecided)
    )
    n_open, open_beta0 = 0, 0
    if len(undecided):
        keys = setting_columns(undecided)
        n_open = len(undecided[keys].astype(str).drop_duplicates())
        if "beta" in undecided.columns:
            b = pd.to_numeric(undecided.drop_duplicates(keys)["beta"], errors="coerce")
            open_beta0 = int((b == 0).sum())
    runs_read = len(decided) + len(undecided)
    if len(decided) == 0:
        if n_open == 0:
            return records.not_run(
                CLAIM_ID,
                cmd,
                criterion=crit_text,
                notes="no stored synthetic run from a random initialisation",
            )
        return records.Claim(
            CLAIM_ID,
            records.Verdict.UNDECIDED,
            (records.Evidence("undecided settings", float(n_open)),),
            setting={"scale": scale, "runs": str(runs_read)},
            command=cmd,
            criterion=crit_text,
            notes="no decided setting: every setting has a seed that did not settle within its budget",
        )
    agg = classify(decided)
    shown = [c for c in _MAP_COLUMNS if c in agg.columns and agg[c].astype(str).nunique() > 1] or [GRID]
    col = rank_column(float(CRITERIA["threshold"]))
    subs = []
    for _, r in agg.iterrows():
        kept = r["cell"] == "rank kept, no NC"
        subs.append(
            records.SubCheck(
                f"[{_line(r, shown)}] {r['cell']}",
                records.Verdict.FOUND if kept else records.Verdict.NOT_FOUND,
                (
                    evidence(r, "etf_mean"),
                    evidence(r, "within_class_variation"),
                    evidence(r, col, f"{col} final"),
                    evidence(r, f"init_avail_{col}", f"min({col} at epoch 0, C - 1)"),
                ),
                instances=int(r["n_seeds"]),
            )
        )
    beta = (
        pd.to_numeric(agg["beta"], errors="coerce")
        if "beta" in agg.columns
        else pd.Series(math.nan, agg.index)
    )
    no_hard = agg[beta == 0]
    dc0 = no_hard[no_hard["cell"] == "DC"]
    # an undecided beta = 0 setting could still end in DC: NOT FOUND only when none is open
    v0 = (
        records.Verdict.FOUND
        if len(dc0)
        else (records.Verdict.UNDECIDED if open_beta0 else records.Verdict.NOT_FOUND)
    )
    subs.append(
        records.SubCheck(
            "DC without hard negatives: a beta = 0 setting in DC",
            v0,
            (records.Evidence("beta = 0 settings in DC", float(len(dc0)), n=len(no_hard)),),
            note="; ".join(_line(r, shown) for _, r in dc0.iterrows())
            + (f" ({open_beta0} undecided beta = 0 setting(s) left out)" if open_beta0 else ""),
        )
    )
    counts = {cell: int((agg["cell"] == cell).sum()) for cell in CELLS}
    ev = [records.Evidence(f"decided settings: {cell}", float(counts[cell]), n=len(agg)) for cell in CELLS]
    ev.append(records.Evidence("undecided settings (left out)", float(n_open)))
    lines = []
    detail = [c for c in shown if c != GRID]
    for cell in CELLS:
        rows = agg[agg["cell"] == cell]
        if not len(rows):
            continue
        if cell == "NC":  # the expected outcome: counted per grid, the sub-checks list them
            per_grid = rows[GRID].astype(str).value_counts(sort=False) if GRID in rows else {}
            lines.append(
                f"NC: {len(rows)} setting(s) (" + ", ".join(f"{g} {n}" for g, n in per_grid.items()) + ")"
            )
        else:
            lines.append(
                f"{cell}: "
                + "; ".join(
                    f"{r[GRID]}: {_line(r, detail)}" if GRID in r else _line(r, detail)
                    for _, r in rows.iterrows()
                )
            )
    # FOUND stands whatever the undecided settings do; NOT FOUND only when none is left open
    if counts["rank kept, no NC"]:
        verdict = records.Verdict.FOUND
    else:
        verdict = records.Verdict.UNDECIDED if n_open else records.Verdict.NOT_FOUND
    return records.Claim(
        CLAIM_ID,
        verdict,
        tuple(ev),
        tuple(subs),
        setting={"scale": scale, "settings": str(len(agg)), "runs": str(runs_read)},
        command=cmd,
        criterion=crit_text,
        notes=" | ".join(lines) + (f" | {n_open} undecided setting(s) left out" if n_open else ""),
    )
