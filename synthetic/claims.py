"""Claim judges of the synthetic study: S1-S4 and R5 (spec/hcl.md §4, §5.7).

:data:`CLAIMS` maps each claim id to its statement and the grid folder it reads; the thresholds
(:data:`NC_ETF_TOL`, :data:`NC_WCV_TOL`, :data:`DC_SPECTRUM_TOL`) are declared here, before the
runs. :func:`claim_details` gives the per-setting evidence, :func:`evaluate_claims` one verdict
per claim and grid folder (a DataFrame).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np
import pandas as pd

from synthetic.results import EPOCH, RUN_KEY, final_epoch
from synthetic.summary import format_mean_std, summarize

__all__ = [
    "CLAIMS",
    "NC_ETF_TOL",
    "NC_WCV_TOL",
    "DC_SPECTRUM_TOL",
    "claim_details",
    "evaluate_claims",
]

#: NC is declared when the final-epoch seed mean of ``etf_mean`` (paper condition P3: mean
#: |cos + 1/(C-1)| over class pairs; 0 at a simplex ETF, about 0.3 for random features and 0.24
#: for the authors' SCL run in DC) is below this ...
NC_ETF_TOL = 0.05
#: ... and the seed mean of ``within_class_variation`` (P5: mean distance to the class mean, for
#: features of norm <= 1; about 0.9 at a random initialisation) is below this. Mini-batch Adam at
#: a constant learning rate leaves a floor of a few hundredths, hence 0.1 rather than ~0.
NC_WCV_TOL = 0.1
#: Dimensional collapse of a run: ``spectrum_min`` = log(sigma_min / sigma_max) of the class-mean
#: covariance (0 at an ETF) below log(1e-4), i.e. the smallest direction of the centred class
#: means has under 1 % of the amplitude of the largest: numerically a lower-dimensional subspace.
DC_SPECTRUM_TOL = math.log(1e-4)

CLAIMS = {
    "S1": ("With ball or sphere normalisation, SCL and HSCL reach NC for every beta.", "s1_scl_hscl_nc"),
    "S2": ("UCL reaches NC with label positives, not with additive-noise positives.", "s2_ucl_positives"),
    "S3": ("HUCL does not reach NC; its ETF deviation grows with beta.", "s3_hucl_beta"),
    "S4": ("Without normalisation, random and hard negatives end in DC, not NC.", "s4_no_normalisation"),
    "R5": (
        "NC is reached for batch sizes 64-512; batch size 32 hinders NC with many classes.",
        "r5_batch_size",
    ),
}


def _col(df: pd.DataFrame, name: str, default: Any = None) -> pd.Series:
    return df[name] if name in df.columns else pd.Series([default] * len(df), index=df.index)


def _matches_grid(grid: str, name: str) -> bool:
    """True for a claim grid's folder ``name`` or a scaled one ``name-<scale>``."""
    return grid == name or grid.startswith(name + "-")


def _claim_grids(table: pd.DataFrame, claim: str) -> list:
    """The grid folders of ``claim`` in the table (default scale first), or [None] without a grid column."""
    if "grid" not in table.columns:
        return [None]
    name = CLAIMS[claim][1]
    grids = [g for g in dict.fromkeys(table["grid"].astype(str)) if _matches_grid(g, name)]
    return sorted(grids, key=lambda g: (g != name, g))


def _claim_rows(table: pd.DataFrame, claim: str, grid: str | None = None) -> pd.DataFrame:
    if "grid" in table.columns:  # grid folders: each claim reads its own grid's runs (any scale)
        name = CLAIMS[claim][1]
        g = table["grid"].astype(str)
        return table[g == grid] if grid is not None else table[[_matches_grid(x, name) for x in g]]
    method, norm = _col(table, "method"), _col(table, "normalization")
    if claim == "S1":
        sel = method.isin(["SCL", "HSCL"]) & norm.isin(["ball", "sphere"])
    elif claim == "S2":
        sel = (method == "UCL") & norm.isin(["ball", "sphere"])
    elif claim == "S3":
        sel = (
            method.isin(["UCL", "HUCL"])
            & norm.isin(["ball", "sphere"])
            & (_col(table, "positives", "label") == "label")
        )
    elif claim == "S4":
        sel = norm == "none"
    else:
        sel = pd.Series(False, index=table.index)
    return table[sel]


def _class_mean_rank(last: pd.DataFrame) -> pd.Series | None:
    if "effective_rank" in last.columns:
        return pd.to_numeric(last["effective_rank"], errors="coerce")
    return None


def _is_nc(row: pd.Series) -> bool:
    return bool(row["etf_mean_mean"] < NC_ETF_TOL and row["within_class_variation_mean"] < NC_WCV_TOL)


