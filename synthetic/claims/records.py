"""The synthetic claims as ``theory.claims`` records: S1, S2, S3, S4, R1s, R2s, R3s, R4, R5, and O2.

Each claim is judged from the runs of its grid (:mod:`synthetic.claims.criteria`) with the
criteria declared in that grid file's ``[claim]`` table before the runs, by the rule of
:mod:`synthetic.claims.judges`. :func:`judge` returns one record per claim and stored grid scale
(``NOT RUN`` with the command that produces the results where none is stored): verdict, headline
evidence as numbers with their seed spread, one sub-check per setting, the setting, the exact
command and the criterion text; after them the open problem O2, the map of every decided setting
(:mod:`synthetic.claims.open_map`), one record per stored scale. :func:`evaluate_claims` is the DataFrame view of
``python -m synthetic claims`` (one row per record, every number in ``measured``);
:func:`claim_details` the per-setting table.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pandas as pd

from synthetic.claims.criteria import _FIGURES, CLAIM_GRIDS, command, criteria, criterion_text
from synthetic.claims.judges import JUDGES
from synthetic.claims.open_map import judge_o2
from synthetic.claims.rows import (
    aggregate,
    is_dc,
    is_nc,
    missing_note,
    rank_column,
    run_summary,
    setting_of,
    varying,
    with_available,
)
from synthetic.claims.undecided import continue_command, split, undecided_record
from synthetic.store.schema import GRID, RUN_KEY
from synthetic.store.summary import missing_seeds
from theory import claims as records

__all__ = ["judge", "to_frame", "format_records", "evaluate_claims", "claim_details"]


def _grids_of(table: pd.DataFrame, grid: str) -> list[str]:
    if GRID not in table.columns:
        return []
    names = [g for g in dict.fromkeys(table[GRID].astype(str)) if g == grid or g.startswith(grid + "-")]
    return sorted(names, key=lambda g: (g != grid, g))


def _grids_of_names(missing: Sequence[dict], grid: str) -> set[str]:
    names = {str(m.get(GRID)) for m in missing}
    return {g for g in names if g == grid or g.startswith(grid + "-")}


def _scale(folder: str, grid: str) -> str:
    return folder[len(grid) + 1 :] if folder.startswith(grid + "-") else "default"


def judge(table: pd.DataFrame, *, results: str = "results", scale: str = "default") -> list[records.Claim]:
    """Records of S1-S4, R1s-R3s, R4, R5 and O2 from a table of grid folders (a ``grid`` column).

    R1s, R2s and R3s share the grid r1r3_analogue: each reads the same folders with its own criteria.

    Args:
        table: synthetic results with a ``grid`` column (``synthetic.store.read.load_results``).
        results: the results folder named in the commands.
        scale: the scale whose records come first and whose command a NOT RUN record carries.

    Returns:
        One record per claim and stored grid folder (each scale apart), in
        :data:`CLAIM_GRIDS` order; a NOT RUN record (with the command) for a claim without runs.
        The judges read decided settings only (every seed settled under its convergence rule,
        :mod:`synthetic.claims.undecided`); a claim with an undecided setting is UNDECIDED, with
        the decided settings' verdict in its notes and the command that continues the others.
        A run missing behind its completion record (``table.attrs["missing"]``) does not change
        the rule, which reads the runs present, but the record names it: its setting, seed and
        ``n`` in the notes (:func:`synthetic.claims.rows.missing_note`) and their number in
        ``setting["missing runs"]``.
    """
    if not isinstance(table, pd.DataFrame):
        raise ValueError(f"table must be a DataFrame, got {type(table).__name__}")
    out: list[records.Claim] = []
    gone = list(table.attrs.get("missing", []))
    # one run summary per grid folder: R1s-R3s share a grid, and O2 reads every folder again
    summaries: dict[str, tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]] = {}
    for cid, grid in CLAIM_GRIDS.items():
        crit = criteria(cid)
        folders = _grids_of(table, grid) if len(table) else []
        found = []
        for folder in folders:
            rows = table[table[GRID].astype(str) == folder]
            if len(rows) == 0:
                continue
            sc = _scale(folder, grid)
            if folder not in summaries:
                summary = run_summary(rows)
                summaries[folder] = (summary, *split(summary))
            runs, decided, undecided = summaries[folder]
            if len(undecided):  # a verdict reads settled runs only
                verdict, ev, subs, notes = undecided_record(
                    JUDGES[cid](decided, crit) if len(decided) else None,
                    decided,
                    undecided,
                    varying(runs),
                    continue_command(undecided, grid, results=results, scale=sc),
                )
            else:
                verdict, ev, subs, notes = JUDGES[cid](runs, crit)
            setting = setting_of(runs, folder, sc)
            mine = [m for m in gone if m.get(GRID) == folder]
            if mine:  # the verdict reads the runs present; the record says which are not
                setting["missing runs"] = str(len(mine))
                notes = " ".join(n for n in (notes, missing_note(mine, runs)) if n)
            rec = records.Claim(
                cid,
                verdict,
                tuple(ev),
                tuple(subs),
                setting=setting,
                command=command(cid, results=results, scale=sc),
                criterion=criterion_text(crit),
                figures=_FIGURES[cid],
                notes=notes,
            )
            found.append((sc != scale, rec))
        if not found:
            lost = sorted(_grids_of_names(gone, grid))
            out.append(
                records.not_run(
                    cid,
                    command(cid, results=results, scale=scale),
                    criterion=criterion_text(crit),
                    notes=f"no stored runs of grid {grid}"
                    + (
                        f"; every run of {', '.join(lost)} is missing behind its completion record"
                        if lost
                        else ""
                    ),
                )
            )
        out += [r for _, r in sorted(found, key=lambda x: x[0])]
    return out + _open_map(summaries, results=results, scale=scale)


def _open_map(
    summaries: dict[str, tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]], *, results: str, scale: str
) -> list[records.Claim]:
    """O2 (:mod:`synthetic.claims.open_map`) per scale of the judged grid folders, ``scale`` first.

    ``summaries`` maps each grid folder to its ``(run summary, decided, undecided)`` (the judges').
    """
    by_scale: dict[str, list[str]] = {}
    for grid in dict.fromkeys(CLAIM_GRIDS.values()):
        for folder in summaries:
            if folder == grid or folder.startswith(grid + "-"):
                by_scale.setdefault(_scale(folder, grid), []).append(folder)
    if not by_scale:
        empty = pd.DataFrame()
        return [judge_o2(empty, empty, results=results, scale=scale)]
    out = []
    for sc in sorted(by_scale, key=lambda x: (x != scale, x)):
        decided = pd.concat([summaries[f][1] for f in by_scale[sc]], ignore_index=True)
        undecided = pd.concat([summaries[f][2] for f in by_scale[sc]], ignore_index=True)
        out.append(judge_o2(decided, undecided, results=results, scale=sc))
    return out


def to_frame(claims: Sequence[records.Claim], *, subchecks: bool = False) -> pd.DataFrame:
    """``theory.claims.to_frame`` of the records (one row per claim, or per sub-check)."""
    return records.to_frame(claims, subchecks=subchecks)


def format_records(claims: Sequence[records.Claim]) -> str:
    """Every record as text: verdict, evidence, sub-checks with all their numbers, notes."""
    lines = []
    for c in claims:
        where = c.setting.get("grid", "")
        lines.append(
            f"{c.id} [{where}]: {c.verdict.value}  ({c.instances} runs)"
            if where
            else f"{c.id}: {c.verdict.value}"
        )
        lines.append(f"  {c.statement}")
        for e in c.evidence:
            lines.append(f"  - {e.text()}")
        for s in c.subchecks:
            lines.append(f"  * {s.verdict.value}: {s.what}")
            for e in s.evidence:
                lines.append(f"      {e.text()}")
            if s.note:
                lines.append(f"      ({s.note})")
        if c.notes:
            lines.append(f"  note: {c.notes}")
        lines.append(f"  command: {c.command}")
        lines.append("")
    return "\n".join(lines)


_OLD_VERDICTS = {
    "REPRODUCED": "reproduced",
    "PARTLY": "partly reproduced",
    "NOT REPRODUCED": "not reproduced",
    "UNDECIDED": "undecided",
    "NOT RUN": "no data",
    "FOUND": "found",
    "NOT FOUND": "not found",
}


def evaluate_claims(table: pd.DataFrame, **kwargs: Any) -> pd.DataFrame:
    """The DataFrame view of :func:`judge` (``python -m synthetic claims``).

    Returns:
        One row per record: ``claim``, ``grid`` (the grid folder, "" for NOT RUN),
        ``statement``, ``n_runs``, ``measured`` (evidence, every sub-check with its numbers, and
        the notes, as text), ``verdict`` (``reproduced`` / ``partly reproduced`` /
        ``not reproduced`` / ``undecided`` / ``no data``), ``record_verdict`` (the record's own
        value).
    """
    rows = []
    for c in judge(table, **kwargs):
        text = format_records([c]).split("\n", 2)[2] if c.evidence or c.subchecks else c.notes
        grid = c.setting.get("grid", "")
        n_runs = int(table.loc[table[GRID].astype(str) == grid, RUN_KEY].nunique()) if grid else 0
        n_runs = int(c.setting.get("runs", n_runs))  # O2 reads the runs of every grid of its scale
        rows.append(
            dict(
                claim=c.id,
                grid=grid,
                statement=c.statement,
                n_runs=n_runs,
                measured=text.strip(),
                verdict=_OLD_VERDICTS[c.verdict.value],
                record_verdict=c.verdict.value,
            )
        )
    return pd.DataFrame(rows)


def claim_details(table: pd.DataFrame) -> pd.DataFrame:
    """Per-setting evidence of every claim: seed-aggregated run summaries and the NC / DC flags.

    Returns:
        One row per (claim, grid folder, config without seed): ``claim``, ``grid``, the varying
        config columns, ``n_seeds``, ``missing_seeds`` (when a run of the folder is missing behind
        its completion record), ``<m>_mean`` / ``<m>_std`` (final epoch and ``init_``
        epoch 0), ``nc`` and, where ranks are recorded, ``dc_<rank column>``.
    """
    if not isinstance(table, pd.DataFrame):
        raise ValueError(f"table must be a DataFrame, got {type(table).__name__}")
    out = []
    for cid, grid in CLAIM_GRIDS.items():
        crit = criteria(cid)
        thresholds = [float(t) for t in crit.get("rank_thresholds", (1e-2, 1e-4))]
        for folder in _grids_of(table, grid) if len(table) else []:
            runs = with_available(run_summary(table[table[GRID].astype(str) == folder]), thresholds)
            cols = varying(runs)
            agg = aggregate(runs, cols)
            mine = [m for m in table.attrs.get("missing", []) if m.get(GRID) == folder]
            if mine:  # n_seeds counts the runs present; name the seeds that are not
                seeds = [missing_seeds(mine, r.to_dict(), cols) for _, r in agg.iterrows()]
                agg.insert(
                    agg.columns.get_loc("n_seeds") + 1,
                    "missing_seeds",
                    [", ".join(map(str, x)) for x in seeds],
                )
            agg.insert(0, "grid", folder)
            agg.insert(0, "claim", cid)
            agg["nc"] = [is_nc(r, crit) for _, r in agg.iterrows()]
            for t in thresholds if "dc_fraction" in crit else ():
                agg[f"dc_{rank_column(t)}"] = [is_dc(r, t, crit) for _, r in agg.iterrows()]
            out.append(agg)
    return pd.concat(out, ignore_index=True, sort=False) if out else pd.DataFrame()
