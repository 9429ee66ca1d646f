"""The one adapter between :mod:`figures` and the computing packages (theory, synthetic, realdata).

Every import of ``theory``, ``synthetic`` and ``realdata`` made by the figures package is in this
module (the figure modules themselves import only pandas, numpy, matplotlib, seaborn and
:mod:`figures.style`), so a re-layout of those packages is absorbed here. The module provides:

* the claims record type (:data:`claims`, re-exported ``theory.claims``);
* :func:`theory_claims`: the theory checks T1-T8 and the W-law as claim records;
* small *producers* of tidy tables computed from theory in seconds: :func:`harris_gap_table`,
  :func:`hucl_nc_table`, :func:`gram_table`, :func:`noise_floor_table`; the EVT tables
  :func:`pot_tables` and :func:`link_tables` from scores;
* the synthetic claim grids: :func:`run_synthetic` (run or reuse them at a scale),
  :func:`load_synthetic`, :func:`spectrum_table`, :func:`synthetic_claims` (the synthetic
  package's own records), :func:`synthetic_criteria`;
* the real-data digits scale: :func:`run_digits` (``realdata.claims.run_digits``; it writes the
  records, tables and WeiNCE score files the later stages read), :func:`digits_progress` and
  :func:`realdata_spectrum`;
* :func:`worker_init` and :func:`run_in_child` (the child processes the figures start: a guard
  against orphans, a prompt exit) and :func:`source_paths` (the files whose content keys the
  cache).

References: Jiang et al., arXiv 2311.05139 (§3 theory, §4-§5 experiments); Erol et al.,
arXiv 2606.00262 (WeiNCE, extreme-value diagnostics).
"""

from __future__ import annotations

import dataclasses
import importlib.util
import math
import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from figures.commands import SCALES, command_for
from theory import claims  # the one claims record type (light: no torch)

