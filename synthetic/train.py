"""One synthetic run: ``train_run(config)`` is the R = 1 case of the engine.

:func:`train_run` trains the run described by a ``synthetic.config.RunConfig`` with
:func:`synthetic.engine.train_runs` and returns its tidy table: one row per recorded epoch, the
resolved config columns (``RunConfig.to_dict()``), then ``run_key`` (``config.key()``), ``epoch``
and the metric columns (:func:`synthetic.engine.metric_columns`; docs/metrics.md). How each
method consumes a batch is described in :mod:`synthetic.objective`, the epochs, batches, skipped
steps, near-NC initialisation and failures in :mod:`synthetic.engine`, the metrics in
:mod:`synthetic.evaluation`. The same config gives an identical table (bit for bit on the same
machine and thread count).
"""

from __future__ import annotations

import json
import os

import numpy as np
import pandas as pd
import torch

from synthetic.config import RunConfig
from synthetic.engine import FULL_LOSS_MAX, epoch_batches, recorded_epochs, train_runs
from synthetic.evaluation import closed_form_optimum, collapse_metrics

__all__ = [
    "FULL_LOSS_MAX",
    "train_run",
    "collapse_metrics",
    "closed_form_optimum",
    "decode_class_means",
    "recorded_epochs",
    "epoch_batches",
]


def train_run(
    config: RunConfig,
    *,
    progress: bool = False,
    device: str | torch.device = "cpu",
    state_dir: str | os.PathLike | None = None,
) -> pd.DataFrame:
    """Train one run with Adam and return its per-epoch table (see the module docstring).

    Args:
        config: a validated :class:`synthetic.config.RunConfig`.
        progress: show a tqdm bar over epochs (only on a terminal).
        device: torch device of the model and data (random draws stay on the CPU generators).
        state_dir: where the source state of an ``init="nc"`` run is saved and reused.

    Returns:
        ``pandas.DataFrame`` with ``len(recorded_epochs(num_epochs, eval_every))`` rows.

    Raises:
        ValueError: ``config`` is not a RunConfig, or every step of an epoch was skipped (each
            mini-batch held a single class under SCL/HSCL).
        NonFiniteRun: the parameters, embeddings or training loss became non-finite
            (``synthetic.errors``; a ``FloatingPointError``).
    """
    if not isinstance(config, RunConfig):
        raise ValueError(f"config must be a RunConfig, got {type(config).__name__}")
    return train_runs([config], progress=progress, device=device, state_dir=state_dir)[0]


def decode_class_means(value: str) -> np.ndarray:
    """Decode a ``class_means`` cell (JSON list of lists) to a ``(C, d)`` float64 array."""
    if not isinstance(value, str):
        raise ValueError(f"value must be a JSON string, got {type(value).__name__}")
    return np.asarray(json.loads(value), dtype=np.float64)
