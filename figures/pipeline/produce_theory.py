"""Producers of the theory stage: the checks as claim records and the theory tables of the figures.

:func:`theory_claims` runs the checks T1-T8 and the W-law (``theory.claims.checks``); small
producers compute tidy tables from theory in seconds (:func:`harris_gap_table`,
:func:`hucl_nc_table`, :func:`gram_table`, :func:`noise_floor_table`; the open problems' rows,
:func:`open_landscape_table` and :func:`open_hessian_table`, shared with the checks in one process) and the extreme-value tables
from stored scores (:func:`pot_tables`, :func:`link_tables`). :func:`source_paths` lists the files
whose content keys a stage's cache.

References: Jiang et al., arXiv 2311.05139 (section 3); Erol et al., arXiv 2606.00262 (WeiNCE,
extreme-value diagnostics).
"""

from __future__ import annotations

import dataclasses
import importlib.util
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from figures.report.commands import SCALES, command_for
from theory import claims
from theory.options import SETTINGS

__all__ = [
    "source_paths",
    "theory_claims",
    "harris_gap_table",
    "hucl_nc_table",
    "gram_table",
    "open_landscape_table",
    "open_hessian_table",
    "noise_floor_table",
    "pot_tables",
    "link_tables",
]


def _package_dir(name: str) -> Path:
    spec = importlib.util.find_spec(name)
    if spec is None or not spec.submodule_search_locations:
        raise ValueError(f"package {name!r} not found")
    return Path(list(spec.submodule_search_locations)[0])


def source_paths(package: str = "theory") -> list[Path]:
    """The files whose content keys the cache of a stage: every ``.py`` of ``package`` and this file.

    Sorted; a re-layout of the package (new sub-packages) is covered because the tree is walked.
    """
    root = _package_dir(package)
    files = sorted(p for p in root.rglob("*.py") if "__pycache__" not in p.parts)
    return files + [Path(__file__).resolve()]


_THEORY_FIGURES = {
    "T1": ("harris_gap",),
    "T2": ("harris_gap",),
    "T3": ("harris_gap",),
    "T4": ("gram_etf", "loss_optimum_scl"),
    "T5": ("loss_optimum_scl",),
    "T6": ("gram_etf", "hucl_at_nc", "loss_optimum_ucl"),
    "T7": ("hucl_at_nc", "loss_optimum_ucl"),
    "O1": ("open_bracket", "open_beta_c"),
    "O1b": ("open_hessian", "open_beta_c"),
    "O1c": ("open_bracket",),
}


def _worst_evidence(rec: claims.Claim) -> claims.Claim:
    """The record with its worst sub-check's number as evidence (when it carries none).

    The label names the sub-check and the quantity (``"worst of 10 sub-checks, <what>: |err| ..."``);
    the number and its tolerance stay in the quantity's own units.
    """
    w = rec.worst()
    if rec.evidence or w is None or not w.evidence:
        return rec
    e = w.evidence[0]
    label = f"worst of {len(rec.subchecks)} sub-checks, {w.what}: {e.label}"
    return dataclasses.replace(
        rec,
        evidence=(
            claims.Evidence(
                label, e.value, e.spread, e.spread_kind, n=w.instances or None, level=e.level, unit=e.unit
            ),
        ),
    )


def theory_claims(scale: str = "default", seed: int = 0) -> list[claims.Claim]:
    """The theory checks T1-T8 and the W-law (``python -m theory``) as claim records.

    Every numerical check is a tolerance sub-check; a claim is PASS iff all its sub-checks pass
    (Jiang et al., arXiv 2311.05139, §3; Erol et al., arXiv 2606.00262, Weibull top-1 law).
    ``quick`` runs the checks' quick mode. The records get the figures that show them and, when
    they carry none, the worst sub-check as their evidence.

    Args:
        scale: ``"quick"``, ``"default"`` or ``"paper"`` (the theory checks have no paper scale:
            it runs the default checks).
        seed: seed of every random instance.

    Returns:
        One record per check id, in catalogue order.

    Raises:
        ValueError: bad ``scale`` or ``seed``.
    """
    _check_scale(scale)
    if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
        raise ValueError(f"seed must be a non-negative integer, got {seed!r}")
    import torch

    # lazy: torch, cvxpy and sympy load only when the theory stage computes (a warm job reads its cache)
    from theory.claims.checks import run_checks

    torch.set_num_threads(max(1, min(2, torch.get_num_threads())))
    setting = {
        "method": "exact enumeration, Monte Carlo with confidence intervals, cvxpy, sympy",
        "instances": "random psi, eta, unit-ball features; exact NC batches",
    }
    out = []
    for r in run_checks(quick=scale == "quick", seed=seed):
        figs = tuple(dict.fromkeys((*r.figures, *_THEORY_FIGURES.get(r.id, ()))))
        r = dataclasses.replace(
            r,
            figures=figs,
            setting={**setting, **r.setting, "scale": scale},
            command=r.command or command_for(r.id, scale=scale),
        )
        out.append(_worst_evidence(r))
    return out