def claim_details(table: pd.DataFrame) -> pd.DataFrame:
    """Per-setting evidence for each claim: seed-aggregated final metrics and an NC flag.

    Returns:
        One row per (claim, grid folder, config without seed): ``claim``, ``grid`` (when the
        table has a grid column; each scale of a claim grid is kept apart), the varying config
        columns, ``n_seeds``, metric means/stds, and ``nc`` (etf_mean and within_class_variation
        seed means below :data:`NC_ETF_TOL` / :data:`NC_WCV_TOL`).
    """
    if not isinstance(table, pd.DataFrame):
        raise ValueError(f"table must be a DataFrame, got {type(table).__name__}")
    out = []
    for claim in CLAIMS:
        if len(table) == 0:
            continue
        for grid in _claim_grids(table, claim):
            rows = _claim_rows(table, claim, grid)
            if len(rows) == 0:
                continue
            s = summarize(rows.drop(columns=["grid"], errors="ignore"))
            for m in ("etf_mean", "within_class_variation"):
                if f"{m}_mean" not in s.columns:
                    raise ValueError(f"table lacks the metric {m!r} needed to judge claim {claim}")
            if grid is not None:
                s.insert(0, "grid", grid)
            s.insert(0, "claim", claim)
            s["nc"] = [_is_nc(r) for _, r in s.iterrows()]
            out.append(s)
    return pd.concat(out, ignore_index=True, sort=False) if out else pd.DataFrame()


def _fmt_setting(row: pd.Series, cols: Sequence[str]) -> str:
    parts = []
    for c in cols:
        if c in row.index and not (isinstance(row[c], float) and math.isnan(row[c])):
            v = row[c]
            parts.append(f"{c}={v:g}" if isinstance(v, (float, np.floating)) else f"{c}={v}")
    return ",".join(parts)


def _metric_str(row: pd.Series, m: str) -> str:
    return format_mean_std(row.get(f"{m}_mean", float("nan")), row.get(f"{m}_std", float("nan")))


def evaluate_claims(table: pd.DataFrame) -> pd.DataFrame:
    """Judge claims S1-S4 and R5 (spec/hcl.md §4, §5.7) from a results table.

    Criteria (final epoch, seed means; thresholds are module constants):
      * NC = ``etf_mean`` < NC_ETF_TOL and ``within_class_variation`` < NC_WCV_TOL.
      * S1: every SCL/HSCL setting with ball/sphere normalisation is NC.
      * S2: every UCL label-positive setting is NC and every noise-positive setting is not.
      * S3: judged per setting (config without method/beta, e.g. encoder x normalisation)
        over its HUCL betas (beta > 0): the ETF deviation grows (Spearman correlation between
        beta and the seed-mean ``etf_mean`` > 0.5 and etf_mean at the largest beta above that
        at the smallest by more than 2 pooled seed stds) and no HUCL setting is NC.
      * S4: no setting without normalisation is NC, and every run is dimensionally collapsed:
        ``spectrum_min`` < DC_SPECTRUM_TOL (the value at initialisation is reported alongside).
      * R5: every batch size >= 64 is NC and batch size 32 is not (or has etf_mean above every
        larger batch size by 2 seed stds).

    Runs are taken from the claim's grid folder (``grid`` column equal to the grid name, or the
    name plus ``-<scale>``); each scale found is judged apart. Without a ``grid`` column runs
    are selected by method/normalisation (S1-S4; R5 then has no data).

    Returns:
        One row per claim and grid folder (default scale first; one "no data" row for a claim
        without runs): ``claim``, ``grid`` ("" without a grid column), ``statement``,
        ``n_runs``, ``measured`` (numbers with seed spread), ``verdict`` ("reproduced",
        "not reproduced", "partly reproduced" or "no data").
    """
    if not isinstance(table, pd.DataFrame):
        raise ValueError(f"table must be a DataFrame, got {type(table).__name__}")
    details = claim_details(table) if len(table) else pd.DataFrame()
    rows = []
    for claim, (statement, _grid) in CLAIMS.items():
        d_claim = details[details["claim"] == claim] if len(details) else details
        if len(d_claim) == 0:
            rows.append(
                dict(claim=claim, grid="", statement=statement, n_runs=0, measured="", verdict="no data")
            )
            continue
        for grid in _claim_grids(table, claim):
            d = d_claim if grid is None else d_claim[d_claim["grid"] == grid]
            if len(d) == 0:
                continue
            sel = _claim_rows(table, claim, grid)
            d = d.drop(columns=["grid"], errors="ignore")
            empty = [c for c in _setting_cols(d) if d[c].isna().all()]  # other grids' columns
            d = d.drop(columns=empty)
            verdict, measured = _JUDGES[claim](d, sel)
            rows.append(
                dict(
                    claim=claim,
                    grid=grid or "",
                    statement=statement,
                    n_runs=int(sel[RUN_KEY].nunique()),
                    measured=measured,
                    verdict=verdict,
                )
            )
    return pd.DataFrame(rows)


