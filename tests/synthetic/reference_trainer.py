"""Reference trainer: the sequential single-run trainer the engine is checked against.

A frozen copy of ``synthetic.engine.train.train_run`` as it was before the one engine existed (one
``ContrastiveModel``, one ``torch.optim.Adam``, one ``theory.hcl.contrastive_loss`` call per step,
the metric step of the time), with its own copy of the encoders, so that a change of
``synthetic.engine.models`` / ``synthetic.engine.train`` cannot change the reference. Two small, obviously
sequential extensions cover the fields added with the engine: an MLP of any depth, a step budget
(``max_steps``: stop after that many mini-batches) and the near-NC initialisation (``init="nc"``:
train the source with this trainer, then continue from its model with a fresh Adam). Tests
compare the engine's tables with these, run by run (tests/synthetic/engine/test_engine.py).
"""

from __future__ import annotations

import json
import math
from typing import Any

import numpy as np
import pandas as pd
import torch
from torch import nn

from synthetic.engine.config import RunConfig
from synthetic.engine.data import make_data, noise_like, run_generators, same_class_partners, stream_seed
from theory.geometry import Normalize
from theory.options import ESTIMATORS, HCL_METHODS
from theory.validation import one_of

__all__ = ["REFERENCE_METRICS", "reference_train_run"]

#: The metric columns of the reference tables (the engine writes these and more).
REFERENCE_METRICS = (
    "loss",
    "skipped_steps",
    "full_loss",
    "optimum",
    "gap_to_optimum",
    "full_gap",
    "unit_norm",
    "zero_sum",
    "etf_mean",
    "etf_max",
    "within_class_variation",
    "nc1",
    "nc2_equinorm",
    "nc2_equiangularity",
    "etf_error",
    "effective_rank",
    "rankme",
    "spectrum_min",
    "mean_norm",
    "ncm_acc",
    "ncm_top5",
    "train_ncm_acc",
)


# ------------------------------------------------------------------------------ encoders


def _uniform(shape, bound, generator, dtype):
    t = (torch.rand(*shape, generator=generator, dtype=torch.float64) * 2.0 - 1.0) * bound
    return nn.Parameter(t.to(dtype))


class _Free(nn.Module):
    def __init__(self, n, d, init_scale, generator, dtype):
        super().__init__()
        w = torch.randn(n, d, generator=generator, dtype=torch.float64)
        self.weight = nn.Parameter((w * (init_scale / math.sqrt(d))).to(dtype))

    def forward(self, idx):
        return self.weight[idx]


class _Linear(nn.Module):
    def __init__(self, D, d, generator, dtype):
        super().__init__()
        bound = 1.0 / math.sqrt(D)
        self.weight = _uniform((D, d), bound, generator, dtype)
        self.bias = _uniform((d,), bound, generator, dtype)

    def forward(self, x):
        return torch.addmm(self.bias, x, self.weight)


class _MLP(nn.Module):
    def __init__(self, D, hidden, d, depth, generator, dtype):
        super().__init__()
        sizes = [D] + [hidden] * depth + [d]
        self.layers = []
        for i, (a, b) in enumerate(zip(sizes[:-1], sizes[1:])):
            bound = 1.0 / math.sqrt(a)
            w = _uniform((a, b), bound, generator, dtype)
            bias = _uniform((b,), bound, generator, dtype)
            self.register_parameter(f"w{i}", w)
            self.register_parameter(f"b{i}", bias)
            self.layers.append((w, bias))

    def forward(self, x):
        for i, (w, b) in enumerate(self.layers):
            x = torch.addmm(b, x, w)
            if i < len(self.layers) - 1:
                x = torch.relu(x)
        return x


