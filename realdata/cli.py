"""The command line of ``python -m realdata``: ``train``, ``eval``, ``claims``, ``digits``.

Every flag is explained in ``--help``; docs/realdata.md gives examples. ``train`` under
``torchrun --nproc_per_node N -m realdata train ...`` runs on N processes (DDP).

Exit status: 0 done; 2 a bad argument, a missing or corrupt dataset or checkpoint (one message on
stderr); 130 interrupted by Ctrl-C: one line on stderr, from rank 0 only under ``torchrun``, no
traceback (what is stored is complete; the line says how to continue).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any

from realdata.claims.grids import CLAIM_GROUPS
from realdata.claims.records import write_records
from realdata.claims.run import run_digits, run_group
from realdata.datasets import DATASETS, DatasetError
from realdata.frozen.evaluate import evaluate_checkpoint
from realdata.training.checkpoint import CorruptCheckpointError, load_checkpoint
from realdata.training.config import TrainConfig
from realdata.training.distributed import close_world, init_world
from realdata.training.loop import RunOptions, train_run
from realdata.training.models import ARCHS
from synthetic.engine.convergence import SETTLE_FIELDS
from theory.options import DDP_LOSS_MODES, ESTIMATORS, HEADS, METHODS, NORMALIZATIONS, RECIPES, STEMS, VIEWS

__all__ = ["build_parser", "main", "config_from_args"]

_DEFAULTS_TEXT = "; ".join(
    f"{m}: lr {d.lr:g}, weight decay {d.weight_decay:g}, tau {d.tau:g}, views {d.views}, "
    f"normalization {d.normalization}"
    for m, d in METHODS.items()
)


def _epochs_between_checkpoints(text: str) -> int:
    """``--checkpoint-every``: an integer >= 0 (argparse names the flag in its error)."""
    try:
        n = int(text)
    except ValueError:
        n = -1
    if n < 0:
        raise argparse.ArgumentTypeError(f"must be an integer >= 0 (0: at the end only), got {text}")
    return n


def _add_train(sub: Any) -> None:
    p = sub.add_parser(
        "train",
        help="train one run and store its per-epoch table",
        description="Train one run (Adam; per-epoch class-mean bank and collapse metrics) and store it "
        "in the results folder. Defaults per method: " + _DEFAULTS_TEXT + ". Several GPUs: "
        "torchrun --nproc_per_node N -m realdata train ... (--batch-size is the global batch).",
    )
    a = p.add_argument
    a(
        "--dataset",
        choices=sorted(DATASETS),
        default="digits",
        help="dataset (digits is bundled; default digits)",
    )
    a(
        "--root",
        default=None,
        help="folder holding the dataset in its standard layout (not needed for digits)",
    )
    a("--download", action="store_true", help="allow downloading a missing dataset (never done otherwise)")
    a(
        "--arch",
        choices=sorted(ARCHS),
        default=None,
        help="encoder (default smallcnn for digits, else resnet18)",
    )
    a("--method", choices=list(METHODS), default="SCL", help="loss (default SCL)")
    a(
        "--beta",
        type=float,
        default=0.0,
        help="hardness of the tilt exp(beta z.z'); > 0 for HSCL/HUCL (default 0)",
    )
    a(
        "--estimator",
        choices=ESTIMATORS,
        default="sampled",
        help="HCL family: 'sampled' (the authors' K draws per pair) or 'expectation' (exact tilted average)",
    )
    a("--num-negatives", type=int, default=256, help="K draws per (anchor, positive) pair (default 256)")
    a(
        "--tau",
        type=float,
        default=None,
        help="temperature (default 1 for the HCL family, 0.5 for InfoNCE/WeiNCE)",
    )
    a(
        "--normalization",
        choices=NORMALIZATIONS,
        default=None,
        help="projection normalisation (default ball for the HCL family, sphere for InfoNCE/WeiNCE)",
    )
    a(
        "--views",
        choices=VIEWS,
        default=None,
        help="'label': one un-augmented view, label positives (the HCL authors); 'simclr': two SimCLR views "
        "augmented on the device (the WeiNCE recipe). Default per method",
    )
    a("--head", choices=sorted(HEADS), default=None, help="projection head (default hcl / weince per method)")
    a("--out-dim", type=int, default=None, help="projection dimension d (default C-1 for hcl, 64 for weince)")
    a(
        "--recipe",
        choices=RECIPES,
        default="core",
        help="WeiNCE: 'core' (the paper's loss) or 'released' (plus the released code's auxiliary terms)",
    )
    a("--epochs", type=int, default=10, help="training epochs (default 10)")
    a("--batch-size", type=int, default=512, help="global batch size, drop_last (default 512)")
    a(
        "--lr",
        type=float,
        default=None,
        help="Adam learning rate (default 1e-3 HCL family, 3e-4 InfoNCE/WeiNCE)",
    )
    a("--weight-decay", type=float, default=None, help="Adam weight decay (default 0; 1e-6 for UCL/HUCL)")
    a("--seed", type=int, default=0, help="seed of the initialisation, batch order, views and negatives")
    a("--balanced-sampler", action="store_true", help="class-balanced batches instead of shuffled ones")
    a("--samples-per-class", type=int, default=None, help="balanced sampler: samples per class per batch")
    a("--eval-every", type=int, default=1, help="record metrics every N epochs (and at epochs 0 and last)")
    a(
        "--settle-window",
        type=int,
        default=0,
        metavar="W",
        help="convergence rule: stop at the first recorded epoch at which the scale-free metrics "
        "changed within their tolerances over the last half of the run (at least W epochs); "
        "--epochs is then the budget (default 0: no rule, train --epochs epochs; "
        "docs/claims.md#convergence-and-undecided)",
    )
    a(
        "--settle-tol",
        nargs="+",
        default=[],
        metavar="FIELD=V",
        help="tolerances of the rule, e.g. settle_etf=0.005 settle_wcv=0.01 settle_rank=0 "
        "settle_erank=0.1 settle_gap=0.001 (the defaults)",
    )
    a("--crop-min-scale", type=float, default=0.08, help="SimCLR views: smallest crop area fraction (0.08)")
    a("--stem", choices=STEMS, default=None, help="ResNet stem (default per dataset)")
    a("--width", type=int, default=32, help="smallcnn width (default 32)")
    a(
        "--no-record-means",
        dest="record_means",
        action="store_false",
        help="do not store the class means of each recorded epoch (the figures' spectra need them)",
    )
    a(
        "--init",
        default=None,
        metavar="CHECKPOINT",
        help="start from this checkpoint's encoder (near-NC initialisation, claim R4)",
    )
    a("--device", choices=("cpu", "cuda"), default="cpu", help="where to train (default cpu)")
    a(
        "--amp",
        choices=("auto", "bf16", "off"),
        default="auto",
        help="bf16 autocast of the encoder: auto = on with cuda, off on cpu; the loss stays float32",
    )
    a("--channels-last", action="store_true", help="channels_last memory format (faster convolutions on GPU)")
    a("--compile", action="store_true", help="torch.compile the encoder")
    a(
        "--sync-bn",
        action="store_true",
        help="under DDP on CUDA, SyncBatchNorm instead of per-rank statistics",
    )
    a(
        "--ddp-loss",
        choices=DDP_LOSS_MODES,
        default="local",
        help="under DDP: each rank computes its anchors' terms (local) or the whole loss (replicated)",
    )
    a(
        "--workers",
        type=int,
        default=0,
        help="CPU threads for torch on the CPU (0: torch's default). Data are held and augmented on the "
        "device, so no loader workers are needed",
    )
    a(
        "--checkpoint-every",
        type=_epochs_between_checkpoints,
        default=0,
        help="write the resumable checkpoint every N epochs (0: end only)",
    )
    a("--resume", action="store_true", help="continue from the run's checkpoint")
    a("--restart", action="store_true", help="ignore an existing checkpoint and start over")
    a("--force", action="store_true", help="train again even if the run is already stored")
    a("--results", default="results/realdata", help="results folder (default results/realdata)")
    a(
        "--progress",
        choices=("auto", "bar", "lines", "off"),
        default="auto",
        help="progress output: bar on a terminal, periodic lines otherwise (auto)",
    )
    a("--dry-run", action="store_true", help="print the resolved config and its key, do not train")


def _add_eval(sub: Any) -> None:
    p = sub.add_parser(
        "eval",
        help="evaluate a frozen encoder (NCM, linear probe, kNN, recall)",
        description="Frozen-feature evaluation of a trained encoder: NCM on the projection z (the HCL "
        "authors), linear probe, weighted kNN and R@k on the backbone features h (the WeiNCE protocol). "
        "Writes one tidy row to RESULTS/eval/runs/.",
    )
    a = p.add_argument
    a("--checkpoint", required=True, help="a checkpoint written by 'train' (CHECKPOINTS/<key>.final.pt)")
    a("--metrics", default="ncm,probe,knn,recall", help="comma-separated subset of ncm,probe,knn,recall")
    a("--root", default=None, help="dataset folder (not needed for digits)")
    a("--device", choices=("cpu", "cuda"), default="cpu", help="where to run")
    a("--probe-epochs", type=int, default=100, help="linear-probe epochs (protocol: 100)")
    a("--probe-lr", type=float, default=3e-4, help="linear-probe Adam learning rate (protocol: 3e-4)")
    a("--probe-seed", type=int, default=0, help="linear-probe seed")
    a("--split-seed", type=int, default=1, help="seed of the stratified 80/20 split (protocol: 1)")
    a("--knn-k", type=int, default=50, help="kNN neighbours (protocol: 50)")
    a("--knn-temperature", type=float, default=0.1, help="kNN temperature (protocol: 0.1)")
    a("--results", default="results/realdata", help="results folder (the row goes to RESULTS/eval)")
    a("--json", action="store_true", help="print the result as JSON")


def _add_claims(sub: Any) -> None:

    p = sub.add_parser(
        "claims",
        help="run a claim's experiments at paper scale and write its records",
        description="The papers' real-data claims as commands. Each group trains its runs (resumable: "
        "finished runs are skipped) and writes claim records (RESULTS/records/<id>.json), tables "
        "(RESULTS/tables/*.csv) and the WeiNCE diagnostics (RESULTS/weince/). 'records' only re-judges "
        "what is stored (NOT RUN, with the command, where nothing is).",
    )
    a = p.add_argument
    a("group", choices=(*CLAIM_GROUPS, "records"), help="which claims")
    a("--root", default=None, help="the dataset folder (CIFAR-100 / Tiny-ImageNet in their standard layouts)")
    a("--results", default="results", help="results folder of the main job (default results)")
    a("--device", choices=("cpu", "cuda"), default="cuda", help="where to train (default cuda)")
    a(
        "--scale",
        choices=("paper", "small"),
        default="paper",
        help="paper: the authors' epochs and batch sizes; small: a few epochs, for a smoke test",
    )
    a("--dry-run", action="store_true", help="print the commands of the runs, do not train")


def _add_digits(sub: Any) -> None:
    p = sub.add_parser(
        "digits",
        help="the digits scale of the claims (CPU, about 3 minutes; part of the main job)",
        description="HSCL vs SCL and HUCL vs UCL, InfoNCE vs WeiNCE with POT and link selection, on "
        "scikit-learn's digits with a small CNN; cached in RESULTS/realdata/digits_*.",
    )
    p.add_argument("--results", default="results", help="results folder of the main job (default results)")
    p.add_argument("--jobs", type=int, default=2, help="parallel processes (default 2)")
    p.add_argument("--scale", choices=("quick", "default"), default="default", help="quick: seconds (tests)")


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of ``python -m realdata``."""
    p = argparse.ArgumentParser(
        prog="python -m realdata",
        description="Real-data experiments of the hard-negative (arXiv 2311.05139) and WeiNCE "
        "(arXiv 2606.00262) papers: training, frozen-feature evaluation, the claims.",
    )
    sub = p.add_subparsers(dest="command", required=True)
    _add_train(sub)
    _add_eval(sub)
    _add_claims(sub)
    _add_digits(sub)
    return p


