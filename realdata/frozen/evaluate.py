"""``python -m realdata eval``: frozen-feature evaluation of a trained encoder, stored as a tidy row.

:func:`evaluate_checkpoint` loads an encoder written by training (:func:`realdata.training.loop.load_encoder`),
evaluates it with :func:`realdata.evaluation.features.evaluate_frozen` (NCM on the projection ``z``, the HCL
authors' protocol; linear probe, weighted kNN and R@k on the backbone features ``h``, the WeiNCE
protocol) using the run's own deterministic view, and writes one row to ``RESULTS/eval/runs/``:
the run's config columns, the evaluation settings, ``run_key`` (a hash of the trained run's key and
the settings), ``epoch`` (of the checkpoint), then the metric columns with, for every metric, a
``*_features`` column saying which features it used (``h`` or ``z``).
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import pandas as pd
import torch

from realdata.datasets import load_dataset
from realdata.evaluation.features import evaluate_frozen
from realdata.inputs.pipeline import Views
from realdata.training import store
from realdata.training.loop import load_encoder
from synthetic.store.runs import run_path

__all__ = ["EVAL_SUBDIR", "evaluate_checkpoint", "eval_key"]

EVAL_SUBDIR = "eval"


def eval_key(trained_key: str, settings: dict[str, Any]) -> str:
    """Identity of one evaluation: sha1 of the trained run's key and the evaluation settings."""
    blob = json.dumps({"trained": trained_key, **settings}, sort_keys=True, separators=(",", ":"))
    return hashlib.sha1(blob.encode()).hexdigest()[:16]


def evaluate_checkpoint(
    checkpoint: str | Path,
    *,
    metrics: tuple[str, ...] = ("ncm", "probe", "knn", "recall"),
    root: str | None = None,
    device: str = "cpu",
    results: str | Path = "results/realdata",
    dataset: Any = None,
    probe_epochs: int = 100,
    probe_lr: float = 3e-4,
    probe_seed: int = 0,
    split_seed: int = 1,
    knn_k: int = 50,
    knn_temperature: float = 0.1,
    progress: bool = True,
    skip_existing: bool = False,
) -> tuple[dict[str, Any], Path]:
    """Evaluate the encoder of ``checkpoint`` and store the row; returns ``(row, path)``.

    Args:
        checkpoint: a training checkpoint (``checkpoints/<key>.final.pt`` or ``<key>.pt``).
        metrics: subset of ``ncm, probe, knn, recall``.
        root: dataset folder (not needed for digits).
        device: ``cpu`` or ``cuda``.
        results: the results folder; the row goes to ``results/eval``.
        dataset: the dataset (default loaded from ``root``).
        probe_epochs: linear-probe epochs.
        probe_lr: linear-probe learning rate.
        probe_seed: linear-probe seed.
        split_seed: seed of the stratified 80/20 split.
        knn_k: kNN neighbours.
        knn_temperature: kNN temperature.
        progress: progress bars.
        skip_existing: return the stored row when this evaluation was already stored.
    """
    dev = torch.device("cuda" if device == "cuda" else "cpu")
    model, cfg, payload = load_encoder(checkpoint, dev)
    if dataset is None:
        dataset = load_dataset(cfg.dataset, root)
    views = Views(
        str(cfg.views), dataset.channels, dataset.image_size, dataset.mean, dataset.std, cfg.crop_min_scale
    )
    # kNN and R@k need k below the bank size (80 % of the training split) on small datasets
    k = min(knn_k, int(len(dataset.train) * 0.8) - 1)
    settings = {
        "eval_metrics": ",".join(metrics),
        "probe_epochs": probe_epochs,
        "probe_lr": probe_lr,
        "probe_seed": probe_seed,
        "split_seed": split_seed,
        "knn_k": k,
        "knn_temperature": knn_temperature,
    }
    key = eval_key(str(payload["config_key"]), settings)
    folder = Path(results) / EVAL_SUBDIR
    if skip_existing and store.is_done(folder, key):
        frame = store.read_result(folder, key)
        return frame.iloc[0].to_dict(), run_path(folder, key)
    res = evaluate_frozen(
        model,
        dataset,
        device=dev,
        preprocess=views.eval_view(),
        metrics=metrics,
        probe_epochs=probe_epochs,
        probe_lr=probe_lr,
        probe_seed=probe_seed,
        split_seed=split_seed,
        knn_k=k,
        knn_temperature=knn_temperature,
        recall_ks=tuple(x for x in (1, 2, 5, 10, 20, 50) if x <= k),
        progress=progress,
    )
    row: dict[str, Any] = {
        **cfg.to_dict(),
        **settings,
        "trained_key": payload["config_key"],
        "run_key": key,
        "epoch": int(payload["epoch"]),
    }
    row.update(res.to_row())
    path = store.write_result(folder, pd.DataFrame([row]))
    return row, path
