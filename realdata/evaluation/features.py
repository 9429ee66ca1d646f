"""Frozen-feature evaluation: feature extraction, NCM, linear probe, weighted kNN and R@k.

Protocols (each result names the features it used: ``h`` = backbone output, ``z`` = projection):

* **NCM** (:func:`ncm_classify`, on ``z``): the hard-negative authors' classifier (arXiv
  2311.05139, Sec. 5): class means ``mu_c`` of the (normalised) training projections, **not**
  re-normalised; a test point is assigned ``argmax_c z . mu_c`` (raw inner product); top-1 and
  top-5.
* **Linear probe** (:func:`linear_probe`, on ``h``): the WeiNCE protocol (arXiv 2606.00262,
  Sec. 5, Table 2): ``nn.Linear(feat, C)`` on raw backbone features, Adam (lr 3e-4, no weight
  decay), batch 256, 100 epochs, trained on a stratified 80 % of the training features (split
  seed fixed, independent of the probe's seed); validation top-1 on the other 20 %, test top-1
  on the test set.
* **Weighted kNN and R@k** (:mod:`realdata.evaluation.knn`, on ``h``): bank = the same 80 % split, queries
  = the 20 % validation split and the test set.

Features are extracted in eval mode without augmentation (:func:`extract_features`), in
batches, on any device, optionally under bf16 autocast, and returned in float32. Accuracies are
fractions in ``[0, 1]`` in which every sample counts once (the WeiNCE scripts drop the last
incomplete batch when extracting features, 49 920 of 50 000 CIFAR training images, and average
per-batch accuracies).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass

import torch
from torch import nn
from tqdm.auto import tqdm

from realdata.evaluation._checks import check_features, check_features_name, check_labels, check_positive_int
from realdata.evaluation.knn import RECALL_KS, KNNResult, RecallResult, knn_classify, recall_at_k
from realdata.evaluation.probe import LinearProbeResult, linear_probe, stratified_split
from realdata.inputs.views import to_float

__all__ = [
    "Features",
    "NCMResult",
    "LinearProbeResult",
    "FrozenEvaluation",
    "extract_features",
    "ncm_classify",
    "stratified_split",
    "linear_probe",
    "evaluate_frozen",
    "KNNResult",
    "RecallResult",
    "knn_classify",
    "recall_at_k",
    "RECALL_KS",
]


@dataclass(frozen=True)
class Features:
    """Backbone features ``h``, projections ``z`` (float32) and labels of one split.

    Shape:
        h ``(N, feat_dim)``, z ``(N, d)``, labels ``(N,)``.
    """

    h: torch.Tensor
    z: torch.Tensor
    labels: torch.Tensor | None

    def __len__(self) -> int:
        return int(self.h.shape[0])


@dataclass(frozen=True)
class NCMResult:
    """NCM accuracies (fractions). ``top5`` is top-``min(5, C)``."""

    top1: float
    top5: float
    features: str
    num_queries: int


@dataclass(frozen=True)
class FrozenEvaluation:
    """All frozen-feature metrics of one encoder (``None`` for a metric that was not run)."""

    ncm: NCMResult | None
    probe: LinearProbeResult | None
    knn_val: KNNResult | None
    knn_test: KNNResult | None
    recall_val: RecallResult | None
    recall_test: RecallResult | None

    def to_row(self) -> dict[str, float | str | None]:
        """One flat row for a tidy results table (metric columns plus ``*_features``)."""
        row: dict[str, float | str | None] = {}
        if self.ncm is not None:
            row.update(ncm_top1=self.ncm.top1, ncm_top5=self.ncm.top5, ncm_features=self.ncm.features)
        if self.probe is not None:
            row.update(probe_val_top1=self.probe.val_top1, probe_test_top1=self.probe.test_top1,
                       probe_features=self.probe.features)  # fmt: skip
        for name, knn in (("knn_val", self.knn_val), ("knn_test", self.knn_test)):
            if knn is not None:
                row[name] = knn.accuracy
                row["knn_features"] = knn.features
        for name, rec in (("val", self.recall_val), ("test", self.recall_test)):
            if rec is not None:
                row.update({f"recall{k}_{name}": v for k, v in rec.recall.items()})
                row["recall_features"] = rec.features
        return row

    def to_dict(self) -> dict:
        """Nested plain-Python form (JSON-serialisable)."""
        return {k: (None if v is None else asdict(v)) for k, v in self.__dict__.items()}


def _device(device) -> torch.device:
    return torch.device(device) if device is not None else torch.device("cpu")


def extract_features(
    model: nn.Module,
    images: torch.Tensor,
    labels: torch.Tensor | None = None,
    *,
    batch_size: int = 512,
    device: torch.device | str | None = None,
    preprocess: Callable[[torch.Tensor], torch.Tensor] | None = None,
    autocast_bf16: bool = False,
    progress: bool = True,
) -> Features:
    """``h`` and ``z`` of every image, in eval mode, without augmentation.

    The model's training flag is restored afterwards; no gradients are recorded.

    Args:
        model: returns ``(h, z)`` (a :class:`realdata.training.models.ModelOutput`) for a batch.
        images: ``uint8`` or float images, on any device (moved batch by batch).
        labels: optional labels, returned alongside (as int64 on ``device``).
        batch_size: images per forward pass.
        device: where the model runs and the features are returned (default CPU).
        preprocess: batch on ``device`` -> model input; default :func:`realdata.inputs.views.to_float`
            (``x / 255``). Pass the training view's normalisation (e.g.
            :func:`realdata.inputs.views.hcl_view`) for a model trained on normalised inputs.
        autocast_bf16: run the forward passes under ``torch.autocast(bfloat16)``.
        progress: show a progress bar (on a terminal).

    Returns:
        :class:`Features` in float32.

    Shape:
        images ``(N, C, H, W)`` -> h ``(N, feat_dim)``, z ``(N, d)``.
    """
    if not isinstance(images, torch.Tensor) or images.ndim != 4 or images.shape[0] == 0:
        got = getattr(images, "shape", type(images))
        raise ValueError(f"images must be a non-empty (N, C, H, W) tensor, got {got!r}")
    check_positive_int("batch_size", batch_size)
    dev = _device(device)
    if labels is not None:
        labels = check_labels(labels, images.shape[0], "labels").to(dev)
    prep = preprocess or to_float
    was_training = model.training
    model.eval()
    hs, zs = [], []
    try:
        with torch.inference_mode(), torch.autocast(dev.type, dtype=torch.bfloat16, enabled=autocast_bf16):
            starts = range(0, images.shape[0], batch_size)
            for s in tqdm(starts, desc="features", disable=None if progress else True, leave=False):
                out = model(prep(images[s : s + batch_size].to(dev, non_blocking=True)))
                h, z = out[0], out[1]
                hs.append(h.float())
                zs.append(z.float())
    finally:
        model.train(was_training)
    return Features(torch.cat(hs), torch.cat(zs), labels)


def ncm_classify(
    train_z: torch.Tensor,
    train_labels: torch.Tensor,
    test_z: torch.Tensor,
    test_labels: torch.Tensor,
    *,
    num_classes: int | None = None,
    features: str = "z",
    chunk_size: int = 8192,
) -> NCMResult:
    """Nearest-class-mean accuracy by raw inner product with un-normalised class means.

    ``mu_c = mean of train_z over class c``; score ``s_c(x) = z(x) . mu_c``. A test point is
    correct at top-``k`` when fewer than ``k`` classes rank above its class (equal scores rank
    the lower class index first, so top-1 is ``argmax`` with first-index ties).
    (arXiv 2311.05139, Sec. 5.)

    Args:
        train_z: training projections (every class present).
        train_labels: their labels.
        test_z: evaluated projections.
        test_labels: their labels.
        num_classes: ``C``; default ``max(train_labels) + 1``.
        features: which features these are (``z`` in the authors' protocol).
        chunk_size: test points scored at a time.

    Returns:
        :class:`NCMResult` with top-1 and top-``min(5, C)``.

    Shape:
        train_z ``(N, d)``, train_labels ``(N,)``, test_z ``(M, d)``, test_labels ``(M,)``.
    """
    features = check_features_name(features)
    tr = check_features(train_z, "train_z")
    te = check_features(test_z, "test_z")
    if te.shape[1] != tr.shape[1]:
        raise ValueError(f"test_z has d = {te.shape[1]} but train_z has d = {tr.shape[1]}")
    ytr = check_labels(train_labels, tr.shape[0], "train_labels", num_classes).to(tr.device)
    C = num_classes if num_classes is not None else int(ytr.max()) + 1
    yte = check_labels(test_labels, te.shape[0], "test_labels", C).to(tr.device)
    check_positive_int("chunk_size", chunk_size)
    dtype = torch.promote_types(tr.dtype, te.dtype)
    counts = torch.bincount(ytr, minlength=C)
    if bool((counts == 0).any()):
        missing = torch.nonzero(counts == 0).flatten().tolist()
        raise ValueError(f"train_labels has no sample of classes {missing[:10]}: their means are undefined")
    mu = torch.zeros(C, tr.shape[1], dtype=dtype, device=tr.device).index_add_(0, ytr, tr.to(dtype))
    mu /= counts[:, None].to(dtype)
    k5 = min(5, C)
    classes = torch.arange(C, device=tr.device)
    hits1 = hits5 = 0
    for s in range(0, te.shape[0], chunk_size):
        scores = te[s : s + chunk_size].to(device=tr.device, dtype=dtype) @ mu.T
        y = yte[s : s + chunk_size]
        own = scores.gather(1, y[:, None])
        rank = (scores > own).sum(1) + ((scores == own) & (classes[None, :] < y[:, None])).sum(1)
        hits1 += int((rank < 1).sum())
        hits5 += int((rank < k5).sum())
    n = te.shape[0]
    return NCMResult(hits1 / n, hits5 / n, features, n)


def evaluate_frozen(
    model: nn.Module,
    dataset,
    *,
    device: torch.device | str | None = None,
    preprocess: Callable[[torch.Tensor], torch.Tensor] | None = None,
    batch_size: int = 512,
    autocast_bf16: bool = False,
    metrics: tuple[str, ...] = ("ncm", "probe", "knn", "recall"),
    probe_epochs: int = 100,
    probe_batch_size: int = 256,
    probe_lr: float = 3e-4,
    probe_seed: int = 0,
    val_fraction: float = 0.2,
    split_seed: int = 1,
    knn_k: int = 50,
    knn_temperature: float = 0.1,
    recall_ks: tuple[int, ...] = RECALL_KS,
    progress: bool = True,
) -> FrozenEvaluation:
    """Every frozen-feature metric of ``model`` on an :class:`~realdata.datasets.ImageDataset`.

    NCM on ``z`` (train means, test queries); the linear probe, kNN and R@k on ``h`` with the
    stratified ``val_fraction`` split of the training set (seed ``split_seed``): the probe and
    the kNN bank use its larger part, validation metrics its smaller part, test metrics the test
    split. Features are extracted once per split (:func:`extract_features`).

    Args:
        model: returns ``(h, z)``.
        dataset: with ``train`` / ``test`` splits of ``images`` and ``labels``, ``num_classes``.
        device: see :func:`extract_features`.
        preprocess: see :func:`extract_features`.
        batch_size: see :func:`extract_features`.
        autocast_bf16: see :func:`extract_features`.
        metrics: subset of ``("ncm", "probe", "knn", "recall")``.
        probe_epochs: see :func:`linear_probe` (``epochs``).
        probe_batch_size: see :func:`linear_probe` (``batch_size``).
        probe_lr: see :func:`linear_probe` (``lr``).
        probe_seed: see :func:`linear_probe` (``seed``).
        val_fraction: share of the training set held out by the stratified split.
        split_seed: seed of the stratified split.
        knn_k: see :func:`realdata.evaluation.knn.knn_classify` (``k``).
        knn_temperature: see :func:`realdata.evaluation.knn.knn_classify` (``temperature``).
        recall_ks: see :func:`realdata.evaluation.knn.recall_at_k`.
        progress: progress bars.

    Returns:
        :class:`FrozenEvaluation`.
    """
    known = ("ncm", "probe", "knn", "recall")
    if not metrics or any(m not in known for m in metrics):
        raise ValueError(f"metrics must be a non-empty subset of {known}, got {metrics!r}")

    def features(split) -> tuple[Features, torch.Tensor]:
        f = extract_features(model, split.images, split.labels, batch_size=batch_size, device=device,
                             preprocess=preprocess, autocast_bf16=autocast_bf16, progress=progress)  # fmt: skip
        assert f.labels is not None  # labels were passed
        return f, f.labels

    train, ytr = features(dataset.train)
    test, yte = features(dataset.test)
    C = dataset.num_classes
    ncm: NCMResult | None = None
    probe: LinearProbeResult | None = None
    knn_val: KNNResult | None = None
    knn_test: KNNResult | None = None
    rec_val: RecallResult | None = None
    rec_test: RecallResult | None = None
    if "ncm" in metrics:
        ncm = ncm_classify(train.z, ytr, test.z, yte, num_classes=C)
    if "probe" in metrics:
        probe = linear_probe(train.h, ytr, test.h, yte, num_classes=C,
                             epochs=probe_epochs, batch_size=probe_batch_size, lr=probe_lr,
                             val_fraction=val_fraction, split_seed=split_seed, seed=probe_seed,
                             device=device, progress=progress)  # fmt: skip
    if "knn" in metrics or "recall" in metrics:
        bank_idx, val_idx = stratified_split(ytr, val_fraction, split_seed)
        bank_idx, val_idx = bank_idx.to(train.h.device), val_idx.to(train.h.device)
        bank, yb = train.h[bank_idx], ytr[bank_idx]
        val, yv = train.h[val_idx], ytr[val_idx]
        if "knn" in metrics:
            knn_val = knn_classify(bank, yb, val, yv, k=knn_k, temperature=knn_temperature, num_classes=C)
            knn_test = knn_classify(bank, yb, test.h, yte, k=knn_k,
                                    temperature=knn_temperature, num_classes=C)  # fmt: skip
        if "recall" in metrics:
            rec_val = recall_at_k(bank, yb, val, yv, ks=recall_ks)
            rec_test = recall_at_k(bank, yb, test.h, yte, ks=recall_ks)
    return FrozenEvaluation(ncm, probe, knn_val, knn_test, rec_val, rec_test)
