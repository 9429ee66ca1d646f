"""Claims of the synthetic study as ``theory.claims.Claim`` records: S1, S2, S3, S4, R4, R5.

Each claim is judged from the runs of its grid (:data:`CLAIM_GRIDS`) with the criteria declared in
that grid file's ``[claim]`` table before the runs (:func:`criteria`; never tuned afterwards).
:func:`judge` returns one record per claim and stored grid scale (``NOT RUN`` with the command
that produces the results where none is stored): verdict, headline evidence as numbers with
their seed spread, one sub-check per setting, the setting, the exact command and the criterion
text. :func:`evaluate_claims` is the DataFrame view of ``python -m synthetic claims`` (one row per
record, every number in ``measured``); :func:`claim_details` the per-setting table.

A *run summary* (:func:`run_summary`) has one row per run: its config columns, its final-epoch
metrics and, prefixed ``init_``, the same metrics at epoch 0 (the initialisation, or the source
state of a near-NC run); the judges aggregate it over seeds (:func:`aggregate`: ``<m>_mean``,
``<m>_std`` with ddof = 1, ``n_seeds``).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd
import tomllib

from synthetic.results import EPOCH, GRID, RUN_KEY, config_columns
from synthetic.summary import format_mean_std
from theory import claims as records

__all__ = [
    "CLAIM_GRIDS",
    "CLAIMS",
    "SUMMARY_METRICS",
    "criteria",
    "command",
    "run_summary",
    "aggregate",
    "judge",
    "to_frame",
    "format_records",
    "evaluate_claims",
    "claim_details",
]

#: The grid of each synthetic claim, in report order.
CLAIM_GRIDS = {
    "S1": "s1_scl_hscl_nc",
    "S2": "s2_ucl_positives",
    "S3": "s3_hucl_beta",
    "S4": "s4_no_normalisation",
    "R4": "r4_near_nc",
    "R5": "r5_batch_size",
}
#: ``{claim: (statement, grid)}`` (statements from the catalogue of ``theory.claims``).
CLAIMS = {cid: (records.statement(cid), grid) for cid, grid in CLAIM_GRIDS.items()}
#: Metrics carried by a run summary (final epoch; ``init_<m>`` at epoch 0), when present.
SUMMARY_METRICS = (
    "etf_mean",
    "within_class_variation",
    "unit_norm",
    "zero_sum",
    "rank_1e-2",
    "rank_1e-4",
    "effective_rank",
    "spectrum_min",
    "mean_norm",
    "collision",
    "collision_nc",
    "loss",
    "gap_to_optimum",
    "ncm_acc",
    "train_ncm_acc",
    "steps",
)
_FIGURES = {
    "S1": ("spectrum_scl", "conditions_scl", "vs_beta_scl", "within_class_scl", "normalization_scl"),
    "S2": ("ucl_positives", "conditions_ucl"),
    "S3": ("vs_beta_ucl", "conditions_ucl", "spectrum_ucl", "hucl_at_nc"),
    "S4": ("normalization_scl", "spectrum_scl", "normalization_ucl"),
    "R4": ("near_nc_init",),
    "R5": ("batch_size",),
}


def criteria(claim_id: str) -> dict[str, Any]:
    """The ``[claim]`` table of the claim's shipped grid file (thresholds and verdict texts).

    Raises:
        ValueError: unknown claim id, or a grid file without a ``[claim]`` table for it.
    """
    if claim_id not in CLAIM_GRIDS:
        raise ValueError(f"claim_id must be one of {list(CLAIM_GRIDS)}, got {claim_id!r}")
    from synthetic.grids import grid_files

    path = grid_files()[CLAIM_GRIDS[claim_id]]
    table = tomllib.loads(path.read_text(encoding="utf-8")).get("claim", {})
    if table.get("id") != claim_id:
        raise ValueError(f"grid {path} has no [claim] table for {claim_id}")
    return dict(table)


def criterion_text(crit: dict[str, Any]) -> str:
    """The verdict rule of a ``[claim]`` table as one paragraph (the record's ``criterion``)."""
    parts = []
    for key in ("nc", "dc", "grows", "hindered", "premise"):
        if key in crit:
            parts.append(str(crit[key]))
    for key, name in (
        ("reproduced", "REPRODUCED"),
        ("partly", "PARTLY"),
        ("not_reproduced", "NOT REPRODUCED"),
    ):
        if key in crit:
            parts.append(f"{name}: {crit[key]}")
    for key in ("versus_r2", "abstract", "collision"):
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


# ------------------------------------------------------------------------------ summaries


def run_summary(rows: pd.DataFrame) -> pd.DataFrame:
    """One row per run: config columns, final-epoch metrics, and ``init_<m>`` at epoch 0.

    Runs are told apart by ``(grid, run_key)`` when there is a ``grid`` column.
    """
    if not isinstance(rows, pd.DataFrame) or RUN_KEY not in rows or EPOCH not in rows:
        raise ValueError("rows must be a tidy results table with run_key and epoch columns")
    by = [GRID, RUN_KEY] if GRID in rows.columns else [RUN_KEY]
    order = rows.sort_values(by + [EPOCH], kind="mergesort")
    last = order.groupby(by, sort=False).tail(1).set_index(by)
    first = order.groupby(by, sort=False).head(1).set_index(by)
    metrics = [m for m in SUMMARY_METRICS if m in rows.columns]
    cfg = [c for c in config_columns(rows) if c in rows.columns]
    out = last[cfg + metrics].copy()
    for m in metrics:
        out[f"init_{m}"] = first[m]
    out["final_epoch"] = last[EPOCH]
    return out.reset_index()


def aggregate(runs: pd.DataFrame, by: Sequence[str]) -> pd.DataFrame:
    """Seed mean and sample std (ddof = 1) of every numeric metric of a run summary, per ``by``."""
    values = [c for c in runs.columns if c.startswith("init_") or c in SUMMARY_METRICS]
    rows = []
    groups = runs.groupby(list(by), sort=False, dropna=False) if by else [((), runs)]
    for key, g in groups:
        key = key if isinstance(key, tuple) else (key,)
        row: dict[str, Any] = dict(zip(by, key, strict=True))
        row["n_seeds"] = int(len(g))
        for m in values:
            v = pd.to_numeric(g[m], errors="coerce").to_numpy(dtype=float)
            row[f"{m}_mean"] = float(np.mean(v)) if len(v) else math.nan
            row[f"{m}_std"] = float(np.std(v, ddof=1)) if len(v) > 1 else math.nan
        rows.append(row)
    return pd.DataFrame(rows)


def varying(runs: pd.DataFrame, exclude: Sequence[str] = ()) -> list[str]:
    """Config columns that vary across ``runs`` (other than ``seed`` and ``exclude``)."""
    cfg = [c for c in config_columns(runs) if c in runs.columns] if RUN_KEY in runs.columns else []
    if not cfg:
        cfg = [
            c
            for c in runs.columns
            if not (c in SUMMARY_METRICS or c.startswith("init_") or c == "final_epoch")
        ]
        cfg = [c for c in cfg if c not in (RUN_KEY, GRID)]
    skip = {"seed", RUN_KEY, GRID, *exclude}
    return [c for c in cfg if c not in skip and runs[c].astype(str).nunique(dropna=False) > 1]


#: Order of the columns in a setting label; columns not listed follow in their own order.
LABEL_ORDER = (
    "num_classes",
    "encoder",
    "hidden",
    "depth",
    "separation",
    "sigma",
    "batch_size",
    "normalization",
    "estimator",
    "positives",
    "epochs",
    "max_steps",
    "lr",
)
#: Columns never shown in a label: derived (d = C - 1 by default) or bookkeeping.
_LABEL_SKIP = ("d", "eval_every", "record_means")


def label(row: pd.Series | dict, cols: Sequence[str]) -> str:
    """``"num_classes=50, encoder=mlp, ..."`` of the columns ``cols`` of a row.

    Columns in a fixed reading order; ``hidden`` / ``depth`` only for MLPs, the inputs' fields not
    for free features, ``d`` and ``eval_every`` never.
    """
    enc = row.get("encoder", None)
    shown = [c for c in cols if c not in _LABEL_SKIP]
    if enc is not None and enc != "mlp":
        shown = [c for c in shown if c not in ("hidden", "depth")]
    if enc == "free":
        shown = [c for c in shown if c not in ("separation", "sigma", "input_dim", "centres")]
    rank = {c: i for i, c in enumerate(LABEL_ORDER)}
    shown = sorted(shown, key=lambda c: (rank.get(c, len(rank)), list(cols).index(c)))
    parts = []
    for c in shown:
        v = row[c]
        if isinstance(v, float) and math.isnan(v):
            continue
        if isinstance(v, (float, np.floating)):
            parts.append(f"{c}={float(v):g}")
        else:
            parts.append(f"{c}={v}")
    return ", ".join(parts) or "all"


def evidence(row: pd.Series, metric: str, text: str | None = None, prefix: str = "") -> records.Evidence:
    """The seed mean ± std of ``metric`` in an aggregated row, as an Evidence."""
    mean = float(row.get(f"{metric}_mean", math.nan))
    sd = row.get(f"{metric}_std", math.nan)
    n = int(row.get("n_seeds", 0)) or None
    name = f"{prefix}{text or metric}"
    if sd is None or not math.isfinite(float(sd)):
        return records.Evidence(name, mean, n=n)
    return records.Evidence(name, mean, float(sd), "std", n=n)


def mean_std(row: pd.Series, metric: str) -> str:
    """``"0.123 ± 0.004"`` of an aggregated row."""
    return format_mean_std(
        float(row.get(f"{metric}_mean", math.nan)), float(row.get(f"{metric}_std", math.nan))
    )


def is_nc(row: pd.Series, crit: dict[str, Any]) -> bool:
    """NC of an aggregated row: seed means ``etf_mean < nc_etf`` and ``wcv < nc_wcv``."""
    return bool(
        row["etf_mean_mean"] < float(crit["nc_etf"])
        and row["within_class_variation_mean"] < float(crit["nc_wcv"])
    )


def rank_column(t: float) -> str:
    """The numerical-rank column of threshold ``t`` (``rank_1e-2`` for 0.01)."""
    return f"rank_{t:.0e}".replace("e-0", "e-")


def available(runs: pd.DataFrame, t: float) -> pd.Series:
    """Per run, ``min(r_t at epoch 0, C - 1)``: the class-mean dimensions available to lose."""
    col = f"init_{rank_column(t)}"
    return np.minimum(pd.to_numeric(runs[col], errors="coerce"), runs["num_classes"].astype(float) - 1)


def with_available(runs: pd.DataFrame, thresholds: Sequence[float]) -> pd.DataFrame:
    """The run summary with ``avail_<rank column>`` columns (see :func:`available`)."""
    out = runs.copy()
    for t in thresholds:
        if f"init_{rank_column(t)}" in out.columns:
            out[f"init_avail_{rank_column(t)}"] = available(out, t)
    return out


def is_dc(row: pd.Series, t: float, crit: dict[str, Any]) -> bool | None:
    """DC at threshold t of an aggregated row (None without rank columns), see the grid files."""
    col = rank_column(t)
    if (
        "dc_fraction" not in crit
        or f"{col}_mean" not in row.index
        or f"init_avail_{col}_mean" not in row.index
    ):
        return None
    final, avail = float(row[f"{col}_mean"]), float(row[f"init_avail_{col}_mean"])
    if not (math.isfinite(final) and math.isfinite(avail)):
        return None
    return bool(final <= float(crit["dc_fraction"]) * avail)


# ------------------------------------------------------------------------------ records


def _grids_of(table: pd.DataFrame, grid: str) -> list[str]:
    if GRID not in table.columns:
        return []
    names = [g for g in dict.fromkeys(table[GRID].astype(str)) if g == grid or g.startswith(grid + "-")]
    return sorted(names, key=lambda g: (g != grid, g))


def _scale(folder: str, grid: str) -> str:
    return folder[len(grid) + 1 :] if folder.startswith(grid + "-") else "default"


def setting_of(runs: pd.DataFrame, folder: str, scale: str) -> dict[str, str]:
    """The ``setting`` of a record: data, encoder, normalisation, batch size, C, ..., scale."""

    def vals(c: str) -> str:
        if c not in runs.columns:
            return ""
        v = list(dict.fromkeys(runs[c].astype(str)))
        return ", ".join("full" if c == "batch_size" and x == "0" else x for x in v)

    enc = vals("encoder")
    data = "free features (one learnable vector per sample)" if enc == "free" else "Gaussian mixture"
    if "separation" in runs.columns and enc != "free":
        data += f" (separation {vals('separation')}, sigma {vals('sigma')}, D {vals('input_dim')})"
    out = {"data": data, "grid": folder, "scale": scale}
    for c, name in (
        ("num_classes", "C"),
        ("encoder", "encoder"),
        ("hidden", "MLP width"),
        ("depth", "MLP depth"),
        ("normalization", "normalisation"),
        ("batch_size", "batch size"),
        ("estimator", "estimator"),
        ("epochs", "epochs"),
        ("max_steps", "steps"),
        ("init", "init"),
        ("positives", "positives"),
    ):
        v = vals(c)
        if v and not (c == "max_steps" and v == "0"):
            out[name] = v
    if "seed" in runs.columns:
        out["seeds"] = str(runs["seed"].nunique())
    return out


def judge(table: pd.DataFrame, *, results: str = "results", scale: str = "default") -> list[records.Claim]:
    """Records of S1, S2, S3, S4, R4, R5 from a table of grid folders (a ``grid`` column).

    Args:
        table: synthetic results with a ``grid`` column (``synthetic.results.load_results``).
        results: the results folder named in the commands.
        scale: the scale whose records come first and whose command a NOT RUN record carries.

    Returns:
        One record per claim and stored grid folder (each scale apart), in
        :data:`CLAIM_GRIDS` order; a NOT RUN record (with the command) for a claim without runs.
    """
    from synthetic.judges import JUDGES

    if not isinstance(table, pd.DataFrame):
        raise ValueError(f"table must be a DataFrame, got {type(table).__name__}")
    out: list[records.Claim] = []
    for cid, grid in CLAIM_GRIDS.items():
        crit = criteria(cid)
        folders = _grids_of(table, grid) if len(table) else []
        found = []
        for folder in folders:
            rows = table[table[GRID].astype(str) == folder]
            if len(rows) == 0:
                continue
            sc = _scale(folder, grid)
            runs = run_summary(rows)
            verdict, ev, subs, notes = JUDGES[cid](runs, crit)
            rec = records.Claim(
                cid,
                verdict,
                tuple(ev),
                tuple(subs),
                setting=setting_of(runs, folder, sc),
                command=command(cid, results=results, scale=sc),
                criterion=criterion_text(crit),
                figures=_FIGURES[cid],
                notes=notes,
            )
            found.append((sc != scale, rec))
        if not found:
            out.append(
                records.not_run(
                    cid,
                    command(cid, results=results, scale=scale),
                    criterion=criterion_text(crit),
                    notes=f"no stored runs of grid {grid}",
                )
            )
        out += [r for _, r in sorted(found, key=lambda x: x[0])]
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
    "NOT RUN": "no data",
}


