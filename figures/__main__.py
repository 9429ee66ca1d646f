"""``python -m figures``: the main job -- theory checks, synthetic grids, digits runs, every figure, the report.

Run ``python -m figures --help`` for the flags. What it does, stage by stage, is described in
:mod:`figures.pipeline.stages`; the report in :mod:`figures.report.assemble`.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

__all__ = ["default_jobs", "build_parser", "main"]

_EPILOG = """\
stages (one progress bar across all of them; one-line progress messages when stderr is not a terminal):
  theory     the theory checks T1-T8 and the W-law (python -m theory), and the theory tables of the
             figures (Harris gap, HUCL at NC, cvxpy Gram matrices); cached under RESULTS/cache/figures/
             keyed by scale, seed and a hash of the theory sources: a warm run reuses them. Each
             cached file has a completeness record (rows, sha256); a truncated, empty, garbage or
             unrecorded one is named in the stage's line, moved to the entry's quarantine/ folder
             and recomputed
  synthetic  trains the synthetic claim grids of S1-S4, R1s-R3s, R4, R5 at the chosen scale into
             RESULTS/synthetic/<grid>[-<scale>] (as `python -m synthetic sweep GRID --results
             RESULTS/synthetic` does; stored runs are never trained again), then the synthetic
             package judges every stored scale; the figures draw, per grid, the largest scale stored
  realdata   the real-data digits scale (`python -m realdata digits`; quick at --scale quick, else
             default): trains or reuses the digits runs and writes the records R1-R5, W1-W4
             (RESULTS/records), the tables (RESULTS/tables) and the WeiNCE score files
             (RESULTS/weince); the CIFAR-scale claims read NOT RUN with their GPU command unless
             `python -m realdata claims ...` stored their results there
  weince     the WeiNCE noise-floor simulation and the W5 verdict (cached); POT and link-selection
             tables from RESULTS/weince/pot_scores.csv (column score) and
             RESULTS/weince/link_candidates.npz when present
  pickup     claim records RESULTS/records/*.json (theory.claims JSON) and tables
             RESULTS/tables/<table>.csv, from the realdata stage or produced elsewhere
  render     every figure its data allows: OUT/<id>.png (150 dpi) and OUT/<id>.pdf; the others are
             listed as not available, with the reason and the command that produces their data
  report     OUT/report.md and OUT/report.html (self-contained, opens offline)
With --jobs 1 (the default at --scale quick) the stages run one after the other; with more (the
default elsewhere: the usable cores), theory, synthetic and realdata run at the same time (weince
after realdata, pickup after both trainers, then render and report).

exit status: 0 when every stage ran and no theory check failed; 1 when a stage failed or a check
FAILed (the report is still written and names it); 2 for a usage error.

examples:
  python -m figures                               # default scale, results/ -> results/figures/
  python -m figures --scale quick --out /tmp/fig  # smoke test (about a minute from cold)
  python -m figures --only spectrum_scl S3        # one figure and every figure of claim S3
  python -m figures --list                        # the figure ids, their claims and tables
"""


def default_jobs(scale: str) -> int:
    """The default of ``--jobs``: 1 at the quick scale, else the CPU cores this process may use."""
    if scale == "quick":
        return 1
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # no sched_getaffinity (macOS, Windows)
        return max(1, os.cpu_count() or 1)


def build_parser() -> argparse.ArgumentParser:
    """The argparse parser of ``python -m figures``."""
    p = argparse.ArgumentParser(
        prog="python -m figures",
        description="The main job of the project: run (or reuse from the cache and the stores) the theory "
        "checks, the synthetic claim grids, the real-data digits scale and the WeiNCE diagnostics, "
        "pick up results produced elsewhere, render every figure the data allows and write the "
        "claims report (report.md, report.html).",
        epilog=_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument(
        "--scale",
        choices=("quick", "default", "paper"),
        default="default",
        help="size of the computations: quick (theory --quick, small Monte Carlo, the synthetic "
        "grids' quick scale, the digits quick scale: about a minute, for tests), default (the "
        "full theory checks, the authors' 12 000 noise-floor replications, the grids' default "
        "scale, the digits default scale) or paper (larger Monte Carlo samples, the grids' paper "
        "scale; digits at the default scale); the figures draw each grid's largest stored "
        "scale (default: default)",
    )
    p.add_argument(
        "--only",
        nargs="+",
        metavar="ID",
        default=None,
        help="render only these figures: figure ids (see --list) or claim ids (every figure "
        "showing that claim); the synthetic and realdata stages then train only what a chosen "
        "figure reads; the report still lists every claim (judged from what is stored)",
    )
    p.add_argument(
        "--results",
        default="results",
        metavar="DIR",
        help="results folder the stages train into and read, holding the cache (default: results)",
    )
    p.add_argument(
        "--out",
        default=None,
        metavar="DIR",
        help="output folder of the figures and the report (default: RESULTS/figures, i.e. results/figures)",
    )
    p.add_argument(
        "--jobs",
        type=int,
        default=None,
        metavar="N",
        help="worker processes of the synthetic runs, the digits runs and the rendering; with more "
        "than 1 the theory, synthetic and realdata stages also run at the same time (1: everything "
        "in this process, one stage after the other). Default: 1 at --scale quick (starting "
        f"workers costs more than it saves there), else the CPU cores this process may use ({default_jobs('default')} here)",
    )
    p.add_argument(
        "--scheduler",
        default=None,
        metavar="ADDR",
        help="dask.distributed scheduler address (tcp://host:8786): the synthetic runs train on "
        "that cluster instead of local processes (the digits runs train locally)",
    )
    p.add_argument(
        "--seed",
        type=int,
        default=0,
        metavar="S",
        help="seed of the theory checks and Monte Carlo producers (default 0); part of the cache key",
    )
    p.add_argument(
        "--refresh",
        action="store_true",
        help="ignore the cache: recompute the cached stages and overwrite their entries",
    )
    p.add_argument(
        "--list",
        action="store_true",
        help="list the figure ids with their claims and input tables, then exit",
    )
    prog = p.add_mutually_exclusive_group()
    prog.add_argument(
        "--progress",
        dest="progress",
        action="store_true",
        default=None,
        help="always draw the progress bar (default: only when stderr is a terminal; otherwise "
        "one-line progress messages)",
    )
    prog.add_argument(
        "--no-progress",
        dest="progress",
        action="store_false",
        help="no progress bar and no progress messages",
    )
    return p


def _list(stream=None) -> None:
    # lazy: --help and --list parse without loading matplotlib, torch and the pipeline
    from figures.plots import registry

    stream = sys.stdout if stream is None else stream
    specs = registry.all_figures()
    width = max(len(s.id) for s in specs)
    for s in specs:
        tables = "; ".join(
            f"{n.name}({', '.join(n.columns)})" + ("" if n.required else " optional") for n in s.needs
        )
        print(f"{s.id:{width}}  [{', '.join(s.claims)}]  {s.title}", file=stream)
        print(f"{'':{width}}  tables: {tables}", file=stream)


def main(argv: list[str] | None = None) -> int:
    """Entry point; returns the exit status."""
    parser = build_parser()
    args = parser.parse_args(argv)
    argv = list(sys.argv[1:] if argv is None else argv)
    if args.jobs is None:
        args.jobs = default_jobs(args.scale)
    if args.jobs < 1:
        parser.error(f"--jobs must be >= 1, got {args.jobs}")
    if args.seed < 0:
        parser.error(f"--seed must be >= 0, got {args.seed}")
    if args.list:
        _list()
        return 0
    results = Path(args.results)
    if results.exists() and not results.is_dir():
        parser.error(f"--results must be a folder, got the file {results}")
    out = Path(args.out) if args.out is not None else results / "figures"
    if out.exists() and not out.is_dir():
        parser.error(f"--out must be a folder, got the file {out}")
    # lazy: --help and --list parse without loading matplotlib, torch and the pipeline
    from figures.plots import registry

    try:
        figures = registry.select(args.only)
    except ValueError as exc:
        parser.error(str(exc))
    # lazy: --help and --list parse without loading matplotlib, torch and the pipeline
    from figures.pipeline.context import Context

    # lazy: --help and --list parse without loading matplotlib, torch and the pipeline
    from figures.pipeline.progress import Progress

    # lazy: --help and --list parse without loading matplotlib, torch and the pipeline
    from figures.pipeline.runner import run_stages

    # lazy: --help and --list parse without loading matplotlib, torch and the pipeline
    from figures.pipeline.stages import default_stages

    bar = args.progress if args.progress is not None else None
    progress = Progress(0, bar=bar, quiet=args.progress is False)
    ctx = Context(
        scale=args.scale,
        results=results,
        out=out,
        figures=figures,
        jobs=args.jobs,
        scheduler=args.scheduler,
        seed=args.seed,
        refresh=args.refresh,
        progress=progress,
        argv=argv,
        only=args.only is not None,
    )
    t0 = time.perf_counter()
    try:
        status = run_stages(ctx, default_stages())
    except KeyboardInterrupt:
        progress.close()
        print("\ninterrupted; cached stages are kept, the same command resumes from them", file=sys.stderr)
        return 130
    progress.close()
    for s in ctx.stages:
        print(f"{s.name:10} {s.status:7} {s.seconds:6.1f} s  {s.detail}")
    n = {k: sum(f.status == k for f in ctx.rendered) for k in ("rendered", "not available", "failed")}
    print(
        f"figures: {n['rendered']} rendered, {n['not available']} not available, {n['failed']} failed -> {out}"
    )
    for kind in ("html", "md", "failed"):
        if kind in ctx.report_paths:
            print(f"report: {ctx.report_paths[kind]}")
    print(f"total {time.perf_counter() - t0:.1f} s, exit status {status}")
    return status


if __name__ == "__main__":
    sys.exit(main())
