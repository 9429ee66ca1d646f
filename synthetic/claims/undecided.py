"""UNDECIDED: a synthetic verdict reads settled runs only (docs/claims.md#convergence-and-undecided).

A *setting* is a grid point less its seed (every config column but ``seed``). It is **decided**
when every one of its runs settled under its convergence rule (``settled`` in the run summary,
``synthetic.engine.convergence``); a run without a rule, or one that reached its ``epochs`` budget
before its rule held, is a snapshot and leaves its setting **undecided**.

:func:`split` separates the decided runs from the undecided ones; the judges see only the decided
runs, so every number and statement beside a verdict comes from settled runs.
:func:`undecided_record` turns a judge's result into the claim's record when some settings are
undecided: the claim is ``UNDECIDED`` (the undecided settings could change it), its notes give the
verdict of the decided settings alone, and each undecided setting is a sub-check saying how far its
runs got (final epoch against the budget, the last window's changes against their tolerances) with
the command that continues them.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import pandas as pd

from synthetic.claims.rows import aggregate, evidence, label, setting_columns
from synthetic.engine.convergence import TOLERANCE_FIELDS
from synthetic.store.schema import SETTLED
from theory import claims as records

__all__ = ["split", "undecided_subchecks", "undecided_record", "continue_command"]


#: The metrics whose last values an undecided setting reports (how far its runs got).
_WHERE = (
    ("etf_mean", "etf_mean at the last epoch (not settled)"),
    ("within_class_variation", "within_class_variation at the last epoch (not settled)"),
    ("rank_1e-2", "rank_1e-2 at the last epoch (not settled)"),
    ("init_rank_1e-2", "rank_1e-2 at epoch 0"),
)


def _setting_keys(runs: pd.DataFrame, cols: Sequence[str]) -> pd.Series:
    if not cols:
        return pd.Series(["all"] * len(runs), index=runs.index)
    # map(str), not astype(str): pandas 3 keeps a missing value missing under astype(str) (a column
    # that older runs of a folder lack is NaN for them), and a join needs text
    return runs[list(cols)].apply(lambda col: col.map(str)).agg("|".join, axis=1)


def split(runs: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame]:
    """``(decided, undecided)`` runs of a run summary: a setting with one unsettled run is undecided.

    Args:
        runs: a run summary (``synthetic.claims.rows.run_summary``) with a ``settled`` column.

    Raises:
        ValueError: ``runs`` has no ``settled`` column.
    """
    if SETTLED not in runs.columns:
        raise ValueError(f"runs must be a run summary with a {SETTLED!r} column")
    keys = _setting_keys(runs, setting_columns(runs))
    open_ = set(keys[~runs[SETTLED].astype(bool)])
    mask = keys.isin(open_)
    return runs[~mask].reset_index(drop=True), runs[mask].reset_index(drop=True)


def continue_command(undecided: pd.DataFrame, grid: str, *, results: str, scale: str) -> str:
    """The command that trains a grid's runs with twice the budget of its undecided runs, and judges.

    ``--epochs 2E`` (E the largest final epoch of the undecided runs), or ``--set max_steps=2S``
    for a grid whose runs have a step budget (claim R5: batch sizes compared at equal steps).
    """
    sc = "" if scale == "default" else f" --scale {scale}"
    steps = pd.to_numeric(undecided.get("max_steps", pd.Series(dtype=float)), errors="coerce").max()
    if pd.notna(steps) and steps > 0:
        budget = f"--set max_steps={2 * int(steps)}"
    else:
        last = pd.to_numeric(undecided["final_epoch"], errors="coerce").max()
        budget = f"--epochs {2 * max(int(last), 1)}"
    return (
        f"python -m synthetic sweep {grid}{sc} {budget} --results {results} "
        f"&& python -m synthetic claims {results}"
    )


def _rule_text(g: pd.DataFrame) -> str:
    window = int(pd.to_numeric(g.get("settle_window", pd.Series([0])), errors="coerce").fillna(0).max())
    if window <= 0:
        return "no convergence rule declared: a snapshot at the budget"
    return f"not settled within the budget (window {window} epochs)"


def undecided_subchecks(undecided: pd.DataFrame, cols: Sequence[str]) -> list[records.SubCheck]:
    """One UNDECIDED sub-check per undecided setting: how far its runs got and what moved last.

    Args:
        undecided: the undecided runs (:func:`split`).
        cols: the config columns that vary in the record (for the setting's label).
    """
    subs = []
    keys = _setting_keys(undecided, setting_columns(undecided))
    for _, g in undecided.groupby(keys, sort=False):
        first = g.iloc[0]
        settled = g[SETTLED].astype(bool)
        budget = pd.to_numeric(g["epochs"], errors="coerce") if "epochs" in g.columns else g["final_epoch"]
        ev = [
            records.Evidence("seeds settled", float(settled.sum()), n=len(g)),
            records.Evidence(
                "final epoch of the unsettled seeds",
                float(g.loc[~settled, "final_epoch"].max()),
                n=int((~settled).sum()),
            ),
            records.Evidence("epochs budget", float(budget.max())),
        ]
        seeds = aggregate(g, []).iloc[0]  # how far the runs got: seed mean ± std, no verdict
        ev += [evidence(seeds, metric, text) for metric, text in _WHERE if f"{metric}_mean" in seeds.index]
        for metric, field in TOLERANCE_FIELDS.items():
            col = f"change_{metric}"
            if col not in g.columns:
                continue
            ch = pd.to_numeric(g.loc[~settled, col], errors="coerce")
            if not ch.notna().any():
                continue
            name, n = f"largest last-window change of {metric}", int(ch.notna().sum())
            if field in g.columns:  # beside its tolerance, in the metric's own units
                ev.append(records.Evidence(name, float(ch.max()), float(first[field]), "tol", n=n))
            else:
                ev.append(records.Evidence(name, float(ch.max()), n=n))
        what = label(first, cols)
        method = str(first.get("method", ""))
        beta = first.get("beta", math.nan)
        if method and "method" not in cols:
            what = f"{what}; {method}" + (f" beta={float(beta):g}" if isinstance(beta, (int, float)) else "")
        subs.append(
            records.SubCheck(
                f"[{what}] undecided: {int((~settled).sum())} of {len(g)} runs have not settled",
                records.Verdict.UNDECIDED,
                tuple(ev),
                instances=len(g),
                note=_rule_text(g),
            )
        )
    return subs


def undecided_record(
    result: tuple[Any, list, list, str] | None,
    decided: pd.DataFrame,
    undecided: pd.DataFrame,
    cols: Sequence[str],
    command: str,
) -> tuple[records.Verdict, list, list, str]:
    """The claim's ``(verdict, evidence, subchecks, notes)`` when some settings are undecided.

    Args:
        result: the judge's result on the decided runs (None when there are none).
        decided: the decided runs (:func:`split`).
        undecided: the undecided runs.
        cols: the varying config columns (labels).
        command: the command that continues the undecided runs.
    """
    n_open = len(set(_setting_keys(undecided, setting_columns(undecided))))
    n_done = len(set(_setting_keys(decided, setting_columns(decided)))) if len(decided) else 0
    subs = undecided_subchecks(undecided, cols)
    counts = [
        records.Evidence("settings decided (every seed settled)", float(n_done), n=n_done + n_open),
        records.Evidence(
            "runs settled",
            float(decided[SETTLED].sum() + undecided[SETTLED].sum()),
            n=len(decided) + len(undecided),
        ),
    ]
    if result is not None and len(decided):
        v, ev, dsubs, dnotes = result
        alone = (
            f"On the {n_done} decided setting(s) alone the rule gives {records.Verdict.parse(v).value}"
            + (f" ({dnotes})" if dnotes else "")
            + "."
        )
        ev = counts + list(ev)
        subs = list(dsubs) + subs
    else:
        alone = "No setting is decided."
        ev = counts
    notes = (
        f"UNDECIDED: {n_open} setting(s) have runs that did not settle within their budget; a verdict "
        f"reads settled runs only. {alone} Continue with a larger budget: {command}"
    )
    return records.Verdict.UNDECIDED, ev, subs, notes
