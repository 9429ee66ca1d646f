"""Linear probe on frozen features, the WeiNCE protocol (arXiv 2606.00262, Sec. 5, Table 2).

``nn.Linear(feat, C)`` on raw (unnormalised) backbone features ``h``; Adam, lr 3e-4, no weight
decay; batch 256; 100 epochs; trained on a stratified 80 % of the training features, the split
seed fixed (1) and independent of the probe's seed; validation top-1 on the other 20 %, test
top-1 on the test set. Accuracies are fractions over all evaluated samples.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch
from sklearn.model_selection import StratifiedShuffleSplit
from torch import nn
from tqdm.auto import tqdm

from realdata.evaluation._checks import check_features, check_features_name, check_labels, check_positive_int

__all__ = ["LinearProbeResult", "stratified_split", "linear_probe"]


@dataclass(frozen=True)
class LinearProbeResult:
    """Linear-probe accuracies (fractions); ``val_top1`` is ``None`` without a validation split."""

    val_top1: float | None
    test_top1: float
    train_top1: float
    final_loss: float
    features: str
    epochs: int


def stratified_split(
    labels: torch.Tensor, val_fraction: float = 0.2, seed: int = 1
) -> tuple[torch.Tensor, torch.Tensor]:
    """Stratified train / validation indices (:class:`sklearn.model_selection.StratifiedShuffleSplit`).

    Args:
        labels: class labels.
        val_fraction: share held out, in ``(0, 1)``.
        seed: split seed (the WeiNCE protocol fixes it at 1).

    Returns:
        ``(train_idx, val_idx)``, sorted int64 tensors on the CPU.

    Shape:
        labels ``(N,)``.
    """
    if not isinstance(val_fraction, (int, float)) or not 0.0 < val_fraction < 1.0:
        raise ValueError(f"val_fraction must lie in (0, 1), got {val_fraction!r}")
    if not isinstance(labels, torch.Tensor) or labels.ndim != 1 or labels.numel() == 0:
        got = getattr(labels, "shape", type(labels))
        raise ValueError(f"labels must be a non-empty 1-D tensor, got {got!r}")
    y = check_labels(labels, labels.shape[0], "labels")
    y_np = y.cpu().numpy()
    try:
        split = StratifiedShuffleSplit(n_splits=1, test_size=float(val_fraction), random_state=int(seed))
        tr, va = next(split.split(np.zeros(len(y_np)), y_np))
    except ValueError as e:
        raise ValueError(f"labels cannot be split {val_fraction:g} stratified: {e}") from e
    return torch.from_numpy(np.sort(tr)), torch.from_numpy(np.sort(va))


def linear_probe(
    train_h: torch.Tensor,
    train_labels: torch.Tensor,
    test_h: torch.Tensor,
    test_labels: torch.Tensor,
    *,
    num_classes: int | None = None,
    epochs: int = 100,
    batch_size: int = 256,
    lr: float = 3e-4,
    val_fraction: float = 0.2,
    split_seed: int = 1,
    seed: int = 0,
    features: str = "h",
    device: torch.device | str | None = None,
    progress: bool = True,
) -> LinearProbeResult:
    """Linear probe on frozen features, WeiNCE protocol (arXiv 2606.00262, Sec. 5).

    ``nn.Linear(feat, C)`` on the raw features, cross-entropy, Adam(``lr``, no weight decay),
    shuffled mini-batches of ``batch_size`` (the last one kept) for ``epochs`` epochs, trained on
    the stratified ``1 - val_fraction`` part of the training features (:func:`stratified_split`
    with ``split_seed``); ``seed`` drives the initialisation and the batch order.

    Args:
        train_h: training features.
        train_labels: their labels.
        test_h: test features.
        test_labels: their labels.
        num_classes: ``C``; default ``max(train_labels) + 1``.
        epochs: training epochs (the protocol's 100).
        batch_size: mini-batch size (the protocol's 256).
        lr: Adam learning rate (the protocol's 3e-4).
        val_fraction: validation share; 0 trains on all training features (no ``val_top1``).
        split_seed: seed of the stratified split.
        seed: seed of the probe (initialisation, batch order).
        features: which features these are (``h`` in the protocol).
        device: where to train (default CPU).
        progress: show a progress bar (on a terminal).

    Returns:
        :class:`LinearProbeResult`.

    Shape:
        train_h ``(N, feat)``, train_labels ``(N,)``, test_h ``(M, feat)``, test_labels ``(M,)``.
    """
    features = check_features_name(features)
    tr = check_features(train_h, "train_h")
    te = check_features(test_h, "test_h")
    if te.shape[1] != tr.shape[1]:
        raise ValueError(f"test_h has dimension {te.shape[1]} but train_h has {tr.shape[1]}")
    ytr = check_labels(train_labels, tr.shape[0], "train_labels", num_classes)
    C = num_classes if num_classes is not None else int(ytr.max()) + 1
    yte = check_labels(test_labels, te.shape[0], "test_labels", C)
    check_positive_int("epochs", epochs)
    check_positive_int("batch_size", batch_size)
    if not isinstance(lr, (int, float)) or not lr > 0 or not math.isfinite(lr):
        raise ValueError(f"lr must be a finite number > 0, got {lr!r}")
    if not isinstance(val_fraction, (int, float)) or not 0.0 <= val_fraction < 1.0:
        raise ValueError(f"val_fraction must lie in [0, 1), got {val_fraction!r}")
    dev = torch.device(device) if device is not None else torch.device("cpu")
    if val_fraction > 0:
        fit_idx, val_idx = stratified_split(ytr, val_fraction, split_seed)
    else:
        fit_idx, val_idx = torch.arange(tr.shape[0]), None
    x = tr.to(dev, torch.float32)
    y = ytr.to(dev)
    xf, yf = x[fit_idx.to(dev)], y[fit_idx.to(dev)]
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        probe = nn.Linear(tr.shape[1], C)
    probe = probe.to(dev)
    opt = torch.optim.Adam(probe.parameters(), lr=lr, weight_decay=0.0)
    order = torch.Generator().manual_seed(seed)
    epoch_loss = torch.zeros((), device=dev)
    for _ in tqdm(range(epochs), desc="linear probe", disable=None if progress else True, leave=False):
        perm = torch.randperm(xf.shape[0], generator=order).to(dev)
        total, steps = torch.zeros((), device=dev), 0
        for s in range(0, xf.shape[0], batch_size):
            b = perm[s : s + batch_size]
            loss = nn.functional.cross_entropy(probe(xf[b]), yf[b])
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            total += loss.detach()
            steps += 1
        epoch_loss = total / steps
    with torch.no_grad():

        def accuracy(feats: torch.Tensor, labels: torch.Tensor) -> float:
            correct = 0
            for s in range(0, feats.shape[0], 8192):
                pred = probe(feats[s : s + 8192].to(dev, torch.float32)).argmax(1)
                correct += int((pred == labels[s : s + 8192].to(dev)).sum())
            return correct / feats.shape[0]

        val = None if val_idx is None else accuracy(x[val_idx.to(dev)], y[val_idx.to(dev)])
        result = LinearProbeResult(
            val_top1=val,
            test_top1=accuracy(te, yte),
            train_top1=accuracy(xf, yf),
            final_loss=float(epoch_loss),
            features=features,
            epochs=epochs,
        )
    return result