def config_from_args(args: argparse.Namespace, device: str) -> tuple[TrainConfig, str | None]:
    """The :class:`TrainConfig` of ``train``'s arguments and the init checkpoint path (or None)."""
    precision = "bf16" if args.amp == "bf16" or (args.amp == "auto" and device == "cuda") else "fp32"
    init, init_from, init_path = "random", "", None
    if args.init:
        payload = load_checkpoint(args.init)
        init, init_from, init_path = "nc", f"{payload['config_key']}@{int(payload['epoch'])}", args.init
    cfg = TrainConfig(
        dataset=args.dataset,
        arch=args.arch,
        method=args.method,
        beta=args.beta,
        estimator=args.estimator,
        num_negatives=args.num_negatives,
        tau=args.tau,
        normalization=args.normalization,
        views=args.views,
        head=args.head,
        out_dim=args.out_dim,
        recipe=args.recipe,
        epochs=args.epochs,
        batch_size=args.batch_size,
        lr=args.lr,
        weight_decay=args.weight_decay,
        seed=args.seed,
        balanced_sampler=args.balanced_sampler,
        samples_per_class=args.samples_per_class,
        eval_every=args.eval_every,
        crop_min_scale=args.crop_min_scale,
        stem=args.stem,
        width=args.width,
        precision=precision,
        init=init,
        init_from=init_from,
        record_means=args.record_means,
        settle_window=args.settle_window,
        **_settle_tolerances(args.settle_tol),
    )
    return cfg, init_path