def _setting_cols(d: pd.DataFrame) -> list[str]:
    skip = {"claim", "n_seeds", "nc"}
    return [c for c in d.columns if c not in skip and not c.endswith("_mean") and not c.endswith("_std")]


def _listing(d: pd.DataFrame, metrics: Sequence[str] = ("etf_mean", "within_class_variation")) -> str:
    cols = _setting_cols(d)
    parts = []
    for _, r in d.iterrows():
        vals = " ".join(f"{m}={_metric_str(r, m)}" for m in metrics if f"{m}_mean" in r.index)
        parts.append(f"[{_fmt_setting(r, cols)}] {vals} (n={r['n_seeds']})")
    return "; ".join(parts)


def _judge_s1(d: pd.DataFrame, rows: pd.DataFrame) -> tuple[str, str]:
    ok = d["nc"].to_numpy(dtype=bool)
    verdict = "reproduced" if ok.all() else ("not reproduced" if not ok.any() else "partly reproduced")
    return verdict, f"{int(ok.sum())}/{len(ok)} settings NC. " + _listing(d)


def _judge_s2(d: pd.DataFrame, rows: pd.DataFrame) -> tuple[str, str]:
    if "positives" not in d.columns:
        return "no data", "needs both label and noise positives. " + _listing(d)
    lab = d[d["positives"] == "label"]
    noi = d[d["positives"] == "noise"]
    if len(lab) == 0 or len(noi) == 0:
        return "no data", "needs both label and noise positives. " + _listing(d)
    a, b = bool(lab["nc"].all()), bool((~noi["nc"]).all())
    verdict = "reproduced" if a and b else ("partly reproduced" if a or b else "not reproduced")
    return verdict, f"label NC: {a}; noise not NC: {b}. " + _listing(d)


def _pooled_std(values: Iterable[float]) -> float:
    v = [x for x in values if math.isfinite(x)]
    return float(np.sqrt(np.mean(np.square(v)))) if v else 0.0


def _judge_s3(d: pd.DataFrame, rows: pd.DataFrame) -> tuple[str, str]:
    """S3 per setting (config without method/beta, e.g. encoder x normalisation), HUCL = beta > 0.

    A setting *grows* when, over its HUCL betas, Spearman rho(beta, etf_mean seed mean) > 0.5
    and etf_mean at its largest beta exceeds that at its smallest by more than 2 pooled seed
    stds (two betas: rho is the sign of the difference). Verdict: "reproduced" when every
    setting grows and no HUCL setting is NC; "not reproduced" when no setting grows and some
    HUCL setting is NC; else "partly reproduced".
    """
    from scipy.stats import spearmanr

    if "beta" not in d.columns:
        return "no data", "needs HUCL runs at two or more betas > 0. " + _listing(d)
    by = [c for c in _setting_cols(d) if c not in ("beta", "method")]
    groups = list(d.groupby(by, sort=False, dropna=False)) if by else [((), d)]
    parts, n_grow, n_judged, nc_betas = [], 0, 0, set()
    for key, g in groups:
        key = key if isinstance(key, tuple) else (key,)
        label = _fmt_setting(pd.Series(dict(zip(by, key, strict=True))), by) or "all"
        g = g.sort_values("beta", kind="mergesort")
        hucl = g[g["beta"] > 0]
        nc_here = [float(b) for b in hucl.loc[hucl["nc"].astype(bool), "beta"]]
        nc_betas.update(nc_here)
        curve = ", ".join(
            f"beta={b:g}{' (UCL)' if b == 0 else ''}: {format_mean_std(e, sd)}{' NC' if nc else ''}"
            for b, e, sd, nc in zip(g["beta"], g["etf_mean_mean"], g["etf_mean_std"], g["nc"], strict=True)
        )
        if hucl["beta"].nunique() < 2:
            parts.append(f"[{label}] {curve}; fewer than two HUCL betas: trend not judged")
            continue
        h = hucl.groupby("beta", sort=True).agg(
            etf=("etf_mean_mean", "mean"), sd=("etf_mean_std", _pooled_std)
        )
        betas, etf = h.index.to_numpy(dtype=float), h["etf"].to_numpy(dtype=float)
        if np.ptp(etf) == 0:
            rho = 0.0  # flat: no trend (Spearman is undefined for a constant input)
        elif len(betas) > 2:
            rho = float(spearmanr(betas, etf).statistic)
        else:
            rho = float(np.sign(etf[-1] - etf[0]))
        grows = bool(rho > 0.5 and etf[-1] - etf[0] > 2 * _pooled_std(h["sd"]))
        n_judged += 1
        n_grow += grows
        nc_txt = ", ".join(f"{b:g}" for b in nc_here) or "none"
        parts.append(
            f"[{label}] {curve}; HUCL Spearman rho={rho:.2f}, grows: {grows}; HUCL NC at beta: {nc_txt}"
        )
    if n_judged == 0:
        return "no data", "needs HUCL runs at two or more betas > 0. " + "; ".join(parts)
    all_grow, no_nc = n_grow == n_judged, not nc_betas
    if all_grow and no_nc:
        verdict = "reproduced"
    elif n_grow == 0 and not no_nc:
        verdict = "not reproduced"
    else:
        verdict = "partly reproduced"
    head = (
        f"ETF deviation grows over the HUCL betas in {n_grow}/{n_judged} settings (judged per setting); "
        f"HUCL (beta > 0) reaches NC at beta: {', '.join(f'{b:g}' for b in sorted(nc_betas)) or 'none'}. "
    )
    return verdict, head + " | ".join(parts)


