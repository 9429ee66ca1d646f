"""The data side of a training step: seeded streams, batch plans, views on the device.

* :class:`Streams`: the independent random streams of a run, each a ``torch.Generator`` seeded by
  the one seed rule of both stacks (:func:`synthetic.engine.data.stream_seed` of ``(seed, name,
  rank)``): ``order`` (batches; on the CPU, the same on every rank), ``views`` (SimCLR
  augmentation; on the device, one stream per rank), ``negatives`` (the sampled estimator; on the
  device, the same on every rank).
* :func:`run_batches`: the global batches of one epoch (shuffled ``drop_last`` batches, or the
  class-balanced sampler), CPU index tensors.
* :class:`Views`: turns a ``uint8`` batch on the device into the model input(s): the HCL authors'
  normalised single view (``label``) or two SimCLR views (``simclr``, augmented on the device by
  :class:`realdata.inputs.augment.SimCLRAugment`), and the deterministic evaluation view.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from realdata.inputs.augment import SimCLRAugment
from realdata.inputs.samplers import class_balanced_batches
from realdata.inputs.views import HCL_MEAN, HCL_STD, normalize, to_float
from synthetic.engine.data import epoch_batches, stream_seed
from theory.options import VIEWS
from theory.validation import one_of

__all__ = ["Streams", "run_batches", "Views"]


def _gen(seed: int, device: torch.device) -> torch.Generator:
    g = torch.Generator(device=device)
    g.manual_seed(seed)
    return g


@dataclass
class Streams:
    """The run's generators (see the module docstring)."""

    order: torch.Generator
    views: torch.Generator
    negatives: torch.Generator

    @classmethod
    def create(cls, seed: int, device: torch.device, rank: int = 0) -> Streams:
        """Fresh streams of run ``seed`` for process ``rank``."""
        return cls(
            _gen(stream_seed(seed, "order"), torch.device("cpu")),
            _gen(stream_seed(seed, "views", rank), device),
            _gen(stream_seed(seed, "negatives"), device),
        )

    def state(self) -> dict[str, torch.Tensor]:
        """Generator states (CPU byte tensors)."""
        return {k: getattr(self, k).get_state() for k in ("order", "views", "negatives")}

    def load(self, state: dict[str, torch.Tensor]) -> None:
        """Restore :meth:`state`."""
        for k, v in state.items():
            getattr(self, k).set_state(v)


def run_batches(config: Any, labels_cpu: torch.Tensor, generator: torch.Generator) -> list[torch.Tensor]:
    """The global index batches of one epoch of a run (CPU ``int64``).

    Shuffled ``drop_last`` batches of ``batch_size`` (the authors' loaders; the one batch rule of
    both stacks, :func:`synthetic.engine.data.epoch_batches`), or, with ``balanced_sampler``,
    ``batch_size // samples_per_class`` classes times ``samples_per_class`` samples (about one
    pass over the data).
    """
    N = int(labels_cpu.numel())
    if not config.balanced_sampler:
        return list(epoch_batches(N, config.batch_size, generator))
    n = int(config.samples_per_class)
    C = int(torch.unique(labels_cpu).numel())
    m = min(C, max(1, config.batch_size // n))
    if m * n != config.batch_size:
        raise ValueError(
            f"batch_size = {config.batch_size} must be a multiple of samples_per_class = {n} (at most "
            f"{C} classes per batch) for the balanced sampler"
        )
    return class_balanced_batches(labels_cpu, n, generator=generator, classes_per_batch=m)


class Views:
    """Model inputs from ``uint8`` batches on the device.

    Args:
        views: ``label`` (one normalised view, no augmentation) or ``simclr`` (two views).
        channels: image channels (1 or 3).
        size: image height = width.
        mean: per-channel mean for the ``label`` view (default: the HCL authors' CIFAR-10
            constants for three channels, the dataset's statistics for one channel).
        std: per-channel std, likewise.
        crop_min_scale: lower bound of RandomResizedCrop's area scale.
    """

    def __init__(
        self,
        views: str,
        channels: int,
        size: int,
        mean: tuple[float, ...] | None = None,
        std: tuple[float, ...] | None = None,
        crop_min_scale: float = 0.08,
    ) -> None:
        self.views = one_of("views", views, VIEWS)
        if channels == 3:
            self.mean, self.std = tuple(mean or HCL_MEAN), tuple(std or HCL_STD)
        else:
            if mean is None or std is None:
                raise ValueError("a one-channel dataset needs its own mean and std for the label view")
            self.mean, self.std = tuple(mean), tuple(std)
        self.augment = SimCLRAugment(size, scale=(crop_min_scale, 1.0)) if views == "simclr" else None

    @property
    def count(self) -> int:
        """Views per image (1 or 2)."""
        return 1 if self.views == "label" else 2

    def eval_view(self) -> Callable[[torch.Tensor], torch.Tensor]:
        """The deterministic view used for metrics and frozen features."""
        if self.views == "label":
            mean, std = self.mean, self.std
            return lambda x: normalize(x, mean, std)
        return to_float

    def train_views(self, images: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
        """``(B, C, H, W)`` uint8 -> ``(count * B, C, H, W)`` float: the view(s), first views first."""
        if self.augment is None:
            return normalize(images, self.mean, self.std)
        v1, v2 = self.augment.two_views(images, generator)
        return torch.cat([v1, v2])
