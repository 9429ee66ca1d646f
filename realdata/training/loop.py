"""Training of one real-data run: Adam on the device, per-epoch collapse metrics, checkpoints.

:func:`train_run` trains the run of a :class:`realdata.training.config.TrainConfig` and stores its table
in a results folder (:mod:`realdata.training.store`): one row per recorded epoch (0 = the initialisation,
every ``eval_every`` epochs and the last), the config columns, ``run_key``, ``epoch`` and the
metric columns: :data:`TRAINING_COLUMNS`, the metric row of :func:`theory.collapse.metric_row` (plus ``class_means`` with
``record_means``). WeiNCE runs also store their per-anchor gate values (:func:`realdata.training.store.gate_file`).

**A step.** The whole dataset sits on the device as ``uint8``; the batch order comes from the
``order`` stream (the same on every rank; each rank takes its slice of the global batch), the views
are made on the device (:class:`realdata.inputs.pipeline.Views`), the encoder runs under bf16 autocast
when ``precision="bf16"`` (``channels_last`` and ``torch.compile`` optional), and the loss
(:mod:`realdata.training.objective`) sees float32 embeddings. Adam as the authors (no schedule). No host
synchronisation inside an epoch except the progress line; the epoch's loss is summed on the device.

**Checkpoints** (:mod:`realdata.training.checkpoint`) every ``checkpoint_every`` epochs and at the end hold
the model, the optimiser, every generator state (the views stream once per rank), the torch RNG
states, WeiNCE's EMA state, the epoch and the rows so far (removed once the run is stored). Resuming restores all of it: on the CPU
a run interrupted after epoch ``k`` and resumed gives the same table and parameters, bit for bit,
as an uninterrupted run (tested). The trained encoder is also written to
``checkpoints/<key>.final.pt`` for ``python -m realdata eval`` and the claims.

**Failures.** A non-finite epoch loss, parameter or embedding stops the run: a failure record is
written (:func:`realdata.training.store.write_failure`), never a result, and :class:`RunOutcome` says so.
"""

from __future__ import annotations

import math
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd
import torch
from torch import nn
from tqdm.auto import tqdm

from realdata.datasets import load_dataset
from realdata.evaluation.metrics import epoch_metrics
from realdata.inputs.pipeline import Streams, Views, run_batches
from realdata.training import store
from realdata.training.checkpoint import load_checkpoint, save_checkpoint
from realdata.training.config import TrainConfig
from realdata.training.distributed import SINGLE, World, rank_slice
from realdata.training.models import build_model
from realdata.training.objective import build_loss
from realdata.training.step import TrainStep
from synthetic.engine.convergence import SettleRule, settle_row
from synthetic.engine.data import stream_seed
from synthetic.store.schema import encode_class_means, expected_epochs, recorded_epochs
from theory.hcl import nc_optimum
from theory.options import DDP_LOSS_MODES
from theory.validation import one_of

__all__ = ["TRAINING_COLUMNS", "RunOptions", "RunOutcome", "train_run", "load_encoder", "GATE_COLUMNS"]

#: The columns of a real-data run's table besides the metric row (``theory.collapse.ROW_COLUMNS``
#: and the spectrum): the epoch's training loss, skipped steps, the closed-form NC value and the gap
#: to it, WeiNCE's gate statistics and the released recipe's ``beta_t`` (NaN for the other
#: methods), and the epoch's time and throughput (docs/realdata.md).
TRAINING_COLUMNS = (
    "loss",
    "skipped_steps",
    "optimum",
    "gap_to_optimum",
    "lambda_mean",
    "lambda_rho_mean",
    "lambda_aic_mean",
    "daic_median",
    "beta_t",
    "epoch_seconds",
    "views_per_second",
)

#: Columns of a WeiNCE run's gate table (one row per sampled anchor and epoch).
GATE_COLUMNS = ("epoch", "lambda", "lambda_rho", "lambda_aic", "daic")
_GATE_STEPS = 4  # steps per epoch whose anchors enter the gate table


