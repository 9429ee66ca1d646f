"""Tiny hand-made tables for the figure tests (no training, no theory computation)."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

EPOCHS = (0, 2, 4, 6, 8, 10)


def _metrics(rng: np.random.Generator, beta: float, norm: str, ep: int, family: str, positives: str) -> dict:
    t = ep / EPOCHS[-1]
    decay = np.exp(-3 * t)
    bad = (norm == "none") or (positives == "noise") or (family == "UCL" and beta >= 5)
    floor = 0.2 if bad else 0.0
    etf = floor + (0.3 - floor) * decay + 0.01 * rng.random()
    return {
        "loss": np.nan if ep == 0 else 0.3 + 0.5 * decay + (0.2 if family == "UCL" and beta > 0 else 0.0),
        "optimum": np.nan if norm == "none" else (0.2846 if family == "SCL" else 0.3338),
        "unit_norm": np.nan if norm == "none" else 0.8 * decay + 0.01 * rng.random(),
        "zero_sum": 0.05 * decay + 0.01 * rng.random() + (0.1 if bad else 0),
        "etf_mean": etf,
        "within_class_variation": 0.9 * decay + 0.001 + (0.5 if positives == "noise" else 0),
        "effective_rank": 9.0 - 2 * floor - decay * rng.random(),
        "spectrum_min": -1 - 5 * floor - rng.random(),
        "ncm_acc": 0.1 + 0.8 * (1 - decay),
        "rank_1e-2": 3.0 if not bad else max(1.0, 3.0 - round(2 * t)),
        "settled": bool(ep == EPOCHS[-1] and not bad),  # the convergence rule held at the last row
    }


def _class_means(rng: np.random.Generator, C: int = 4) -> str:
    return json.dumps(rng.normal(size=(C, C - 1)).tolist())


@pytest.fixture(scope="session")
def synthetic_table() -> pd.DataFrame:
    """A results table shaped like ``python -m synthetic``'s: two families, betas, three
    normalisations, label/noise positives, two batch sizes, a near-NC grid; two seeds, 6 epochs."""
    rng = np.random.default_rng(0)
    rows = []

    def add(grid, method, beta, norm="ball", positives="label", batch=0, init="random", C=4):
        for seed in (0, 1):
            key = f"{grid}-{method}-{beta:g}-{norm}-{positives}-{batch}-{init}-{seed}"
            fam = "SCL" if method in ("SCL", "HSCL") else "UCL"
            for ep in EPOCHS:
                rows.append(
                    {
                        "grid": grid,
                        "method": method,
                        "beta": float(beta),
                        "normalization": norm,
                        "positives": positives,
                        "batch_size": batch,
                        "encoder": "mlp",
                        "num_classes": C,
                        "n_per_class": 8,
                        "init": init,
                        "epochs": EPOCHS[-1],
                        "seed": seed,
                        "run_key": key,
                        "epoch": ep,
                        **_metrics(rng, beta, norm, ep, fam, positives),
                        "class_means": _class_means(rng, C),
                    }
                )

    for fam, hard in (("SCL", "HSCL"), ("UCL", "HUCL")):
        for norm in ("ball", "sphere", "none"):
            for b in (0.0, 2.0, 5.0, 30.0):
                add("s_beta", fam if b == 0 else hard, b, norm=norm)
    add("s2", "UCL", 0.0, positives="noise")
    add("s2", "UCL", 0.0, positives="label")
    for batch in (32, 64, 128):
        add("r5", "HSCL", 5.0, batch=batch)
    for m, b in (("SCL", 0.0), ("HSCL", 5.0), ("UCL", 0.0), ("HUCL", 10.0)):
        add("r4", m, b, init="nc")
    t = pd.DataFrame(rows)
    cols = list(t.columns)  # config columns before run_key, as in the store's layout
    return t[cols]


@pytest.fixture(scope="session")
def spectrum_table(synthetic_table) -> pd.DataFrame:
    """Long spectrum table built by hand (log ratios decreasing with the index)."""
    rng = np.random.default_rng(1)
    keep = [
        "grid",
        "method",
        "beta",
        "normalization",
        "encoder",
        "batch_size",
        "positives",
        "num_classes",
        "init",
        "seed",
        "run_key",
        "epoch",
    ]
    base = synthetic_table[keep].drop_duplicates()
    rows = []
    for rec in base.to_dict("records"):
        drop = 0.0 if rec["normalization"] != "none" else -3.0
        for i in range(3):
            rows.append(
                {
                    **rec,
                    "index": i,
                    "log_ratio": 0.0 if i == 0 else drop * i * rec["epoch"] / 10 - rng.random(),
                }
            )
    return pd.DataFrame(rows)


@pytest.fixture(scope="session")
def theory_tables() -> dict[str, pd.DataFrame]:
    """Hand-made versions of the theory producers' tables."""
    betas = [0.0, 1.0, 2.0, 5.0, 10.0]
    harris = pd.DataFrame(
        [
            {
                "setting": s,
                "beta": b,
                "estimate": 0.01 * b * (1 + k),
                "ci_low": 0.01 * b * (1 + k) - 0.005,
                "ci_high": 0.01 * b * (1 + k) + 0.005,
                "confidence": 0.99,
                "num_pairs": 100,
                "sizes": "C=10",
            }
            for k, s in enumerate(("supervised", "unsupervised"))
            for b in betas
        ]
    )
    hucl = pd.DataFrame(
        [
            {
                "num_classes": C,
                "beta": b,
                "hucl_at_nc": 0.33 + 0.03 * b,
                "q": min(1.0, 0.1 + 0.09 * b),
                "ucl_optimum": 0.33,
                "scl_optimum": 0.28,
                "limit": 0.6931,
            }
            for C in (10, 100)
            for b in betas
        ]
    )
    gram = []
    for C in (3, 4):
        etf = (C * np.eye(C) - np.ones((C, C))) / (C - 1)
        for prog, G in (("SCL optimum", etf + 1e-4), ("ETF", etf)):
            gram += [
                {"num_classes": C, "program": prog, "row": i, "col": j, "value": float(v)}
                for (i, j), v in np.ndenumerate(G)
            ]
    ns = np.array([100, 1000, 10000])
    c, floor = 7.136, 0.045
    nf = pd.DataFrame(
        {
            "n": ns,
            "reps": 50,
            "mse_softmax": floor + 20 / ns,
            "mse_weibit": c / ns * 1.01,
            "se_mse_softmax": 0.001,
            "se_mse_weibit": 0.0001,
            "theory_weibit": c / ns,
            "bias2_floor": floor,
            "theory_softmax": floor + 19 / ns,
            "c": c,
            "dgp": "hand-made",
        }
    )
    land = pd.DataFrame(
        [
            {
                "loss": loss,
                "normalization": norm,
                "num_classes": C,
                "n": 2,
                "psi": "mean",
                "beta": b,
                "nc": 0.35 + 0.034 * min(b, 10.0),
                "best": 0.35 + 0.034 * min(b, 10.0) - (0.02 if loss == "HUCL" and b >= 1 else 0.0),
                "bound": 0.35,
                "beats_nc": loss == "HUCL" and b >= 1,
            }
            for loss in ("HUCL", "SCL")
            for norm in ("sphere", "ball")
            for C in (3, 4)
            for b in (0.0, 0.5, 1.0, 2.0, 10.0, 100.0)
        ]
    )
    hess = pd.DataFrame(
        [
            {
                "kind": "eigen",
                "loss": loss,
                "num_classes": C,
                "beta": b,
                "min_eigenvalue": 0.05 - (0.05 * b if loss == "HUCL" else -0.01 * b),
            }
            for C in (3, 4)
            for loss, betas_ in (
                ("SCL", (0.0,)),
                ("UCL", (0.0,)),
                ("HSCL", (1.0, 5.0)),
                ("HUCL", (0.25, 0.5, 1.0, 1.5)),
            )
            for b in betas_
        ]
        + [{"kind": "saddle", "num_classes": C, "beta_saddle": 0.7 + 0.1 * C} for C in (3, 4)]
        + [{"kind": "ball", "num_classes": C, "beta_ball": 0.5 + 0.1 * C} for C in (3, 4)]
    )
    return {
        "harris_gap": harris,
        "hucl_nc": hucl,
        "gram": pd.DataFrame(gram),
        "noise_floor": nf,
        "open_landscape": land,
        "open_hessian": hess,
    }


