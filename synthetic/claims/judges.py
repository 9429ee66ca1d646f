"""The verdict rules of the synthetic claims S1, S2, S3, S4, R4, R5 (one function per claim).

:data:`JUDGES` also holds those of R1s, R2s, R3s, the synthetic analogues of R1-R3
(:mod:`synthetic.claims.judges_analogue`).

Each judge takes a run summary of its grid's runs (:func:`synthetic.claims.rows.run_summary`) and the
grid's ``[claim]`` table (its thresholds and texts, declared before the runs) and returns
``(verdict, evidence, subchecks, notes)`` for a ``theory.claims.Claim``. The rules are those
written in the grid files (synthetic/grids/*.toml) and in docs/claims.md; every number a verdict
uses appears in its evidence or sub-checks, as a seed mean ± std.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import pandas as pd

from synthetic.claims.judges_analogue import judge_r1s, judge_r2s, judge_r3s
from synthetic.claims.rows import (
    LABEL_ORDER,
    aggregate,
    evidence,
    is_dc,
    is_nc,
    label,
    mean_std,
    pooled_std,
    rank_column,
    spearman,
    varying,
    with_available,
)
from theory.claims import Evidence, SubCheck, Verdict
from theory.options import POSITIVES

__all__ = ["JUDGES", "judge_s1", "judge_s2", "judge_s3", "judge_s4", "judge_r4", "judge_r5"]

Result = tuple[Verdict, list[Evidence], list[SubCheck], str]
_DRAWN = ("method", "beta")
_ORDER = {c: i for i, c in enumerate(LABEL_ORDER)}


def _thresholds(crit: dict[str, Any]) -> list[float]:
    return [float(t) for t in crit.get("rank_thresholds", (1e-2, 1e-4))]


def _all_some_none(flags: Sequence[bool]) -> Verdict:
    if flags and all(flags):
        return Verdict.REPRODUCED
    if any(flags):
        return Verdict.PARTLY
    return Verdict.NOT_REPRODUCED


def _ok(flag: bool) -> Verdict:
    return Verdict.REPRODUCED if flag else Verdict.NOT_REPRODUCED


def _rank_evidence(row: pd.Series, thresholds: Sequence[float]) -> list[Evidence]:
    out = []
    for t in thresholds:
        col = rank_column(t)
        if f"{col}_mean" in row.index:
            out.append(evidence(row, col, f"{col} final"))
            out.append(evidence(row, f"init_{col}", f"{col} at epoch 0"))
    if "effective_rank_mean" in row.index:
        out.append(evidence(row, "effective_rank", "effective rank final"))
        out.append(evidence(row, "init_effective_rank", "effective rank at epoch 0"))
    return out


def _nc_evidence(row: pd.Series) -> list[Evidence]:
    return [evidence(row, "etf_mean"), evidence(row, "within_class_variation")]


def _dc_text(row: pd.Series, thresholds: Sequence[float], crit: dict[str, Any]) -> str:
    parts = []
    for t in thresholds:
        flag = is_dc(row, t, crit)
        col = rank_column(t)
        if flag is None:
            parts.append(f"DC at {t:g}: not recorded")
            continue
        parts.append(
            f"DC at {t:g}: {'yes' if flag else 'no'} (r_t {mean_std(row, col)} vs "
            f"{float(crit['dc_fraction']):g} x {row[f'init_avail_{col}_mean']:.3g} available)"
        )
    return "; ".join(parts)


def _prepare(
    runs: pd.DataFrame, crit: dict[str, Any], exclude: Sequence[str] = ()
) -> tuple[pd.DataFrame, list[str]]:
    """Seed aggregates per setting, in reading order (setting columns, then method, beta)."""
    runs = with_available(runs, _thresholds(crit))
    by = varying(runs, exclude)
    agg = aggregate(runs, by)
    order = sorted(
        [c for c in by if c not in _DRAWN], key=lambda c: (_ORDER.get(c, len(_ORDER)), by.index(c))
    )
    keys = order + [c for c in _DRAWN if c in by]

    def sort_key(i: int) -> tuple:
        out = []
        for c in keys:
            v = agg.iloc[i][c]
            num = isinstance(v, (int, float, np.integer, np.floating)) and not isinstance(v, bool)
            out.append((0, float(v), "") if num else (1, 0.0, str(v)))
        return tuple(out)

    agg = agg.iloc[sorted(range(len(agg)), key=sort_key)] if keys else agg
    return agg.reset_index(drop=True), by


def _setting_cols(by: Sequence[str]) -> list[str]:
    return [c for c in by if c not in _DRAWN]


def _beta_label(row: pd.Series) -> str:
    m = str(row["method"]) if "method" in row.index else ""
    b = float(row["beta"]) if "beta" in row.index else math.nan
    if m and math.isfinite(b):
        return f"{m} beta={b:g}"
    return m


# ------------------------------------------------------------------------------ S1 (and R2)


def judge_s1(runs: pd.DataFrame, crit: dict[str, Any]) -> Result:
    """S1: every (setting, beta) at NC; beside it, where SCL (beta = 0) reaches NC or ends in DC."""
    th = _thresholds(crit)
    agg, by = _prepare(runs, crit)
    cols = _setting_cols(by)
    subs: list[SubCheck] = []
    nc_flags = []
    scl_nc, scl_dc, scl_dc4, scl_neither = [], [], [], []
    for _, r in agg.iterrows():
        nc = is_nc(r, crit)
        nc_flags.append(nc)
        where = label(r, cols)
        subs.append(
            SubCheck(
                f"[{where}] {_beta_label(r)}: at NC",
                _ok(nc),
                tuple(_nc_evidence(r) + _rank_evidence(r, th)),
                instances=int(r["n_seeds"]),
                note=_dc_text(r, th, crit),
            )
        )
        if float(r.get("beta", 0.0)) == 0.0:
            dc = is_dc(r, th[0], crit)
            if nc:
                scl_nc.append(where)
            if dc:
                scl_dc.append(where)
            if len(th) > 1 and is_dc(r, th[1], crit):
                scl_dc4.append(where)
            if not nc and not dc:
                scl_neither.append(where)
    verdict = _all_some_none(nc_flags)
    n_scl = sum(1 for _, r in agg.iterrows() if float(r.get("beta", 0.0)) == 0.0)
    subs.append(
        SubCheck(
            f"S1 vs R2: SCL (beta = 0) ends in DC at {th[0]:g} (R2 / the abstract)",
            _all_some_none([w in scl_dc for w in _scl_settings(agg, cols)]),
            (Evidence(f"SCL settings in DC at {th[0]:g}", float(len(scl_dc)), n=n_scl),),
            note="DC in: " + ("; ".join(scl_dc) or "none"),
        )
    )
    if len(th) > 1:
        subs.append(
            SubCheck(
                f"S1 vs R2: SCL (beta = 0) ends in DC at {th[1]:g}",
                _all_some_none([w in scl_dc4 for w in _scl_settings(agg, cols)]),
                (Evidence(f"SCL settings in DC at {th[1]:g}", float(len(scl_dc4)), n=n_scl),),
                note="DC in: " + ("; ".join(scl_dc4) or "none"),
            )
        )
    subs.append(
        SubCheck(
            "S1 vs R2: SCL (beta = 0) reaches NC (S1 at beta = 0)",
            _all_some_none([w in scl_nc for w in _scl_settings(agg, cols)]),
            (Evidence("SCL settings at NC", float(len(scl_nc)), n=n_scl),),
            note="NC in: " + ("; ".join(scl_nc) or "none"),
        )
    )
    ev = [Evidence("(setting, beta) at NC", float(sum(nc_flags)), n=len(nc_flags))]
    ev.append(Evidence(f"SCL settings in DC at {th[0]:g}", float(len(scl_dc)), n=n_scl))
    ev.append(Evidence("SCL settings at NC", float(len(scl_nc)), n=n_scl))
    notes = (
        f"S1 vs R2. SCL (beta = 0) reaches NC in: {'; '.join(scl_nc) or 'none'}. "
        f"SCL ends in DC (rank at {th[0]:g}) in: {'; '.join(scl_dc) or 'none'}. "
        f"Neither NC nor DC: {'; '.join(scl_neither) or 'none'}."
    )
    return verdict, ev, subs, notes


def _scl_settings(agg: pd.DataFrame, cols: Sequence[str]) -> list[str]:
    return [label(r, cols) for _, r in agg.iterrows() if float(r.get("beta", 0.0)) == 0.0]


# ------------------------------------------------------------------------------ S2


def judge_s2(runs: pd.DataFrame, crit: dict[str, Any]) -> Result:
    """S2: every label-positive setting at NC, no noise-positive setting at NC."""
    agg, by = _prepare(runs, crit)
    if "positives" not in agg.columns or set(agg["positives"]) != set(POSITIVES):
        return Verdict.NOT_RUN, [], [], "needs both label and noise positives"
    cols = [c for c in _setting_cols(by) if c != "positives"]
    subs = []
    lab: list[bool] = []
    noi: list[bool] = []
    for _, r in agg.iterrows():
        nc = is_nc(r, crit)
        want = r["positives"] == "label"
        (lab if want else noi).append(nc)
        subs.append(
            SubCheck(
                f"[{label(r, cols)}] {r['positives']} positives: {'at NC' if want else 'not at NC'}",
                _ok(nc == want),
                tuple(_nc_evidence(r)),
                instances=int(r["n_seeds"]),
            )
        )
    a, b = all(lab), not any(noi)
    verdict = Verdict.REPRODUCED if a and b else (Verdict.PARTLY if a or b else Verdict.NOT_REPRODUCED)
    ev = [
        Evidence("label-positive settings at NC", float(sum(lab)), n=len(lab)),
        Evidence("noise-positive settings at NC", float(sum(noi)), n=len(noi)),
    ]
    return verdict, ev, subs, f"label positives all at NC: {a}; no noise-positive setting at NC: {b}"


# ------------------------------------------------------------------------------ S3


_pooled, _spearman = pooled_std, spearman


def judge_s3(runs: pd.DataFrame, crit: dict[str, Any]) -> Result:
    """S3: HUCL's etf_mean grows with beta in every setting and no HUCL setting is at NC."""
    agg, by = _prepare(runs, crit)
    if "beta" not in agg.columns:
        return Verdict.NOT_RUN, [], [], "needs HUCL runs at two or more betas > 0"
    cols = _setting_cols(by)
    rho_min, k = float(crit["spearman"]), float(crit["margin_stds"])
    groups = list(agg.groupby(cols, sort=False, dropna=False)) if cols else [((), agg)]
    subs, ev = [], []
    n_grow = n_judged = 0
    nc_at: list[str] = []
    coll_rises = []
    for key, g in groups:
        key = key if isinstance(key, tuple) else (key,)
        where = label(dict(zip(cols, key, strict=True)), cols)
        g = g.sort_values("beta", kind="mergesort")
        hucl = g[g["beta"] > 0]
        for _, r in hucl.iterrows():
            if is_nc(r, crit):
                nc_at.append(f"[{where}] beta={float(r['beta']):g}")
        curve = tuple(evidence(r, "etf_mean", f"etf_mean beta={float(r['beta']):g}") for _, r in g.iterrows())
        if hucl["beta"].nunique() < 2:
            subs.append(
                SubCheck(f"[{where}] fewer than two HUCL betas: trend not judged", Verdict.NOT_RUN, curve)
            )
            continue
        betas = hucl["beta"].to_numpy(float)
        etf = hucl["etf_mean_mean"].to_numpy(float)
        rho = _spearman(betas, etf)
        gap = float(etf[-1] - etf[0])
        sd = _pooled(hucl["etf_mean_std"])
        grows = bool(rho > rho_min and gap > k * sd)
        n_judged += 1
        n_grow += grows
        subs.append(
            SubCheck(
                f"[{where}] HUCL etf_mean grows with beta",
                _ok(grows),
                (
                    Evidence("Spearman rho(beta, etf_mean)", rho),
                    Evidence(
                        f"etf_mean(beta={betas[-1]:g}) - etf_mean(beta={betas[0]:g})", gap, k * sd, "tol"
                    ),
                    *curve,
                ),
                instances=int(hucl["n_seeds"].sum()),
                note="HUCL at NC at beta: "
                + (
                    ", ".join(f"{float(r['beta']):g}" for _, r in hucl.iterrows() if is_nc(r, crit)) or "none"
                ),
            )
        )
        if "collision_mean" in g.columns and g["collision_mean"].notna().any():
            c_rho = _spearman(g["beta"].to_numpy(float), g["collision_mean"].to_numpy(float))
            coll_rises.append(c_rho > rho_min)
            cev = []
            for _, r in g.iterrows():
                cev.append(evidence(r, "collision", f"collision beta={float(r['beta']):g}"))
                cev.append(Evidence(f"q(beta={float(r['beta']):g}) at NC", float(r["collision_nc_mean"])))
            subs.append(
                SubCheck(
                    f"[{where}] class collision: the final same-class negative mass rises with beta (against q(beta))",
                    _ok(c_rho > rho_min),
                    (Evidence("Spearman rho(beta, collision)", c_rho), *cev),
                )
            )
    if n_judged == 0:
        return Verdict.NOT_RUN, [], subs, "needs HUCL runs at two or more betas > 0"
    if n_grow == n_judged and not nc_at:
        verdict = Verdict.REPRODUCED
    elif n_grow == 0 and nc_at:
        verdict = Verdict.NOT_REPRODUCED
    else:
        verdict = Verdict.PARTLY
    ev.append(Evidence("settings where etf_mean grows with beta", float(n_grow), n=n_judged))
    ev.append(Evidence("HUCL (setting, beta) at NC", float(len(nc_at)), n=int((agg["beta"] > 0).sum())))
    if coll_rises:
        ev.append(
            Evidence(
                "settings where the collision fraction rises with beta",
                float(sum(coll_rises)),
                n=len(coll_rises),
            )
        )
    notes = f"HUCL at NC: {'; '.join(nc_at) or 'none'}"
    return verdict, ev, subs, notes


