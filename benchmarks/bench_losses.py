"""Speed and memory of the contrastive-loss estimators (DESIGN.md performance targets).

Run: ``python -m benchmarks.bench_losses [--batch 512 --dim 99 --classes 100 --negatives 256]``.

Prints, from one run (interleaved repeats, medians), the forward+backward time of

* ``floor``: a bare similarity matmul ``(z @ z.T).sum()`` -- no estimator can beat it;
* ``expectation``: :func:`theory.hcl.contrastive_loss` with the exact tilted expectation;
* ``sampled``: the same with K sampled negatives per (anchor, positive) pair;
* ``loop-expectation`` / ``loop-sampled``: per-anchor Python-loop baselines of the same
  estimators, structured like the authors' code (per anchor: build masks, weights, sample with
  numpy, average),

their ratios, and the memory autograd holds for backward (unique saved storages) at B/2, B and 2B:
the expectation estimator grows as O(B^2); the sampled one holds O(P K) indices and values but
never a (P, K, d) tensor.
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np
import torch

from theory.geometry import normalize
from theory.hcl import contrastive_loss


def loop_loss(z, labels, *, beta, K, sampled, rng=None):
    """Per-anchor loop baseline of the HSCL batch loss (mean-form psi, tau = 1)."""
    B = z.shape[0]
    total = z.new_zeros(())
    pairs = 0
    for i in range(B):
        pos_mask = labels == labels[i]
        neg_mask = ~pos_mask
        s = z[i] @ z.T
        s_neg = s[neg_mask]
        w = torch.softmax(beta * s_neg.detach(), dim=0)
        pos_idx = torch.nonzero(pos_mask).flatten().tolist()
        for j in pos_idx:
            if sampled:
                prob = w.detach().double().numpy()
                draw = rng.choice(s_neg.shape[0], size=K, replace=True, p=prob / prob.sum())
                avg = torch.exp(s_neg[torch.from_numpy(draw)] - s[j]).mean()
            else:
                avg = (w * torch.exp(s_neg - s[j])).sum()
            total = total + torch.log1p(avg)
            pairs += 1
    return total / pairs


def make_batch(B, d, C, seed=0):
    g = torch.Generator().manual_seed(seed)
    z = normalize(torch.randn(B, d, generator=g), "ball")
    labels = torch.randint(0, C, (B,), generator=g)
    return z, labels


def fwd_bwd(fn, z):
    zz = z.clone().requires_grad_(True)
    t0 = time.perf_counter()
    fn(zz).backward()
    return time.perf_counter() - t0


def methods(labels, beta, K):
    gen = torch.Generator().manual_seed(0)
    rng = np.random.default_rng(0)
    return {
        "floor": lambda z: (z @ z.T).sum(),
        "expectation": lambda z: contrastive_loss(z, labels, setting="supervised", beta=beta, num_negatives=K),
        "sampled": lambda z: contrastive_loss(z, labels, setting="supervised", beta=beta, num_negatives=K,
                                              estimator="sampled", generator=gen),
        "loop-expectation": lambda z: loop_loss(z, labels, beta=beta, K=K, sampled=False),
        "loop-sampled": lambda z: loop_loss(z, labels, beta=beta, K=K, sampled=True, rng=rng),
    }


def time_all(B, d, C, K, beta, repeats, loop_repeats):
    z, labels = make_batch(B, d, C)
    fns = methods(labels, beta, K)
    times = {name: [] for name in fns}
    for name, fn in fns.items():  # warm-up
        fwd_bwd(fn, z)
    for r in range(repeats):
        for name, fn in fns.items():
            if name.startswith("loop") and r >= loop_repeats:
                continue
            times[name].append(fwd_bwd(fn, z))
    return {name: statistics.median(v) for name, v in times.items()}


def saved_memory(fn, z):
    """Bytes held for backward by one forward (unique storages of the tensors autograd saves),
    and the largest single saved tensor -- a deterministic measure of an estimator's memory."""
    seen, sizes = set(), []

    def pack(t):
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


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--batch", type=int, default=512, help="batch size B (default 512)")
    p.add_argument("--dim", type=int, default=99, help="embedding dimension d (default 99)")
    p.add_argument("--classes", type=int, default=100, help="number of classes C (default 100)")
    p.add_argument("--negatives", type=int, default=256, help="K negatives per pair (default 256)")
    p.add_argument("--beta", type=float, default=5.0, help="hardness beta (default 5)")
    p.add_argument("--repeats", type=int, default=15, help="timed repeats of the fast methods (default 15)")
    p.add_argument("--loop-repeats", type=int, default=3, help="timed repeats of the loop baselines (default 3)")
    p.add_argument("--no-memory", action="store_true", help="skip the peak-memory measurements")
    a = p.parse_args(argv)
    print(f"torch {torch.__version__}, threads {torch.get_num_threads()}, B={a.batch} d={a.dim} "
          f"C={a.classes} K={a.negatives} beta={a.beta}")
    t = time_all(a.batch, a.dim, a.classes, a.negatives, a.beta, a.repeats, a.loop_repeats)
    print("\nforward+backward, median seconds")
    for name, v in t.items():
        print(f"  {name:18s} {v * 1e3:10.2f} ms")
    print("\nratios (targets in DESIGN.md)")
    print(f"  loop-expectation / expectation = {t['loop-expectation'] / t['expectation']:8.1f}x   (target >= 60x)")
    print(f"  expectation / floor            = {t['expectation'] / t['floor']:8.2f}x   (target <= 2.5x)")
    print(f"  loop-sampled / sampled         = {t['loop-sampled'] / t['sampled']:8.1f}x   (target >= 20x)")
    print(f"  sampled / floor                = {t['sampled'] / t['floor']:8.2f}x")
    if not a.no_memory:
        print("\nmemory held for backward (unique saved storages; MiB) and the largest saved tensor")
        for B in (a.batch // 2, a.batch, 2 * a.batch):
            z, labels = make_batch(B, a.dim, a.classes)
            fns = methods(labels, a.beta, a.negatives)
            for name in ("floor", "expectation", "sampled"):
                total, largest = saved_memory(fns[name], z)
                print(f"  B={B:5d} {name:12s} total {total / 2**20:8.2f}   largest {largest / 2**20:8.2f}")
        P = float((torch.bincount(make_batch(a.batch, a.dim, a.classes)[1]) ** 2).sum())
        print(f"  (at B={a.batch}: one (P, K, d) float32 tensor would take {P * a.negatives * a.dim * 4 / 2**20:.0f} MiB;"
              f" a (B, B) float32 matrix takes {a.batch**2 * 4 / 2**20:.2f} MiB)")


if __name__ == "__main__":
    main()