class _Model(nn.Module):
    def __init__(self, backbone, normalization):
        super().__init__()
        self.backbone = backbone
        self.norm = Normalize(normalization)
        self.is_free = isinstance(backbone, _Free)

    def forward(self, inputs, noise=None):
        if noise is None:
            return self.norm(self.backbone(inputs))
        if self.is_free:
            return self.norm(self.backbone(inputs) + noise)
        return self.norm(self.backbone(inputs + noise))


def build_model(config, generator=None):
    d, dtype = config.embed_dim, config.torch_dtype
    if config.encoder == "free":
        bb = _Free(config.num_train, d, config.init_scale, generator, dtype)
    elif config.encoder == "linear":
        bb = _Linear(config.input_dim, d, generator, dtype)
    else:
        bb = _MLP(config.input_dim, config.hidden, d, config.depth, generator, dtype)
    return _Model(bb, config.normalization)


#: full_loss is computed only when the evaluation batch (N, or 2N for two views) is at most this.
FULL_LOSS_MAX = 4096


# ------------------------------------------------------------------------------ closed forms


def closed_form_optimum(config: RunConfig, estimator: str | None = None) -> float:
    """Closed-form NC value of the loss of ``config`` (docs/hcl.md#theory).

    With ``a = -C / ((C - 1) tau)`` (the scaled cross-class ``t`` at NC) and ``K`` negatives:

    * SCL/HSCL: ``psi(a, ..., a)``: mean ``log(1 + e^a)``, sum ``log(1 + K e^a)``,
      triplet ``max(0, a + margin)`` (L*_SCL; attained at NC for every beta).
    * UCL/HUCL (same-class negatives have ``t = 0``): sampled estimator ->
      ``sum_m Binom(m; K, 1/C) psi(0^m, a^(K-m))``; expectation estimator -> the same with the
      average inside psi: mean ``log(1 + 1/C + (1 - 1/C) e^a)``, sum ``log(1 + K(...))``, triplet
      ``margin/C + (1 - 1/C) max(0, a + margin)`` (L*_UCL; a lower bound for HUCL).
    * InfoNCE/WeiNCE: NaN (no closed form used here).
    * NaN as well where these values are not the optimum of the run: ``normalization="none"``
      (unbounded embeddings drive the loss to 0, its infimum, so the NC value is no optimum) and
      ``d < C - 1`` (no simplex ETF exists in ``R^d``; the value is then a bound that NC cannot
      attain).

    Computed by ``theory.hcl`` (``scl_optimum``, ``ucl_optimum``, ``plugin_value``).

    Args:
        config: the run.
        estimator: override ``config.estimator`` (``"expectation"`` or ``"sampled"``).
    """
    est = config.estimator if estimator is None else estimator
    one_of("estimator", est, ESTIMATORS)
    if (
        config.method not in HCL_METHODS
        or config.normalization == "none"
        or config.embed_dim < config.num_classes - 1
    ):
        return float("nan")
    from theory.hcl import plugin_value, scl_optimum, ucl_optimum

    kw = dict(psi=config.psi, tau=config.tau, num_negatives=config.num_negatives, margin=config.margin)
    C = config.num_classes
    if config.setting == "supervised":
        return float(scl_optimum(C, **kw))
    if est == "sampled":
        return float(ucl_optimum(C, **kw))
    return float(plugin_value(1.0 / C, C, **kw))


# ------------------------------------------------------------------------------ metrics


def _safe(fn, *args, **kwargs) -> float:
    try:
        v = float(fn(*args, **kwargs))
    except ValueError:
        return float("nan")
    return v