# ------------------------------------------------------------------------------ S4 (and the abstract)


def _s4_verdict(
    none_rows: pd.DataFrame, t: float, crit: dict[str, Any]
) -> tuple[Verdict, list[bool], list[bool]]:
    dc = [bool(is_dc(r, t, crit)) for _, r in none_rows.iterrows()]
    nc = [is_nc(r, crit) for _, r in none_rows.iterrows()]
    if dc and all(dc) and not any(nc):
        v = Verdict.REPRODUCED
    elif not any(dc):
        v = Verdict.NOT_REPRODUCED
    else:
        v = Verdict.PARTLY
    return v, dc, nc


def judge_s4(runs: pd.DataFrame, crit: dict[str, Any]) -> Result:
    """S4: every no-normalisation setting in DC (at the first threshold) and none at NC."""
    th = _thresholds(crit)
    agg, by = _prepare(runs, crit)
    if "normalization" not in agg.columns:
        agg["normalization"] = runs["normalization"].iloc[0]
    cols = [c for c in _setting_cols(by) if c != "normalization"]
    none = agg[agg["normalization"] == "none"]
    if len(none) == 0:
        return Verdict.NOT_RUN, [], [], "no run without normalisation"
    verdict, dc, nc = _s4_verdict(none, th[0], crit)
    subs = []
    for (_, r), d, n in zip(none.iterrows(), dc, nc, strict=True):
        subs.append(
            SubCheck(
                f"[{label(r, cols)}] no normalisation, {_beta_label(r)}: in DC at {th[0]:g}, not at NC",
                _ok(d and not n),
                tuple(_rank_evidence(r, th) + _nc_evidence(r) + [evidence(r, "mean_norm")]),
                instances=int(r["n_seeds"]),
                note=_dc_text(r, th, crit),
            )
        )
    for t in th[1:]:
        v, dct, _ = _s4_verdict(none, t, crit)
        subs.append(
            SubCheck(
                f"verdict at threshold {t:g}: no-normalisation settings in DC",
                v,
                (Evidence(f"no-normalisation settings in DC at {t:g}", float(sum(dct)), n=len(dct)),),
            )
        )
    normed = agg[agg["normalization"] != "none"]
    abstract = []
    for _, r in normed.iterrows():
        d = bool(is_dc(r, th[0], crit))
        hard = float(r.get("beta", 0.0)) > 0
        want = not hard  # the abstract: without hard negatives DC; with them no DC
        abstract.append(d == want)
        subs.append(
            SubCheck(
                f"[{label(r, cols)}] {r['normalization']}, {_beta_label(r)}: "
                f"{'not in DC' if hard else 'in DC'} at {th[0]:g} (the abstract)",
                _ok(d == want),
                tuple(_rank_evidence(r, th) + _nc_evidence(r)),
                instances=int(r["n_seeds"]),
                note=_dc_text(r, th, crit),
            )
        )
    ev = [
        Evidence(f"no-normalisation settings in DC at {th[0]:g}", float(sum(dc)), n=len(dc)),
        Evidence("no-normalisation settings at NC", float(sum(nc)), n=len(nc)),
    ]
    if abstract:
        ev.append(
            Evidence(
                "normalised settings as the abstract says (beta = 0 DC, beta > 0 not)",
                float(sum(abstract)),
                n=len(abstract),
            )
        )
    v4 = _s4_verdict(none, th[1], crit)[0].value if len(th) > 1 else ""
    notes = f"verdict at {th[0]:g}: {verdict.value}" + (f"; at {th[1]:g}: {v4}" if v4 else "")
    return verdict, ev, subs, notes


