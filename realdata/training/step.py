"""One training step of a real-data run.

``TrainStep(images, labels)``: views on the device (:class:`realdata.inputs.pipeline.Views`),
the encoder forward under bf16 autocast when asked (``channels_last`` inputs when the model uses
it), the objective on float32 embeddings (:mod:`realdata.training.objective`), backward, Adam
step. Nothing in it waits for the device (the returned loss value stays a device tensor).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from realdata.inputs.pipeline import Streams, Views
from realdata.training.objective import Objective, StepLoss

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
        """One optimisation step; returns the objective's :class:`realdata.training.objective.StepLoss`."""
        z1, z2 = self.embed(images)
        out = self.objective(z1, z2, labels, self.streams.negatives)
        self.optimizer.zero_grad(set_to_none=True)
        out.loss.backward()
        self.optimizer.step()
        return out