def collapse_metrics(
    z: torch.Tensor,
    labels: torch.Tensor,
    num_classes: int,
    test_z: torch.Tensor | None = None,
    test_labels: torch.Tensor | None = None,
) -> tuple[dict[str, float], np.ndarray]:
    """NC/DC metrics of embeddings ``z`` ``(N, d)`` (see the module docstring), via theory.collapse.

    Returns ``(metrics, mu)``: a dict of floats with the metric columns other than the losses, and
    the ``(C, d)`` float64 class means as a numpy array.
    """
    from theory import collapse as col

    with torch.no_grad():
        z = z.detach().to(torch.float64)
        mu_t = col.class_means(z, labels, num_classes)
        cond = col.paper_conditions(mu_t)
        C, d = mu_t.shape
        r = min(C - 1, d)
        spec = col.class_mean_spectrum(mu_t)
        out = {
            "unit_norm": cond["unit_norm"],
            "zero_sum": cond["zero_sum"],
            "etf_mean": cond["etf_mean"],
            "etf_max": cond["etf_max"],
            "within_class_variation": col.within_class_variation(z, labels, num_classes),
            "nc1": _safe(col.nc1, z, labels, num_classes),
            "nc2_equinorm": _safe(col.nc2_equinorm, mu_t),
            "nc2_equiangularity": _safe(col.nc2_equiangularity, mu_t),
            "etf_error": _safe(col.etf_error, mu_t),
            "effective_rank": _safe(col.effective_rank, mu_t),
            "rankme": _safe(col.rankme, z),
            "spectrum_min": float(spec[r - 1]) if r >= 1 else float("nan"),
            "mean_norm": float(torch.linalg.vector_norm(z, dim=1).mean()),
            "train_ncm_acc": _safe(col.ncm_accuracy, z, labels, z, labels, num_classes=num_classes),
        }
        if test_z is not None and test_labels is not None and test_z.shape[0] > 0:
            t64 = test_z.detach().to(torch.float64)
            out["ncm_acc"] = _safe(col.ncm_accuracy, z, labels, t64, test_labels, num_classes=num_classes)
            out["ncm_top5"] = _safe(
                col.ncm_accuracy, z, labels, t64, test_labels, top_k=min(5, C), num_classes=num_classes
            )
        else:
            out["ncm_acc"] = out["ncm_top5"] = float("nan")
    return out, mu_t.cpu().numpy()


def decode_class_means(value: str) -> np.ndarray:
    """Decode a ``class_means`` cell (JSON list of lists) to a ``(C, d)`` float64 array."""
    if not isinstance(value, str):
        raise ValueError(f"value must be a JSON string, got {type(value).__name__}")
    return np.asarray(json.loads(value), dtype=np.float64)


# ------------------------------------------------------------------------------ schedule


def recorded_epochs(epochs: int, eval_every: int) -> list[int]:
    """Epochs with a row: 0, every ``eval_every``, and ``epochs``."""
    out = list(range(0, epochs + 1, eval_every))
    if out[-1] != epochs:
        out.append(epochs)
    return out


def epoch_batches(N: int, batch_size: int, generator: torch.Generator) -> torch.Tensor:
    """Index batches ``(steps, b)`` of one epoch (full batch: ``arange(N)[None]``, no draw)."""
    if batch_size == 0 or batch_size >= N:
        return torch.arange(N)[None]
    perm = torch.randperm(N, generator=generator)
    steps = N // batch_size
    return perm[: steps * batch_size].view(steps, batch_size)


# ------------------------------------------------------------------------------ losses


def _skipped_batches(config: RunConfig, labels: torch.Tensor) -> torch.Tensor:
    """Bool ``(...)``: which batches of labels ``(..., B)`` are skipped (single class, SCL/HSCL)."""
    if config.setting != "supervised":
        return torch.zeros(labels.shape[:-1], dtype=torch.bool, device=labels.device)
    return labels.amax(dim=-1) == labels.amin(dim=-1)


def _two_view_loss(config: RunConfig, z1: torch.Tensor, z2: torch.Tensor) -> torch.Tensor:
    if config.method == "InfoNCE":
        from theory.infonce import info_nce

        return info_nce(z1, z2, tau=config.tau)
    from theory.weince import weince_loss

    return weince_loss(z1, z2, tau=config.tau, recipe="core")


