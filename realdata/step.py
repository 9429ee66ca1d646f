"""One training step, shared by the training loop and the benchmarks.

``TrainStep(images, labels)``: views on the device (:class:`realdata.pipeline.Views`), the encoder
forward under bf16 autocast when asked (``channels_last`` inputs when the model uses it), the
objective on float32 embeddings (:mod:`realdata.losses`), backward, Adam step. Nothing in it
waits for the device (the returned loss value stays a device tensor).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from realdata.losses import Objective, StepLoss
from realdata.pipeline import Streams, Views

__all__ = ["TrainStep"]


@dataclass
class TrainStep:
    """A training step over one (local) batch of ``uint8`` images.

    Attributes:
        model: the encoder as trained (possibly DDP-wrapped or compiled), returning ``(h, z)``.
        views: how images become inputs.
        objective: the loss.
        optimizer: the optimiser of the encoder's parameters.
        streams: the run's generators (``views`` and ``negatives`` are used here).
        bf16: autocast the encoder to bfloat16.
    """

    model: nn.Module
    views: Views
    objective: Objective
    optimizer: torch.optim.Optimizer
    streams: Streams
    bf16: bool = False

    def embed(self, images: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor | None]:
        """``(z1, z2)`` of a batch (``z2`` None for label views), with autograd."""
        x = self.views.train_views(images, self.streams.views)
        with torch.autocast(x.device.type, dtype=torch.bfloat16, enabled=self.bf16):
            z = self.model(x)[1]
        if self.views.count == 1:
            return z, None
        z1, z2 = z.chunk(2)
        return z1, z2

    def __call__(self, images: torch.Tensor, labels: torch.Tensor) -> StepLoss:
        """One optimisation step; returns the objective's :class:`realdata.losses.StepLoss`."""
        z1, z2 = self.embed(images)
        out = self.objective(z1, z2, labels, self.streams.negatives)
        self.optimizer.zero_grad(set_to_none=True)
        out.loss.backward()
        self.optimizer.step()
        return out


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
    from realdata.config import TrainConfig
    from realdata.losses import build_loss
    from realdata.models import build_model

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
