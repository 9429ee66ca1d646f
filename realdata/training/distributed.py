"""Several processes (``torchrun`` + DDP): the process group, gathers and rank slices.

A :class:`World` is this process's place in the job: ``rank`` and ``size`` (1 without
``torch.distributed``). Its gathers concatenate the per-rank tensors along dim 0 in rank order;
:meth:`World.gather` is differentiable (``torch.distributed.nn.functional.all_gather``: its backward
sums every rank's gradient of a gathered piece and returns it to the rank that owns the piece), so a
loss computed on the gathered global batch sends gradients back to every rank's encoder.

:func:`init_world` reads the variables ``torchrun`` sets (``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``,
``MASTER_ADDR``, ``MASTER_PORT``) and joins the group: backend ``nccl`` on CUDA, ``gloo`` on the CPU
(the tests spawn two gloo processes). Nothing here imports the rest of the package.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist

__all__ = ["World", "SINGLE", "init_world", "close_world", "rank_slice"]


@dataclass(frozen=True)
class World:
    """This process's rank and the number of processes (``size``)."""

    rank: int = 0
    size: int = 1

    def __post_init__(self) -> None:
        if self.size < 1 or not 0 <= self.rank < self.size:
            raise ValueError(f"need 0 <= rank < size, got rank={self.rank}, size={self.size}")

    @property
    def is_main(self) -> bool:
        """True on rank 0 (the process that writes files)."""
        return self.rank == 0

    @property
    def distributed(self) -> bool:
        """True with more than one process."""
        return self.size > 1

    def gather(self, t: torch.Tensor) -> torch.Tensor:
        """Differentiable all-gather: ``cat`` of every rank's ``t`` along dim 0, in rank order.

        Shape:
            ``(n, ...)`` on every rank -> ``(size * n, ...)``.
        """
        if not self.distributed:
            return t
        from torch.distributed.nn.functional import all_gather

        return torch.cat(all_gather(t.contiguous()), dim=0)

    def gather_nograd(self, t: torch.Tensor) -> torch.Tensor:
        """All-gather without autograd (labels, statistics)."""
        if not self.distributed:
            return t
        parts = [torch.empty_like(t) for _ in range(self.size)]
        dist.all_gather(parts, t.contiguous())
        return torch.cat(parts, dim=0)

    def sum(self, t: torch.Tensor) -> torch.Tensor:
        """All-reduce sum (no autograd); returns a new tensor."""
        out = t.detach().clone()
        if self.distributed:
            dist.all_reduce(out, op=dist.ReduceOp.SUM)
        return out

    def all_objects(self, obj: Any) -> list[Any]:
        """Every rank's picklable ``obj``, in rank order."""
        if not self.distributed:
            return [obj]
        out: list[Any] = [None] * self.size
        dist.all_gather_object(out, obj)
        return out

    def barrier(self) -> None:
        """Wait for every rank."""
        if self.distributed:
            dist.barrier()


#: The single-process world.
SINGLE = World()


def rank_slice(n_global: int, world: World) -> slice:
    """The rows of the global batch that belong to ``world.rank`` (equal contiguous blocks).

    Raises:
        ValueError: ``n_global`` is not divisible by the number of processes.
    """
    if n_global % world.size:
        raise ValueError(f"batch_size = {n_global} must be divisible by the number of processes {world.size}")
    n = n_global // world.size
    return slice(world.rank * n, (world.rank + 1) * n)


def init_world(device: str = "cpu") -> tuple[World, torch.device]:
    """Join the process group described by the ``torchrun`` environment, if any.

    Args:
        device: ``cpu`` or ``cuda`` (``cuda`` picks ``cuda:LOCAL_RANK`` under torchrun).

    Returns:
        ``(world, device)``; a single-process world when ``WORLD_SIZE`` is unset or 1.
    """
    if device not in ("cpu", "cuda"):
        raise ValueError(f"device must be 'cpu' or 'cuda', got {device!r}")
    size = int(os.environ.get("WORLD_SIZE", "1"))
    if device == "cuda" and not torch.cuda.is_available():
        raise ValueError("device 'cuda' requested but torch.cuda.is_available() is False")
    if size <= 1:
        return SINGLE, torch.device("cuda" if device == "cuda" else "cpu")
    rank = int(os.environ["RANK"])
    local = int(os.environ.get("LOCAL_RANK", "0"))
    if device == "cuda":
        torch.cuda.set_device(local)
        dev = torch.device("cuda", local)
        backend = "nccl"
    else:
        dev = torch.device("cpu")
        backend = "gloo"
    if not dist.is_initialized():
        dist.init_process_group(backend=backend, rank=rank, world_size=size)
    return World(rank, size), dev


def close_world(world: World) -> None:
    """Leave the process group (no-op for a single process)."""
    if world.distributed and dist.is_initialized():
        dist.destroy_process_group()