def _batch_loss(
    config: RunConfig,
    model,
    data,
    idx: torch.Tensor,
    generator: torch.Generator,
    estimator: str | None = None,
) -> torch.Tensor:
    """Loss of one batch ``idx`` (B,) -- see the module docstring for each method.

    Random draws from ``generator`` in this order: positives' noise (``"noise"``) or partners
    (two-view ``"label"``), then the sampled negatives (inside ``contrastive_loss``).
    """
    from theory.hcl import contrastive_loss

    free = config.encoder == "free"
    inputs = (lambda i: i) if free else (lambda i: data.x_train[i])
    y = data.y_train[idx]
    B = idx.shape[0]
    dtype = config.torch_dtype
    device = data.y_train.device
    noise_dim = config.embed_dim if free else config.input_dim
    if config.method in HCL_METHODS:
        kw: dict[str, Any] = dict(
            setting=config.setting,
            beta=config.beta,
            tau=config.tau,
            psi=config.psi,
            estimator=config.estimator if estimator is None else estimator,
            num_negatives=config.num_negatives,
            margin=config.margin,
            generator=generator,
            num_classes=config.num_classes,
        )
        if config.positives == "label":
            return contrastive_loss(model(inputs(idx)), y, **kw)
        noise = noise_like((B, noise_dim), config.noise_std, generator=generator, dtype=dtype, device=device)
        z = torch.cat([model(inputs(idx)), model(inputs(idx), noise)])
        ids = torch.arange(B, device=device)
        return contrastive_loss(
            z, torch.cat([y, y]), positive_groups=torch.cat([ids, ids]), self_positive=False, **kw
        )
    if config.positives == "label":
        partner = same_class_partners(data.y_train, idx, generator=generator)
        z2 = model(inputs(partner))
    else:
        noise = noise_like((B, noise_dim), config.noise_std, generator=generator, dtype=dtype, device=device)
        z2 = model(inputs(idx), noise)
    return _two_view_loss(config, model(inputs(idx)), z2)


# ------------------------------------------------------------------------------ evaluation


def _embed(config: RunConfig, model, data) -> tuple[torch.Tensor, torch.Tensor | None]:
    if config.encoder == "free":
        return model(torch.arange(data.num_train, device=data.y_train.device)), None
    return model(data.x_train), (model(data.x_test) if data.x_test.shape[0] > 0 else None)


def _row_metrics(
    config: RunConfig, model, data, optimum: float, optimum_full: float
) -> tuple[dict, np.ndarray]:
    with torch.no_grad():
        z, zt = _embed(config, model, data)
        metrics, mu = collapse_metrics(z, data.y_train, config.num_classes, zt, data.y_test)
        n_eval = data.num_train * (1 if (config.method in HCL_METHODS and config.positives == "label") else 2)
        if n_eval <= FULL_LOSS_MAX:
            g = torch.Generator()
            g.manual_seed(stream_seed(config.seed, "eval"))
            idx = torch.arange(data.num_train, device=data.y_train.device)
            # Never degenerate: the full balanced set holds C >= 2 classes (and >= 2 members per
            # class for two-view label positives, RunConfig validates it).
            full = float(_batch_loss(config, model, data, idx, g, estimator="expectation"))
        else:
            full = float("nan")
    metrics["full_loss"] = full
    metrics["optimum"] = optimum
    metrics["full_gap"] = full - optimum_full
    return metrics, mu


# ------------------------------------------------------------------------------ training


def _progress(iterable, enabled: bool, desc: str, total: int | None = None):
    if not enabled:
        return iterable
    import sys

    from tqdm.auto import tqdm

    return tqdm(iterable, desc=desc, total=total, disable=not sys.stderr.isatty(), leave=False)


def _assemble(config: RunConfig, records: list[dict]) -> pd.DataFrame:
    base = config.to_dict()
    base["run_key"] = config.key()
    cols = list(base) + ["epoch"] + list(REFERENCE_METRICS) + (["class_means"] if config.record_means else [])
    rows = [{**base, **r} for r in records]
    df = pd.DataFrame(rows, columns=cols)
    df["epoch"] = df["epoch"].astype(np.int64)
    df["skipped_steps"] = df["skipped_steps"].astype(np.int64)
    return df