def _judge_s4(d: pd.DataFrame, rows: pd.DataFrame) -> tuple[str, str]:
    no_nc = bool((~d["nc"]).all())
    last = final_epoch(rows)
    text = f"no setting NC: {no_nc}. "
    dc = None
    if "spectrum_min" in last.columns:
        spec = pd.to_numeric(last["spectrum_min"], errors="coerce")
        flags = spec < DC_SPECTRUM_TOL
        dc = bool(flags.all())
        first = rows[rows[EPOCH] == rows[EPOCH].min()]
        init = pd.to_numeric(first["spectrum_min"], errors="coerce")
        text += (
            f"class-mean spectrum_min {format_mean_std(float(spec.mean()), float(spec.std(ddof=1)))} over {len(spec)} runs"
            f" (initialisation {format_mean_std(float(init.mean()), float(init.std(ddof=1)))}; DC below"
            f" {DC_SPECTRUM_TOL:.2f}): DC in {int(flags.sum())}/{len(spec)} runs. "
        )
        rank = _class_mean_rank(last)
        if rank is not None:
            text += f"class-mean effective rank {format_mean_std(float(rank.mean()), float(rank.std(ddof=1)))} (ETF: C-1). "
    metrics = ["etf_mean", "within_class_variation", "spectrum_min", "effective_rank", "mean_norm"]
    text += _listing(d, [m for m in metrics if f"{m}_mean" in d.columns])
    if dc is None:
        verdict = "partly reproduced (no spectrum metric)" if no_nc else "not reproduced"
    else:
        verdict = "reproduced" if no_nc and dc else ("partly reproduced" if no_nc or dc else "not reproduced")
    return verdict, text


def _judge_r5(d: pd.DataFrame, rows: pd.DataFrame) -> tuple[str, str]:
    if "batch_size" not in d.columns or not (d["batch_size"] == 32).any() or not (d["batch_size"] > 32).any():
        return "no data", "needs batch size 32 and larger ones. " + _listing(d)
    small = d[d["batch_size"] == 32]
    large = d[d["batch_size"] >= 64]
    large_nc = bool(large["nc"].all())
    worst_large = float(large["etf_mean_mean"].max())
    margin = 2 * _pooled_std(list(small["etf_mean_std"]) + list(large["etf_mean_std"]))
    small_worse = bool((~small["nc"]).all() or (small["etf_mean_mean"] > worst_large + margin).all())
    verdict = (
        "reproduced"
        if large_nc and small_worse
        else ("partly reproduced" if large_nc or small_worse else "not reproduced")
    )
    g = d.groupby("batch_size", sort=True)[["etf_mean_mean", "within_class_variation_mean"]].mean()
    trend = ", ".join(
        f"b={int(b)}: etf {e:.3g}, wcv {w:.3g}"
        for b, e, w in zip(g.index, g["etf_mean_mean"], g["within_class_variation_mean"], strict=True)
    )
    return verdict, f"b>=64 all NC: {large_nc}; b=32 hindered: {small_worse}. Trend: {trend}. " + _listing(d)


_JUDGES = {"S1": _judge_s1, "S2": _judge_s2, "S3": _judge_s3, "S4": _judge_s4, "R5": _judge_r5}