__all__ = [
    "claims",
    "SCALES",
    "source_paths",
    "theory_claims",
    "harris_gap_table",
    "hucl_nc_table",
    "gram_table",
    "noise_floor_table",
    "pot_tables",
    "link_tables",
    "synthetic_folder",
    "synthetic_runs",
    "run_synthetic",
    "find_synthetic_results",
    "load_synthetic",
    "spectrum_table",
    "synthetic_claims",
    "synthetic_criteria",
    "DIGITS_SCALE",
    "run_digits",
    "digits_progress",
    "realdata_spectrum",
    "worker_init",
    "run_in_child",
    "device_description",
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


# --------------------------------------------------------------------------------------------
# theory checks
# --------------------------------------------------------------------------------------------

_THEORY_FIGURES = {
    "T1": ("harris_gap",),
    "T2": ("harris_gap",),
    "T3": ("harris_gap",),
    "T4": ("gram_etf", "loss_optimum_scl"),
    "T5": ("loss_optimum_scl",),
    "T6": ("gram_etf", "hucl_at_nc", "loss_optimum_ucl"),
    "T7": ("hucl_at_nc", "loss_optimum_ucl"),
}


def _worst_evidence(rec: claims.Claim) -> claims.Claim:
    w = rec.worst()
    if rec.evidence or w is None or not w.evidence:
        return rec
    e = w.evidence[0]
    return dataclasses.replace(
        rec,
        evidence=(
            claims.Evidence(
                f"worst sub-check ({e.label})", e.value, e.spread, e.spread_kind, n=w.instances or None
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

    from theory.checks import run_checks

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


# --------------------------------------------------------------------------------------------
# theory producers (seconds)
# --------------------------------------------------------------------------------------------

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
    from theory.hcl import harris

    rows = []
    pairs = _HARRIS_PAIRS[scale]
    for setting in ("supervised", "unsupervised"):
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


def gram_table(scale: str = "default", num_classes: Sequence[int] = (4, 5, 6)) -> pd.DataFrame:
    """Optimal Gram matrices of the SCL and UCL convex programs (cvxpy) and the ETF Gram.

    Jiang et al. (arXiv 2311.05139, §3.3, §3.5); unit sphere (the programs' default), mean-form psi,
    one negative.

    Returns:
        Long table ``num_classes, program, row, col, value`` (programs ``"SCL optimum"``,
        ``"UCL optimum"``, ``"ETF"``).
    """
    _check_scale(scale)
    from theory.hcl import convex

    rows = []
    for C in num_classes:
        mats = {
            "SCL optimum": convex.minimize_scl(C, num_negatives=1).G,
            "UCL optimum": convex.minimize_ucl(C, num_negatives=1).G,
            "ETF": convex.etf_gram_np(C),
        }
        for prog, G in mats.items():
            for (i, j), v in np.ndenumerate(G):
                rows.append({"num_classes": int(C), "program": prog, "row": i, "col": j, "value": float(v)})
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


# --------------------------------------------------------------------------------------------
# synthetic results
# --------------------------------------------------------------------------------------------

#: Folders (under the results folder) searched for synthetic grid results, in order.
SYNTHETIC_DIRS = ("synthetic", "claims", ".")


def synthetic_folder(results: str | os.PathLike) -> Path:
    """``RESULTS/synthetic``: where the main job stores the synthetic claim grids."""
    return Path(results) / "synthetic"


def _claim_grids(scale: str) -> list[Any]:
    from synthetic.claims import CLAIM_GRIDS
    from synthetic.grids import load_grid

    return [load_grid(name, scale=scale) for name in CLAIM_GRIDS.values()]


def synthetic_runs(scale: str = "default") -> int:
    """How many runs the shipped claim grids hold at ``scale`` (the synthetic stage's progress units)."""
    _check_scale(scale)
    return sum(len(g) for g in _claim_grids(scale))


def run_synthetic(
    results: str | os.PathLike,
    scale: str = "default",
    jobs: int = 1,
    scheduler: str | None = None,
    progress: Callable[[int], None] | None = None,
) -> dict[str, Any]:
    """Run the synthetic claim grids at ``scale`` (stored runs are reused), into ``RESULTS/synthetic``.

    Every grid of ``synthetic.claims.CLAIM_GRIDS`` is swept with the synthetic package's public
    ``synthetic.sweep.run_sweep`` into ``RESULTS/synthetic/<grid>[-<scale>]`` (the folders of
    ``python -m synthetic sweep GRID --results RESULTS/synthetic``), stacking compatible runs as
    that command does; a finished run is never trained again.

    Args:
        results: the main job's results folder.
        scale: ``"quick"``, ``"default"`` or ``"paper"`` (the grids' own scales).
        jobs: local worker processes (ignored with ``scheduler``).
        scheduler: a dask scheduler address; the runs then train on that cluster.
        progress: called with the number of runs finished (or found stored) since the last call.

    Returns:
        ``{"runs", "trained", "stored", "failed", "seconds"}``, ``failed`` the ``"<grid>/<key>:
        <reason>"`` of the runs that failed now or before.

    Raises:
        ValueError: bad scale or jobs.
    """
    _check_scale(scale)
    if isinstance(jobs, bool) or not isinstance(jobs, int) or jobs < 1:
        raise ValueError(f"jobs must be a positive integer, got {jobs!r}")
    import time

    from synthetic.progress import SweepProgress
    from synthetic.sweep import run_sweep

    class _Forward(SweepProgress):
        def already_done(self, n: int) -> None:
            super().already_done(n)
            if progress is not None and n:
                progress(n)

        def advance(self, ok: bool = True) -> None:
            super().advance(ok)
            if progress is not None:
                progress(1)

    t0 = time.perf_counter()
    grids = _claim_grids(scale)
    bar = _Forward(sum(len(g) for g in grids), mode="off")
    out: dict[str, Any] = {"runs": 0, "trained": 0, "stored": 0, "failed": []}
    base = synthetic_folder(results)
    for g in sorted(grids, key=len, reverse=True):  # the largest grids first: shorter tails
        folder = base / (g.name if scale == "default" else f"{g.name}-{scale}")
        s = run_sweep(g, folder, n_jobs=jobs, scheduler=scheduler, stack=True, progress=bar)
        out["runs"] += s.n_runs
        out["trained"] += s.n_done
        out["stored"] += s.n_skipped
        out["failed"] += [f"{folder.name}/{k}: {v.get('reason', v)}" for k, v in s.failures.items()]
        out["failed"] += [f"{folder.name}/{k}: failed before" for k in s.failed_before]
    out["seconds"] = time.perf_counter() - t0
    return out


def find_synthetic_results(results: str | os.PathLike) -> list[Path]:
    """Folders under ``results`` holding synthetic grid folders (``<grid>/runs/``), in search order.

    Searched: ``results/synthetic``, ``results/claims`` (the README's sweep folder) and
    ``results`` itself; each folder is returned once.
    """
    base = Path(results)
    found: list[Path] = []
    for sub in SYNTHETIC_DIRS:
        d = (base / sub).resolve() if sub != "." else base.resolve()
        if not d.is_dir() or d in found:
            continue
        if (d / "runs").is_dir() or any((p / "runs").is_dir() for p in d.iterdir() if p.is_dir()):
            found.append(d)
    return found


def load_synthetic(results: str | os.PathLike) -> pd.DataFrame:
    """All synthetic results under ``results`` as one tidy table with a ``grid`` column.

    Uses the synthetic package's loader (only complete runs; one table per grid folder); an
    empty frame when nothing is stored. ``attrs["left_out"]`` lists the run files it left out
    (incomplete, corrupt or failed runs, as the loader names them).
    """
    import warnings

    from synthetic.results import load_results

    frames, left_out = [], []
    seen: set[str] = set()
    for folder in find_synthetic_results(results):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # named in attrs["left_out"], shown by the stage
            t = load_results(folder)
        left_out += list(t.attrs.get("excluded", [])) + list(t.attrs.get("failed", []))
        if len(t) == 0:
            continue
        if "grid" in t.columns:
            t = t[~t["grid"].astype(str).isin(seen)]
            seen |= set(t["grid"].astype(str))
        frames.append(t)
    if not frames:
        out = pd.DataFrame()
    else:
        out = pd.concat(frames, ignore_index=True, sort=False)
        cols = list(out.columns)
        if "grid" in cols:  # keep grid first and the config columns before run_key
            cols.remove("grid")
            out = out[["grid"] + cols]
    out.attrs["left_out"] = left_out
    return out


def synthetic_claims(
    table: pd.DataFrame, *, results: str | os.PathLike = "results", scale: str = "default"
) -> list[claims.Claim]:
    """Claims S1-S4, R4 and R5 as the synthetic package judges them (``synthetic.claims.judge``).

    Each record comes straight from its producer: verdict, evidence with seed spread, one
    sub-check per setting, the setting, the criterion declared in the grid file and the command
    (``RESULTS/synthetic``); NOT RUN with the command for a claim without stored runs.

    Args:
        table: :func:`load_synthetic` of the results folder (may be empty).
        results: the main job's results folder.
        scale: the main job's scale (its records come first, and NOT RUN commands name it).

    Returns:
        One record per claim and stored grid scale.
    """
    from synthetic.claims import judge

    t = table if isinstance(table, pd.DataFrame) and len(table) else pd.DataFrame({"grid": []})
    return judge(t, results=str(synthetic_folder(results)), scale=scale)


def synthetic_criteria() -> pd.DataFrame:
    """The declared criteria of the synthetic claims as a long table ``claim, key, value``.

    Numbers only (thresholds such as ``nc_etf``, ``dc_fraction``), read from the grid files'
    ``[claim]`` tables through ``synthetic.claims.criteria``; figures draw them as reference lines.
    """
    from synthetic.claims import CLAIM_GRIDS, criteria

    rows = []
    for cid in CLAIM_GRIDS:
        for k, v in criteria(cid).items():
            if isinstance(v, (int, float)) and not isinstance(v, bool):
                rows.append({"claim": cid, "key": k, "value": float(v)})
    return pd.DataFrame(rows)


_SPEC_KEEP = (
    "grid",
    "dataset",
    "arch",
    "method",
    "beta",
    "normalization",
    "encoder",
    "batch_size",
    "positives",
    "num_classes",
    "estimator",
    "epochs",
    "eval_every",
    "lr",
    "init",
    "seed",
)


def spectrum_table(table: pd.DataFrame) -> pd.DataFrame:
    """The sorted normalised class-mean spectrum per (run, epoch, index) of a results table.

    From the wide columns ``spectrum_0, spectrum_1, ...`` that the synthetic engine records at
    every recorded epoch (the authors' P4 / N1 curve: ``log(sigma_i / sigma_max)`` of the
    covariance of the C class means, the first ``min(C - 1, d)`` values), else from a
    ``class_means`` column (JSON ``(C, d)`` per row, as the real-data store records) through
    ``theory``'s class-mean spectrum.

    Returns:
        Columns: the config columns of :data:`_SPEC_KEEP` present, ``run_key``, ``epoch``,
        ``index``, ``log_ratio``. Empty when the table records neither.
    """
    if not isinstance(table, pd.DataFrame) or len(table) == 0:
        return pd.DataFrame()
    keep = [c for c in _SPEC_KEEP if c in table.columns] + [
        c for c in ("run_key", "epoch") if c in table.columns
    ]
    wide = sorted(
        (c for c in table.columns if c.startswith("spectrum_") and c[9:].isdigit()), key=lambda c: int(c[9:])
    )
    if wide:
        long = table[keep + wide].melt(
            id_vars=keep, value_vars=wide, var_name="index", value_name="log_ratio"
        )
        long["index"] = long["index"].str[9:].astype(int)
        return long.dropna(subset=["log_ratio"]).reset_index(drop=True)
    if "class_means" not in table.columns:
        return pd.DataFrame()
    import torch

    from synthetic.train import decode_class_means
    from theory.collapse import class_mean_spectrum

    rows = []
    sub = table[table["class_means"].notna()]
    base = sub[keep].to_dict("records")
    for rec, cell in zip(base, sub["class_means"], strict=True):
        mu = decode_class_means(cell)
        if not np.isfinite(mu).all() or mu.shape[0] < 2:
            continue
        r = min(mu.shape[0] - 1, mu.shape[1])
        spec = class_mean_spectrum(torch.from_numpy(mu))[:r]
        for i, v in enumerate(spec):
            rows.append({**rec, "index": i, "log_ratio": float(v)})
    return pd.DataFrame(rows)


# --------------------------------------------------------------------------------------------
# real data
# --------------------------------------------------------------------------------------------

#: The digits scale run by the main job at each of its scales (the real-data paper scale needs
#: CIFAR-100 / Tiny-ImageNet and a GPU: ``python -m realdata claims ...``; its results are picked up).
DIGITS_SCALE = {"quick": "quick", "default": "default", "paper": "default"}


def run_digits(results: str | os.PathLike, jobs: int = 1, scale: str = "default") -> dict[str, Any]:
    """The real-data digits scale (``realdata.claims.run_digits``): cached and resumable.

    Trains (or reuses) the digits runs, evaluates the frozen two-view encoders, writes the POT
    scores and link candidates of the trained InfoNCE encoder (``RESULTS/weince/``), the records
    ``RESULTS/records/R*.json`` and ``W*.json`` and the tables ``RESULTS/tables/*.csv``.

    Args:
        results: the main job's results folder.
        jobs: parallel training processes.
        scale: the main job's scale (mapped by :data:`DIGITS_SCALE`).

    Returns:
        ``{"trained", "cached", "failed", "seconds", "numbers"}`` (plain data, picklable).
    """
    _check_scale(scale)
    from realdata.claims import run_digits as _run

    s = _run(str(results), jobs=jobs, scale=DIGITS_SCALE[scale], progress=False)
    return {
        "trained": s.trained,
        "cached": s.cached,
        "failed": list(s.failed),
        "seconds": s.seconds,
        "numbers": dict(s.numbers),
    }


def digits_progress(results: str | os.PathLike, scale: str = "default") -> tuple[int, int]:
    """``(finished, total)`` digits runs of the main job's ``scale`` (the real-data stage's progress).

    ``finished`` counts the runs of the digits scale (:data:`DIGITS_SCALE`) stored complete under
    ``RESULTS/realdata``, ``total`` how many runs that scale has.

    Raises:
        ValueError: bad scale.
    """
    _check_scale(scale)
    from realdata.grids import digits_runs
    from realdata.records import DIGITS_HCL, DIGITS_TWO, realdata_folder
    from realdata.store import done_keys

    hcl, two = digits_runs(DIGITS_SCALE[scale])
    base = realdata_folder(Path(results))
    done = 0
    for folder, configs in ((base / DIGITS_HCL, hcl), (base / DIGITS_TWO, two)):
        keys = done_keys(folder)
        done += sum(c.resolved().key() in keys for c in configs)
    return done, len(hcl) + len(two)


def realdata_spectrum(results: str | os.PathLike) -> pd.DataFrame:
    """Class-mean spectra of every real-data run stored under ``RESULTS/realdata/<folder>``.

    The real-data stores keep each recorded epoch's class means (``realdata.records.load_folder``);
    the spectrum is computed as for the synthetic runs (:func:`spectrum_table`). The ``grid``
    column names the store folder, as in ``RESULTS/tables/realdata.csv``.
    """
    from realdata.records import load_folder, realdata_folder

    base = realdata_folder(Path(results))
    frames = []
    for folder in sorted(p for p in base.iterdir() if (p / "runs").is_dir()) if base.is_dir() else []:
        t = load_folder(folder)
        if len(t) and "class_means" in t.columns:
            frames.append(spectrum_table(t.assign(grid=folder.name)))
    frames = [f for f in frames if len(f)]
    return pd.concat(frames, ignore_index=True, sort=False) if frames else pd.DataFrame()


def worker_init(parent_pid: int) -> None:
    """Initializer of a child process the figures start: it exits once ``parent_pid`` is gone.

    The synthetic package's worker guard (``synthetic.backends.watch_parent``: SIGINT ignored,
    the parent checked twice a second), so that a killed main job leaves no process behind.
    """
    from synthetic.backends import watch_parent

    watch_parent(parent_pid)


def run_in_child(fn: Callable[..., Any], *args: Any) -> Any:
    """``fn(*args)`` in a child process the figures started, then its joblib workers stopped.

    A process started by :mod:`multiprocessing` waits at its exit for its own child processes,
    and joblib's loky pool keeps idle workers alive for 300 s: without this, the child that ran
    the real-data digits scale with ``jobs > 1`` took five minutes to exit after its work was done.
    """
    import sys

    try:
        return fn(*args)
    finally:
        if "joblib.externals.loky" in sys.modules:  # a pool can only exist if loky was imported
            from joblib.externals.loky import get_reusable_executor

            get_reusable_executor(reuse=True).shutdown(wait=True)


# --------------------------------------------------------------------------------------------
# environment
# --------------------------------------------------------------------------------------------


def device_description() -> str:
    """The compute device in words: CPU cores, and the GPU when torch sees one."""
    import platform

    cpu = f"CPU: {os.cpu_count()} logical cores ({platform.machine()}, {platform.system()})"
    try:
        import torch

        threads = torch.get_num_threads()
        cpu += f", torch threads {threads}"
        if torch.cuda.is_available():
            names = ", ".join(torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count()))
            return f"{cpu}; GPU: {names} (not used by these stages)"
    except Exception:
        pass
    return cpu + "; no GPU used"