@dataclass(frozen=True)
class RunOptions:
    """How to run (not part of the run's identity).

    Attributes:
        results: the results folder (:mod:`realdata.training.store` layout).
        device: ``cpu`` or ``cuda``.
        checkpoint_every: write the resumable checkpoint every N epochs (0: only at the end).
        resume: continue from the run's checkpoint when one exists.
        restart: ignore (and overwrite) an existing checkpoint.
        force: train again even if the run is stored as finished.
        compile: wrap the encoder in ``torch.compile``.
        channels_last: ``torch.channels_last`` memory format for the encoder and its inputs.
        sync_bn: convert batch norms to ``SyncBatchNorm`` under DDP (CUDA only).
        ddp_loss: ``local`` or ``replicated`` (:mod:`realdata.training.objective`).
        init_path: checkpoint to initialise the encoder from (``init="nc"`` runs).
        progress: progress bars; ``None`` = only on a terminal (periodic lines otherwise).
        eval_batch_size: images per forward pass of the evaluations.
        gate_anchors: WeiNCE anchors per epoch kept in the gate table.
        stop_after: stop (as if interrupted) after this many epochs; for tests.
        log_every_s: seconds between progress lines when not on a terminal.
    """

    results: str = "results/realdata"
    device: str = "cpu"
    checkpoint_every: int = 0
    resume: bool = False
    restart: bool = False
    force: bool = False
    compile: bool = False
    channels_last: bool = False
    sync_bn: bool = False
    ddp_loss: str = "local"
    init_path: str | None = None
    progress: bool | None = None
    eval_batch_size: int = 1024
    gate_anchors: int = 512
    stop_after: int | None = None
    log_every_s: float = 30.0

    def __post_init__(self) -> None:
        c = self.checkpoint_every
        if not isinstance(c, int) or isinstance(c, bool) or c < 0:
            raise ValueError(f"checkpoint_every must be an integer >= 0 (0: at the end only), got {c!r}")


@dataclass
class RunOutcome:
    """What :func:`train_run` did: ``status`` is ``done``, ``cached``, ``failed`` or ``interrupted``."""

    status: str
    key: str
    config: TrainConfig
    frame: pd.DataFrame | None = None
    gate: pd.DataFrame | None = None
    message: str = ""
    seconds: float = 0.0
    extra: dict[str, Any] = field(default_factory=dict)


def _unwrap(model: nn.Module) -> nn.Module:
    m = getattr(model, "_orig_mod", model)
    return getattr(m, "module", m)


def _finite_params(model: nn.Module) -> bool:
    flags = [torch.isfinite(p).all() for p in model.parameters()]
    return bool(torch.stack(flags).all()) if flags else True


def load_encoder(path: str | Path, device: torch.device | str = "cpu") -> tuple[nn.Module, TrainConfig, dict]:
    """The encoder stored in a checkpoint (training or final), in eval mode.

    Returns:
        ``(model, config, payload)``.
    """
    payload = load_checkpoint(path)
    cfg = TrainConfig.from_dict(payload["config"])
    model = _build(cfg, int(payload["num_classes"]), int(payload["channels"]), channels_last=False)
    model.load_state_dict(payload["model"])
    return model.to(device).eval(), cfg, payload


def _build(cfg: TrainConfig, C: int, channels: int, channels_last: bool) -> nn.Module:
    return build_model(
        str(cfg.arch),
        str(cfg.head),
        C,
        cfg.normalization,
        out_dim=cfg.out_dim,
        stem=cfg.stem,
        in_channels=channels,
        width=cfg.width,
        channels_last=channels_last,
        seed=stream_seed(cfg.seed, "init"),
    )


class _Log:
    """Progress: a tqdm bar on a terminal, else one line every ``every_s`` seconds (rank 0)."""

    def __init__(self, total: int, desc: str, progress: bool | None, every_s: float, main: bool) -> None:
        use_bar = main and (progress is True or (progress is None and sys.stderr.isatty()))
        self.bar = tqdm(total=total, desc=desc, leave=False, dynamic_ncols=True) if use_bar else None
        self.lines = main and not use_bar and progress is None  # periodic lines off a terminal
        self.desc, self.every, self.last, self.total, self.done = desc, every_s, time.monotonic(), total, 0

    def step(self, n: int = 1, text: str = "") -> None:
        self.done += n
        if self.bar is not None:
            self.bar.update(n)
            if text:
                self.bar.set_postfix_str(text, refresh=False)
        elif self.lines and (time.monotonic() - self.last >= self.every or self.done == self.total):
            self.last = time.monotonic()
            print(f"{self.desc}: step {self.done}/{self.total} {text}", file=sys.stderr, flush=True)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()