def _settle_tolerances(items: list[str]) -> dict[str, Any]:
    """``--settle-tol settle_etf=0.005 ...`` as config fields (ValueError naming a bad item)."""
    out: dict[str, Any] = {}
    for item in items:
        name, sep, value = item.partition("=")
        if not sep or name not in SETTLE_FIELDS or name == "settle_window":
            raise ValueError(
                f"--settle-tol: {item!r} is not FIELD=V with FIELD one of "
                f"{[f for f in SETTLE_FIELDS if f != 'settle_window']}"
            )
        try:
            out[name] = int(value) if name == "settle_rank" else float(value)
        except ValueError:
            raise ValueError(f"--settle-tol: {name} needs a number, got {value!r}") from None
    return out


def _cmd_train(args: argparse.Namespace) -> int:
    import torch

    if args.workers < 0:
        raise ValueError(f"--workers must be >= 0, got {args.workers}")
    if args.workers:
        torch.set_num_threads(args.workers)
    cfg, init_path = config_from_args(args, args.device)
    if args.dry_run:
        print(json.dumps({"run_key": cfg.key(), "config": cfg.to_dict()}, indent=2))
        return 0
    world, _ = init_world(args.device)
    progress = {"auto": None, "bar": True, "lines": None, "off": False}[args.progress]
    opts = RunOptions(
        results=args.results,
        device=args.device,
        checkpoint_every=args.checkpoint_every,
        resume=args.resume,
        restart=args.restart,
        force=args.force,
        compile=args.compile,
        channels_last=args.channels_last,
        sync_bn=args.sync_bn,
        ddp_loss=args.ddp_loss,
        init_path=init_path,
        progress=progress,
        log_every_s=0.0 if args.progress == "lines" else 30.0,
    )
    try:
        out = train_run(cfg, opts, world=world, root=args.root, download=args.download)
    finally:
        close_world(world)
    if world.is_main:
        where = Path(args.results) / "runs" / f"{out.key}.csv"
        print(f"run {out.key} ({out.config.describe()}): {out.status} {out.message}".rstrip())
        if out.frame is not None:
            last = out.frame.iloc[-1]
            print(
                f"  final epoch {int(last['epoch'])}: loss {last['loss']:.4f}, NCM test {100 * last['ncm_acc']:.2f} %, "
                f"etf_mean {last['etf_mean']:.4f}, spectrum_min {last['spectrum_min']:.2f}"
            )
            if "settled" in out.frame.columns:
                print(
                    f"  convergence: settled at epoch {int(last['epoch'])}"
                    if bool(last["settled"])
                    else f"  convergence: not settled within {out.config.epochs} epochs (undecided)"
                )
            print(f"  results: {where}")
    return 1 if out.status == "failed" else 0


