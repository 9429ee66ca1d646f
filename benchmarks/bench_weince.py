"""Speed of WeiNCE versus plain InfoNCE (DESIGN.md performance targets, spec/weince.md claim W4).

Run: ``python -m benchmarks.bench_weince [--pairs 256 --dim 64 --threads 2 --repeats 60]``.

Prints, from one run (repeats interleaved across methods, medians):

1. the loss alone, forward + backward, at ``2N = 512`` anchors, ``d = 64``:
   ``info_nce`` (:func:`theory.infonce.info_nce`), ``weince`` (:func:`theory.weince.weince_loss`,
   core recipe), ``weince-released`` (with the §2.8 auxiliary terms) and ``naive`` (a
   straightforward implementation: masked ``torch.topk``, unfused autograd logits) -- target
   ``weince / info_nce <= 2.0``;
2. one full synthetic training step (two views through an MLP encoder 64 -> 256 -> 64, the loss,
   backward, Adam step) with WeiNCE versus InfoNCE -- target ``<= 1.1``.
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch
import torch.nn.functional as F

from theory.infonce import info_nce, two_view_candidates
from theory.weince import WeibullBetaState, tail_size, weince_loss


def naive_weince(z1, z2, tau=0.5, q=0.2, margin=2.0, kappa_rho=10.0, kappa_aic=1.0, eps=1e-6):
    """A straightforward (unfused) WeiNCE after spec §3.1: masked full-row ``torch.topk``, the
    statistics as separate tensor ops, autograd through the T_lambda logits."""
    S, cand = two_view_candidates(z1, z2)
    A = S.shape[0]
    N = A // 2
    idx = torch.arange(A)
    pos = (idx + N) % A
    negmask = torch.ones(A, A, dtype=torch.bool)
    negmask[idx, idx] = False
    negmask[idx, pos] = False
    with torch.no_grad():
        Sd = S.detach().masked_fill(~negmask, -1e9)
        K = A - 2
        k = tail_size(K)
        T = torch.topk(Sd, k, dim=1).values
        rho = torch.clamp(1 - T[:, 0], min=eps)
        delta = torch.clamp(1 - T, min=eps)
        b = max(1, k // 20)
        x = torch.log(delta)[:, b:]
        Fh = torch.clamp(torch.arange(1, k + 1, dtype=S.dtype) / (k + 1), min=eps)[b:]
        n = k - b
        sse = []
        slopes = []
        for y in (torch.log(Fh), torch.log(-torch.log(Fh))):
            xc = x - x.mean(1, keepdim=True)
            yc = (y - y.mean())[None, :]
            slope = (xc * yc).sum(1) / torch.clamp((xc * xc).sum(1), min=1e-12)
            sse.append(torch.clamp(((yc - slope[:, None] * xc) ** 2).sum(1), min=1e-12))
            slopes.append(slope)
        sseW = sse[0] + 1e6 * (slopes[0] <= 0)
        sseG = sse[1] + 1e6 * (slopes[1] >= 0)
        daic = n * torch.log(sseG / n) - n * torch.log(sseW / n)
        rho0 = torch.clamp(torch.sort(rho).values[round(q * (A - 1))], min=eps)
        lam = torch.sigmoid(kappa_rho * (torch.log(rho0) - torch.log(rho))) * torch.sigmoid(kappa_aic * (daic - margin))
    W = -torch.log(1 - torch.clamp(cand, max=1 - eps))
    logits = (1 - lam[:, None]) * cand / tau + lam[:, None] * W
    return F.cross_entropy(logits, torch.zeros(A, dtype=torch.long))


def _median_ms(v):
    return 1e3 * statistics.median(v)


_CLOCK = time.perf_counter


def _interleaved(fns: dict, repeats: int, warmup: int, inner: int) -> dict:
    for f in fns.values():
        for _ in range(warmup):
            f()
    times = {k: [] for k in fns}
    for _ in range(repeats):
        for k, f in fns.items():
            t = _CLOCK()
            for _ in range(inner):
                f()
            times[k].append((_CLOCK() - t) / inner)
    return {k: _median_ms(v) for k, v in times.items()}


def bench_loss(N: int, d: int, repeats: int, inner: int, seed: int = 0) -> dict:
    g = torch.Generator().manual_seed(seed)
    base = torch.randn(N, d, generator=g)
    z1 = (base + 0.5 * torch.randn(N, d, generator=g)).requires_grad_()
    z2 = (base + 0.5 * torch.randn(N, d, generator=g)).requires_grad_()
    state = WeibullBetaState()

    def run(loss_fn):
        def f():
            z1.grad = z2.grad = None
            loss_fn().backward()
        return f

    fns = {
        "info_nce": run(lambda: info_nce(z1, z2, tau=0.5)),
        "weince": run(lambda: weince_loss(z1, z2, tau=0.5)),
        "weince-released": run(lambda: weince_loss(z1, z2, tau=0.5, recipe="released", state=state)),
        "naive": run(lambda: naive_weince(z1, z2)),
        "similarity floor": run(lambda: two_view_candidates(z1, z2)[1].sum()),
    }
    return _interleaved(fns, repeats, warmup=5, inner=inner)


def _encoder(D: int, hidden: int, d: int, seed: int) -> torch.nn.Module:
    g = torch.Generator().manual_seed(seed)
    try:
        from synthetic.models import MLPEncoder  # the project's synthetic encoder, if present

        return MLPEncoder(D, hidden, d, generator=g)
    except ImportError:  # pragma: no cover - fallback before synthetic.models exists
        torch.manual_seed(seed)
        return torch.nn.Sequential(torch.nn.Linear(D, hidden), torch.nn.ReLU(), torch.nn.Linear(hidden, d))


def bench_step(N: int, d: int, D: int, hidden: int, repeats: int, inner: int, seed: int = 0) -> dict:
    g = torch.Generator().manual_seed(seed + 1)
    latent = torch.randn(N, D, generator=g)
    x1 = latent + 0.3 * torch.randn(N, D, generator=g)
    x2 = latent + 0.3 * torch.randn(N, D, generator=g)
    models = {k: _encoder(D, hidden, d, seed) for k in ("info_nce", "weince")}
    opts = {k: torch.optim.Adam(m.parameters(), lr=3e-4) for k, m in models.items()}
    losses = {"info_nce": lambda a, b: info_nce(a, b, tau=0.5), "weince": lambda a, b: weince_loss(a, b, tau=0.5)}

    def step(k):
        m, opt, lf = models[k], opts[k], losses[k]

        def f():
            opt.zero_grad(set_to_none=True)
            loss = lf(m(x1), m(x2))
            loss.backward()
            opt.step()
        return f

    return _interleaved({k: step(k) for k in models}, repeats, warmup=5, inner=inner)


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--pairs", type=int, default=256, help="N pairs per batch (2N anchors); default 256 -> 2N = 512")
    ap.add_argument("--dim", type=int, default=64, help="embedding dimension d (default 64)")
    ap.add_argument("--input-dim", type=int, default=64, help="encoder input dimension D (default 64)")
    ap.add_argument("--hidden", type=int, default=256, help="encoder hidden width (default 256)")
    ap.add_argument("--threads", type=int, default=2, help="torch intra-op threads (default 2 = the 2-core target)")
    ap.add_argument("--repeats", type=int, default=60, help="interleaved repeats; medians are reported (default 60)")
    ap.add_argument("--inner", type=int, default=3, help="calls timed together per repeat (default 3)")
    ap.add_argument("--clock", choices=("wall", "cpu"), default="wall",
                    help="wall: time.perf_counter (default); cpu: time.process_time, less sensitive to other "
                         "processes on a shared machine (counts the CPU time of all threads)")
    args = ap.parse_args(argv)
    global _CLOCK
    _CLOCK = time.perf_counter if args.clock == "wall" else time.process_time
    if min(args.pairs, args.dim, args.input_dim, args.hidden, args.threads, args.repeats, args.inner) < 1 or args.pairs < 2:
        raise ValueError("all sizes must be >= 1 and --pairs >= 2")
    torch.set_num_threads(args.threads)
    print(f"WeiNCE benchmark: 2N = {2 * args.pairs}, d = {args.dim}, threads = {torch.get_num_threads()}, "
          f"torch {torch.__version__}, repeats = {args.repeats} x {args.inner} (medians, interleaved), "
          f"clock = {args.clock}")
    loss = bench_loss(args.pairs, args.dim, args.repeats, args.inner)
    print("\n[1] loss forward + backward (ms)")
    for k, v in loss.items():
        print(f"  {k:18s} {v:8.3f}   x{v / loss['info_nce']:.2f} of info_nce")
    r1 = loss["weince"] / loss["info_nce"]
    print(f"  ratio weince / info_nce = {r1:.2f}  (target <= 2.0: {'PASS' if r1 <= 2.0 else 'FAIL'}); "
          f"naive / info_nce = {loss['naive'] / loss['info_nce']:.2f}")
    step = bench_step(args.pairs, args.dim, args.input_dim, args.hidden, args.repeats, args.inner)
    print(f"\n[2] training step (MLP {args.input_dim} -> {args.hidden} -> {args.dim}, Adam) (ms)")
    for k, v in step.items():
        print(f"  {k:18s} {v:8.3f}")
    r2 = step["weince"] / step["info_nce"]
    print(f"  ratio weince / info_nce = {r2:.2f}  (target <= 1.1: {'PASS' if r2 <= 1.1 else 'FAIL'})")


if __name__ == "__main__":
    main()
