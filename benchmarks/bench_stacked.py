"""Throughput of R stacked runs (``synthetic.stacked.train_stacked``) vs R sequential ``train_run``.

DESIGN.md target: >= 4x the throughput of R sequential runs at R = 16 on 2 CPU cores.

Usage::

    python -m benchmarks.bench_stacked                 # R = 16, 2 threads, three scenarios
    python -m benchmarks.bench_stacked --threads 1 --epochs 10 --runs 8

Scenarios (C = 10, d = 9, N = 500, HSCL with beta in {1, 2, 3, 4} over 16 seeds, expectation
estimator, sphere normalisation, metrics at the first and last epoch only):

* ``free b=64``: free features, mini-batches of 64 (7 steps/epoch): overhead-bound per run;
* ``mlp b=64``: 2-layer MLP encoder (D = 64, hidden 128), mini-batches of 64;
* ``free full``: free features, full batch of 500: each step is a (500 x 500) similarity program,
  already compute/memory-bound for a single run, so stacking gains little here.

Both sides run with the same ``torch.set_num_threads``; the sequential side trains every one of the
R runs. Prints seconds and the throughput ratio (sequential time / stacked time) per scenario.
"""

from __future__ import annotations

import argparse
import os
import time

import torch

from synthetic.config import RunConfig
from synthetic.stacked import train_stacked
from synthetic.train import train_run

SCENARIOS = {
    "free b=64": dict(encoder="free", batch_size=64),
    "mlp b=64": dict(encoder="mlp", batch_size=64),
    "free full": dict(encoder="free", batch_size=0),
}


def _configs(runs: int, epochs: int, **kw) -> list[RunConfig]:
    base = RunConfig(
        method="HSCL",
        beta=1.0,
        epochs=epochs,
        eval_every=epochs,
        num_classes=10,
        n_per_class=50,
        normalization="sphere",
        **kw,
    )
    return [base.replace(seed=s, beta=float(1 + s % 4)) for s in range(runs)]


def main(argv=None) -> None:
    """Run the benchmark and print one line per scenario."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--runs", type=int, default=16, help="R, the number of runs stacked (default 16)")
    ap.add_argument("--epochs", type=int, default=20, help="epochs per run (default 20)")
    ap.add_argument("--threads", type=int, default=2, help="torch threads for both sides (default 2)")
    ap.add_argument(
        "--scenario", choices=sorted(SCENARIOS), action="append", help="scenario(s) to run (default: all)"
    )
    args = ap.parse_args(argv)
    if args.runs < 1 or args.epochs < 1 or args.threads < 1:
        raise ValueError("--runs, --epochs and --threads must be >= 1")
    torch.set_num_threads(args.threads)
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print(f"R = {args.runs}, epochs = {args.epochs}, torch threads = {args.threads}, load average {load:.2f}")
    # Warm-up (imports, allocator, Adam's first step).
    train_stacked(_configs(2, 1, batch_size=64))
    train_run(_configs(1, 1, batch_size=64)[0])
    for name in args.scenario or list(SCENARIOS):
        cfgs = _configs(args.runs, args.epochs, **SCENARIOS[name])
        t0 = time.perf_counter()
        for c in cfgs:
            train_run(c)
        t_seq = time.perf_counter() - t0
        t0 = time.perf_counter()
        train_stacked(cfgs)
        t_stack = time.perf_counter() - t0
        print(
            f"{name:>10}: sequential {t_seq:7.2f} s, stacked {t_stack:7.2f} s, "
            f"throughput ratio {t_seq / t_stack:5.2f}x"
        )


if __name__ == "__main__":
    main()
