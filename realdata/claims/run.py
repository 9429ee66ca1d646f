"""The papers' real-data claims as commands, and the files ``python -m figures`` reads.

Entry points:

* :func:`run_digits` (the main job's digits scale, ``python -m realdata digits``): trains the digits
  runs of :func:`realdata.claims.grids.digits_runs` (cached in the store: finished runs are never
  retrained), evaluates the two-view encoders (linear probe, kNN), computes the POT scores and link
  candidates of a trained InfoNCE encoder, and writes the records.
* :func:`run_group` (``python -m realdata claims r1-r3|r4|r5|w1-w3``): the paper-scale runs of a
  group (:mod:`realdata.claims.grids`), resumable, then the records.
* :func:`realdata.claims.records.write_records` (``python -m realdata claims records``): re-judges what
  is stored and writes the records and tables (re-exported here).

What is written (``RESULTS`` = the main job's results folder):

* ``RESULTS/realdata/<folder>/``: the stores of the runs (:mod:`realdata.training.store`);
* ``RESULTS/records/<id>.json`` for R1-R5 and W1-W4: a JSON array holding one
  :class:`theory.claims.Claim` (:func:`theory.claims.to_json`). A claim whose paper-scale runs are
  absent reads NOT RUN with the command that runs them; its digits-scale evidence is attached as a
  sub-check with its own setting (verdict rules: :mod:`realdata.claims.judges`);
* ``RESULTS/tables/realdata.csv`` (every real-data run and epoch, with a ``grid`` column, without
  the class means), ``realdata_summary.csv`` (final epoch, mean/std/n over seeds),
  ``realdata_eval.csv`` (frozen-feature evaluations), ``weince_gate.csv`` (per-anchor gate values:
  ``epoch, lambda, lambda_rho, lambda_aic, daic``, plus ``source``);
* ``RESULTS/weince/pot_scores.csv`` (column ``score``) and ``RESULTS/weince/link_candidates.npz``
  (arrays ``batch_000``, ... of shape ``(M, C)``, positive in column 0), as the figures' readers
  expect; ``RESULTS/weince/diagnostics.json`` records where they come from and the fits. Paper-scale
  files replace digits-scale ones, never the reverse.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from realdata.claims.grids import CLAIM_GROUPS, digits_runs, group_runs
from realdata.claims.judges import final_summary
from realdata.claims.records import (
    DIGITS_HCL,
    DIGITS_TWO,
    REALDATA_IDS,
    digits_tables,
    load_folder,
    probe_values,
    read_diagnostics,
    realdata_folder,
    write_records,
)
from realdata.datasets import load_dataset, load_digits_dataset
from realdata.frozen.diagnostics import link_candidates, link_summary, pot_scores, pot_summary
from realdata.frozen.evaluate import evaluate_checkpoint
from realdata.inputs.pipeline import Views
from realdata.training import store
from realdata.training.config import TrainConfig
from realdata.training.loop import RunOptions, load_encoder, train_run
from synthetic.store.folders import atomic_write_bytes, atomic_write_text
from synthetic.sweep.backends import local_results

__all__ = [
    "CLAIM_GROUPS",
    "REALDATA_IDS",
    "DigitsSummary",
    "run_digits",
    "run_group",
    "write_records",
]

_rd = realdata_folder
_load = load_folder


# --------------------------------------------------------------------------------------------
# training many runs (optionally in parallel processes)
# --------------------------------------------------------------------------------------------


_DATASETS: dict[tuple[str, str | None], Any] = {}  # loaded once per process


def _dataset(name: str, root: str | None) -> Any:
    if (name, root) not in _DATASETS:
        _DATASETS[(name, root)] = load_dataset(name, root)
    return _DATASETS[(name, root)]


def _train_one(
    folder: str, config: dict[str, Any], device: str, root: str | None, options: dict[str, Any]
) -> dict:
    import torch

    if device == "cpu":
        torch.set_num_threads(1)
    options = dict(options)
    metrics = options.pop("evaluate", None)  # frozen-feature metrics to compute after training
    cfg = TrainConfig.from_dict(config)
    if store.failure(folder, cfg.resolved().key()) is not None:
        return {"key": cfg.resolved().key(), "status": "failed", "seconds": 0.0}
    opts = RunOptions(results=folder, device=device, resume=True, progress=False, **options)
    dataset = _dataset(cfg.dataset, root)
    out = train_run(cfg, opts, dataset=dataset)
    final = store.final_checkpoint_file(folder, out.key)
    if metrics and out.status in ("done", "cached") and final.is_file():
        evaluate_checkpoint(final, metrics=tuple(metrics), dataset=dataset, results=folder, device=device,
                            progress=False, skip_existing=True)  # fmt: skip
    return {"key": out.key, "status": out.status, "seconds": out.seconds, "message": out.message}


def _train_many(
    todo: list[tuple[Path, Any]] | list[tuple[Path, Any, dict[str, Any]]],
    *,
    jobs: int,
    device: str = "cpu",
    root: str | None = None,
    options: dict[str, Any] | None = None,
) -> list[dict]:
    """Train ``(folder, config)`` pairs; ``jobs > 1`` uses joblib processes (one torch thread each).

    The processes are the synthetic sweep's (:func:`synthetic.sweep.backends.local_results`): they
    ignore Ctrl-C, which reaches only this process, and they are stopped when it stops. The
    outcomes come back in the order of ``todo``.
    """
    args = [
        (str(t[0]), t[1].to_dict(), device, root, {**(options or {}), **(t[2] if len(t) > 2 else {})})
        for t in todo
    ]
    if not args:
        return []
    if jobs <= 1 or len(args) == 1:
        return [_train_one(*a) for a in args]
    done = dict(local_results(_train_indexed, list(enumerate(args)), (), min(jobs, len(args))))
    return [done[i] for i in range(len(args))]


def _train_indexed(task: tuple[int, tuple]) -> tuple[int, dict]:
    """``(index, arguments of _train_one)`` -> ``(index, outcome)`` (a worker's task)."""
    i, a = task
    return i, _train_one(*a)


# --------------------------------------------------------------------------------------------
# diagnostics of a trained encoder (POT scores, link candidates)
# --------------------------------------------------------------------------------------------


#: Which diagnostics files may replace which: paper-scale files are never replaced by smaller scales.
_RANK = {"paper": 3, "digits": 2, "small": 1}


def _diag_path(results: str | Path) -> Path:
    return Path(results) / "weince" / "diagnostics.json"


_read_diag = read_diagnostics


def _diagnose(
    results: str | Path,
    scale: str,
    encoders: dict[str, Path],
    dataset: Any,
    *,
    repeats: int,
    pairs: int,
    batches: int,
    device: str = "cpu",
) -> dict[str, Any]:
    """POT and link fits of trained encoders, stored in ``diagnostics.json``.

    The scores and candidates of ``encoders['InfoNCE']`` are also written for the figures, unless
    files of a larger scale are already there (:data:`_RANK`: digits never replaces paper scale).
    """
    diag = _read_diag(results)
    out: dict[str, Any] = {"pot": {}, "link": {}, "source": {}}
    write_files = _RANK.get(scale, 0) >= _RANK.get(str(diag.get("files_scale", "")), -1)
    for method, ckpt in encoders.items():
        model, cfg, _ = load_encoder(ckpt, device)
        views = Views(
            str(cfg.views),
            dataset.channels,
            dataset.image_size,
            dataset.mean,
            dataset.std,
            cfg.crop_min_scale,
        )
        scores = pot_scores(model, dataset, views, repeats=repeats, device=device)
        out["pot"][method] = pot_summary(scores)
        out["source"][method] = f"{cfg.describe()} (run {cfg.key()})"
        cands = link_candidates(model, dataset, views, pairs=pairs, batches=batches, device=device)
        out["link"][method] = link_summary(cands)
        if method == "InfoNCE" and write_files:
            wdir = Path(results) / "weince"
            atomic_write_text(
                wdir / "pot_scores.csv", "score\n" + "\n".join(repr(float(v)) for v in scores) + "\n"
            )
            import io

            buf = io.BytesIO()
            arrays: dict[str, Any] = {f"batch_{i:03d}": a for i, a in enumerate(cands)}
            np.savez_compressed(buf, **arrays)
            atomic_write_bytes(wdir / "link_candidates.npz", buf.getvalue())
            diag["files_scale"], diag["files_source"] = scale, out["source"][method]
    diag[scale] = out
    atomic_write_text(_diag_path(results), json.dumps(diag, indent=2, default=float))
    return out


# --------------------------------------------------------------------------------------------
# the digits scale (main job)
# --------------------------------------------------------------------------------------------


@dataclass
class DigitsSummary:
    """What :func:`run_digits` did and found."""

    seconds: float
    trained: int
    cached: int
    failed: list[str]
    records: list[Path]
    numbers: dict[str, Any] = field(default_factory=dict)

    def text(self) -> str:
        """A few lines for the terminal."""
        lines = [
            f"digits scale: {self.trained} runs trained, {self.cached} cached, {len(self.failed)} failed "
            f"in {self.seconds:.0f} s; {len(self.records)} files written"
        ]
        lines += [f"  {k}: {v}" for k, v in self.numbers.items()]
        return "\n".join(lines)


def run_digits(
    results: str | Path = "results", jobs: int = 2, scale: str = "default", progress: bool = False
) -> DigitsSummary:
    """The digits scale of the real-data claims (see the module docstring); resumable and cached.

    Args:
        results: the main job's results folder.
        jobs: parallel training processes (one torch thread each).
        scale: ``default`` (about 3 minutes on 2 cores from cold) or ``quick`` (seconds, tests).
        progress: print a line per stage.

    Returns:
        :class:`DigitsSummary`.
    """
    t0 = time.perf_counter()
    rd = _rd(results)
    quick = scale == "quick"
    fh, ft = rd / DIGITS_HCL, rd / DIGITS_TWO
    hcl, two = digits_runs(scale)
    todo = [
        (f, c)
        for f, cs, done in ((fh, hcl, store.done_keys(fh)), (ft, two, store.done_keys(ft)))
        for c in cs
        if c.resolved().key() not in done
    ]
    cached = len(hcl) + len(two) - len(todo)
    if progress:
        print(f"digits: {len(todo)} runs to train, {cached} cached", flush=True)
    probe = {"evaluate": ["probe", "knn"]}
    # the two-view runs (the slowest, and evaluated after training) first, for load balance
    work = [(f, c, probe if f == ft else {}) for f, c in sorted(todo, key=lambda fc: fc[0] != ft)]
    outs = _train_many(work, jobs=jobs, options={"checkpoint_every": 10})
    failed = [o["key"] for o in outs if o["status"] == "failed"]
    dataset = load_digits_dataset()
    finals = {
        c.method: store.final_checkpoint_file(ft, c.resolved().key()) for c in two if c.seed == two[0].seed
    }
    for c in two:
        ck = store.final_checkpoint_file(ft, c.resolved().key())
        if ck.is_file():
            evaluate_checkpoint(
                ck, metrics=("probe", "knn"), dataset=dataset, results=ft, progress=False, skip_existing=True
            )
    if progress:
        print(f"digits: evaluations done at {time.perf_counter() - t0:.0f} s", flush=True)
    if all(p.is_file() for p in finals.values()):
        diag = _read_diag(results).get("digits")
        srcs = {
            m: f"(run {c.resolved().key()})" for m, c in ((c.method, c) for c in two if c.seed == two[0].seed)
        }
        fresh = diag is None or any(
            not str(diag.get("source", {}).get(m, "")).endswith(s) for m, s in srcs.items()
        )
        if fresh:
            _diagnose(
                results,
                "digits",
                finals,
                dataset,
                repeats=2 if quick else 8,
                pairs=128,
                batches=2 if quick else 8,
            )
    records = write_records(results, digits_scale=scale)
    numbers = _digits_numbers(results, scale)
    return DigitsSummary(time.perf_counter() - t0, len(todo), cached, failed, records, numbers)


def _digits_numbers(results: str | Path, scale: str) -> dict[str, str]:
    dh, _, ev = digits_tables(_rd(results), scale)
    s = final_summary(dh)
    out = {}
    for _, r in s.iterrows() if len(s) else []:
        out[f"{r['method']} beta={r['beta']:g}"] = (
            f"NCM {100 * r['ncm_acc_mean']:.1f} ± {100 * np.nan_to_num(r['ncm_acc_std']):.1f} %, "
            f"etf_mean {r['etf_mean_mean']:.3f}, spectrum_min {r['spectrum_min_mean']:.2f}"
        )
    for m, v in probe_values(ev, "probe_test_top1").items():
        out[f"{m} linear probe"] = (
            f"{np.mean(v):.1f} ± {np.std(v, ddof=1) if len(v) > 1 else 0:.1f} % (n={len(v)})"
        )
    diag = _read_diag(results).get("digits", {})
    for m, d in diag.get("pot", {}).items():
        out[f"POT xi_hat ({m} encoder)"] = f"{d['xi']:.3f} (n_exceed {d['n_exceed']})"
    for m, d in diag.get("link", {}).items():
        out[f"lambda_hat ({m} encoder)"] = f"{d['lam_hat']:.3f} (p_boundary {d['p_boundary']:.2g})"
    return out


# --------------------------------------------------------------------------------------------
# paper scale
# --------------------------------------------------------------------------------------------


def run_group(
    group: str,
    *,
    root: str | None,
    results: str | Path = "results",
    device: str = "cuda",
    scale: str = "paper",
    dry_run: bool = False,
) -> int:
    """Train the runs of a claim group (resumable), evaluate, and write the records; 0 on success."""
    if group not in CLAIM_GROUPS:
        raise ValueError(f"group must be one of {CLAIM_GROUPS}, got {group!r}")
    precision = "bf16" if device == "cuda" else "fp32"
    g = group_runs(group, scale, precision=precision)
    rd = _rd(results)
    options = {"checkpoint_every": 10, "channels_last": device == "cuda"}
    runs = list(g.runs)
    if g.source is not None:  # R4: started from the final encoder of the r1-r3 HSCL beta=10 run
        skey = g.source[1].resolved().key()
        runs = [(f, c.replace(init="nc", init_from=f"{skey}@{g.source[1].epochs}")) for f, c in runs]
    if dry_run:
        for folder, c in ([g.source] if g.source else []) + runs:
            print(f"{rd / folder}: {c.describe()} (run {c.resolved().key()})")
        return 0
    if root is None:
        raise ValueError(f"--root is required for claim group {group!r} (the folder holding the datasets)")
    status = 0
    if g.source is not None:  # R4: the near-NC encoder is the r1-r3 HSCL beta=10 run
        sfold, scfg = g.source
        outs = _train_many([(rd / sfold, scfg)], jobs=1, device=device, root=root, options=options)
        init = store.final_checkpoint_file(rd / sfold, outs[0]["key"])
        if not init.is_file():
            raise ValueError(
                f"the near-NC source run {outs[0]['key']} did not finish ({outs}); cannot start R4"
            )
        for f, c in ((rd / f, c) for f, c in runs):
            o = _train_many(
                [(f, c)], jobs=1, device=device, root=root, options={**options, "init_path": str(init)}
            )
            status |= int(o[0]["status"] == "failed")
    else:
        outs = _train_many(
            [(rd / f, c) for f, c in g.runs], jobs=1, device=device, root=root, options=options
        )
        status |= int(any(o["status"] == "failed" for o in outs))
    if group == "w1-w3":
        _finish_weince(g, rd, results, root, device, scale)
    write_records(results)
    return status


def _finish_weince(g: Any, rd: Path, results: str | Path, root: str | None, device: str, scale: str) -> None:

    first = g.runs[0][1]
    dataset = load_dataset(first.dataset, root)
    finals = {}
    for folder, c in g.runs:
        ck = store.final_checkpoint_file(rd / folder, c.resolved(dataset.num_classes).key())
        if ck.is_file():
            evaluate_checkpoint(ck, dataset=dataset, results=rd / folder, device=device, skip_existing=True)
            if c.seed == first.seed:
                finals[c.method] = ck
    if "InfoNCE" in finals:
        _diagnose(
            results,
            scale,
            finals,
            dataset,
            repeats=64 if scale == "paper" else 1,
            pairs=256 if scale == "paper" else 8,
            batches=8 if scale == "paper" else 1,
            device=device,
        )
