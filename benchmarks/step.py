"""A training step of the real-data pipeline on random images, for the benchmarks.

:func:`benchmark_step` builds the step of ``realdata.training.step.TrainStep`` (model, views,
loss, Adam) on random CIFAR-shaped ``uint8`` images, so ``benchmarks/bench_realdata.py`` and
``benchmarks/gpu_check.py`` time the real step without a dataset.
"""

from __future__ import annotations

import torch
from torch import nn

from realdata.inputs.pipeline import Streams, Views
from realdata.training.config import TrainConfig
from realdata.training.models import build_model
from realdata.training.objective import build_loss
from realdata.training.step import TrainStep


def benchmark_step(
    arch: str,
    method: str,
    *,
    batch: int,
    device: torch.device | str = "cpu",
    bf16: bool = False,
    channels_last: bool = False,
    num_classes: int = 100,
    image_size: int = 32,
    estimator: str = "sampled",
    beta: float = 5.0,
    compile: bool = False,
    seed: int = 0,
    width: int = 32,
) -> tuple[TrainStep, torch.Tensor, torch.Tensor]:
    """A training step of the real pipeline on random CIFAR-shaped ``uint8`` images on the device.

    ``method`` HCL family: label views (no augmentation), the authors' head, ``K = 256``; InfoNCE /
    WeiNCE: two SimCLR views, the WeiNCE projector. Used by ``benchmarks/bench_realdata.py`` and
    ``benchmarks/gpu_check.py`` (no dataset needed).

    Args:
        arch: encoder name.
        method: loss name.
        batch: images per step.
        device: where the step runs.
        bf16: autocast the encoder.
        channels_last: channels_last memory format.
        num_classes: ``C`` of the labels.
        image_size: side of the random images.
        estimator: HCL estimator.
        beta: hardness of HSCL / HUCL.
        compile: ``torch.compile`` the encoder.
        seed: seed of the model, the streams and the images.
        width: ``smallcnn`` width.

    Returns:
        ``(step, images, labels)`` with ``images`` ``(batch, 3, S, S)`` uint8 and ``labels``
        ``(batch,)`` (every class present when ``batch >= num_classes``), both on ``device``.
    """
    dev = torch.device(device)
    hard = method in ("HSCL", "HUCL")
    cfg = TrainConfig(
        dataset="cifar100",
        arch=arch,
        method=method,
        beta=beta if hard else 0.0,
        estimator=estimator,
        batch_size=batch,
        seed=seed,
    ).resolved(num_classes)
    model = build_model(
        str(cfg.arch),
        str(cfg.head),
        num_classes,
        cfg.normalization,
        out_dim=cfg.out_dim,
        stem="cifar",
        channels_last=channels_last,
        seed=seed,
        width=width,
    ).to(dev)
    train_model: nn.Module = torch.compile(model) if compile else model  # type: ignore[assignment]
    mean, std = (0.5, 0.5, 0.5), (0.25, 0.25, 0.25)
    views = Views(str(cfg.views), 3, image_size, mean, std)
    assert cfg.lr is not None  # resolved
    opt = torch.optim.Adam(model.parameters(), lr=cfg.lr)
    step = TrainStep(train_model, views, build_loss(cfg), opt, Streams.create(seed, dev), bf16)
    g = torch.Generator(device=dev).manual_seed(seed)
    images = torch.randint(
        0, 256, (batch, 3, image_size, image_size), generator=g, device=dev, dtype=torch.uint8
    )
    labels = torch.arange(batch, device=dev) % num_classes
    return step, images, labels