def _cmd_eval(args: argparse.Namespace) -> int:

    metrics = tuple(m.strip() for m in args.metrics.split(",") if m.strip())
    row, path = evaluate_checkpoint(
        args.checkpoint,
        metrics=metrics,
        root=args.root,
        device=args.device,
        results=args.results,
        probe_epochs=args.probe_epochs,
        probe_lr=args.probe_lr,
        probe_seed=args.probe_seed,
        split_seed=args.split_seed,
        knn_k=args.knn_k,
        knn_temperature=args.knn_temperature,
    )
    if args.json:
        print(json.dumps(row, indent=2, default=str))
    else:
        for k, v in row.items():
            if (
                k.endswith("_features")
                or k in ("ncm_top1", "probe_test_top1", "knn_test")
                or k.startswith("recall")
            ):
                print(f"  {k}: {v}")
        print(f"  row: {path}")
    return 0


def _cmd_claims(args: argparse.Namespace) -> int:

    if args.group == "records":
        for p in write_records(args.results):
            print(p)
        return 0
    return run_group(
        args.group,
        root=args.root,
        results=args.results,
        device=args.device,
        scale=args.scale,
        dry_run=args.dry_run,
    )


def _cmd_digits(args: argparse.Namespace) -> int:

    summary = run_digits(args.results, jobs=args.jobs, scale=args.scale, progress=True)
    print(summary.text())
    return 0


#: How to continue after Ctrl-C, per command (the stored runs and checkpoints are complete).
_CONTINUE = {
    "train": lambda a: (
        "add --resume to continue from the last checkpoint"
        if a.checkpoint_every
        else "no checkpoint was written: --checkpoint-every N writes one every N epochs"
    ),
    "eval": lambda a: "run the same command again",
    "claims": lambda a: "run the same command again to continue",
    "digits": lambda a: "run the same command again to continue",
}


def main(argv: list[str] | None = None) -> int:
    """Run ``python -m realdata``; returns the exit status."""
    args = build_parser().parse_args(argv)
    handlers = {"train": _cmd_train, "eval": _cmd_eval, "claims": _cmd_claims, "digits": _cmd_digits}

    try:
        return handlers[args.command](args)
    except KeyboardInterrupt:
        if os.environ.get("RANK", "0") == "0":  # under torchrun, rank 0 speaks for every rank
            print(
                f"interrupted; nothing half-written is left behind ({_CONTINUE[args.command](args)})",
                file=sys.stderr,
            )
        return 130
    except BrokenPipeError:  # e.g. piped into head: stop quietly
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    except (ValueError, DatasetError, CorruptCheckpointError, FileNotFoundError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
