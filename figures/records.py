"""Claim records built from tables: the W5 verdict, and the synthetic judges' output as records.

* :func:`w5_claim` -- claim W5 (Erol et al., arXiv 2606.00262: on a synthetic design with a
  Weibull winner law the softmax estimator of a log-odds keeps a bias floor while the Weibit
  estimator's mean squared error follows the Fisher rate c/n), judged from the noise-floor table
  with a criterion declared here, before any run, and not tuned to the results;
* :func:`synthetic_records` -- the verdicts of the synthetic package's judges (S1-S4, R5; Jiang
  et al., arXiv 2311.05139, §4-§5) turned into claim records with per-setting evidence.
"""

from __future__ import annotations

import pandas as pd

from figures.commands import command_for
from figures.sources import claims

__all__ = ["W5_RATIO_TOL", "W5_FLOOR_TOL", "w5_claim", "synthetic_records"]

#: Declared criterion of W5 (before any run): per n, the Weibit MSE over c/n within
#: [1/W5_RATIO_TOL, W5_RATIO_TOL]; at the largest n, the softmax MSE within W5_FLOOR_TOL
#: (relative) of the bias^2 floor plus its Godambe variance term, and above the Weibit MSE.
W5_RATIO_TOL = 1.25
W5_FLOOR_TOL = 0.25


def w5_claim(table: pd.DataFrame, *, scale: str = "default", results: str = "results") -> claims.Claim:
    """Judge W5 (noise floor) from :func:`noise_floor_table` with the declared criterion.

    REPRODUCED when both parts hold (the Weibit MSE tracks c/n at every n; the softmax MSE
    levels off at its floor above the Weibit MSE), PARTLY when one holds, NOT REPRODUCED when
    neither; NOT RUN for an empty table.

    Raises:
        ValueError: missing columns.
    """
    need = ("n", "mse_softmax", "mse_weibit", "theory_weibit", "bias2_floor", "theory_softmax", "reps")
    if not isinstance(table, pd.DataFrame) or any(c not in table.columns for c in need):
        raise ValueError(f"table must be a DataFrame with the columns {list(need)}")
    cmd = command_for("W5", results=results, scale=scale)
    if len(table) == 0:
        return claims.not_run("W5", cmd)
    t = table.sort_values("n")
    ratio = t["mse_weibit"] / t["theory_weibit"]
    weibit_ok = bool(((ratio <= W5_RATIO_TOL) & (ratio >= 1 / W5_RATIO_TOL)).all())
    big = t.iloc[-1]
    floor_rel = abs(big["mse_softmax"] / big["theory_softmax"] - 1)
    softmax_ok = bool(floor_rel <= W5_FLOOR_TOL and big["mse_softmax"] > big["mse_weibit"])
    V = claims.Verdict
    verdict = (
        V.REPRODUCED
        if weibit_ok and softmax_ok
        else V.PARTLY
        if weibit_ok or softmax_ok
        else V.NOT_REPRODUCED
    )
    reps = int(t["reps"].iloc[0])
    ev = [
        claims.Evidence("Weibit MSE / (c/n), min over n", float(ratio.min()), n=reps),
        claims.Evidence("Weibit MSE / (c/n), max over n", float(ratio.max()), n=reps),
        claims.Evidence("c (Fisher constant)", float(t["c"].iloc[0])) if "c" in t.columns else None,
        claims.Evidence(
            f"softmax MSE at n={int(big['n'])}",
            float(big["mse_softmax"]),
            float(big.get("se_mse_softmax", float("nan"))),
            "se",
            n=reps,
        ),
        claims.Evidence("softmax bias² floor (theory)", float(big["bias2_floor"])),
        claims.Evidence(
            f"Weibit MSE at n={int(big['n'])}",
            float(big["mse_weibit"]),
            float(big.get("se_mse_weibit", float("nan"))),
            "se",
            n=reps,
        ),
    ]
    subs = [
        claims.SubCheck(
            f"Weibit MSE tracks c/n at n={int(r['n'])}",
            V.REPRODUCED
            if 1 / W5_RATIO_TOL <= r["mse_weibit"] / r["theory_weibit"] <= W5_RATIO_TOL
            else V.NOT_REPRODUCED,
            (claims.Evidence("MSE / (c/n)", float(r["mse_weibit"] / r["theory_weibit"]), n=reps),),
            instances=reps,
        )
        for _, r in t.iterrows()
    ]
    subs.append(
        claims.SubCheck(
            f"softmax MSE at n={int(big['n'])} at its floor and above the Weibit MSE",
            V.REPRODUCED if softmax_ok else V.NOT_REPRODUCED,
            (claims.Evidence("softmax MSE / (floor + Godambe/n) − 1", float(floor_rel)),),
            instances=reps,
        )
    )
    return claims.Claim(
        "W5",
        verdict,
        tuple(e for e in ev if e is not None),
        tuple(subs),
        setting={
            "data": "synthetic multinomial winners, 4 candidates, β* = 0.8",
            "n": "100 ... 10 000",
            "replications": reps,
            "scale": scale,
        },
        command=cmd,
        criterion=(
            f"Weibit MSE/(c/n) in [{1 / W5_RATIO_TOL:.2f}, {W5_RATIO_TOL:.2f}] at every n, and at the "
            f"largest n the softmax MSE within {100 * W5_FLOOR_TOL:g} % of bias² floor + Godambe "
            "variance/n and above the Weibit MSE"
        ),
        figures=("noise_floor",),
    )


