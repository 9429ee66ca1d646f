"""Speed and memory of the contrastive-loss estimators (the performance targets of CONTRIBUTING.md#performance-work).

Run from the repository root: ``python -m benchmarks.bench_losses [--batch 512 --dim 99
--classes 100 --negatives 256 --threads 2]``.

Prints, from one run (interleaved repeats, medians), the forward+backward time of

* ``floor``: a bare similarity matmul ``(z @ z.T).sum()`` -- no estimator can beat it;
* ``expectation``: :func:`theory.hcl.contrastive_loss` with the exact tilted expectation;
* ``sampled``: the same with K sampled negatives per (anchor, positive) pair;
* ``loop-sampled``: the authors' per-anchor loop structure (per anchor: masks, the tilted law,
  numpy ``choice`` of ``npos * K`` indices, gather, mean over K inside the log) --
  :func:`tests.reference.loop_loss`, the very reference the tests compare against;
* ``loop-expectation``: the same loop with the exact expectation per anchor,

the ratios against the targets (expectation <= 2.0x the floor, sampled >= 20x faster than the
authors' loop structure), the load average of the machine before and after, and the memory
autograd holds for backward (unique saved storages) at B/2, B and 2B. Exits with status 1 when a
target is missed.

``--samplers`` also times the ways of drawing the ``P x K`` negatives of the same batch (the
sampled estimator's bottleneck): the alias method in use, the previous inverse-CDF sampler (one
flat ``searchsorted``), ``torch.multinomial``, sorted uniforms with one sorted search, and a lower
bound for multinomial counts per (pair, negative).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from collections.abc import Callable

import numpy as np
import torch

from tests.reference import loop_loss
from theory.geometry import normalize
from theory.hcl import alias_table, contrastive_loss, positive_pairs, tilted_log_weights
from theory.hcl.sampling import _draw_stream, draw_seed, stream_uniforms

#: name -> (target ratio, description); "le": time / floor <= target, "ge": baseline / time >= target.
TARGETS = {
    "expectation / floor": (2.0, "le"),
    "loop-sampled / sampled": (20.0, "ge"),
}


def make_batch(B: int, d: int, C: int, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """Unit-ball embeddings ``(B, d)`` and labels uniform in ``[0, C)`` (float32, as in training)."""
    g = torch.Generator().manual_seed(seed)
    z = normalize(torch.randn(B, d, generator=g), "ball")
    labels = torch.randint(0, C, (B,), generator=g)
    return z, labels


def fwd_bwd(fn: Callable[[torch.Tensor], torch.Tensor], z: torch.Tensor) -> float:
    zz = z.clone().requires_grad_(True)
    t0 = time.perf_counter()
    fn(zz).backward()
    return time.perf_counter() - t0


def methods(labels: torch.Tensor, beta: float, K: int) -> dict[str, Callable[[torch.Tensor], torch.Tensor]]:
    gen = torch.Generator().manual_seed(0)
    rng = np.random.default_rng(0)
    return {
        "floor": lambda z: (z @ z.T).sum(),
        "expectation": lambda z: contrastive_loss(
            z, labels, setting="supervised", beta=beta, num_negatives=K
        ),
        "sampled": lambda z: contrastive_loss(
            z, labels, setting="supervised", beta=beta, num_negatives=K, estimator="sampled", generator=gen
        ),
        "loop-sampled": lambda z: loop_loss(z, labels, beta=beta, K=K, estimator="sampled", rng=rng),
        "loop-expectation": lambda z: loop_loss(z, labels, beta=beta, K=K),
    }


def time_all(
    B: int, d: int, C: int, K: int, beta: float, repeats: int, loop_repeats: int
) -> dict[str, float]:
    """Median forward+backward seconds per method, repeats interleaved (round robin)."""
    z, labels = make_batch(B, d, C)
    fns = methods(labels, beta, K)
    times: dict[str, list[float]] = {name: [] for name in fns}
    for fn in fns.values():  # warm-up
        fwd_bwd(fn, z)
    for r in range(repeats):
        for name, fn in fns.items():
            if name.startswith("loop") and r >= loop_repeats:
                continue
            times[name].append(fwd_bwd(fn, z))
    return {name: statistics.median(v) for name, v in times.items()}


def saved_memory(fn: Callable[[torch.Tensor], torch.Tensor], z: torch.Tensor) -> tuple[int, int]:
    """Bytes held for backward by one forward, and the largest single saved tensor.

    Unique storages of the tensors autograd saves: a deterministic measure of an estimator's memory.
    """
    seen, sizes = set(), []

    def pack(t: torch.Tensor) -> torch.Tensor:
        key = (t.untyped_storage().data_ptr(), t.untyped_storage().nbytes())
        if key not in seen:
            seen.add(key)
            sizes.append(key[1])
        return t

    zz = z.clone().requires_grad_(True)
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        out = fn(zz)
    out.backward()
    return sum(sizes), max(sizes)


def time_samplers(B: int, d: int, C: int, K: int, beta: float, repeats: int) -> dict[str, float]:
    """Median seconds of each way to draw K negatives for every (anchor, positive) pair."""
    z, labels = make_batch(B, d, C)
    rows = positive_pairs(labels).anchor
    P = rows.numel()
    S = (z @ z.T).double()
    q = tilted_log_weights(S, labels[:, None] != labels[None, :], beta).exp()
    gen = torch.Generator().manual_seed(0)
    offsets = 2.0 * torch.arange(B, dtype=torch.float64)

    def inverse_cdf() -> torch.Tensor:  # the previous sampler: one flat, row-offset CDF
        cdf = q.cumsum(dim=1)
        flat = (cdf + offsets[:, None]).reshape(-1)
        u = torch.rand(P, K, generator=gen, dtype=torch.float64)
        pos = torch.searchsorted(flat, torch.addcmul(offsets[rows][:, None], u, cdf[rows, -1:]), right=True)
        last = (B - 1) - torch.argmax(torch.flip(q > 0, dims=[1]).to(torch.int8), dim=1)
        return torch.minimum(pos, (torch.arange(B) * B + last)[rows][:, None])

    def sorted_uniforms() -> torch.Tensor:  # K sorted uniforms per pair (exponential spacings)
        e = torch.empty(P, K + 1, dtype=torch.float64).exponential_(generator=gen).cumsum_(dim=1)
        cdf = q.cumsum(dim=1)
        u = e[:, :K] / e[:, K:] * cdf[rows, -1:] + offsets[rows][:, None]
        return torch.searchsorted((cdf + offsets[:, None]).reshape(-1), u, right=True)

    counts = torch.full((P, B), float(K), dtype=torch.float64)
    first = torch.arange(P) * K
    probs = q[rows]
    fns: dict[str, Callable[[], object]] = {
        "alias method + counter stream (table + draws, in use)": lambda: _draw_stream(
            alias_table(q), rows, draw_seed(gen).expand(P), first, K
        ),
        "  of which the alias tables": lambda: alias_table(q),
        "counter-stream uniforms in torch (other devices)": lambda: stream_uniforms(draw_seed(gen), first, K),
        "torch.rand float64 uniforms (the previous source)": lambda: torch.rand(
            P, K, generator=gen, dtype=torch.float64
        ),
        "inverse CDF, flat searchsorted (previous)": inverse_cdf,
        "torch.multinomial on q[rows]": lambda: torch.multinomial(probs, K, replacement=True, generator=gen),
        "sorted uniforms + one sorted searchsorted": sorted_uniforms,
        "counts: one binomial per (pair, negative), lower bound": lambda: torch.binomial(
            counts, probs, generator=gen
        ),
    }
    times: dict[str, list[float]] = {name: [] for name in fns}
    for fn in fns.values():
        fn()
    for _ in range(repeats):
        for name, fn in fns.items():
            t0 = time.perf_counter()
            fn()
            times[name].append(time.perf_counter() - t0)
    return {name: statistics.median(v) for name, v in times.items()}


def ratios(t: dict[str, float]) -> dict[str, float]:
    return {
        "expectation / floor": t["expectation"] / t["floor"],
        "loop-sampled / sampled": t["loop-sampled"] / t["sampled"],
        "loop-expectation / expectation": t["loop-expectation"] / t["expectation"],
        "sampled / floor": t["sampled"] / t["floor"],
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--batch", type=int, default=512, help="batch size B (default 512)")
    p.add_argument("--dim", type=int, default=99, help="embedding dimension d (default 99)")
    p.add_argument("--classes", type=int, default=100, help="number of classes C (default 100)")
    p.add_argument("--negatives", type=int, default=256, help="K negatives per pair (default 256)")
    p.add_argument("--beta", type=float, default=5.0, help="hardness beta (default 5)")
    p.add_argument("--threads", type=int, default=2, help="torch CPU threads (default 2: the 2-core target)")
    p.add_argument("--repeats", type=int, default=41, help="timed repeats of the fast methods (default 41)")
    p.add_argument(
        "--loop-repeats", type=int, default=5, help="timed repeats of the loop baselines (default 5)"
    )
    p.add_argument("--no-memory", action="store_true", help="skip the memory measurements")
    p.add_argument("--samplers", action="store_true", help="also time the ways of drawing the negatives")
    a = p.parse_args(argv)
    torch.set_num_threads(a.threads)
    load0 = os.getloadavg()
    print(
        f"torch {torch.__version__}, threads {torch.get_num_threads()}, B={a.batch} d={a.dim} "
        f"C={a.classes} K={a.negatives} beta={a.beta}; load average {load0[0]:.2f} {load0[1]:.2f} {load0[2]:.2f}"
    )
    t = time_all(a.batch, a.dim, a.classes, a.negatives, a.beta, a.repeats, a.loop_repeats)
    load1 = os.getloadavg()
    print("\nforward+backward, median seconds")
    for name, v in t.items():
        print(f"  {name:18s} {v * 1e3:10.2f} ms")
    print("\nratios (targets in CONTRIBUTING.md#performance-work)")
    missed = []
    for name, value in ratios(t).items():
        target = TARGETS.get(name)
        if target is None:
            print(f"  {name:32s} = {value:8.2f}x")
            continue
        bound, kind = target
        ok = value <= bound if kind == "le" else value >= bound
        print(
            f"  {name:32s} = {value:8.2f}x   (target {'<=' if kind == 'le' else '>='} {bound:g}x) {'ok' if ok else 'MISSED'}"
        )
        if not ok:
            missed.append(name)
    print(f"  load average after: {load1[0]:.2f} {load1[1]:.2f} {load1[2]:.2f}")
    if a.samplers:
        print(f"\ndrawing K={a.negatives} negatives for every (anchor, positive) pair, median seconds")
        for name, v in time_samplers(a.batch, a.dim, a.classes, a.negatives, a.beta, 7).items():
            print(f"  {name:58s} {v * 1e3:9.2f} ms")
    if not a.no_memory:
        print("\nmemory held for backward (unique saved storages; MiB) and the largest saved tensor")
        for B in (a.batch // 2, a.batch, 2 * a.batch):
            z, labels = make_batch(B, a.dim, a.classes)
            fns = methods(labels, a.beta, a.negatives)
            for name in ("floor", "expectation", "sampled"):
                total, largest = saved_memory(fns[name], z)
                print(f"  B={B:5d} {name:12s} total {total / 2**20:8.2f}   largest {largest / 2**20:8.2f}")
        P = float((torch.bincount(make_batch(a.batch, a.dim, a.classes)[1]) ** 2).sum())
        print(
            f"  (at B={a.batch}: one (P, K, d) float32 tensor would take {P * a.negatives * a.dim * 4 / 2**20:.0f} MiB;"
            f" a (B, B) float32 matrix takes {a.batch**2 * 4 / 2**20:.2f} MiB)"
        )
    if missed:
        print(f"\nMISSED: {', '.join(missed)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