def _record(config: RunConfig, epoch: int, loss: float, skipped: int, metrics: dict, mu: np.ndarray) -> dict:
    r = {
        "epoch": epoch,
        "loss": loss,
        "skipped_steps": skipped,
        "gap_to_optimum": loss - metrics["optimum"],
        **metrics,
    }
    if config.record_means:
        r["class_means"] = json.dumps(mu.tolist())
    return r


def reference_train_run(
    config: RunConfig,
    *,
    progress: bool = False,
    device: str | torch.device = "cpu",
    _return_model: bool = False,
) -> Any:
    """Train one run sequentially and return its per-epoch table (the reference of the engine).

    Args:
        config: a validated :class:`synthetic.engine.config.RunConfig`.
        progress: show a tqdm bar over epochs (only on a terminal).
        device: torch device of the model and data (random draws stay on the CPU generators).

    Returns:
        ``pandas.DataFrame``: the resolved config fields, ``run_key``, ``epoch``,
        :data:`REFERENCE_METRICS` and, with ``record_means``, ``class_means`` (JSON string).

    Raises:
        ValueError: ``config`` is not a RunConfig, or every step of an epoch was skipped (each
            mini-batch held a single class under SCL/HSCL; see the module docstring).
        FloatingPointError: the training loss became non-finite (never recorded silently).
    """
    if not isinstance(config, RunConfig):
        raise ValueError(f"config must be a RunConfig, got {type(config).__name__}")
    gens = run_generators(config.seed)
    data = make_data(config, device=device)
    model = build_model(config, generator=gens["init"]).to(device)
    source = config.source_config()
    if source is not None:  # extension: continue from the source's final model, fresh Adam
        _, source_model = reference_train_run(source, device=device, _return_model=True)
        model.load_state_dict(source_model.state_dict())
    opt = torch.optim.Adam(model.parameters(), lr=config.lr, weight_decay=config.weight_decay)
    optimum = closed_form_optimum(config)
    optimum_full = closed_form_optimum(config, "expectation")
    epochs = config.num_epochs
    budget = config.num_steps  # extension: the step budget
    record_at = set(recorded_epochs(epochs, config.eval_every))

    metrics, mu = _row_metrics(config, model, data, optimum, optimum_full)
    records = [_record(config, 0, float("nan"), 0, metrics, mu)]
    drawn = 0
    for epoch in _progress(range(1, epochs + 1), progress, f"run {config.key()}", epochs):
        batches = epoch_batches(data.num_train, config.batch_size, gens["order"]).to(device)
        batches = batches[: budget - drawn]
        drawn += len(batches)
        skip = _skipped_batches(config, data.y_train[batches]).tolist()
        if all(skip):
            raise ValueError(
                f"run {config.key()}: every mini-batch of epoch {epoch} holds a single class; the "
                f"{config.method} loss is undefined (batch_size={config.batch_size} is too small for "
                f"num_classes={config.num_classes})"
            )
        total = torch.zeros((), dtype=torch.float64)
        for idx, skipped in zip(batches, skip, strict=True):
            if skipped:
                continue
            loss = _batch_loss(config, model, data, idx, gens["step"])
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            total += loss.detach().to(torch.float64).cpu()
        if not bool(torch.isfinite(total)):
            raise FloatingPointError(f"run {config.key()}: non-finite training loss in epoch {epoch}")
        if epoch in record_at:
            metrics, mu = _row_metrics(config, model, data, optimum, optimum_full)
            done = len(skip) - sum(skip)
            records.append(_record(config, epoch, float(total) / done, len(skip) - done, metrics, mu))
    table = _assemble(config, records)
    return (table, model) if _return_model else table
