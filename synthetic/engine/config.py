"""Frozen, validated configuration of one synthetic training run.

A run's identity is the hash of its *resolved, canonical* configuration (:meth:`RunConfig.key`):
two configs that resolve to the same values (e.g. ``d=None`` and ``d=C-1``, ``batch_size=None``
and ``0``) or differ only in fields the run does not use (e.g. ``margin`` without the triplet
psi, :meth:`RunConfig.identity_dict`) share a key, so a results store keyed by it never trains
the same computation twice. Canonicalisation happens only inside ``key()``: the config and its
:meth:`RunConfig.to_dict` keep the given values, except that ``to_dict()`` resolves ``d=None``
to ``C - 1`` and a full batch to 0, so ``from_dict(to_dict())`` has the same ``key()`` (and equals
the config once those are resolved).

The design of the synthetic study is the project's own (docs/claims.md#synthetic-claims; the paper does not state its synthetic setup);
defaults follow the authors' code where it has one (mean-form InfoNCE, tau = 1, K = 256, Adam
lr 1e-3, weight decay 0, d = C - 1; docs/claims.md). The method table, the option literals
(positives, encoders, centres, dtypes, initialisations included) and the loss defaults come
from :mod:`theory.options`, the single source.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, fields
from typing import Any

import numpy as np

from synthetic.engine.convergence import SETTLE_FIELDS, check_rule_fields
from synthetic.store.keys import run_key
from theory.options import (
    CENTRES,
    DTYPES,
    ENCODERS,
    ESTIMATORS,
    HCL_METHODS,
    HCL_TAU,
    INITS,
    MARGIN,
    METHODS,
    NORMALIZATIONS,
    NUM_NEGATIVES,
    POSITIVES,
    PSI_FORMS,
    SAMPLED_DRAWS,
    SETTLE_LOSSES,
    TWO_VIEW_METHODS,
)

__all__ = ["RunConfig"]

#: Fields added after results were first stored: at these values they are left out of the hashed
#: identity, so every run stored before they existed keeps its key.
_LATER_FIELDS = {
    "depth": 1,
    "max_steps": 0,
    "init": "random",
    "init_method": "HSCL",
    "init_beta": 10.0,
    "init_epochs": 0,
    **SETTLE_FIELDS,
    "settle_loss": "epoch",
}

#: The tolerance fields of the convergence rule (synthetic.engine.convergence).
_SETTLE_TOLERANCES = tuple(f for f in SETTLE_FIELDS if f != "settle_window")


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _is_real(v: Any) -> bool:
    return (isinstance(v, (int, float)) and not isinstance(v, bool)) and math.isfinite(float(v))


@dataclass(frozen=True)
class RunConfig:
    """One synthetic run: data, encoder, loss, optimiser, seed.

    Attributes:
        method: a :data:`theory.options.METHODS` name: ``"SCL"``, ``"HSCL"``, ``"UCL"``,
            ``"HUCL"`` (docs/hcl.md#the-batched-loss, via ``theory.hcl.contrastive_loss``), ``"InfoNCE"`` or
            ``"WeiNCE"`` (two views).
        beta: hardness of the tilt ``exp(beta z.z')``; 0 for SCL/UCL/InfoNCE/WeiNCE, > 0 for
            HSCL/HUCL.
        tau: temperature > 0 (psi is applied to ``t / tau``; authors: 1).
        psi: ``"mean"`` (authors), ``"sum"`` or ``"triplet"`` (docs/hcl.md#the-psi-family).
        margin: triplet margin >= 0 (``psi="triplet"`` only).
        estimator: ``"expectation"`` (exact tilted average, deterministic) or ``"sampled"``
            (K negatives drawn with replacement per pair, authors' code).
        num_negatives: K >= 1.
        batch_size: mini-batch size; ``0``/``None`` = full batch. Mini-batches are drawn from a
            fresh permutation each epoch, ``drop_last`` as in the authors' code.
        lr: Adam learning rate > 0.
        weight_decay: Adam (L2) weight decay >= 0.
        epochs: number of training epochs >= 0 (with ``max_steps > 0`` it is replaced by the
            number of epochs the budget spans).
        max_steps: optimisation-step budget; ``0`` = ``epochs`` full epochs. With
            ``max_steps > 0`` the run draws exactly ``max_steps`` mini-batches
            (``ceil(max_steps / (N // batch_size))`` epochs, the last one cut short): runs of
            different batch sizes compared at equal steps (claim R5).
        eval_every: metrics are recorded at epoch 0, every ``eval_every`` epochs and at the last.
        normalization: ``"none"``, ``"ball"`` (authors: ``z / max(1, ||z||)``) or ``"sphere"``.
        positives: ``"label"`` (another sample of the same class) or ``"noise"`` (the anchor plus
            Gaussian noise of std ``noise_std``; breaks conditional independence, claim S2).
        noise_std: std of the additive noise of ``"noise"`` positives (input space for
            linear/MLP encoders, pre-normalisation embedding space for free features).
        encoder: ``"free"`` (one learnable vector per sample), ``"linear"`` or ``"mlp"``.
        hidden: width of every hidden layer of the MLP encoder.
        depth: number of hidden layers of the MLP encoder (1 = ``relu(x W1 + b1) W2 + b2``).
        d: embedding dimension; ``None`` = ``num_classes - 1`` (the authors' choice).
        init_scale: free features start as ``N(0, init_scale^2 / d)`` per coordinate.
        num_classes: C >= 2 latent classes (balanced).
        n_per_class: training samples per class (>= 1).
        n_test_per_class: held-out samples per class for NCM accuracy (0 = none).
        input_dim: D, dimension of the Gaussian-mixture inputs.
        separation: norm of every class centre.
        sigma: within-class standard deviation per input coordinate.
        centres: ``"random"`` (i.i.d. uniform directions) or ``"orthogonal"`` (needs D >= C).
        seed: integer seed of everything random in the run (data, init, order, negatives).
        record_means: also record the (C, d) class means per recorded epoch.
        dtype: ``"float32"`` or ``"float64"``.
        init: ``"random"`` (a fresh initialisation from the ``"init"`` stream) or ``"nc"``: the
            parameters start from the final state of :meth:`source_config` (the same run trained
            with ``init_method`` / ``init_beta`` for ``init_epochs`` epochs, meant to reach Neural
            Collapse), with a fresh Adam state (claim R4, docs/claims.md).
        init_method: method of the source run (``init="nc"``).
        init_beta: beta of the source run (``init="nc"``).
        init_epochs: epochs of the source run (``init="nc"``; >= 1 there).
        settle_window: W, the shortest trailing window (epochs) of the convergence rule; 0 = no
            rule (the run trains ``epochs`` epochs). With W > 0 the run stops at the first recorded
            epoch e at which its scale-free metrics changed by at most their tolerances over the
            last ``max(W, e // 2)`` epochs (a window holding at least two recorded epochs), else
            at ``epochs`` (the budget)
            (:mod:`synthetic.engine.convergence`, docs/claims.md#convergence-and-undecided).
        settle_etf: tolerance on the window's change of ``etf_mean`` (default 0.005, a tenth of
            the claims' NC threshold 0.05).
        settle_wcv: tolerance on the change of ``within_class_variation / mean_norm`` (default
            0.01, a tenth of the NC threshold 0.1).
        settle_rank: tolerance on the change of ``rank_1e-2`` and ``rank_1e-4`` (default 0: the
            ranks are constant over the window).
        settle_erank: tolerance on the change of ``effective_rank`` (default 0.1, a tenth of one
            dimension).
        settle_gap: tolerance on the change of ``gap_to_optimum`` (default 1e-3; watched only
            with ball or sphere normalisation).
        settle_loss: the loss whose gap the rule watches (:data:`theory.options.SETTLE_LOSSES`):
            ``"epoch"`` (default) the epoch's mean training loss (``gap_to_optimum``), or
            ``"eval"`` the deterministic loss of the training set over a fixed partition into the
            run's batch size with the exact expectation estimator (``eval_gap``; for runs whose
            training loss is a noisy estimate, docs/claims.md#convergence-and-undecided).

    A numpy scalar is taken as the Python value it holds (``np.int64(1)`` as ``1``,
    ``np.float32(2)`` as ``2.0``), so the config and its key are those of the Python values.
    """

    method: str = "SCL"
    beta: float = 0.0
    tau: float = HCL_TAU
    psi: str = "mean"
    margin: float = MARGIN
    estimator: str = "expectation"
    num_negatives: int = NUM_NEGATIVES
    batch_size: int | None = 0
    lr: float = 1e-3
    weight_decay: float = 0.0
    epochs: int = 100
    max_steps: int = 0
    eval_every: int = 1
    normalization: str = "sphere"
    positives: str = "label"
    noise_std: float = 0.1
    encoder: str = "free"
    hidden: int = 128
    depth: int = 1
    d: int | None = None
    init_scale: float = 1.0
    num_classes: int = 10
    n_per_class: int = 50
    n_test_per_class: int = 20
    input_dim: int = 64
    separation: float = 3.0
    sigma: float = 1.0
    centres: str = "random"
    seed: int = 0
    record_means: bool = False
    dtype: str = "float32"
    init: str = "random"
    init_method: str = "HSCL"
    init_beta: float = 10.0
    init_epochs: int = 0
    settle_window: int = int(SETTLE_FIELDS["settle_window"])
    settle_etf: float = SETTLE_FIELDS["settle_etf"]
    settle_wcv: float = SETTLE_FIELDS["settle_wcv"]
    settle_rank: int = int(SETTLE_FIELDS["settle_rank"])
    settle_erank: float = SETTLE_FIELDS["settle_erank"]
    settle_gap: float = SETTLE_FIELDS["settle_gap"]
    settle_loss: str = "epoch"

    def __post_init__(self) -> None:
        for f in fields(self):  # a numpy scalar (a grid or a pandas row) is the Python value it holds
            v = getattr(self, f.name)
            if isinstance(v, np.generic):
                object.__setattr__(self, f.name, v.item())

        def choice(name: str, options) -> None:
            v = getattr(self, name)
            if v not in options:
                raise ValueError(f"{name} must be one of {tuple(options)}, got {v!r}")

        def integer(name: str, lo: int) -> None:
            v = getattr(self, name)
            if not _is_int(v) or v < lo:
                raise ValueError(f"{name} must be an integer >= {lo}, got {v!r}")

        def real(name: str, lo: float, strict: bool) -> None:
            v = getattr(self, name)
            if not _is_real(v) or (v <= lo if strict else v < lo):
                op = ">" if strict else ">="
                raise ValueError(f"{name} must be a finite number {op} {lo}, got {v!r}")
            object.__setattr__(self, name, float(v))

        choice("method", METHODS)
        choice("psi", PSI_FORMS)
        choice("estimator", ESTIMATORS)
        choice("normalization", NORMALIZATIONS)
        choice("positives", POSITIVES)
        choice("encoder", ENCODERS)
        choice("centres", CENTRES)
        choice("dtype", DTYPES)
        choice("init", INITS)
        choice("settle_loss", SETTLE_LOSSES)
        choice("init_method", HCL_METHODS)
        real("beta", 0.0, strict=False)
        real("tau", 0.0, strict=True)
        real("margin", 0.0, strict=False)
        real("lr", 0.0, strict=True)
        real("weight_decay", 0.0, strict=False)
        real("noise_std", 0.0, strict=False)
        real("init_scale", 0.0, strict=True)
        real("separation", 0.0, strict=False)
        real("sigma", 0.0, strict=False)
        real("init_beta", 0.0, strict=False)
        integer("num_negatives", 1)
        integer("epochs", 0)
        integer("eval_every", 1)
        integer("hidden", 1)
        integer("depth", 1)
        integer("max_steps", 0)
        integer("init_epochs", 0)
        integer("num_classes", 2)
        integer("n_per_class", 1)
        integer("n_test_per_class", 0)
        integer("input_dim", 1)
        integer("seed", 0)
        check_rule_fields(self)
        if self.batch_size is None:
            object.__setattr__(self, "batch_size", 0)
        if not _is_int(self.batch_size) or int(self.batch_size or 0) < 0 or self.batch_size == 1:
            raise ValueError(
                f"batch_size must be 0/None (full batch) or an integer >= 2, got {self.batch_size!r}"
            )
        if self.d is not None and (not _is_int(self.d) or self.d < 1):
            raise ValueError(f"d must be None (= num_classes - 1) or an integer >= 1, got {self.d!r}")
        if not isinstance(self.record_means, bool):
            raise ValueError(f"record_means must be a bool, got {self.record_means!r}")
        if self.method in HCL_METHODS:
            needs_beta = METHODS[self.method].hard
            if needs_beta and not self.beta > 0:
                raise ValueError(f"beta must be > 0 for method {self.method!r}, got {self.beta}")
            if not needs_beta and self.beta != 0:
                raise ValueError(
                    f"beta must be 0 for method {self.method!r} (use H{self.method} for "
                    f"hard negatives), got {self.beta}"
                )
        else:
            if self.beta != 0:
                raise ValueError(f"beta must be 0 for method {self.method!r}, got {self.beta}")
        if self.positives == "noise" and not self.noise_std > 0:
            raise ValueError(f"noise_std must be > 0 for positives='noise', got {self.noise_std}")
        if self.centres == "orthogonal" and self.input_dim < self.num_classes:
            raise ValueError(
                f"input_dim must be >= num_classes = {self.num_classes} for orthogonal centres, "
                f"got {self.input_dim}"
            )
        if self.method in TWO_VIEW_METHODS and self.n_per_class < 2 and self.positives == "label":
            raise ValueError(
                f"n_per_class must be >= 2 for {self.method} with label positives (a partner "
                f"other than the anchor), got {self.n_per_class}"
            )
        if self.max_steps > 0:  # the budget decides the epochs: every reader sees the resolved value
            object.__setattr__(self, "epochs", -(-self.max_steps // self.steps_per_epoch))
        if self.init == "nc":
            if self.init_epochs < 1:
                raise ValueError(f"init_epochs must be >= 1 for init='nc', got {self.init_epochs}")
            hard = METHODS[self.init_method].hard
            if hard != (self.init_beta > 0):
                raise ValueError(
                    f"init_beta must be {'> 0' if hard else '0'} for init_method "
                    f"{self.init_method!r}, got {self.init_beta}"
                )

    # ------------------------------------------------------------------ derived quantities
    @property
    def embed_dim(self) -> int:
        """The resolved embedding dimension ``d`` (``num_classes - 1`` when ``d`` is None)."""
        return self.num_classes - 1 if self.d is None else self.d

    @property
    def num_train(self) -> int:
        """N = C * n_per_class training samples."""
        return self.num_classes * self.n_per_class

    @property
    def batch(self) -> int:
        """The resolved batch size: the number of samples of one step (N for a full batch)."""
        b = int(self.batch_size or 0)
        return self.num_train if b == 0 or b >= self.num_train else b

    @property
    def full_batch(self) -> bool:
        """Whether every step uses the whole training set (``batch_size`` 0 or >= N)."""
        return self.batch == self.num_train

    @property
    def steps_per_epoch(self) -> int:
        """Mini-batches per epoch: 1 for a full batch, else ``N // batch_size`` (drop_last)."""
        return 1 if self.full_batch else self.num_train // self.batch

    @property
    def watches_eval_loss(self) -> bool:
        """Whether the run's rule watches the gap of the evaluation loss.

        ``settle_loss = "eval"`` with a rule and a normalisation; the run then records
        ``eval_loss`` and ``eval_gap`` (:data:`synthetic.engine.evaluation.EVAL_COLUMNS`).
        """
        return self.settle_window > 0 and self.normalization != "none" and self.settle_loss == "eval"

    @property
    def num_epochs(self) -> int:
        """Epochs the run trains: ``epochs``, or ``ceil(max_steps / steps_per_epoch)`` with a budget."""
        if self.max_steps > 0:
            return -(-self.max_steps // self.steps_per_epoch)
        return self.epochs

    @property
    def num_steps(self) -> int:
        """Mini-batches the run draws in all (executed or skipped)."""
        return self.max_steps if self.max_steps > 0 else self.epochs * self.steps_per_epoch

    def source_config(self) -> RunConfig | None:
        """The run whose final state starts this one (``init="nc"``), else None.

        The same config (data, encoder, optimiser, seed) trained from a random initialisation
        with ``method = init_method``, ``beta = init_beta`` for ``init_epochs`` epochs (without a
        convergence rule).
        """
        if self.init != "nc":
            return None
        return self.replace(
            method=self.init_method,
            beta=self.init_beta,
            epochs=self.init_epochs,
            max_steps=0,
            init="random",
            init_method=_LATER_FIELDS["init_method"],
            init_beta=_LATER_FIELDS["init_beta"],
            init_epochs=_LATER_FIELDS["init_epochs"],
            settle_window=0,  # a source trains its init_epochs: no convergence rule
        )

    @property
    def setting(self) -> str | None:
        """``"supervised"`` / ``"unsupervised"`` for the SCL family, None for two-view losses."""
        return METHODS[self.method].setting

    @property
    def torch_dtype(self):
        """The torch dtype of the run."""
        import torch

        return torch.float64 if self.dtype == "float64" else torch.float32

    # ------------------------------------------------------------------ (de)serialisation
    def to_dict(self) -> dict[str, Any]:
        """Flat, JSON-able dict of the **resolved** config.

        ``d`` filled in, ``batch_size`` 0 = full, ``epochs`` the number of epochs trained (derived
        from ``max_steps`` when a step budget is set).
        """
        out = {f.name: getattr(self, f.name) for f in fields(self)}
        out["d"] = self.embed_dim
        out["epochs"] = self.num_epochs
        return out

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> RunConfig:
        """Build from a (possibly partial) flat dict; unknown keys raise ValueError.

        Keys not present take their defaults; ``run_key``/metric columns are not accepted.
        """
        if not isinstance(data, dict):
            raise ValueError(f"data must be a dict, got {type(data).__name__}")
        names = {f.name for f in fields(cls)}
        unknown = sorted(set(data) - names)
        if unknown:
            raise ValueError(f"unknown RunConfig field(s): {unknown}")
        kwargs = {}
        for k, v in data.items():
            # Tolerate numpy scalars (e.g. from a pandas row).
            if hasattr(v, "item") and not isinstance(v, (str, bytes)):
                v = v.item()
            if k in ("d",) and isinstance(v, float) and math.isnan(v):
                v = None
            kwargs[k] = v
        return cls(**kwargs)

    def identity_dict(self) -> dict[str, Any]:
        """The resolved config with every field that cannot affect the run set to ``None``.

        This is what :meth:`key` hashes, so configs describing the same computation share a key
        (checked against ``synthetic.engine.train``; :meth:`to_dict` keeps the config's own values and
        stays round-trippable). Canonicalised fields (value ``None``) and the ones rewritten:

        * ``num_negatives``: SCL family with ``estimator="expectation"`` and psi ``"mean"`` or
          ``"triplet"`` (K only enters the sum form's ``log K`` and the sampled draws);
        * ``margin``: unless an SCL-family method with ``psi="triplet"``;
        * ``psi``, ``estimator``, ``num_negatives``, ``margin``: InfoNCE/WeiNCE (not used);
        * ``hidden`` and ``depth``: unless ``encoder="mlp"``; ``init_scale``: unless
          ``encoder="free"``;
        * ``noise_std``: with ``positives="label"``;
        * ``n_test_per_class``, ``input_dim``, ``separation``, ``sigma``, ``centres``: free
          features (their inputs are never used and they have no held-out set);
        * ``batch_size``: ``0`` when ``>= num_train`` (a full batch either way);
        * ``epochs``: with a step budget (``max_steps > 0``) the resolved number of epochs;
        * ``max_steps``: ``0`` when it is a whole number of epochs (the same run);
        * ``eval_every``: ``min(eval_every, epochs)`` (the same recorded epochs);
        * ``epochs == 0``: ``lr``, ``weight_decay``, ``batch_size`` and ``eval_every`` (no step
          is taken);
        * ``init_method``, ``init_beta``, ``init_epochs``: with ``init="random"``;
        * the tolerances ``settle_*`` and ``settle_loss``: without a convergence rule
          (``settle_window = 0``), and ``settle_gap``, ``settle_loss`` without normalisation (the
          gap is not watched there);
        * the fields added later (``depth``, ``max_steps``, ``init`` and its source fields, the
          convergence rule's ``settle_*``) are left
          out when they hold their default value, so keys of runs stored before they existed do
          not change;
        * floats are canonical: ``-0.0`` is ``0.0``.
        """
        out = self.to_dict()
        contrastive = self.method in HCL_METHODS
        if not contrastive:
            for k in ("psi", "estimator", "num_negatives", "margin"):
                out[k] = None
        else:
            if self.estimator == "expectation" and self.psi in ("mean", "triplet"):
                out["num_negatives"] = None
            if self.psi != "triplet":
                out["margin"] = None
            if self.estimator == "sampled":
                out["draws"] = (
                    SAMPLED_DRAWS  # the randomness contract: no run drawn under another one matches
                )
        if self.encoder != "mlp":
            out["hidden"] = None
            out["depth"] = None
        if self.encoder != "free":
            out["init_scale"] = None
        else:
            for k in ("n_test_per_class", "input_dim", "separation", "sigma", "centres"):
                out[k] = None
        if self.positives == "label":
            out["noise_std"] = None
        if self.full_batch:
            out["batch_size"] = 0
        if self.max_steps > 0 and self.max_steps % self.steps_per_epoch == 0:
            out["max_steps"] = 0  # a whole number of epochs: the run of epochs = max_steps / spe
        epochs = self.num_epochs
        if epochs == 0:
            for k in ("lr", "weight_decay", "batch_size", "eval_every"):
                out[k] = None
        else:
            out["eval_every"] = min(self.eval_every, epochs)
        if self.init == "random":
            for k in ("init_method", "init_beta", "init_epochs"):
                out[k] = None
        if self.settle_window == 0:
            for k in (*_SETTLE_TOLERANCES, "settle_loss"):
                out[k] = None
        elif self.normalization == "none":
            out["settle_gap"] = None
            out["settle_loss"] = None
        for k, default in _LATER_FIELDS.items():
            if out[k] is None or out[k] == default:
                del out[k]
        return {k: (v + 0.0 if isinstance(v, float) else v) for k, v in out.items()}

    def key(self) -> str:
        """Stable 16-hex-digit identity: sha1 of the sorted-key JSON of :meth:`identity_dict`.

        Equal for configs that differ only in fields the run does not use (see
        :meth:`identity_dict`); a results table still records the config's own values
        (:meth:`to_dict`), so a sweep that deduplicates by key keeps the first such config.
        """
        return run_key(self.identity_dict(), _DEFAULTS)

    def replace(self, **changes: Any) -> RunConfig:
        """A copy with ``changes`` applied (validated again). Unknown names raise ValueError."""
        names = {f.name for f in fields(self)}
        unknown = sorted(set(changes) - names)
        if unknown:
            raise ValueError(f"unknown RunConfig field(s): {unknown}")
        return dataclasses.replace(self, **changes)


#: The default of every field (the reference values of the canonical run key).
_DEFAULTS = {f.name: f.default for f in fields(RunConfig)}
