"""Command line of the synthetic experiments: ``python -m synthetic {sweep,summary,claims,grids}``.

Examples::

    python -m synthetic grids                                   # list the shipped claim grids
    python -m synthetic sweep s1_scl_hscl_nc --results results/claims
    python -m synthetic sweep synthetic/grids/*.toml --results results/claims --jobs 2
    python -m synthetic sweep s3_hucl_beta --scale paper --scheduler tcp://10.0.0.5:8786
    python -m synthetic sweep s3_hucl_beta --scale paper --cluster slurm --partition cpu --jobs 4
    python -m synthetic sweep --method SCL --beta 0 2 5 --seeds 3 --epochs 50   # quick grid
    python -m synthetic summary results/claims/s1_scl_hscl_nc [--csv | --markdown]
    python -m synthetic claims results/claims

Exit status: 0 done; 1 some runs failed (now, or before and not retried); 2 bad arguments or a
results folder that cannot be used (a file, read-only, locked by another sweep, an unreachable
scheduler; one line on stderr); 130 interrupted by Ctrl-C, 143 by SIGTERM (the finished runs are
stored: the same command resumes).
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import warnings
from pathlib import Path

from synthetic.claims.criteria import CLAIMS
from synthetic.claims.records import claim_details, evaluate_claims
from synthetic.store.errors import StoreError
from synthetic.store.folders import atomic_write_text
from synthetic.store.read import load_results, missing_line
from synthetic.store.summary import format_summary, format_summary_csv, format_summary_markdown, summarize
from synthetic.store.tables import StoreWarning
from synthetic.sweep.backends import SlurmOptions, make_slurm_cluster
from synthetic.sweep.errors import SweepInterrupted, TerminationRequested
from synthetic.sweep.grids import check_fields, grid_files, load_grid
from synthetic.sweep.progress import SweepProgress
from synthetic.sweep.run import estimate_grid, run_sweep

__all__ = ["build_parser", "main"]

# Quick-grid flags: (flag, RunConfig field, type). Each takes one or more values; several values
# make an axis of the grid. With a grid file they override the file's values.
_GRID_FLAGS = [
    ("--method", "method", str, "loss: SCL HSCL UCL HUCL InfoNCE WeiNCE (beta picks SCL/HSCL, UCL/HUCL)"),
    ("--beta", "beta", float, "hardness beta (0 = SCL/UCL, > 0 = HSCL/HUCL)"),
    ("--tau", "tau", float, "temperature tau > 0"),
    ("--psi", "psi", str, "psi form: mean sum triplet"),
    ("--estimator", "estimator", str, "negatives estimator: expectation sampled"),
    ("--num-negatives", "num_negatives", int, "K negatives per pair (sampled estimator)"),
    ("--batch-size", "batch_size", int, "mini-batch size (0 = full batch)"),
    ("--lr", "lr", float, "Adam learning rate"),
    ("--normalization", "normalization", str, "feature normalisation: none ball sphere"),
    ("--positives", "positives", str, "positive pairs: label noise"),
    ("--noise-std", "noise_std", float, "std of noise positives"),
    ("--encoder", "encoder", str, "encoder: free linear mlp"),
    ("--num-classes", "num_classes", int, "number of latent classes C"),
    ("--n-per-class", "n_per_class", int, "training samples per class"),
    ("--input-dim", "input_dim", int, "input dimension D of the Gaussian mixture"),
    ("--d", "d", int, "embedding dimension (default C-1)"),
    ("--sigma", "sigma", float, "within-class input noise std"),
    ("--separation", "separation", float, "norm of the class centres"),
]


def _parse_set(items: list[str]) -> dict:
    """``FIELD=V1[,V2...]`` -> {field: value or [values]} with TOML-like value parsing."""
    import tomllib

    out = {}
    for item in items:
        if "=" not in item:
            raise ValueError(f"--set expects FIELD=VALUE, got {item!r}")
        field, raw = item.split("=", 1)
        vals = []
        for part in raw.split(","):
            try:
                vals.append(tomllib.loads(f"v = {part}")["v"])
            except tomllib.TOMLDecodeError:
                vals.append(part)  # a bare string
        out[field.strip()] = vals if len(vals) > 1 else vals[0]
    return out


def build_parser() -> argparse.ArgumentParser:
    """The argparse parser of ``python -m synthetic``."""
    p = argparse.ArgumentParser(
        prog="python -m synthetic",
        description="Synthetic contrastive-learning experiments (latent-class data, Adam): "
        "resumable sweeps, seed summaries and the verdicts of claims S1-S4, R1s-R3s (the synthetic "
        "analogues of R1-R3), R4 and R5, and the open problem O2.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=__doc__.split("Examples::", 1)[1],
    )
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")

    s = sub.add_parser(
        "sweep",
        help="run a grid of runs (skips finished ones; safe to kill and restart)",
        description="Run every run of one or more grids that is not stored yet. Each finished run "
        "is written atomically to RESULTS/<grid>/runs/<key>.csv; the consolidated table goes to "
        "RESULTS/<grid>/table.csv. Without GRID, a quick grid is built from the flags below.",
    )
    s.add_argument(
        "grids",
        nargs="*",
        metavar="GRID",
        help="grid TOML file(s) or shipped grid name(s) (see `python -m synthetic grids`)",
    )
    s.add_argument(
        "--results",
        default="results",
        metavar="DIR",
        help="parent results folder; each grid writes into DIR/<grid name>[-<scale>] (default: results)",
    )
    s.add_argument(
        "--jobs",
        type=int,
        default=1,
        metavar="N",
        help="local worker processes (joblib), -1 = all cores; with --cluster: SLURM jobs or local "
        "dask workers (default 1)",
    )
    s.add_argument(
        "--scheduler",
        default=None,
        metavar="ADDRESS",
        help="dask.distributed scheduler address (e.g. tcp://host:8786): run there instead of locally",
    )
    s.add_argument(
        "--connect-timeout",
        type=float,
        default=10.0,
        metavar="S",
        help="seconds to wait for the dask scheduler or cluster before giving up (default 10)",
    )
    s.add_argument(
        "--wait",
        nargs="?",
        type=float,
        const=-1.0,
        default=None,
        metavar="S",
        help="when another sweep holds the results folder's lock, wait for it (at most S seconds if "
        "given) instead of stopping at once",
    )
    s.add_argument(
        "--retry-failed",
        action="store_true",
        help="also rerun the runs recorded as failed by an earlier sweep (RESULTS/<grid>/failures/); "
        "without it they are reported and left alone",
    )
    s.add_argument(
        "--no-estimate",
        action="store_true",
        help="do not measure and print the sweep's cost before it starts (by default, on local "
        "sweeps, one task per shape is trained for 0 epochs, 8 and 16 steps and the line 'cost "
        "estimate: ... core-hours ..., about ... wall on N worker(s)' is printed; an upper bound when "
        "runs settle early)",
    )
    s.add_argument(
        "--estimate-only",
        action="store_true",
        help="measure and print the cost of every run of each grid (stored or not) as above, then "
        "stop: only the probe trains (a few steps per shape) and nothing is stored",
    )
    cl = s.add_argument_group(
        "cluster",
        "Run on a dask cluster started here: --cluster slurm submits SLURM jobs through dask-jobqueue "
        "(pip install 'hardneg-collapse[cluster]'); --cluster local starts a dask LocalCluster. "
        "With --cluster, --jobs is the number of SLURM jobs (or local workers).",
    )
    cl.add_argument(
        "--cluster",
        choices=("slurm", "local"),
        default=None,
        help="start a dask cluster of this kind and run the sweep on it",
    )
    cl.add_argument(
        "--partition", "--queue", dest="partition", default=None, help="SLURM partition (queue), #SBATCH -p"
    )
    cl.add_argument("--cores", type=int, default=1, metavar="N", help="CPU cores per SLURM job (default 1)")
    cl.add_argument(
        "--slurm-processes",
        type=int,
        default=None,
        metavar="N",
        help="dask worker processes per SLURM job (default: one per core)",
    )
    cl.add_argument("--memory", default="4GB", help="memory per SLURM job, e.g. 16GB (default 4GB)")
    cl.add_argument(
        "--walltime", default="01:00:00", help="time limit per SLURM job, HH:MM:SS (default 01:00:00)"
    )
    cl.add_argument("--account", default=None, help="SLURM account to charge, #SBATCH -A")
    cl.add_argument(
        "--slurm-directive",
        dest="slurm_directives",
        action="append",
        default=[],
        metavar="D",
        help="extra #SBATCH directive, e.g. --slurm-directive=--gres=gpu:1 (repeatable)",
    )
    cl.add_argument(
        "--slurm-prologue",
        dest="slurm_prologue",
        action="append",
        default=[],
        metavar="CMD",
        help="shell line run in each job before the worker starts, e.g. 'module load python' (repeatable)",
    )
    cl.add_argument(
        "--slurm-interface",
        default=None,
        metavar="NAME",
        help="network interface the dask scheduler and workers use, e.g. ib0 (default: the host's default)",
    )
    cl.add_argument(
        "--print-job-script",
        action="store_true",
        help="print the SLURM job script that --cluster slurm would submit, and exit",
    )
    s.add_argument(
        "--threads",
        type=int,
        default=1,
        metavar="N",
        help="torch threads per run (default 1; keep it fixed across restarts: results are "
        "bit-identical only at equal thread counts)",
    )
    s.add_argument(
        "--scale",
        default="default",
        metavar="NAME",
        help="grid scale: default, quick, or a [scale.NAME] of the file such as paper (default: default)",
    )
    s.add_argument("--quick", action="store_true", help="smoke-test scale, same as --scale quick")
    s.add_argument(
        "--no-stack",
        action="store_true",
        help="train each run alone instead of stacking compatible runs in one tensor program "
        "(stacked runs equal single runs only up to float rounding: resume with the same choice)",
    )
    s.add_argument(
        "--epochs",
        type=int,
        default=None,
        metavar="N",
        help="override the number of epochs of every run (a run stored with a smaller budget continues from its stored state, docs/claims.md#extending-a-run)",
    )
    s.add_argument("--seeds", type=int, default=None, metavar="N", help="override the seeds with 0..N-1")
    s.add_argument("--name", default=None, help="results sub-folder name of a quick grid (default: quick)")
    for flag, field, typ, text in _GRID_FLAGS:
        s.add_argument(
            flag,
            dest=f"grid_{field}",
            nargs="+",
            type=typ,
            default=None,
            metavar="V",
            help=f"{text}; several values make an axis",
        )
    s.add_argument(
        "--set",
        dest="set_fields",
        action="extend",
        nargs="+",
        default=[],
        metavar="FIELD=V[,V...]",
        help="set any RunConfig field (comma-separated values make an axis); repeatable",
    )
    prog = s.add_mutually_exclusive_group()
    prog.add_argument(
        "--progress",
        dest="progress",
        action="store_true",
        default=None,
        help="always show the progress bar (default: only on a terminal)",
    )
    prog.add_argument(
        "--no-progress",
        dest="progress",
        action="store_false",
        help="never show the progress bar or progress lines",
    )
    s.add_argument(
        "--progress-every",
        type=float,
        default=30.0,
        metavar="S",
        help="when stderr is not a terminal, print a progress line (runs done / total, failures, "
        "elapsed, ETA) every S seconds (default 30)",
    )

    m = sub.add_parser(
        "summary",
        help="print final-epoch metrics, mean ± std over seeds, per config",
        description="Print the seed-aggregated final-epoch metrics of a results folder "
        "(or of every grid folder below it).",
    )
    m.add_argument("dir", metavar="DIR", help="results folder (with runs/) or a parent of grid folders")
    m.add_argument("--metrics", nargs="+", default=None, metavar="M", help="metric columns to show")
    fmt = m.add_mutually_exclusive_group()
    fmt.add_argument(
        "--csv", action="store_true", help="print CSV (<metric>_mean, <metric>_std columns, full precision)"
    )
    fmt.add_argument("--markdown", action="store_true", help="print a Markdown table with mean ± std cells")

    c = sub.add_parser(
        "claims",
        help="judge claims S1-S4, R1s-R3s, R4, R5 and the open problem O2 from claim-grid results",
        description="Evaluate claims S1-S4, R1s-R3s (the synthetic analogues of the CIFAR claims "
        "R1-R3, the project's design: never a verdict on those), R4, R5 (docs/claims.md) from DIR/<grid>/ "
        "folders written by the shipped claim grids, then the open problem O2 (where Dimensional "
        "Collapse is avoided without NC: the map of every settled setting, docs/open_problems.md); "
        "prints numbers with seed spread. A verdict "
        "reads runs that settled under their grid's convergence rule; a claim with an unsettled "
        "setting is UNDECIDED and names the command that continues it "
        "(docs/claims.md#convergence-and-undecided).",
    )
    c.add_argument("dir", metavar="DIR", help="results folder holding the claim grids' folders")
    c.add_argument("--details", action="store_true", help="also print the per-setting table")
    c.add_argument("--csv", default=None, metavar="FILE", help="also write the verdicts to FILE (CSV)")

    sub.add_parser("grids", help="list the shipped grid files", description="List synthetic/grids/*.toml.")
    return p


def _quick_spec(args, overrides: dict) -> dict:
    axes = {k: (v if isinstance(v, list) else [v]) for k, v in overrides.items()}
    return {"sweep": {"name": args.name or "quick", "auto_hard": True, "axes": axes}}


def _note(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


def _load_results(folder: str):
    """``load_results`` with the left-out runs reported on stderr (instead of as a warning)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", category=StoreWarning)
        table = load_results(folder)
    _report_left_out(table)
    return table


