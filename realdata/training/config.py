"""Frozen, validated configuration of one real-data training run; its hash is the run's identity.

:class:`TrainConfig` holds everything that decides the numbers a run computes: data, encoder,
loss, views, optimiser, schedule of evaluations, seed and precision. Fields left ``None`` take a
per-method default when the config is built (:meth:`TrainConfig.resolved`), so the stored config
always shows the values that ran. The defaults are the authors' recipes, the recipe fields of
:data:`theory.options.METHODS` (the single source of every option and default):

=================  =====================================  ======================================
field              SCL / HSCL / UCL / HUCL                InfoNCE / WeiNCE
=================  =====================================  ======================================
``views``          ``label`` (the HCL authors: no          ``simclr`` (two SimCLR views, the
                   augmentation, label positives)          WeiNCE recipe)
``head``           ``hcl`` (512-BN-ReLU, ``d = C - 1``)   ``weince`` (512-ReLU-64, no BN/bias)
``normalization``  ``ball`` (the authors' unit ball)      ``sphere`` (the loss uses cosines, so
                                                          this only fixes the metrics' ``z``)
``tau``            1 (the HCL authors use none)           0.5 (the WeiNCE recipe)
``lr``             1e-3 (Adam, the HCL authors)           3e-4 (Adam, the WeiNCE recipe)
``weight_decay``   0 for SCL/HSCL, 1e-6 for UCL/HUCL      0 (Adam ignores it in their code)
                   (the authors' two folders)
=================  =====================================  ======================================

The run's key (:meth:`TrainConfig.key`) is the run key of the results store
(:func:`synthetic.store.keys.run_key`): the sha1 of the canonical JSON of
:meth:`TrainConfig.identity_dict`: the resolved values with ``-0.0`` written as ``0.0``, floats
as their shortest round-trip repr, and the fields that cannot change the computation blanked
(``estimator`` and ``num_negatives`` of the two-view losses, ``recipe`` outside WeiNCE,
``crop_min_scale`` with label views, ``samples_per_class`` without the balanced sampler, ``width``
outside ``smallcnn``, ``stem`` for ``smallcnn``). Runtime choices that do not change the
mathematics (device, number of processes, ``torch.compile``, ``channels_last``, checkpoint
cadence, progress output) are not part of it.

Papers: hard negatives and collapse (Jiang et al., arXiv 2311.05139, Sec. 5; docs/hcl.md),
WeiNCE (Erol et al., arXiv 2606.00262, Sec. 5; docs/weince.md). See docs/realdata.md.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, fields
from typing import Any

import numpy as np

from realdata.datasets import DATASETS
from realdata.training.models import ARCHS, default_out_dim, default_stem
from synthetic.engine.convergence import SETTLE_FIELDS, check_rule_fields
from synthetic.store.keys import run_key
from theory.options import (
    ESTIMATORS,
    HCL_METHODS,
    HEADS,
    INITS,
    METHODS,
    NORMALIZATIONS,
    NUM_NEGATIVES,
    PRECISIONS,
    RECIPES,
    SAMPLED_DRAWS,
    STEMS,
    TWO_VIEW_METHODS,
    VIEWS,
)

__all__ = ["TrainConfig"]


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _is_real(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(float(v))


def _canonical(v: Any) -> Any:
    """JSON-stable value: ``-0.0 -> 0.0``, integral floats stay floats, tuples become lists."""
    if isinstance(v, float):
        return 0.0 if v == 0.0 else v
    if isinstance(v, (list, tuple)):
        return [_canonical(x) for x in v]
    return v


@dataclass(frozen=True)
class TrainConfig:
    """One real-data training run (validated; see the module docstring for the defaults).

    Attributes:
        dataset: a :data:`realdata.datasets.DATASETS` name.
        arch: a :data:`realdata.training.models.ARCHS` name; default ``smallcnn`` for digits, else
            ``resnet18``.
        method: SCL, HSCL, UCL, HUCL, InfoNCE or WeiNCE.
        beta: hardness of the tilt ``exp(beta z.z')``: 0 for SCL/UCL/InfoNCE/WeiNCE, > 0 for
            HSCL/HUCL.
        estimator: HCL family: ``sampled`` (the authors' K draws per pair) or ``expectation``.
        num_negatives: ``K`` draws per (anchor, positive) pair of the sampled estimator.
        tau: temperature; default per method.
        normalization: ``none`` / ``ball`` / ``sphere`` of the projection ``z``; per method.
        views: ``label`` or ``simclr``; per method (two-view losses need ``simclr``).
        head: ``hcl`` / ``weince`` / ``identity``; per method.
        out_dim: ``d``; default ``C - 1`` for the ``hcl`` head, 64 for ``weince``.
        recipe: WeiNCE only: ``core`` (the paper's loss) or ``released`` (plus the released
            code's auxiliary top-50 terms and batch-beta EMA).
        epochs: training epochs (>= 0).
        batch_size: the **global** batch (over all processes; drop_last).
        lr: Adam learning rate; per method.
        weight_decay: Adam (L2) weight decay; per method.
        seed: seed of the initialisation, the batch order, the views and the negatives.
        balanced_sampler: class-balanced batches (``samples_per_class`` per class, all classes
            when the batch allows) instead of the shuffled ``drop_last`` batches.
        samples_per_class: samples per class of the balanced sampler; default
            ``max(2, batch_size // C)``.
        eval_every: metrics at epoch 0, every ``eval_every`` epochs and at the last epoch.
        crop_min_scale: lower bound of the RandomResizedCrop area scale (SimCLR views; 0.08).
        stem: ResNet stem; default per dataset (:func:`realdata.training.models.default_stem`).
        width: ``smallcnn`` width.
        precision: ``fp32`` or ``bf16`` (autocast of the encoder; losses and statistics stay
            float32). Resolved from ``--amp`` and the device by the command line.
        init: ``random`` or ``nc`` (started from the checkpoint named by ``init_from``).
        init_from: identity of the initial checkpoint (``<run_key>@<epoch>``); empty for
            ``random``.
        record_means: store the class means of every recorded epoch (the ``class_means`` column,
            from which the figures draw spectra).
        settle_window: the convergence rule's shortest window W in epochs; 0 (default) = no
            rule, the run trains ``epochs`` epochs. With W > 0 the run stops at the first
            recorded epoch at which its scale-free metrics settled (the synthetic study's rule,
            ``synthetic.engine.convergence``; docs/claims.md#convergence-and-undecided).
        settle_etf, settle_wcv, settle_rank, settle_erank, settle_gap: the rule's tolerances.

    A numpy scalar is taken as the Python value it holds (``np.int64(1)`` as ``1``), so the config
    and its key are those of the Python values.
    """

    dataset: str = "digits"
    arch: str | None = None
    method: str = "SCL"
    beta: float = 0.0
    estimator: str = "sampled"
    num_negatives: int = NUM_NEGATIVES
    tau: float | None = None
    normalization: str | None = None
    views: str | None = None
    head: str | None = None
    out_dim: int | None = None
    recipe: str = "core"
    epochs: int = 10
    batch_size: int = 512
    lr: float | None = None
    weight_decay: float | None = None
    seed: int = 0
    balanced_sampler: bool = False
    samples_per_class: int | None = None
    eval_every: int = 1
    crop_min_scale: float = 0.08
    stem: str | None = None
    width: int = 32
    precision: str = "fp32"
    init: str = "random"
    init_from: str = ""
    record_means: bool = True
    settle_window: int = int(SETTLE_FIELDS["settle_window"])
    settle_etf: float = SETTLE_FIELDS["settle_etf"]
    settle_wcv: float = SETTLE_FIELDS["settle_wcv"]
    settle_rank: int = int(SETTLE_FIELDS["settle_rank"])
    settle_erank: float = SETTLE_FIELDS["settle_erank"]
    settle_gap: float = SETTLE_FIELDS["settle_gap"]

    def __post_init__(self) -> None:
        for f in fields(self):  # a numpy scalar (a grid or a pandas row) is the Python value it holds
            v = getattr(self, f.name)
            if isinstance(v, np.generic):
                object.__setattr__(self, f.name, v.item())

        def choice(name: str, options: Any, allow_none: bool = False) -> None:
            v = getattr(self, name)
            if (v is None and allow_none) or v in options:
                return
            raise ValueError(f"{name} must be one of {tuple(options)}, got {v!r}")

        def integer(name: str, lo: int, allow_none: bool = False) -> None:
            v = getattr(self, name)
            if v is None and allow_none:
                return
            if not _is_int(v) or v < lo:
                raise ValueError(f"{name} must be an integer >= {lo}, got {v!r}")

        def real(name: str, lo: float, strict: bool, allow_none: bool = False) -> None:
            v = getattr(self, name)
            if v is None and allow_none:
                return
            if not _is_real(v) or (v <= lo if strict else v < lo):
                op = ">" if strict else ">="
                raise ValueError(f"{name} must be a finite number {op} {lo}, got {v!r}")
            object.__setattr__(self, name, _canonical(float(v)))

        choice("dataset", DATASETS)
        choice("arch", ARCHS, allow_none=True)
        choice("method", METHODS)
        choice("estimator", ESTIMATORS)
        choice("normalization", NORMALIZATIONS, allow_none=True)
        choice("views", VIEWS, allow_none=True)
        choice("head", HEADS, allow_none=True)
        choice("recipe", RECIPES)
        choice("stem", STEMS, allow_none=True)
        choice("precision", PRECISIONS)
        choice("init", INITS)
        real("beta", 0.0, strict=False)
        real("tau", 0.0, strict=True, allow_none=True)
        real("lr", 0.0, strict=True, allow_none=True)
        real("weight_decay", 0.0, strict=False, allow_none=True)
        real("crop_min_scale", 0.0, strict=True)
        if self.crop_min_scale > 1.0:
            raise ValueError(f"crop_min_scale must lie in (0, 1], got {self.crop_min_scale!r}")
        integer("num_negatives", 1)
        integer("out_dim", 1, allow_none=True)
        integer("epochs", 0)
        integer("batch_size", 2)
        integer("seed", 0)
        integer("samples_per_class", 1, allow_none=True)
        integer("eval_every", 1)
        integer("width", 1)
        for name in ("balanced_sampler", "record_means"):
            if not isinstance(getattr(self, name), bool):
                raise ValueError(f"{name} must be a bool, got {getattr(self, name)!r}")
        if not isinstance(self.init_from, str):
            raise ValueError(f"init_from must be a string, got {self.init_from!r}")
        check_rule_fields(self)
        if (self.init == "nc") != bool(self.init_from):
            raise ValueError(
                f"init_from must name the initial checkpoint exactly when init='nc', got "
                f"init={self.init!r}, init_from={self.init_from!r}"
            )
        if self.method in HCL_METHODS:
            hard = METHODS[self.method].hard
            if hard and not self.beta > 0:
                raise ValueError(f"beta must be > 0 for method {self.method!r}, got {self.beta}")
            if not hard and self.beta != 0:
                raise ValueError(
                    f"beta must be 0 for method {self.method!r} (use H{self.method} for hard "
                    f"negatives), got {self.beta}"
                )
        else:
            if self.beta != 0:
                raise ValueError(f"beta must be 0 for method {self.method!r}, got {self.beta}")
            if self.views == "label":
                raise ValueError(
                    f"views must be 'simclr' for the two-view method {self.method!r}, got 'label'"
                )
        if self.recipe != "core" and self.method != "WeiNCE":
            raise ValueError(f"recipe applies to WeiNCE only; got recipe={self.recipe!r} for {self.method!r}")

    # ------------------------------------------------------------------ resolution
    def resolved(self, num_classes: int | None = None) -> TrainConfig:
        """The config with every ``None`` replaced by its default (idempotent).

        Args:
            num_classes: ``C`` of the dataset, needed for ``out_dim`` of the ``hcl`` head and
                the balanced sampler's default; default the dataset's known class count.
        """
        C = DATASETS[self.dataset].num_classes if num_classes is None else num_classes
        d = METHODS[self.method]
        arch = self.arch or ("smallcnn" if self.dataset == "digits" else "resnet18")
        head = self.head or d.head
        out = default_out_dim(head, C) if self.out_dim is None else self.out_dim
        if head == "identity":
            out = None
        spc = self.samples_per_class
        if self.balanced_sampler and spc is None:
            spc = max(2, self.batch_size // C)
        stem = self.stem
        if stem is None and arch != "smallcnn":
            stem = default_stem(self.dataset, 8 if self.dataset == "digits" else None)
        return dataclasses.replace(
            self,
            arch=arch,
            tau=d.tau if self.tau is None else self.tau,
            normalization=self.normalization or d.normalization,
            views=self.views or d.views,
            head=head,
            out_dim=out,
            lr=d.lr if self.lr is None else self.lr,
            weight_decay=d.weight_decay if self.weight_decay is None else self.weight_decay,
            samples_per_class=spc,
            stem=stem,
        )

    @property
    def setting(self) -> str | None:
        """``supervised`` / ``unsupervised`` for the HCL family, ``None`` for two-view losses."""
        return METHODS[self.method].setting

    @property
    def two_views(self) -> bool:
        """Whether a step sees two augmented views per image."""
        return self.resolved().views == "simclr"

    # ------------------------------------------------------------------ (de)serialisation
    def to_dict(self) -> dict[str, Any]:
        """Flat, JSON-able dict of the resolved config (the config columns of a results table)."""
        r = self.resolved()
        return {f.name: _canonical(getattr(r, f.name)) for f in fields(r)}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> TrainConfig:
        """Build from a (possibly partial) flat dict (numpy scalars and NaN for None tolerated).

        Raises:
            ValueError: unknown keys or invalid values.
        """
        if not isinstance(data, dict):
            raise ValueError(f"data must be a dict, got {type(data).__name__}")
        names = {f.name: f for f in fields(cls)}
        unknown = sorted(set(data) - set(names))
        if unknown:
            raise ValueError(f"unknown TrainConfig field(s): {unknown}")
        kwargs: dict[str, Any] = {}
        for k, v in data.items():
            if hasattr(v, "item") and not isinstance(v, (str, bytes)):
                v = v.item()
            if isinstance(v, float) and math.isnan(v):
                v = None
            if (
                k
                in (
                    "out_dim",
                    "samples_per_class",
                    "epochs",
                    "batch_size",
                    "seed",
                    "num_negatives",
                    "eval_every",
                    "width",
                    "settle_window",
                    "settle_rank",
                )
                and isinstance(v, float)
                and v.is_integer()
            ):
                v = int(v)
            if k == "init_from" and v is None:
                v = ""
            kwargs[k] = v
        return cls(**kwargs)

    def identity_dict(self) -> dict[str, Any]:
        """The resolved config with the fields that cannot change the run blanked (``None``)."""
        out = self.to_dict()
        if self.method in TWO_VIEW_METHODS:
            out["estimator"] = None
            out["num_negatives"] = None
        elif out["estimator"] == "expectation":
            out["num_negatives"] = None
        else:  # sampled: the randomness contract, so no run drawn under another one matches
            out["draws"] = SAMPLED_DRAWS
        if self.method != "WeiNCE":
            out["recipe"] = None
        if out["views"] == "label":
            out["crop_min_scale"] = None
        if not self.balanced_sampler:
            out["samples_per_class"] = None
        if out["arch"] != "smallcnn":
            out["width"] = None
        else:
            out["stem"] = None
        if self.epochs == 0:
            for k in ("lr", "weight_decay", "batch_size", "balanced_sampler", "samples_per_class"):
                out[k] = None
            out["eval_every"] = None
        else:
            out["eval_every"] = min(self.eval_every, self.epochs)
        if self.settle_window == 0:  # no rule: left out, so runs stored before the rule keep their keys
            for k in SETTLE_FIELDS:
                del out[k]
        elif out["normalization"] == "none":
            out["settle_gap"] = None  # not watched without normalisation
        return out

    def key(self) -> str:
        """16 hex digits: sha1 of the canonical JSON of :meth:`identity_dict`."""
        return run_key(self.identity_dict())

    def replace(self, **changes: Any) -> TrainConfig:
        """A copy with ``changes`` applied (validated again)."""
        names = {f.name for f in fields(self)}
        unknown = sorted(set(changes) - names)
        if unknown:
            raise ValueError(f"unknown TrainConfig field(s): {unknown}")
        return dataclasses.replace(self, **changes)

    def describe(self) -> str:
        """One line: ``digits smallcnn HSCL beta=5 sampled K=256 ball bs=256 seed=0``."""
        r = self.resolved()
        parts = [r.dataset, str(r.arch), r.method]
        if r.method in HCL_METHODS:
            parts += [
                f"beta={r.beta:g}",
                r.estimator + (f" K={r.num_negatives}" if r.estimator == "sampled" else ""),
            ]
        if r.method == "WeiNCE":
            parts.append(f"recipe={r.recipe}")
        parts += [
            f"views={r.views}",
            str(r.normalization),
            f"bs={r.batch_size}",
            f"epochs={r.epochs}",
            f"seed={r.seed}",
        ]
        if r.init == "nc":
            parts.append(f"init=nc({r.init_from})")
        return " ".join(parts)