# ------------------------------------------------------------------------------ R4


def judge_r4(runs: pd.DataFrame, crit: dict[str, Any]) -> Result:
    """R4: from NC, SCL/HSCL keep NC and HUCL at the drift betas leave NC into DC."""
    th = _thresholds(crit)
    if "init" in runs.columns:
        runs = runs[runs["init"].astype(str) == "nc"]
    if len(runs) == 0:
        return Verdict.NOT_RUN, [], [], "no run with init = 'nc'"
    agg, by = _prepare(runs, crit, exclude=("init_key",))
    for c in _DRAWN:  # a single decided (method, beta) does not vary, but every row names it
        if c not in agg.columns and c in runs.columns:
            agg[c] = runs[c].iloc[0]
    cols = _setting_cols(by)
    drift = {float(b) for b in crit["drift_betas"]}
    premise = all(
        float(r["init_etf_mean_mean"]) < float(crit["nc_etf"])
        and float(r["init_within_class_variation_mean"]) < float(crit["nc_wcv"])
        for _, r in agg.iterrows()
    )
    subs = []
    keep, leave, leave_dc = [], [], []
    for _, r in agg.iterrows():
        m, b = str(r["method"]), float(r["beta"])
        nc = is_nc(r, crit)
        dc = bool(is_dc(r, th[0], crit))
        drift_ev = [
            evidence(r, "init_etf_mean", "etf_mean at epoch 0 (NC source)"),
            evidence(r, "etf_mean", "etf_mean final"),
            evidence(r, "init_within_class_variation", "within_class_variation at epoch 0"),
            evidence(r, "within_class_variation", "within_class_variation final"),
            evidence(r, "unit_norm", "unit_norm final"),
            evidence(r, "zero_sum", "zero_sum final"),
            *_rank_evidence(r, th),
        ]
        if m in ("SCL", "HSCL"):
            keep.append(nc)
            what, ok = "keeps NC", nc
        elif m == "HUCL" and b in drift:
            leave.append(not nc)
            leave_dc.append(dc)
            what, ok = f"leaves NC into DC at {th[0]:g}", (not nc) and dc
        else:
            what, ok = "(reported: UCL / HUCL at small beta)", nc
        subs.append(
            SubCheck(
                f"[{label(r, cols)}] {_beta_label(r)}: {what}",
                _ok(ok),
                tuple(drift_ev),
                instances=int(r["n_seeds"]),
                note=("at NC" if nc else "not at NC") + "; " + _dc_text(r, th, crit),
            )
        )
    A, B, D = bool(keep) and all(keep), bool(leave) and all(leave), bool(leave_dc) and all(leave_dc)
    if not premise:
        verdict = Verdict.NOT_REPRODUCED
    elif A and B and D:
        verdict = Verdict.REPRODUCED
    elif A or B:
        verdict = Verdict.PARTLY
    else:
        verdict = Verdict.NOT_REPRODUCED
    ev = [
        Evidence("SCL / HSCL (method, beta) keeping NC", float(sum(keep)), n=len(keep)),
        Evidence(f"HUCL at beta {sorted(drift)} leaving NC", float(sum(leave)), n=len(leave)),
        Evidence(f"HUCL at beta {sorted(drift)} in DC at {th[0]:g}", float(sum(leave_dc)), n=len(leave_dc)),
    ]
    notes = (
        "" if premise else "PREMISE FAILED: the HSCL source is not at NC at epoch 0. "
    ) + f"SCL/HSCL keep NC: {A}; HUCL {sorted(drift)} leave NC: {B}; and are in DC: {D}"
    return verdict, ev, subs, notes