_SYN_FIGURES = {
    "S1": ("conditions_scl", "spectrum_scl", "vs_beta_scl", "within_class_scl", "normalization_scl"),
    "S2": ("ucl_positives", "conditions_ucl"),
    "S3": ("vs_beta_ucl", "conditions_ucl", "spectrum_ucl", "hucl_at_nc"),
    "S4": ("normalization_scl", "normalization_ucl", "spectrum_scl", "spectrum_ucl"),
    "R5": ("batch_size",),
    "R4": ("near_nc_init",),
}
_VERDICTS = {
    "reproduced": "REPRODUCED",
    "partly reproduced": "PARTLY",
    "not reproduced": "NOT REPRODUCED",
    "no data": "NOT RUN",
}


def _grid_scale(grid: str) -> str:
    """The scale suffix of a grid folder (``s3_hucl_beta-paper`` -> ``paper``), else ``default``."""
    return grid.rsplit("-", 1)[1] if "-" in grid else "default"


def _setting_of(rows: pd.DataFrame, grid: str) -> dict[str, str]:
    def vals(c: str) -> str:
        if c not in rows.columns:
            return ""
        v = list(dict.fromkeys(rows[c].astype(str)))
        return ", ".join(("full" if c == "batch_size" and x == "0" else x) for x in v)

    out = {"data": "synthetic Gaussian mixture / free features", "grid": grid, "scale": _grid_scale(grid)}
    for c, name in (
        ("num_classes", "C"),
        ("d", "d"),
        ("encoder", "encoder"),
        ("normalization", "normalization"),
        ("batch_size", "batch size"),
        ("epochs", "epochs"),
        ("estimator", "estimator"),
    ):
        v = vals(c)
        if v:
            out[name] = v
    if "seed" in rows.columns:
        out["seeds"] = str(rows["seed"].nunique())
    return out


def synthetic_records(
    table: pd.DataFrame,
    verdicts: pd.DataFrame,
    details: pd.DataFrame,
    *,
    results: str = "results",
    scale: str = "default",
) -> list[claims.Claim]:
    """Records of S1-S4 and R5 from the synthetic judges' output, plus R4 (NOT RUN: no grid yet).

    Args:
        table: the synthetic results (with a ``grid`` column).
        verdicts: one row per claim and grid folder: ``claim, grid, verdict, measured`` (verdicts
            ``reproduced`` / ``partly reproduced`` / ``not reproduced`` / ``no data``).
        details: per-setting final-epoch seed statistics: ``claim, grid, n_seeds``,
            ``etf_mean_mean/_std``, ``within_class_variation_mean/_std`` and the setting columns.
        results: the results folder (for the commands).
        scale: the main job's scale; records of grids at this scale come first.

    Returns:
        Records for S1, S2, S3, S4, R5 (several per id when several grid scales are stored; NOT RUN
        with the command where none is) and R4. The evidence lists, per setting, the seed mean ±
        std of the ETF deviation and of the within-class variation; ``notes`` the judge's text.
    """
    ids = ("S1", "S2", "S3", "S4", "R5")
    out: list[claims.Claim] = []
    for cid in ids:
        cmd = command_for(cid, results=results, scale=scale)
        rows = verdicts[verdicts["claim"] == cid] if len(verdicts) else verdicts
        rows = rows[rows["verdict"] != "no data"] if len(rows) else rows
        if len(rows) == 0:
            out.append(claims.not_run(cid, cmd, notes="no stored synthetic results for this claim's grid"))
            continue
        recs = []
        for _, v in rows.iterrows():
            grid = str(v["grid"])
            sel = table[table["grid"].astype(str) == grid] if grid and "grid" in table.columns else table
            d = details[
                (details["claim"] == cid) & ((details["grid"] == grid) if "grid" in details.columns else True)
            ]
            ev = []
            for _, r in d.iterrows():
                label = ", ".join(
                    f"{c}={r[c]}"
                    for c in ("method", "beta", "normalization", "encoder", "batch_size", "positives")
                    if c in r.index and pd.notna(r[c])
                )
                for m in ("etf_mean", "within_class_variation"):
                    if f"{m}_mean" in r.index and pd.notna(r[f"{m}_mean"]):
                        sd = r.get(f"{m}_std")
                        ev.append(
                            claims.Evidence(
                                f"{m} [{label}]" if label else m,
                                float(r[f"{m}_mean"]),
                                None if pd.isna(sd) else float(sd),
                                "" if pd.isna(sd) else "std",
                                n=int(r["n_seeds"]),
                            )
                        )
            grid_scale = _grid_scale(grid)
            recs.append(
                (
                    grid_scale != scale,
                    claims.Claim(
                        cid,
                        _VERDICTS.get(str(v["verdict"]), "NOT RUN"),
                        tuple(ev),
                        setting=_setting_of(sel, grid),
                        command=command_for(cid, results=results, scale=grid_scale),
                        criterion=_CRITERIA.get(cid, ""),
                        figures=_SYN_FIGURES.get(cid, ()),
                        notes=str(v["measured"]),
                    ),
                )
            )
        out += [r for _, r in sorted(recs, key=lambda x: x[0])]
    out.append(
        claims.not_run(
            "R4", command_for("R4", results=results, scale=scale), notes="no near-NC-initialisation grid yet"
        )
    )
    return out


_CRITERIA = {
    "S1": "every SCL/HSCL setting with ball/sphere normalisation is NC (final seed-mean etf_mean < 0.05 "
    "and within_class_variation < 0.1)",
    "S2": "every UCL label-positive setting is NC and every noise-positive setting is not",
    "S3": "per setting, HUCL etf_mean grows with beta (Spearman > 0.5, largest vs smallest beta by > 2 pooled "
    "std) and no HUCL setting is NC",
    "S4": "no setting without normalisation is NC and every run is dimensionally collapsed "
    "(log(sigma_min/sigma_max) < log 1e-4)",
    "R5": "every batch size >= 64 is NC and batch size 32 is not (or clearly worse)",
}
