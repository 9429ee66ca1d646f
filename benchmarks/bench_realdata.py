"""CPU speed of the real-data training step (the performance targets of CONTRIBUTING.md#performance-work, claim W4).

Run: ``python -m benchmarks.bench_realdata [--batch 64 --threads 2 --repeats 5 --out FILE]``.

Measures in one run, with ResNet-18 (CIFAR stem) on random CIFAR-shaped ``uint8`` images, the whole
step of :class:`realdata.training.step.TrainStep` (views on the device, forward, loss, backward, Adam):

1. WeiNCE's step overhead over InfoNCE (two SimCLR views of ``--batch`` images, the WeiNCE
   projector; steps interleaved, median of the paired ratios) -- target ``<= 5 %`` on the CPU at
   batch 64 (and ``<= 1 %`` on a GPU: ``benchmarks/gpu_check.py``);
2. HSCL's loss share of its step (label views, the authors' head, ``K = 256`` sampled negatives,
   beta 5): the objective's forward + backward on detached embeddings over the step;
3. the data/augmentation share: making the two SimCLR views of the batch over the WeiNCE step.

Prints the ratios and the machine load; exits 1 when the overhead target is missed. ``--out``
writes the numbers as JSON (``weince_overhead_pct``, ``weince_parameters``, ...), which
``python -m realdata claims records`` reads from ``RESULTS/bench/realdata_cpu.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

import torch

from benchmarks.step import benchmark_step


def _timed(fn) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m benchmarks.bench_realdata", description=__doc__.split("\n\n")[0]
    )
    p.add_argument("--batch", type=int, default=64, help="images per step (default 64)")
    p.add_argument("--arch", default="resnet18", help="encoder (default resnet18)")
    p.add_argument("--threads", type=int, default=2, help="torch CPU threads (default 2)")
    p.add_argument("--repeats", type=int, default=5, help="measured steps per method (default 5)")
    p.add_argument("--target", type=float, default=5.0, help="WeiNCE overhead target in percent (default 5)")
    p.add_argument("--out", default=None, help="write the numbers as JSON to this file")
    args = p.parse_args(argv)
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")

    info, x, y = benchmark_step(args.arch, "InfoNCE", batch=args.batch)
    wei, _, _ = benchmark_step(args.arch, "WeiNCE", batch=args.batch)
    hscl, xh, yh = benchmark_step(args.arch, "HSCL", batch=args.batch)
    for s in (info, wei, hscl):  # warm-up
        s(x if s is not hscl else xh, y if s is not hscl else yh)
    ratios, t_info, t_wei, t_hscl, t_loss, t_aug = [], [], [], [], [], []
    for _ in range(args.repeats):
        a = _timed(lambda: info(x, y))
        b = _timed(lambda: wei(x, y))
        ratios.append(b / a)
        t_info.append(a)
        t_wei.append(b)
        t_hscl.append(_timed(lambda: hscl(xh, yh)))
        z1, _ = hscl.embed(xh)
        zd = z1.detach().float().requires_grad_(True)
        t_loss.append(
            _timed(lambda zd=zd: hscl.objective(zd, None, yh, hscl.streams.negatives).loss.backward())
        )
        t_aug.append(_timed(lambda: wei.views.train_views(x, wei.streams.views)))
    med = statistics.median
    overhead = 100.0 * (med(ratios) - 1.0)
    params = sum(p.numel() for p in wei.objective.parameters() if p.requires_grad)
    out = {
        "device": "cpu",
        "threads": args.threads,
        "load_average": load,
        "arch": args.arch,
        "batch": args.batch,
        "repeats": args.repeats,
        "infonce_step_s": med(t_info),
        "weince_step_s": med(t_wei),
        "weince_overhead_pct": overhead,
        "weince_parameters": params,
        "hscl_step_s": med(t_hscl),
        "hscl_loss_share_pct": 100.0 * med(t_loss) / med(t_hscl),
        "augment_share_pct": 100.0 * med(t_aug) / med(t_wei),
        "target_overhead_pct": args.target,
    }
    print(
        f"bench_realdata: {args.arch}, batch {args.batch}, {args.threads} threads, load {load:.1f}, "
        f"{args.repeats} repeats (medians)"
    )
    print(
        f"  InfoNCE step {med(t_info):.3f} s, WeiNCE step {med(t_wei):.3f} s: WeiNCE overhead {overhead:+.2f} % "
        f"(target <= {args.target:g} %), trainable parameters added by WeiNCE: {params}"
    )
    print(
        f"  HSCL step {med(t_hscl):.3f} s, its loss (forward + backward, K=256 sampled) "
        f"{med(t_loss):.4f} s = {out['hscl_loss_share_pct']:.2f} % of the step"
    )
    print(
        f"  two SimCLR views of the batch {med(t_aug):.4f} s = {out['augment_share_pct']:.2f} % of the WeiNCE step"
    )
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(json.dumps(out, indent=2))
    ok = overhead <= args.target
    print("  target met" if ok else "  TARGET MISSED: WeiNCE overhead above target")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
