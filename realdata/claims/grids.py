"""The runs behind each real-data claim, at paper scale, at a smoke-test scale and at digits scale.

Each claim group trains a list of :class:`realdata.training.config.TrainConfig` into its own results folder
``RESULTS/realdata/<folder>`` (:data:`FOLDERS`):

* ``r1-r3`` (claims R1-R3; the HCL authors' CIFAR-100 notebooks): ResNet-50, CIFAR stem, the
  authors' head (``d = 99``, unit ball), label views without augmentation, batch 512, ``K = 256``
  sampled negatives, Adam 1e-3 (weight decay 0 for SCL/HSCL, 1e-6 for UCL/HUCL), 400 epochs,
  metrics every 5 epochs; SCL, HSCL, UCL, HUCL at beta in {0, 2, 5, 10, 30}; seed 0 (one run per
  configuration, as the authors).
* ``r4`` (R4; no released code, our design): the ten methods/betas of ``r1-r3`` re-initialised
  from the final HSCL beta = 10 encoder of ``r1-r3`` (a near-NC network), 100 epochs.
* ``r5`` (R5; no released code, our design): SCL and HSCL beta = 5, batch sizes 32, 64, 128, 256,
  512, CIFAR-100 and Tiny-ImageNet (ResNet-18, 200 epochs, otherwise as ``r1-r3``; the CIFAR stem
  on CIFAR, the standard stem on Tiny-ImageNet).
* ``w1-w3`` (W1-W3; the WeiNCE recipe): CIFAR-100, ResNet-18, two SimCLR views, batch 256, 100
  epochs, Adam 3e-4, tau 0.5; InfoNCE and WeiNCE (``released`` recipe, the authors' reproduction
  script) at the authors' seeds 7, 21, 63, 84; then the linear probe / kNN / R@k of each encoder and
  POT / link selection on the InfoNCE seed-7 encoder.

``scale="small"`` keeps the structure with a small CNN, one epoch and tiny batches (a smoke test
for fake folders; its numbers are never a reproduction). :func:`digits_runs` is the digits scale of
the main job (docs/realdata.md).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from realdata.training.config import TrainConfig
from theory.options import TWO_VIEW_METHODS

__all__ = [
    "CLAIM_GROUPS",
    "FOLDERS",
    "BETAS",
    "DIGITS_BETAS",
    "DIGITS_SEEDS",
    "GroupRuns",
    "group_runs",
    "group_command",
    "digits_runs",
]

CLAIM_GROUPS = ("r1-r3", "r4", "r5", "w1-w3")
FOLDERS = {"r1-r3": "r1_r3", "r4": "r4", "r5": "r5", "w1-w3": "w1_w3"}
BETAS = (0.0, 2.0, 5.0, 10.0, 30.0)
WEINCE_SEEDS = (7, 21, 63, 84)
R5_BATCHES = (32, 64, 128, 256, 512)
R4_SOURCE_BETA = 10.0

DIGITS_BETAS = (0.0, 2.0, 5.0, 10.0)
DIGITS_SEEDS = (0, 1, 2)


@dataclass(frozen=True)
class GroupRuns:
    """The runs of one group: ``(folder name, config)`` pairs and, for R4, the source run."""

    group: str
    scale: str
    runs: tuple[tuple[str, TrainConfig], ...]
    source: tuple[str, TrainConfig] | None = None


def _method(beta: float, unsupervised: bool) -> str:
    base = "UCL" if unsupervised else "SCL"
    return ("H" + base) if beta > 0 else base


def _hcl_family(base: TrainConfig, betas: tuple[float, ...]) -> list[TrainConfig]:
    out = []
    for unsup in (False, True):
        for b in betas:
            out.append(base.replace(method=_method(b, unsup), beta=b))
    return out


def _folder(group: str, scale: str, dataset: str | None = None) -> str:
    name = FOLDERS[group] + (f"_{dataset.replace('-', '')}" if dataset else "")
    return name if scale == "paper" else f"{name}_{scale}"


def group_runs(group: str, scale: str = "paper", precision: str = "bf16") -> GroupRuns:
    """The runs of ``group`` at ``scale`` (``paper`` or ``small``)."""
    if group not in CLAIM_GROUPS:
        raise ValueError(f"group must be one of {CLAIM_GROUPS}, got {group!r}")
    if scale not in ("paper", "small"):
        raise ValueError(f"scale must be 'paper' or 'small', got {scale!r}")
    small = scale == "small"
    shrink = dict(arch="smallcnn", width=4, epochs=1, eval_every=1, num_negatives=16, precision="fp32")
    hcl = TrainConfig(
        dataset="cifar100",
        arch="resnet50",
        estimator="sampled",
        num_negatives=256,
        epochs=400,
        batch_size=512,
        eval_every=5,
        precision=precision,
    )
    if small:
        hcl = hcl.replace(batch_size=32, **shrink)
    if group == "r1-r3":
        return GroupRuns(group, scale, tuple((_folder(group, scale), c) for c in _hcl_family(hcl, BETAS)))
    if group == "r4":
        src = hcl.replace(method="HSCL", beta=R4_SOURCE_BETA)
        runs = tuple(
            (_folder(group, scale), c.replace(epochs=1 if small else 100)) for c in _hcl_family(hcl, BETAS)
        )
        return GroupRuns(group, scale, runs, (_folder("r1-r3", scale), src))
    if group == "r5":
        out: list[tuple[str, TrainConfig]] = []
        for ds in ("cifar100", "tiny-imagenet"):
            base = hcl.replace(dataset=ds, arch="resnet18", epochs=200, eval_every=10)
            batches: tuple[int, ...] = R5_BATCHES
            if small:
                base = base.replace(**shrink)
                batches = (8, 16)
            for bs in batches:
                for m, b in (("SCL", 0.0), ("HSCL", 5.0)):
                    out.append((_folder(group, scale, ds), base.replace(method=m, beta=b, batch_size=bs)))
        return GroupRuns(group, scale, tuple(out))
    two = TrainConfig(
        dataset="cifar100", arch="resnet18", epochs=100, batch_size=256, eval_every=10, precision=precision
    )
    seeds: tuple[int, ...] = WEINCE_SEEDS
    if small:
        two = two.replace(batch_size=16, **{k: v for k, v in shrink.items() if k != "num_negatives"})
        seeds = WEINCE_SEEDS[:2]
    pairs: list[tuple[str, TrainConfig]] = []
    for s in seeds:
        pairs.append((_folder(group, scale), two.replace(method="InfoNCE", seed=s)))
        pairs.append((_folder(group, scale), two.replace(method="WeiNCE", recipe="released", seed=s)))
    return GroupRuns(group, scale, tuple(pairs))


def group_command(group: str, *, root: str = "DATA", results: str = "results", scale: str = "paper") -> str:
    """The command that runs ``group`` (shown by NOT RUN records)."""
    extra = "" if scale == "paper" else f" --scale {scale}"
    return f"python -m realdata claims {group} --root {root} --results {results} --device cuda{extra}"


def digits_runs(scale: str = "default") -> tuple[list[TrainConfig], list[TrainConfig]]:
    """The digits scale: ``(HCL runs, two-view runs)``.

    HCL: SCL / HSCL and UCL / HUCL at beta in :data:`DIGITS_BETAS`, the small CNN (width 16), the
    authors' head (``d = 9``, unit ball), label views, batch 128, the exact (expectation) estimator
    (deterministic; the sampled one is the paper-scale default), Adam 1e-3, 20 epochs, metrics
    every 5 epochs. Two-view: InfoNCE and WeiNCE (core recipe), SimCLR views with crops of at least
    half the 8x8 image, batch 128, Adam 3e-4, tau 0.5, 20 epochs. Seeds :data:`DIGITS_SEEDS`.
    ``quick``: 2 epochs, one seed, betas 0 and 5 (seconds; for tests).
    """
    if scale not in ("quick", "default"):
        raise ValueError(f"scale must be 'quick' or 'default', got {scale!r}")
    quick = scale == "quick"
    epochs, seeds, betas = (2, (0,), (0.0, 5.0)) if quick else (20, DIGITS_SEEDS, DIGITS_BETAS)
    base = TrainConfig(
        dataset="digits",
        arch="smallcnn",
        width=16,
        batch_size=128,
        estimator="expectation",
        epochs=epochs,
        eval_every=1 if quick else 5,
    )
    hcl = [replace(c, seed=s) for c in _hcl_family(base, betas) for s in seeds]
    two = [base.replace(method=m, crop_min_scale=0.5, seed=s) for m in TWO_VIEW_METHODS for s in seeds]
    return hcl, two