def _report_left_out(table) -> None:
    """Name the runs a table leaves out (bad or missing run files, recorded failures) on stderr."""
    excluded = table.attrs.get("excluded", [])
    failed = table.attrs.get("failed", [])
    missing = table.attrs.get("missing", [])
    if excluded:
        _note(
            f"note: {len(excluded)} incomplete, corrupt or unverified run file(s) left out (the next "
            "sweep sets aside and reruns those it cannot verify):"
        )
        for e in excluded:
            _note(f"  {e}")
    if missing:
        _note(
            f"note: {len(missing)} run(s) missing behind their completion record, left out (n_seeds counts "
            "the runs present; the sweep of their grid trains them again):"
        )
        for m in missing:
            _note(f"  {missing_line(m)}")
    if failed:
        _note(f"note: {len(failed)} failed run(s) left out (see their failures/<key>.json):")
        for f in failed:
            _note(f"  {f}")


def _make_cluster(args):
    """(cluster, closer) for --cluster, or (None, None)."""
    if args.cluster is None:
        return None, None
    if args.jobs < 1:
        raise ValueError(f"--jobs must be >= 1 with --cluster, got {args.jobs}")
    if args.cluster == "local":
        from distributed import LocalCluster

        cluster = LocalCluster(
            n_workers=args.jobs,
            threads_per_worker=1,
            processes=True,
            dashboard_address=None,
            host="127.0.0.1",
        )
        return cluster, cluster.close

    opts = SlurmOptions(
        partition=args.partition,
        cores=args.cores,
        processes=args.slurm_processes,
        memory=args.memory,
        walltime=args.walltime,
        jobs=args.jobs,
        account=args.account,
        directives=tuple(args.slurm_directives),
        prologue=tuple(args.slurm_prologue),
        interface=args.slurm_interface,
    )
    cluster = make_slurm_cluster(opts, threads=args.threads, scheduler_options={"dashboard_address": None})
    if not args.print_job_script:
        cluster.scale(jobs=opts.jobs)
    return cluster, cluster.close