def evaluate_claims(table: pd.DataFrame, **kwargs: Any) -> pd.DataFrame:
    """The DataFrame view of :func:`judge` (``python -m synthetic claims``).

    Returns:
        One row per record: ``claim``, ``grid`` (the grid folder, "" for NOT RUN),
        ``statement``, ``n_runs``, ``measured`` (evidence, every sub-check with its numbers, and
        the notes, as text), ``verdict`` (``reproduced`` / ``partly reproduced`` /
        ``not reproduced`` / ``no data``), ``record_verdict`` (the record's own value).
    """
    rows = []
    for c in judge(table, **kwargs):
        text = format_records([c]).split("\n", 2)[2] if c.evidence or c.subchecks else c.notes
        grid = c.setting.get("grid", "")
        n_runs = int(table.loc[table[GRID].astype(str) == grid, RUN_KEY].nunique()) if grid else 0
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
        config columns, ``n_seeds``, ``<m>_mean`` / ``<m>_std`` (final epoch and ``init_``
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
            agg = aggregate(runs, varying(runs))
            agg.insert(0, "grid", folder)
            agg.insert(0, "claim", cid)
            agg["nc"] = [is_nc(r, crit) for _, r in agg.iterrows()]
            for t in thresholds if "dc_fraction" in crit else ():
                agg[f"dc_{rank_column(t)}"] = [is_dc(r, t, crit) for _, r in agg.iterrows()]
            out.append(agg)
    return pd.concat(out, ignore_index=True, sort=False) if out else pd.DataFrame()