# ------------------------------------------------------------------------------ R5


def judge_r5(runs: pd.DataFrame, crit: dict[str, Any]) -> Result:
    """R5: at each C, every batch size >= 64 at NC and batch 32 hindered (equal steps)."""
    agg, _ = _prepare(runs, crit, exclude=("eval_every", "epochs"))
    small, k = int(crit["small_batch"]), float(crit["margin_stds"])
    if "batch_size" not in agg.columns or not (agg["batch_size"] == small).any():
        return Verdict.NOT_RUN, [], [], f"needs batch size {small} and larger ones"
    per_c = list(agg.groupby("num_classes", sort=True)) if "num_classes" in agg.columns else [(None, agg)]
    subs, parts_a, parts_b = [], [], []
    ev = []
    for C, g in per_c:
        g = g.sort_values("batch_size")
        big = g[g["batch_size"] > small]
        lo = g[g["batch_size"] == small]
        if len(big) == 0 or len(lo) == 0:
            continue
        big_nc = [is_nc(r, crit) for _, r in big.iterrows()]
        margin = k * _pooled(list(g["etf_mean_std"]))
        worst_big = float(big["etf_mean_mean"].max())
        r32 = lo.iloc[0]
        hindered = (not is_nc(r32, crit)) or float(r32["etf_mean_mean"]) > worst_big + margin
        parts_a.append(all(big_nc))
        parts_b.append(hindered)
        tag = f"C={int(C)}" if C is not None else "all"
        for (_, r), nc in zip(big.iterrows(), big_nc, strict=True):
            subs.append(
                SubCheck(
                    f"[{tag}] batch {int(r['batch_size'])}: at NC after {int(r['steps_mean'])} steps",
                    _ok(nc),
                    tuple(_nc_evidence(r)),
                    instances=int(r["n_seeds"]),
                )
            )
        subs.append(
            SubCheck(
                f"[{tag}] batch {small}: hindered (not at NC, or etf_mean above every larger batch by "
                f"{k:g} pooled stds)",
                _ok(hindered),
                tuple(_nc_evidence(r32)),
                instances=int(r32["n_seeds"]),
                note=("at NC" if is_nc(r32, crit) else "not at NC"),
            )
        )
        at_nc = [int(r["batch_size"]) for _, r in g.iterrows() if is_nc(r, crit)]
        ev.append(Evidence(f"{tag}: batch sizes at NC", float(len(at_nc)), n=len(g)))
        for _, r in g.iterrows():
            ev.append(evidence(r, "etf_mean", f"{tag} b={int(r['batch_size'])} etf_mean"))
    if not parts_a:
        return Verdict.NOT_RUN, [], subs, "needs batch size 32 and larger ones"
    if all(parts_a) and all(parts_b):
        verdict = Verdict.REPRODUCED
    elif any(parts_a) or any(parts_b):
        verdict = Verdict.PARTLY
    else:
        verdict = Verdict.NOT_REPRODUCED
    notes = (
        f"batch sizes >= 64 all at NC: {parts_a}; batch {small} hindered: {parts_b} (per C). "
        "At equal steps small batches see fewer samples; with free features each vector is then "
        "updated in fewer steps."
    )
    return verdict, ev, subs, notes


JUDGES: dict[str, Callable[[pd.DataFrame, dict[str, Any]], Result]] = {
    "S1": judge_s1,
    "S2": judge_s2,
    "S3": judge_s3,
    "S4": judge_s4,
    "R1s": judge_r1s,
    "R2s": judge_r2s,
    "R3s": judge_r3s,
    "R4": judge_r4,
    "R5": judge_r5,
}
