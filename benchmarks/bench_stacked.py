"""Throughput of the engine's plan (stacked or sequential groups) against R runs one by one.

The performance targets (CONTRIBUTING.md#performance-work): R runs stacked in one tensor program >= 4x the throughput of R sequential runs
(R = 16) where batches are small, and never slower than sequential. ``synthetic.engine.plan.plan``
decides per group whether to stack (a modelled cost); this benchmark measures, in one run and on
the same machine state, for each scenario:

* ``sequential``: every run alone (``train_runs([c])``, the R = 1 case of the engine);
* ``stacked``: all R runs in one program (``train_runs(configs)``), whatever the plan says;
* ``planned``: what the sweep does (``plan`` then ``train_group``);

and prints the throughput ratios ``sequential / stacked`` and ``sequential / planned``. Timings
are the minimum over ``--repeats`` interleaved repetitions (the machine is shared). Targets,
checked on the planned ratio: >= 4x for the small-batch scenarios whose step is overhead-bound,
and >= 1x elsewhere (free features with many samples have small batches but an Adam update of all
their N d parameters at every step, so their step is not overhead-bound) -- where the plan runs a group sequentially both sides execute the same code, so the
check allows the timing noise of identical programs (``--noise``, default 5 %). The exit status
is 1 when a target is missed.

Usage::

    python -m benchmarks.bench_stacked                  # R = 16, 2 threads, every scenario
    python -m benchmarks.bench_stacked --threads 1 --scenario "free b=64"
"""

from __future__ import annotations

import argparse
import os
import sys
import time

import torch

from synthetic.engine.config import RunConfig
from synthetic.engine.plan import plan
from synthetic.engine.train import train_group, train_runs

#: name -> (config fields, epochs, runs R, small-batch target applies)
SCENARIOS: dict[str, tuple[dict, int, int, bool]] = {
    "free b=64": (dict(encoder="free", batch_size=64, num_classes=10, lr=0.05), 20, 16, True),
    "mlp b=64": (dict(encoder="mlp", hidden=128, batch_size=64, num_classes=10), 20, 16, True),
    # small batches, but Adam updates all N d = 122 500 free parameters of every run at every step
    "free b=64 C=50": (dict(encoder="free", batch_size=64, num_classes=50, lr=0.05), 3, 16, False),
    "free full N=500": (dict(encoder="free", batch_size=0, num_classes=10, lr=0.05), 40, 16, False),
    "free full N=1000": (dict(encoder="free", batch_size=0, num_classes=20, lr=0.05), 10, 8, False),
    "mlp b=512 C=100": (dict(encoder="mlp", hidden=256, batch_size=512, num_classes=100), 2, 8, False),
}


def _configs(fields: dict, epochs: int, runs: int) -> list[RunConfig]:
    base = RunConfig(
        method="HSCL",
        beta=1.0,
        epochs=epochs,
        eval_every=epochs,
        n_per_class=50,
        normalization="sphere",
        input_dim=64,
        **fields,
    )
    return [base.replace(seed=s, beta=float(1 + s % 4)) for s in range(runs)]


def _sequential(cfgs: list[RunConfig]) -> None:
    for c in cfgs:
        train_runs([c])


def _stacked(cfgs: list[RunConfig]) -> None:
    train_runs(cfgs)


def _planned(cfgs: list[RunConfig]) -> None:
    for g in plan(cfgs):
        train_group(g)


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark; print one line per scenario; return 1 if a target is missed."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--threads", type=int, default=2, help="torch threads for every side (default 2)")
    ap.add_argument(
        "--repeats", type=int, default=3, help="interleaved repetitions, minimum kept (default 3)"
    )
    ap.add_argument(
        "--noise", type=float, default=0.05, help="timing noise allowed on the 1x target (default 0.05)"
    )
    ap.add_argument(
        "--scenario", choices=sorted(SCENARIOS), action="append", help="scenario(s) (default: all)"
    )
    args = ap.parse_args(argv)
    if args.threads < 1 or args.repeats < 1 or not 0 <= args.noise < 1:
        raise SystemExit("--threads and --repeats must be >= 1, --noise in [0, 1)")
    torch.set_num_threads(args.threads)
    load = os.getloadavg() if hasattr(os, "getloadavg") else (float("nan"),) * 3
    print(
        f"torch threads {args.threads}, repeats {args.repeats}, load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}"
    )
    train_runs(_configs(SCENARIOS["free b=64"][0], 1, 2))  # warm-up: imports, allocator, Adam's first step
    missed = []
    for name in args.scenario or list(SCENARIOS):
        fields, epochs, R, small = SCENARIOS[name]
        cfgs = _configs(fields, epochs, R)
        modes = sorted({g.mode for g in plan(cfgs)})
        best = {"sequential": float("inf"), "stacked": float("inf"), "planned": float("inf")}
        for _ in range(args.repeats):
            for side, fn in (("sequential", _sequential), ("stacked", _stacked), ("planned", _planned)):
                t0 = time.perf_counter()
                fn(cfgs)
                best[side] = min(best[side], time.perf_counter() - t0)
        r_stack = best["sequential"] / best["stacked"]
        r_plan = best["sequential"] / best["planned"]
        target = 4.0 if small else 1.0 - args.noise
        ok = r_plan >= target
        if not ok:
            missed.append(name)
        print(
            f"{name:>17} R={R:2d}: sequential {best['sequential']:7.2f} s, stacked {best['stacked']:7.2f} s "
            f"({r_stack:5.2f}x), planned [{'/'.join(modes)}] {best['planned']:7.2f} s ({r_plan:5.2f}x; "
            f"target >= {target:.2f}x: {'ok' if ok else 'MISSED'})",
            flush=True,
        )
    load = os.getloadavg() if hasattr(os, "getloadavg") else (float("nan"),) * 3
    print(f"load average at the end {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}")
    if missed:
        print(f"targets missed: {', '.join(missed)}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