def _check_scale(scale: str) -> None:
    if scale not in SCALES:
        raise ValueError(f"scale must be one of {SCALES}, got {scale!r}")


HARRIS_BETAS = (0.0, 0.5, 1.0, 2.0, 5.0, 10.0, 30.0)


_HARRIS_PAIRS = {"quick": 400, "default": 2000, "paper": 8000}


def harris_gap_table(
    scale: str = "default", seed: int = 0, betas: Sequence[float] = HARRIS_BETAS
) -> pd.DataFrame:
    """Monte Carlo Harris gap ``E_hard - E_base`` against beta with 99 % confidence intervals.

    ``theory`` Harris Monte Carlo (Jiang et al., arXiv 2311.05139, §3, Harris lemma): random
    unit-ball features, C = 10, 50 per class, d = 9, K = 256, mean-form psi, exponential tilt.

    Returns:
        Columns ``setting, beta, estimate, ci_low, ci_high, confidence, base_mean, hard_mean,
        num_pairs, sizes``; one row per (setting, beta).
    """
    _check_scale(scale)
    # lazy: torch, cvxpy and sympy load only when the theory stage computes (a warm job reads its cache)
    from theory.hcl import harris

    rows = []
    pairs = _HARRIS_PAIRS[scale]
    for setting in SETTINGS:
        for b in betas:
            b = float(b)
            if b < 0:
                raise ValueError(f"betas must be >= 0, got {b}")
            r = harris.harris_monte_carlo(
                setting=setting, num_pairs=pairs, eta="exponential", eta_params={"beta": b}, seed=seed
            )
            lo, hi = r.details["ci"]
            rows.append(
                {
                    "setting": setting,
                    "beta": b,
                    "estimate": r.details["estimate"],
                    "ci_low": lo,
                    "ci_high": hi,
                    "confidence": r.details["confidence"],
                    "base_mean": r.details["base_mean"],
                    "hard_mean": r.details["hard_mean"],
                    "num_pairs": pairs,
                    "sizes": "C=10, N=500, d=9, K=256, mean-form ψ",
                }
            )
    return pd.DataFrame(rows)


def hucl_nc_table(
    scale: str = "default", num_classes: Sequence[int] = (10, 100), num_negatives: int = 256
) -> pd.DataFrame:
    """Closed-form HUCL loss at NC, q(beta), L*_UCL, L*_SCL and the beta -> inf limit.

    Jiang et al. (arXiv 2311.05139, §3.6); mean-form psi, tau = 1, ``num_negatives`` sampled
    negatives (the population value is the binomial mixture).

    Returns:
        Columns ``num_classes, beta, hucl_at_nc, q, ucl_optimum, scl_optimum, limit,
        num_negatives``.
    """
    _check_scale(scale)
    # lazy: torch, cvxpy and sympy load only when the theory stage computes (a warm job reads its cache)
    from theory.hcl import optima as bounds

    betas = np.unique(
        np.concatenate([np.linspace(0, 30, 61 if scale == "quick" else 121), [0.5, 1, 2, 5, 10]])
    )
    rows = []
    for C in num_classes:
        ucl = bounds.ucl_optimum(C, num_negatives=num_negatives)
        scl = bounds.scl_optimum(C, num_negatives=num_negatives)
        lim = bounds.plugin_value(1.0, C, num_negatives=num_negatives)
        for b in betas:
            rows.append(
                {
                    "num_classes": int(C),
                    "beta": float(b),
                    "hucl_at_nc": bounds.hucl_at_nc(C, float(b), num_negatives=num_negatives),
                    "q": bounds.collision_probability(C, float(b)),
                    "ucl_optimum": ucl,
                    "scl_optimum": scl,
                    "limit": lim,
                    "num_negatives": num_negatives,
                }
            )
    return pd.DataFrame(rows)