def _sweep(args) -> int:

    if args.epochs is not None and args.epochs < 0:
        raise ValueError(f"--epochs must be >= 0, got {args.epochs}")
    if args.seeds is not None and args.seeds < 1:
        raise ValueError(f"--seeds must be >= 1, got {args.seeds}")
    if args.progress_every < 0:
        raise ValueError(f"--progress-every must be >= 0 seconds, got {args.progress_every}")
    if args.cluster is not None and args.scheduler is not None:
        raise ValueError("give --scheduler or --cluster, not both")
    if args.print_job_script and args.cluster != "slurm":
        raise ValueError("--print-job-script needs --cluster slurm")
    results = Path(args.results)
    if results.exists() and not results.is_dir():
        raise ValueError(f"--results {results} is a file, not a folder")
    scale = "quick" if args.quick else args.scale
    overrides: dict = {}
    for _flag, field, _t, _h in _GRID_FLAGS:
        v = getattr(args, f"grid_{field}")
        if v is not None:
            overrides[field] = v if len(v) > 1 else v[0]
    set_fields = _parse_set(args.set_fields)
    check_fields(list(set_fields), "--set")
    overrides.update(set_fields)
    if args.epochs is not None:
        overrides["epochs"] = args.epochs
    if args.seeds is not None:
        overrides["seed"] = list(range(args.seeds)) if args.seeds > 1 else 0
    if args.grids:
        grids = [load_grid(g, scale=scale, overrides=overrides) for g in args.grids]
    else:
        if not overrides:
            raise ValueError("give a GRID file or quick-grid flags (e.g. --method SCL --beta 0 2)")
        # the flags build the grid; like with a grid file they are also applied after the scale,
        # so --quick does not replace --epochs / --seeds / --set values
        grids = [load_grid(_quick_spec(args, overrides), scale=scale, overrides=overrides)]
    if args.estimate_only:
        for g in grids:
            print(f"grid {g.name} ({g.source}, scale {scale}): {len(g)} runs", flush=True)
            workers = args.jobs if args.jobs > 0 else (os.cpu_count() or 1)
            cost = estimate_grid(g, jobs=workers, threads=args.threads or 1, stack=not args.no_stack)
            print(cost.text(), flush=True)
        return 0
    cluster, close_cluster = _make_cluster(args)
    if args.print_job_script:
        try:
            print(cluster.job_script())
        finally:
            close_cluster()
        return 0
    mode = None if args.progress is None else ("bar" if args.progress else "off")
    bar = SweepProgress(sum(len(g) for g in grids), mode=mode, interval=args.progress_every)
    rc = 0
    try:
        for g in grids:
            folder = results / (g.name if scale == "default" else f"{g.name}-{scale}")
            print(f"grid {g.name} ({g.source}, scale {scale}): {len(g)} runs -> {folder}", flush=True)
            summary = run_sweep(
                g,
                folder,
                n_jobs=1 if cluster is not None else args.jobs,
                scheduler=args.scheduler,
                cluster=cluster,
                connect_timeout=args.connect_timeout,
                stack=not args.no_stack,
                progress=bar,
                threads=args.threads,
                retry_failed=args.retry_failed,
                estimate=not args.no_estimate,
                wait=False if args.wait is None else (True if args.wait < 0 else args.wait),
            )
            print(summary.format(), flush=True)
            if not summary.ok:
                rc = 1
    finally:
        bar.close()
        if close_cluster is not None:
            close_cluster()
    return rc


