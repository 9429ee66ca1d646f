"""Throughput of the batched SimCLR augmentation versus torchvision's per-image pipeline.

Run: ``python -m benchmarks.bench_augment [--batch 512 --size 32 --threads 2 --repeats 5
--device cpu]``.

Both make the views of the WeiNCE recipe (arXiv 2606.00262, Sec. 5): RandomResizedCrop,
horizontal flip 0.5, ColorJitter(0.8, 0.8, 0.8, 0.2) with p 0.8, greyscale 0.2, no blur, output
float in [0, 1]. Prints images (views) per second, medians over the repeats, for

1. ``batched``: :class:`realdata.inputs.augment.SimCLRAugment` on one ``uint8`` batch on ``--device``;
2. ``tv-tensor``: :mod:`torchvision.transforms.v2` applied image by image to ``uint8`` tensors;
3. ``tv-pil``: the same pipeline image by image on PIL images, then ``ToImage`` + ``ToDtype``
   (what a DataLoader worker of the recipe does, without the worker processes);

and the ratios ``batched / tv-*``. torchvision's pipelines would need about that many worker
processes to keep up with one call of the batched version.
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch
from PIL import Image
from torchvision.transforms import v2

from realdata.inputs.augment import SimCLRAugment


def tv_pipeline(size: int, pil: bool) -> v2.Compose:
    ops = [
        v2.RandomResizedCrop(size, antialias=True),
        v2.RandomHorizontalFlip(0.5),
        v2.RandomApply([v2.ColorJitter(0.8, 0.8, 0.8, 0.2)], p=0.8),
        v2.RandomGrayscale(0.2),
    ]
    ops += [v2.ToImage()] if pil else []
    return v2.Compose(ops + [v2.ToDtype(torch.float32, scale=True)])


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def main(argv: list[str] | None = None) -> dict[str, float]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--batch", type=int, default=512, help="images per batch")
    parser.add_argument("--size", type=int, default=32, help="image height = width = crop size")
    parser.add_argument("--threads", type=int, default=2, help="torch CPU threads")
    parser.add_argument("--repeats", type=int, default=5, help="timed repeats (median)")
    parser.add_argument("--device", default="cpu", help="device of the batched version")
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    g = torch.Generator().manual_seed(0)
    images = torch.randint(0, 256, (args.batch, 3, args.size, args.size), dtype=torch.uint8,
                           generator=g)  # fmt: skip
    pil_images = [Image.fromarray(im.permute(1, 2, 0).numpy()) for im in images]
    aug = SimCLRAugment(args.size)
    on_device = images.to(device)
    aug_gen = torch.Generator(device=device).manual_seed(1) if device.type != "cpu" else g
    tv_t, tv_p = tv_pipeline(args.size, pil=False), tv_pipeline(args.size, pil=True)

    def batched() -> None:
        aug(on_device, aug_gen)
        _sync(device)

    def tv_tensor() -> None:
        for im in images:
            tv_t(im)

    def tv_pil() -> None:
        for im in pil_images:
            tv_p(im)

    runs = {"batched": batched, "tv-tensor": tv_tensor, "tv-pil": tv_pil}
    times: dict[str, list[float]] = {k: [] for k in runs}
    for fn in runs.values():
        fn()  # warm-up
    for _ in range(args.repeats):  # interleaved, so load changes hit all equally
        for name, fn in runs.items():
            t0 = time.perf_counter()
            fn()
            times[name].append(time.perf_counter() - t0)
    rate = {k: args.batch / statistics.median(v) for k, v in times.items()}
    print(f"SimCLR views, batch {args.batch} of {args.size}x{args.size}, {args.threads} CPU "
          f"thread(s), batched on {device}:")  # fmt: skip
    for name, r in rate.items():
        print(f"  {name:10s} {r:10.0f} images/s")
    for ref in ("tv-tensor", "tv-pil"):
        print(f"  ratio batched / {ref}: {rate['batched'] / rate[ref]:.1f}x")
    return rate


if __name__ == "__main__":
    main()