def _open_scale(scale: str) -> str:
    """The open problems' scale (theory.claims.open_search.SCALES) of the job's scale."""
    _check_scale(scale)
    return "quick" if scale == "quick" else "full"


def open_landscape_table(scale: str = "default", seed: int = 0) -> pd.DataFrame:
    """The free-embedding searches of the open problems O1 / O1c (docs/open_problems.md).

    ``theory.claims.open_search.landscape_rows`` at the checks' scale (``quick`` at the quick
    scale, the default otherwise): computed once per process, so the theory stage's checks and
    this table share one run.

    Returns:
        One row per search: ``loss, setting, normalization, psi, num_classes, n, d, beta, best, nc,
        nc_loss, bound, gain, beats_nc, restarts, iterations`` and the minimiser's geometry.
    """
    if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
        raise ValueError(f"seed must be a non-negative integer, got {seed!r}")
    # lazy: torch loads only when the theory stage computes (a warm job reads its cache)
    from theory.claims.open_search import landscape_rows

    return pd.DataFrame(list(landscape_rows(_open_scale(scale), seed)))


def open_hessian_table(scale: str = "default") -> pd.DataFrame:
    """The Hessian at NC of the open problem O1b (``theory.claims.open_search.hessian_rows``).

    Returns:
        Rows of ``kind`` ``"eigen"`` (``loss, num_classes, beta, min_eigenvalue, ...``),
        ``"saddle"`` (``num_classes, beta_saddle``) and ``"ball"`` (``num_classes, beta_ball,
        beta_ball_sympy``).
    """
    # lazy: torch and sympy load only when the theory stage computes (a warm job reads its cache)
    from theory.claims.open_search import hessian_rows

    return pd.DataFrame(list(hessian_rows(_open_scale(scale))))


def gram_table(scale: str = "default", num_classes: Sequence[int] = (4, 5, 6)) -> pd.DataFrame:
    """Optimal Gram matrices of the SCL and UCL convex programs (cvxpy) and the ETF Gram.

    Jiang et al. (arXiv 2311.05139, §3.3, §3.5); unit sphere (the programs' default), mean-form psi,
    one negative.

    Returns:
        Long table ``num_classes, program, row, col, value, num_negatives`` (programs
        ``"SCL optimum"``, ``"UCL optimum"``, ``"ETF"``; ``num_negatives``: k of the programs).
    """
    _check_scale(scale)
    # lazy: torch, cvxpy and sympy load only when the theory stage computes (a warm job reads its cache)
    from theory.hcl import convex

    k = 1
    rows = []
    for C in num_classes:
        mats = {
            "SCL optimum": convex.minimize_scl(C, num_negatives=k).G,
            "UCL optimum": convex.minimize_ucl(C, num_negatives=k).G,
            "ETF": convex.etf_gram_np(C),
        }
        for prog, G in mats.items():
            for (i, j), v in np.ndenumerate(G):
                rows.append(
                    {
                        "num_classes": int(C),
                        "program": prog,
                        "row": i,
                        "col": j,
                        "value": float(v),
                        "num_negatives": k,
                    }
                )
    return pd.DataFrame(rows)


#: Replications of the noise-floor experiment per scale (the authors use 12 000).
NOISE_FLOOR_REPS = {"quick": 400, "default": 12000, "paper": 12000}