def _summary(args) -> int:

    table = _load_results(args.dir)
    summary = summarize(table, metrics=args.metrics)
    if args.csv:
        sys.stdout.write(format_summary_csv(summary))
    elif args.markdown:
        print(format_summary_markdown(summary))
    else:
        print(format_summary(summary))
    return 0


def _claims(args) -> int:
    import pandas as pd

    table = _load_results(args.dir)
    verdicts = evaluate_claims(table)
    for _, r in verdicts.iterrows():
        # a scaled grid folder (e.g. s3_hucl_beta-paper) is judged apart and named
        where = f" [{r['grid']}]" if r["grid"] and r["grid"] != CLAIMS.get(r["claim"], ("", ""))[1] else ""
        print(
            f"{r['claim']}{where}: {r['verdict'].upper()}  ({r['n_runs']} runs)\n  {r['statement']}\n  {r['measured']}\n"
        )
    left_out = sum(len(table.attrs.get(k, [])) for k in ("excluded", "failed", "missing"))
    if left_out:
        print(f"({left_out} run(s) left out as incomplete, corrupt, failed or missing: listed on stderr)\n")
    if args.details:
        details = claim_details(table)
        with pd.option_context("display.max_columns", None, "display.width", 250, "display.max_rows", None):
            print(details.to_string(index=False))
    if args.csv:
        atomic_write_text(args.csv, verdicts.to_csv(index=False, lineterminator="\n"))
    return 0