@pytest.fixture(scope="session")
def weince_tables() -> dict[str, pd.DataFrame]:
    """Hand-made POT, link-selection and gate tables."""
    rng = np.random.default_rng(2)
    y = np.sort(rng.uniform(0, 1, 300) ** 2 * 0.4)
    y = y[y > 0]
    grid = np.linspace(1e-4, 0.4, 50)
    p = np.round(np.arange(1, 100) / 100, 2)
    ep = np.repeat(np.arange(4), 20)
    return {
        "pot_exceedances": pd.DataFrame({"y": y}),
        "pot_fit": pd.DataFrame(
            [
                {
                    "q": 0.99,
                    "threshold": 0.55,
                    "n_exceed": y.size,
                    "xi": -0.2,
                    "sigma": 0.1,
                    "exp_sigma": 0.09,
                    "endpoint": 1.05,
                    "source": "hand-made scores",
                }
            ]
        ),
        "pot_density": pd.DataFrame(
            {"y": grid, "gpd": 10 * (1 - grid / 0.5) ** 4, "exponential": 11 * np.exp(-grid / 0.09)}
        ),
        "pot_qq": pd.DataFrame(
            {
                "p": p,
                "empirical": np.quantile(y, p),
                "gpd": np.quantile(y, p) * 1.01,
                "exponential": -0.09 * np.log1p(-p),
            }
        ),
        "pot_stability": pd.DataFrame(
            {
                "q": [0.98, 0.99, 0.995],
                "threshold": [0.5, 0.55, 0.6],
                "n_exceed": [600, 300, 150],
                "xi": [-0.22, -0.2, np.nan],
            }
        ),
        "lambda_profile": pd.DataFrame(
            {"lam": np.linspace(0, 1, 11), "loglik": -((np.linspace(0, 1, 11) - 0.4) ** 2) * 30 - 100}
        ),
        "lambda_fit": pd.DataFrame(
            [
                {
                    "lam_hat": 0.4,
                    "tau_hat": 0.5,
                    "loglik": -100.0,
                    "loglik0": -104.8,
                    "lr_stat": 9.6,
                    "p_boundary": 0.001,
                    "n_rows": 64,
                }
            ]
        ),
        "weince_gate": pd.DataFrame(
            {
                "epoch": ep,
                "lambda": rng.random(ep.size),
                "lambda_rho": rng.random(ep.size),
                "lambda_aic": rng.random(ep.size),
                "daic": rng.normal(size=ep.size),
            }
        ),
    }


@pytest.fixture(scope="session")
def all_tables(synthetic_table, spectrum_table, theory_tables, weince_tables) -> dict[str, pd.DataFrame]:
    """Every table name a figure reads."""
    return {"synthetic": synthetic_table, "spectrum": spectrum_table, **theory_tables, **weince_tables}