def train_run(
    config: TrainConfig,
    options: RunOptions,
    *,
    world: World = SINGLE,
    dataset: Any = None,
    root: str | None = None,
    download: bool = False,
) -> RunOutcome:
    """Train (or resume, or skip) one run and store its results; see the module docstring.

    Args:
        config: the run.
        options: how to run it.
        world: this process's place among several (DDP); rank 0 writes every file.
        dataset: an :class:`realdata.datasets.ImageDataset` (default: loaded from ``root``).
        root: data folder (not needed for digits).
        download: allow downloading a missing dataset.

    Returns:
        :class:`RunOutcome` (its ``frame`` is None on ranks other than 0, which record no rows).

    Raises:
        ValueError: bad options, an existing checkpoint without ``resume``/``restart``, a batch
            size the data or the number of processes cannot serve.
    """
    t_start = time.perf_counter()
    one_of("ddp_loss", options.ddp_loss, DDP_LOSS_MODES)
    if dataset is None:
        dataset = load_dataset(config.dataset, root, download=download)
    C, channels = int(dataset.num_classes), int(dataset.channels)
    cfg = config.resolved(C)
    key = cfg.key()
    folder = options.results
    ckpt_path = store.checkpoint_file(folder, key)
    # every rank acts on rank 0's view of the folder (a rank must never resume while another restarts)
    done, has_ckpt = world.all_objects((store.is_done(folder, key), ckpt_path.is_file()))[0]
    if done and not options.force:
        return RunOutcome(
            "cached", key, cfg, store.read_result(folder, key), store.read_gate(folder, key), "already stored"
        )
    device = (
        torch.device("cuda", torch.cuda.current_device()) if options.device == "cuda" else torch.device("cpu")
    )
    payload = None
    if has_ckpt and not options.restart:
        if not options.resume:
            raise ValueError(
                f"a checkpoint of run {key} exists at {ckpt_path}: pass --resume to continue it or "
                "--restart to start over"
            )
        payload = load_checkpoint(ckpt_path, expect_key=key)
    if cfg.batch_size > len(dataset.train):
        raise ValueError(f"batch_size = {cfg.batch_size} exceeds the {len(dataset.train)} training images")
    local = rank_slice(cfg.batch_size, world)

    data = dataset.to(device)
    labels_cpu = dataset.train.labels.cpu()
    views = Views(str(cfg.views), channels, dataset.image_size, dataset.mean, dataset.std, cfg.crop_min_scale)
    model = _build(cfg, C, channels, options.channels_last).to(device)
    if cfg.init == "nc" and payload is None:
        if not options.init_path:
            raise ValueError(f"run {key} has init='nc' ({cfg.init_from}); pass init_path (--init CHECKPOINT)")
        init = load_checkpoint(options.init_path)
        model.load_state_dict(init["model"])
    if world.distributed and options.sync_bn and device.type == "cuda":
        model = nn.SyncBatchNorm.convert_sync_batchnorm(model)
    train_model: nn.Module = model
    if world.distributed:
        from torch.nn.parallel import DistributedDataParallel

        train_model = DistributedDataParallel(
            model, device_ids=[device.index] if device.type == "cuda" else None
        )
    if options.compile:
        train_model = torch.compile(train_model)  # type: ignore[assignment]
    assert cfg.lr is not None and cfg.weight_decay is not None  # resolved
    opt = torch.optim.Adam(model.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay)
    objective = build_loss(cfg, world, options.ddp_loss)
    streams = Streams.create(cfg.seed, device, world.rank)
    bf16 = cfg.precision == "bf16"
    optimum = math.nan  # the identity head (out_dim None): z is the backbone's feature, no closed form used
    if cfg.out_dim is not None:
        optimum = nc_optimum(
            cfg.setting,
            C,
            d=cfg.out_dim,
            normalization=str(cfg.normalization),
            tau=float(cfg.tau),  # type: ignore[arg-type]
            num_negatives=cfg.num_negatives,
            estimator=cfg.estimator,
        )
    record_at = set(recorded_epochs(cfg.epochs, cfg.eval_every))
    rule = SettleRule.of(cfg)  # None without a rule: the run trains cfg.epochs epochs
    stopped: int | None = None  # the epoch at which the rule stopped the run
    rows: list[dict[str, Any]] = []
    gate_rows: list[pd.DataFrame] = []
    start = 0
    if payload is not None:
        model.load_state_dict(payload["model"])
        opt.load_state_dict(payload["optimizer"])
        gens = payload["generators"]
        streams.load(
            {"order": gens["order"], "negatives": gens["negatives"], "views": gens["views"][world.rank]}
        )
        torch.set_rng_state(payload["torch_rng"]["cpu"])
        if device.type == "cuda" and payload["torch_rng"].get("cuda") is not None:
            torch.cuda.set_rng_state_all(payload["torch_rng"]["cuda"])
        objective.load_state_payload(payload["objective"])
        rows, start = list(payload["rows"]), int(payload["epoch"])
        gate_rows = [pd.DataFrame(payload["gate"])] if payload.get("gate") else []

    def evaluate(epoch: int, loss: float, skipped: int, extra: dict[str, float]) -> None:
        em = epoch_metrics(
            _unwrap(model),
            data,
            preprocess=views.eval_view(),
            device=device,
            batch_size=options.eval_batch_size,
            autocast_bf16=bf16,
        )
        row: dict[str, Any] = {**cfg.to_dict(), "run_key": key, "epoch": epoch}
        vals = {c: float("nan") for c in TRAINING_COLUMNS}
        vals.update(loss=loss, skipped_steps=float(skipped), optimum=optimum, gap_to_optimum=loss - optimum)
        vals.update(extra)
        row.update(vals)
        row.update(em.values)
        if cfg.record_means:
            row["class_means"] = encode_class_means(em.class_means)
        rows.append(row)
        if rule is not None:  # the convergence columns: whether the rule holds over the window
            row.update(settle_row(rows, rule))

    def fail(epoch: int, reason: str) -> RunOutcome:
        if world.is_main:
            store.write_failure(folder, key, cfg.to_dict(), epoch, reason)
        return RunOutcome(
            "failed",
            key,
            cfg,
            message=f"run {key} failed at epoch {epoch}: {reason}",
            seconds=time.perf_counter() - t_start,
        )

    def checkpoint(epoch: int, path: Path, full: bool = True) -> None:
        views_states = world.all_objects(streams.views.get_state()) if full else None
        if world.is_main:
            _save(epoch, path, full, views_states)
        world.barrier()  # the file is in place before any rank looks for it

    def _save(epoch: int, path: Path, full: bool, views_states: list[Any] | None) -> None:
        body: dict[str, Any] = {
            "config_key": key,
            "config": cfg.to_dict(),
            "epoch": epoch,
            "num_classes": C,
            "channels": channels,
            "model": _unwrap(model).state_dict(),
        }
        if full:
            cuda_rng = torch.cuda.get_rng_state_all() if device.type == "cuda" else None
            gate = pd.concat(gate_rows, ignore_index=True).to_dict("list") if gate_rows else None
            body.update(
                {
                    "optimizer": opt.state_dict(),
                    "scheduler": None,
                    "generators": {
                        "order": streams.order.get_state(),
                        "negatives": streams.negatives.get_state(),
                        "views": views_states,
                    },
                    "torch_rng": {"cpu": torch.get_rng_state(), "cuda": cuda_rng},
                    "objective": objective.state_payload(),
                    "rows": rows,
                    "gate": gate,
                }
            )
        save_checkpoint(path, body)

    error: str | None = None
    if start == 0 and 0 in record_at and world.is_main:
        try:
            with torch.no_grad():
                evaluate(0, float("nan"), 0, {})
        except FloatingPointError as exc:
            error = str(exc)
    error = world.all_objects(error)[0]  # rank 0's evaluation decides for every rank
    if error is not None:
        return fail(0, error)
    log = _Log(0, f"run {key}", options.progress, options.log_every_s, world.is_main)
    setting = cfg.setting
    step = TrainStep(train_model, views, objective, opt, streams, bf16)
    for epoch in range(start + 1, cfg.epochs + 1):
        t0 = time.perf_counter()
        batches = run_batches(cfg, labels_cpu, streams.order)
        log.close()
        log = _Log(
            len(batches),
            f"run {key} epoch {epoch}/{cfg.epochs}",
            options.progress,
            options.log_every_s,
            world.is_main,
        )
        train_model.train()
        total = torch.zeros((), dtype=torch.float64, device=device)
        gate_sum: dict[str, torch.Tensor] = {}
        gate_parts: list[dict[str, torch.Tensor]] = []
        keep_at = {round(i * (len(batches) - 1) / max(1, _GATE_STEPS - 1)) for i in range(_GATE_STEPS)}
        done = skipped = 0
        beta_t: Any = float("nan")
        for s, idx in enumerate(batches):
            if setting == "supervised" and bool((labels_cpu[idx] == labels_cpu[idx[0]]).all()):
                skipped += 1  # a single-class batch: no negatives, the SCL loss is undefined
                log.step()
                continue
            mine = idx[local].to(device, non_blocking=True)
            try:
                out = step(data.train.images[mine], data.train.labels[mine])
            except ValueError as exc:  # the loss rejects non-finite embeddings, naming them
                if not _finite_params(model):
                    log.close()
                    return fail(epoch, f"non-finite parameters ({exc})")
                if "finite" in str(exc) or "overflows" in str(exc):
                    log.close()
                    return fail(epoch, f"non-finite embeddings ({exc})")
                raise
            total += out.value
            done += 1
            if out.gate is not None:
                for k, v in out.gate.items():
                    gate_sum[k] = gate_sum.get(k, 0.0) + torch.stack([v.double().mean(), v.double().median()])
                if s in keep_at:
                    gate_parts.append(
                        {k: v[: max(1, options.gate_anchors // _GATE_STEPS)] for k, v in out.gate.items()}
                    )
            if out.extra and "beta_t" in out.extra:
                beta_t = out.extra["beta_t"]
            if log.bar is not None or log.lines:
                rate = done * cfg.batch_size * views.count / max(time.perf_counter() - t0, 1e-9)
                log.step(text=f"views/s {rate:.0f}")
        if done == 0:
            raise ValueError(
                f"run {key}: every batch of epoch {epoch} holds a single class; the {cfg.method} loss is "
                f"undefined (batch_size={cfg.batch_size} is too small for {C} classes)"
            )
        loss = float(total) / done
        if not math.isfinite(loss):
            log.close()
            return fail(epoch, f"non-finite training loss ({loss})")
        if not _finite_params(model):
            log.close()
            return fail(epoch, "non-finite parameters")
        seconds = time.perf_counter() - t0
        extra = {"epoch_seconds": seconds, "views_per_second": done * cfg.batch_size * views.count / seconds}
        if gate_sum:
            extra.update(
                lambda_mean=float(gate_sum["lambda"][0]) / done,
                lambda_rho_mean=float(gate_sum["lambda_rho"][0]) / done,
                lambda_aic_mean=float(gate_sum["lambda_aic"][0]) / done,
                daic_median=float(gate_sum["daic"][1]) / done,
            )
            extra["beta_t"] = float(beta_t)
            part = {k: torch.cat([g[k] for g in gate_parts]).double().cpu().numpy() for k in gate_parts[0]}
            gate_rows.append(pd.DataFrame({"epoch": epoch, **part})[list(GATE_COLUMNS)])
        error = None
        if epoch in record_at and world.is_main:
            try:
                with torch.no_grad():
                    evaluate(epoch, loss, skipped, extra)
            except FloatingPointError as exc:
                error = str(exc)
        error = world.all_objects(error)[0]  # rank 0's evaluation decides for every rank
        if error is not None:
            log.close()
            return fail(epoch, error)
        settled = rule is not None and epoch in record_at and world.is_main and bool(rows[-1]["settled"])
        if rule is not None and world.all_objects(settled)[0]:  # rank 0's rows decide for every rank
            stopped = epoch
            break
        last = epoch == cfg.epochs
        if options.checkpoint_every and (epoch % options.checkpoint_every == 0 or last):
            checkpoint(epoch, store.checkpoint_file(folder, key))
        if options.stop_after is not None and epoch >= options.stop_after and not last:
            log.close()
            return RunOutcome(
                "interrupted",
                key,
                cfg,
                message=f"stopped after epoch {epoch}",
                seconds=time.perf_counter() - t_start,
            )
    log.close()
    checkpoint(
        cfg.epochs if stopped is None else stopped, store.final_checkpoint_file(folder, key), full=False
    )
    frame = _frame(rows) if world.is_main else None  # rows are recorded by rank 0 only
    gate = pd.concat(gate_rows, ignore_index=True) if gate_rows else None
    if world.is_main:
        assert frame is not None
        if gate is not None:
            store.write_gate(folder, key, gate)
        store.write_result(folder, frame, expected=expected_epochs(cfg, stopped))
        store.checkpoint_file(folder, key).unlink(missing_ok=True)  # the run is stored: nothing to resume
    world.barrier()
    return RunOutcome("done", key, cfg, frame, gate, seconds=time.perf_counter() - t_start)


def _frame(rows: list[dict[str, Any]]) -> pd.DataFrame:
    frame = pd.DataFrame(rows)
    cfg_cols = list(frame.columns[: list(frame.columns).index("run_key")])
    metric = [c for c in frame.columns if c not in (*cfg_cols, "run_key", "epoch", "class_means")]
    tail = ["class_means"] if "class_means" in frame.columns else []
    return frame[cfg_cols + ["run_key", "epoch", *metric, *tail]]