def _grids(args) -> int:
    import tomllib

    for name, path in grid_files().items():
        meta = tomllib.loads(path.read_text(encoding="utf-8")).get("sweep", {})
        print(f"{name:24s} {meta.get('claim', ''):4s} {meta.get('description', '')}")
    return 0


def _on_sigterm(signum, frame) -> None:

    raise TerminationRequested()


def _one_line(exc: BaseException) -> str:
    return " ".join(str(exc).split()) or type(exc).__name__


def main(argv: list[str] | None = None) -> int:
    """Entry point; returns the exit status (see the module docstring)."""
    parser = build_parser()
    args = parser.parse_args(argv)
    command = {"sweep": _sweep, "summary": _summary, "claims": _claims, "grids": _grids}[args.command]
    old_term = None
    if args.command == "sweep":
        try:
            old_term = signal.signal(signal.SIGTERM, _on_sigterm)
        except ValueError:  # not the main thread (e.g. called from a test runner thread)
            old_term = None
    try:
        return command(args)
    except SweepInterrupted as exc:
        _note(
            f"interrupted ({exc.signal_name}): {exc.stored} of {exc.total} runs stored in {exc.folder}; "
            "run the same command again to resume"
        )
        return 143 if exc.signal_name == "SIGTERM" else 130
    except KeyboardInterrupt:
        _note("interrupted; nothing half-written is left behind (run the same command again to resume)")
        return 130
    except BrokenPipeError:
        # the reader of our output went away (e.g. `| head`): stop quietly
        try:
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, sys.stdout.fileno())
        except OSError:
            pass
        return 2
    except (StoreError, ValueError, OSError, ImportError) as exc:
        parser.exit(2, f"error: {_one_line(exc)}\n")
    finally:
        if old_term is not None:
            signal.signal(signal.SIGTERM, old_term)
    return 0


if __name__ == "__main__":
    sys.exit(main())
