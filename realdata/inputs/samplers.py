"""The class-balanced batch sampler of the real-data runs.

(The authors' shuffled ``drop_last`` batches are the one batch rule of both experiment stacks,
:func:`synthetic.engine.data.epoch_batches`: the hard-negative code's ``shuffle=True,
drop_last=True``, 97 steps of 512 on CIFAR-100, arXiv 2311.05139, Sec. 5; the WeiNCE recipe
likewise, 195 steps of 256, arXiv 2606.00262, Sec. 5.)

* :func:`class_balanced_batches`: every batch holds ``m`` classes with ``n`` samples each (``m``
  defaults to all classes), for the supervised (SCL / HSCL) family, where a batch with few
  same-class members has few positives. Within a batch no index repeats; each class's samples
  are drawn ``n`` at a time from a random permutation of the class, and a new permutation is
  drawn only when fewer than ``n`` are left (those few wait for the next pass).

It returns a list of 1-D ``int64`` index tensors on the generator's device and draws all its
randomness from the explicit ``torch.Generator``: the same generator state gives the same batches.
"""

from __future__ import annotations

import torch

__all__ = ["class_balanced_batches"]


def _positive_int(name: str, value) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{name} must be an integer >= 1, got {value!r}")
    return value


def class_balanced_batches(
    labels: torch.Tensor,
    samples_per_class: int,
    *,
    generator: torch.Generator,
    classes_per_batch: int | None = None,
    num_batches: int | None = None,
) -> list[torch.Tensor]:
    """Batches of ``m`` classes x ``n`` samples each, seeded.

    Classes are taken ``m`` at a time from a random permutation of the classes present (a new
    permutation when fewer than ``m`` are left); each class's samples ``n`` at a time from a
    random permutation of that class (a new one when fewer than ``n`` are left). The indices of
    a batch are then shuffled.

    Args:
        labels: class label of every sample.
        samples_per_class: ``n``; at most the size of the smallest class.
        generator: source of all random choices.
        classes_per_batch: ``m``; default all classes present (batch size ``C * n``).
        num_batches: batches to draw; default ``N // (m n)`` (about one pass over the data).

    Returns:
        ``num_batches`` index tensors of ``m * n`` indices.

    Shape:
        labels ``(N,)`` -> each batch ``(m * n,)``.
    """
    if not isinstance(labels, torch.Tensor) or labels.ndim != 1 or labels.numel() == 0:
        raise ValueError(f"labels must be a non-empty 1-D tensor, got {getattr(labels, 'shape', labels)!r}")
    if labels.is_floating_point() or labels.dtype == torch.bool:
        raise ValueError(f"labels must be integers, got {labels.dtype}")
    n = _positive_int("samples_per_class", samples_per_class)
    dev = generator.device
    classes, inverse, counts = torch.unique(labels.cpu(), return_inverse=True, return_counts=True)
    C = classes.numel()
    m = C if classes_per_batch is None else _positive_int("classes_per_batch", classes_per_batch)
    if m > C:
        raise ValueError(f"classes_per_batch = {m} exceeds the {C} classes present in labels")
    if n > int(counts.min()):
        raise ValueError(
            f"samples_per_class = {n} exceeds the smallest class ({int(counts.min())} samples, "
            f"label {int(classes[counts.argmin()])})"
        )
    steps = labels.numel() // (m * n) if num_batches is None else num_batches
    if num_batches is not None:
        _positive_int("num_batches", num_batches)
    steps = max(steps, 1)
    order = torch.argsort(inverse, stable=True)
    members = list(order.split(counts.tolist()))  # indices of each class, ascending
    queues = [torch.empty(0, dtype=torch.int64)] * C
    class_queue = torch.empty(0, dtype=torch.int64)
    batches = []
    for _ in range(steps):
        if class_queue.numel() < m:
            class_queue = torch.randperm(C, generator=generator, device=dev).cpu()
        chosen, class_queue = class_queue[:m], class_queue[m:]
        parts = []
        for c in chosen.tolist():
            if queues[c].numel() < n:
                perm = torch.randperm(members[c].numel(), generator=generator, device=dev).cpu()
                queues[c] = members[c][perm]
            parts.append(queues[c][:n])
            queues[c] = queues[c][n:]
        batch = torch.cat(parts)
        shuffle = torch.randperm(batch.numel(), generator=generator, device=dev).cpu()
        batches.append(batch[shuffle].to(dev))
    return batches
