"""Tests of synthetic.claims: the verdicts of S1-S4 and R5 on constructed tables and result folders."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from synthetic import claims, results


def _claim_table(grid: str, rows: list[dict]) -> pd.DataFrame:
    out = []
    for i, r in enumerate(rows):
        base = {
            "method": "SCL",
            "beta": 0.0,
            "normalization": "sphere",
            "positives": "label",
            "batch_size": 0,
            "num_classes": 10,
            "seed": 0,
        }
        base.update({k: v for k, v in r.items() if k in base})
        metrics = {k: v for k, v in r.items() if k not in base}
        out.append({"grid": grid, **base, "run_key": f"{grid}{i}", "epoch": 5, **metrics})
    return pd.DataFrame(out)


def _seeds(setting: dict, etf: float, wcv: float, n: int = 3, jitter: float = 0.001, **extra) -> list[dict]:
    return [
        {
            **setting,
            "seed": s,
            "etf_mean": etf + jitter * s,
            "within_class_variation": wcv + jitter * s,
            **extra,
        }
        for s in range(n)
    ]


def test_evaluate_claims_verdicts_on_constructed_tables():
    s1 = _claim_table(
        "s1_scl_hscl_nc",
        _seeds({"method": "SCL"}, 0.01, 0.01) + _seeds({"method": "HSCL", "beta": 5.0}, 0.01, 0.02),
    )
    s2 = _claim_table(
        "s2_ucl_positives",
        _seeds({"method": "UCL", "positives": "label"}, 0.01, 0.01)
        + _seeds({"method": "UCL", "positives": "noise"}, 0.3, 0.5),
    )
    s3 = _claim_table(
        "s3_hucl_beta",
        _seeds({"method": "UCL"}, 0.01, 0.01)
        + _seeds({"method": "HUCL", "beta": 2.0}, 0.05, 0.01)
        + _seeds({"method": "HUCL", "beta": 10.0}, 0.4, 0.2),
    )
    s4 = _claim_table(
        "s4_no_normalisation",
        _seeds({"normalization": "none"}, 0.2, 3.0, effective_rank=4.0, spectrum_min=-12.0),
    )
    r5 = _claim_table(
        "r5_batch_size",
        _seeds({"batch_size": 32}, 0.3, 0.2)
        + _seeds({"batch_size": 64}, 0.01, 0.01)
        + _seeds({"batch_size": 512}, 0.02, 0.01),
    )
    table = pd.concat([s1, s2, s3, s4, r5], ignore_index=True)
    v = claims.evaluate_claims(table).set_index("claim")
    assert list(v["verdict"]) == ["reproduced"] * 5, v["measured"].to_dict()
    assert "±" in v.loc["S3", "measured"] and v.loc["S1", "n_runs"] == 6
    # break each claim
    bad = table.copy()
    bad.loc[(bad["grid"] == "s1_scl_hscl_nc") & (bad["method"] == "SCL"), "etf_mean"] = 0.3
    bad.loc[bad["grid"] == "s2_ucl_positives", "etf_mean"] = 0.01
    bad.loc[bad["grid"] == "s2_ucl_positives", "within_class_variation"] = 0.01
    s3m = bad["grid"] == "s3_hucl_beta"
    bad.loc[s3m, "etf_mean"] = 0.4 - bad.loc[s3m, "beta"] * 0.03
    bad.loc[bad["grid"] == "s4_no_normalisation", "etf_mean"] = 0.001
    bad.loc[bad["grid"] == "s4_no_normalisation", "within_class_variation"] = 0.001
    bad.loc[bad["grid"] == "s4_no_normalisation", "spectrum_min"] = -0.5
    bad.loc[(bad["grid"] == "r5_batch_size"), "etf_mean"] = 0.01
    bad.loc[(bad["grid"] == "r5_batch_size"), "within_class_variation"] = 0.01
    v = claims.evaluate_claims(bad).set_index("claim")
    assert v.loc["S1", "verdict"] == "partly reproduced"
    assert v.loc["S2", "verdict"] == "partly reproduced"
    assert v.loc["S3", "verdict"] == "partly reproduced"  # no growth, but HUCL is not NC
    assert "grows over the HUCL betas in 0/1 settings" in v.loc["S3", "measured"]
    assert v.loc["S4", "verdict"] == "not reproduced"
    assert v.loc["R5", "verdict"] == "partly reproduced"
    empty = claims.evaluate_claims(s1)
    assert set(empty.set_index("claim").loc[["S2", "S3", "S4", "R5"], "verdict"]) == {"no data"}


def _s3_rows(curves: dict, wcv: dict | None = None) -> list[dict]:
    """S3 settings: {(encoder, normalization): {beta: etf}} -> seed rows (wcv 0.01 unless given)."""
    rows = []
    for (enc, norm), curve in curves.items():
        for beta, etf in curve.items():
            w = (wcv or {}).get((enc, norm, beta), 0.01)
            rows += _seeds(
                {
                    "method": "HUCL" if beta > 0 else "UCL",
                    "beta": float(beta),
                    "normalization": norm,
                    "encoder": enc,
                },
                etf,
                w,
            )
    return rows


def _s3_table(curves: dict, wcv: dict | None = None) -> pd.DataFrame:
    rows = _s3_rows(curves, wcv)
    out = []
    for i, r in enumerate(rows):
        base = {
            "method": r["method"],
            "beta": r["beta"],
            "normalization": r["normalization"],
            "encoder": r["encoder"],
            "positives": "label",
            "seed": r["seed"],
        }
        out.append(
            {
                "grid": "s3_hucl_beta",
                **base,
                "run_key": f"s3k{i}",
                "epoch": 5,
                "etf_mean": r["etf_mean"],
                "within_class_variation": r["within_class_variation"],
            }
        )
    return pd.DataFrame(out)


def _s3(curves: dict, wcv: dict | None = None) -> tuple[str, str]:
    v = claims.evaluate_claims(_s3_table(curves, wcv)).set_index("claim")
    return v.loc["S3", "verdict"], v.loc["S3", "measured"]


def test_s3_verdict_per_setting_and_hucl_nc():
    grow = {0: 0.01, 1: 0.1, 2: 0.2, 5: 0.3, 10: 0.4}
    verdict, text = _s3({("free", "sphere"): grow, ("mlp", "ball"): grow})
    assert verdict == "reproduced" and "2/2 settings" in text and "reaches NC at beta: none" in text
    # the measured case: HUCL reaches NC at beta 1 and 2, then the deviation grows -> partly
    nc_low = {0: 0.001, 1: 0.001, 2: 0.002, 5: 0.07, 10: 0.2, 30: 0.35}
    verdict, text = _s3({("free", "sphere"): nc_low, ("mlp", "ball"): grow})
    assert verdict == "partly reproduced"
    assert "reaches NC at beta: 1, 2." in text and "2/2 settings" in text
    assert "[normalization=sphere,encoder=free]" in text and "HUCL NC at beta: 1, 2" in text
    # beta = 0 (UCL) is not part of the trend: NC at beta 0, flat above it -> no growth
    flat = {0: 0.01, 1: 0.3, 5: 0.3, 10: 0.3}
    assert _s3({("free", "sphere"): flat})[0] == "partly reproduced"
    # trend judged per setting: one grows, one falls (pooled, the means would still grow)
    falls = {0: 0.01, 1: 0.5, 5: 0.45, 10: 0.4}
    steep = {0: 0.01, 1: 0.1, 5: 0.6, 10: 0.9}
    verdict, text = _s3({("free", "sphere"): steep, ("mlp", "sphere"): falls})
    assert verdict == "partly reproduced" and "1/2 settings" in text
    # no setting grows and HUCL is NC -> not reproduced
    all_nc = {0: 0.001, 1: 0.001, 5: 0.001, 10: 0.001}
    verdict, text = _s3({("free", "sphere"): all_nc})
    assert verdict == "not reproduced" and "reaches NC at beta: 1, 5, 10." in text
    # a single HUCL beta cannot show a trend
    assert _s3({("free", "sphere"): {0: 0.01, 5: 0.3}})[0] == "no data"


def _write_claim_folder(folder: Path, table: pd.DataFrame) -> None:
    for _, run in table.drop(columns=["grid"]).groupby("run_key", sort=False):
        results.write_run(folder, run.reset_index(drop=True))


def _r5_table(grid: str = "r5_batch_size", small_etf: float = 0.3, small_wcv: float = 0.2) -> pd.DataFrame:
    return _claim_table(
        grid,
        _seeds({"batch_size": 32}, small_etf, small_wcv)
        + _seeds({"batch_size": 64}, 0.01, 0.01)
        + _seeds({"batch_size": 512}, 0.02, 0.01),
    )


def test_claims_on_a_single_grid_folder_judge_its_claim(tmp_path):
    _write_claim_folder(tmp_path / "r5_batch_size", _r5_table())
    table = results.load_results(tmp_path / "r5_batch_size")
    assert set(table["grid"]) == {"r5_batch_size"}
    v = claims.evaluate_claims(table).set_index("claim")
    assert list(v["verdict"]) == ["no data"] * 4 + ["reproduced"]
    assert v.loc["R5", "n_runs"] == 9


def test_claims_match_scaled_grid_folders_and_keep_scales_apart(tmp_path):
    _write_claim_folder(tmp_path / "r5_batch_size", _r5_table())
    # the same runs (same keys) at another scale, where batch size 32 is NC too
    _write_claim_folder(
        tmp_path / "r5_batch_size-paper", _r5_table("r5_batch_size-paper", small_etf=0.01, small_wcv=0.01)
    )
    _write_claim_folder(
        tmp_path / "s3_hucl_beta-quick", _s3_table({("free", "sphere"): {0: 0.01, 1: 0.1, 5: 0.3}})
    )
    table = results.load_results(tmp_path)
    v = claims.evaluate_claims(table)
    got = list(zip(v["claim"], v["grid"], v["verdict"], v["n_runs"]))
    assert got == [
        ("S1", "", "no data", 0),
        ("S2", "", "no data", 0),
        ("S3", "s3_hucl_beta-quick", "reproduced", 9),
        ("S4", "", "no data", 0),
        ("R5", "r5_batch_size", "reproduced", 9),
        ("R5", "r5_batch_size-paper", "partly reproduced", 9),
    ]