def noise_floor_table(scale: str = "default", seed: int = 20260113) -> pd.DataFrame:
    """The softmax-vs-Weibit noise-floor simulation (Erol et al., arXiv 2606.00262).

    Four candidates ``s = (0.15, 0.45, 0.70, 0.90)``, ``beta* = 0.8``, n in 100 ... 10 000,
    :data:`NOISE_FLOOR_REPS` replications (the seed is the authors').

    Returns:
        One row per n: ``n, reps, mse_softmax, mse_weibit, se_mse_softmax, se_mse_weibit,
        bias2_softmax, theory_weibit, bias2_floor, theory_softmax, c, dgp``.
    """
    _check_scale(scale)
    # lazy: torch, cvxpy and sympy load only when the theory stage computes (a warm job reads its cache)
    from theory.weince import noise_floor as nf

    t = nf.noise_floor_experiment(reps=NOISE_FLOOR_REPS[scale], seed=seed)
    return t.assign(dgp="candidates s = (0.15, 0.45, 0.70, 0.90), β* = 0.8, Weibit winner law")


def pot_tables(
    scores: Sequence[float] | np.ndarray,
    q: float = 0.99,
    *,
    source: str = "",
    quantiles: Sequence[float] = (0.98, 0.985, 0.99, 0.992, 0.995),
    min_exceed: int = 100,
) -> dict[str, pd.DataFrame]:
    """Peaks-over-threshold tables of similarity scores (Erol et al., arXiv 2606.00262).

    Profile-likelihood GPD fit above the ``q`` quantile (``theory`` POT fit), a separately fitted
    exponential, the QQ table, fitted densities on a grid, and the shape at several thresholds.

    Args:
        scores: ``(n,)`` negative-pair similarities.
        q: threshold quantile in (0, 1).
        source: text naming where the scores come from (shown in the figure).
        quantiles: thresholds of the stability scan.
        min_exceed: fewest exceedances for a stability fit.

    Returns:
        ``{"pot_exceedances", "pot_fit", "pot_density", "pot_qq", "pot_stability"}``.

    Raises:
        ValueError: bad scores or threshold (from the fit).
    """
    from scipy import stats

    # lazy: torch, cvxpy and sympy load only when the theory stage computes (a warm job reads its cache)
    from theory.weince import gpd

    s = np.asarray(scores, dtype=np.float64).ravel()
    r = gpd.pot_fit(s, q)
    y = np.asarray(r.exceedances, dtype=np.float64)
    top = float(y.max())
    end = -r.sigma / r.xi if r.xi < 0 else math.inf
    grid = np.unique(
        np.concatenate([np.geomspace(max(y.min(), top * 1e-4), top, 200), np.linspace(0.0, top, 200)])
    )
    if math.isfinite(end):
        grid = np.unique(np.concatenate([grid, np.linspace(0.0, min(end, top * 1.2), 50)]))
    fit = pd.DataFrame([{**r.numbers(), "source": source}])
    density = pd.DataFrame(
        {
            "y": grid,
            "gpd": stats.genpareto.pdf(grid, c=r.xi, scale=r.sigma),
            "exponential": stats.expon.pdf(grid, scale=r.exp_sigma),
        }
    )
    stability = gpd.threshold_stability(s, quantiles, min_exceed=min_exceed)
    return {
        "pot_exceedances": pd.DataFrame({"y": y}),
        "pot_fit": fit,
        "pot_density": density,
        "pot_qq": r.qq.copy(),
        "pot_stability": stability,
    }


def link_tables(cand: Any, *, tau: float | None = 0.5, source: str = "") -> dict[str, pd.DataFrame]:
    """Link-selection tables: the profile likelihood of lambda and the fit (LRT of lambda = 0).

    ``theory`` link selection in the T_lambda family (Erol et al., arXiv 2606.00262).

    Args:
        cand: ``(M, C)`` candidate similarities with the positive in column 0, or a list of them.
        tau: fixed temperature, or None to profile it.
        source: text naming the data.

    Returns:
        ``{"lambda_profile", "lambda_fit"}``.
    """
    # lazy: torch, cvxpy and sympy load only when the theory stage computes (a warm job reads its cache)
    from theory.weince import links

    r = links.link_select(cand, tau=tau)
    fit = pd.DataFrame(
        [
            {
                "lam_hat": r.lam_hat,
                "tau_hat": r.tau_hat,
                "loglik": r.loglik,
                "loglik0": r.loglik0,
                "lr_stat": r.lr_stat,
                "p_chi2": r.p_chi2,
                "p_boundary": r.p_boundary,
                "n_rows": r.n_rows,
                "source": source,
            }
        ]
    )
    return {"lambda_profile": r.profile.copy(), "lambda_fit": fit}
