"""The validated scalar options of one hard-negative loss (shared by the functions and the modules).

:func:`_options` checks every option once, each error naming its argument, and returns an
:class:`_Options`; :func:`_scalar_beta` tells a scalar ``beta`` from a per-run or per-anchor
tensor. Used by :mod:`theory.hcl.losses`, :mod:`theory.hcl.modules` and the estimators.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from theory.options import ESTIMATORS, PSI_FORMS, REDUCTIONS, SETTINGS
from theory.validation import (
    integer,
    one_of,
    real,
)


@dataclass(frozen=True)
class _Options:
    """The validated scalar options of one loss (shared by the functions and the modules)."""

    setting: str
    tau: float
    psi: str
    estimator: str
    num_negatives: int
    margin: float
    reduction: str
    self_positive: bool
    self_negative: bool
    detach_weights: bool
    num_classes: int | None
    check_inputs: bool


def _flag(name: str, value: Any) -> bool:
    if not isinstance(value, bool):
        raise ValueError(f"{name} must be True or False, got {value!r}")
    return value


def _options(
    *,
    setting: str,
    tau: float,
    psi: str,
    estimator: str,
    num_negatives: int,
    margin: float,
    reduction: str,
    self_positive: bool,
    self_negative: bool,
    detach_weights: bool,
    num_classes: int | None,
    check_inputs: bool,
) -> _Options:
    """Validate every scalar option once; each error names its argument."""
    opts = _Options(
        setting=one_of("setting", setting, SETTINGS),
        tau=real("tau", tau, lo=0.0, lo_open=True),
        psi=one_of("psi", psi, PSI_FORMS),
        estimator=one_of("estimator", estimator, ESTIMATORS),
        num_negatives=integer("num_negatives", num_negatives, lo=1),
        margin=real("margin", margin, lo=0.0, allow_inf=True),
        reduction=one_of("reduction", reduction, REDUCTIONS),
        self_positive=_flag("self_positive", self_positive),
        self_negative=_flag("self_negative", self_negative),
        detach_weights=_flag("detach_weights", detach_weights),
        num_classes=None if num_classes is None else integer("num_classes", num_classes, lo=1),
        check_inputs=_flag("check_inputs", check_inputs),
    )
    if not opts.detach_weights and opts.estimator == "sampled":
        raise ValueError(
            "detach_weights=False is only defined for estimator='expectation' (a sampled index has no derivative)"
        )
    return opts


def _check_beta_range(beta_max: float, dtype: torch.dtype, tau: float, per_anchor: bool = False) -> None:
    """``ValueError`` naming ``beta`` unless ``beta + 1/tau`` is a finite number of ``dtype``.

    The tilt ``exp(beta S)`` and the expectation estimator's ``exp((beta + 1/tau) (S - M))`` are
    computed in the dtype of ``z`` (float32 for half inputs); a larger ``beta`` rounds to ``inf``
    there, and ``0 * inf`` would make the loss NaN (docs/hcl.md#numerical-safeguards). Every
    smaller ``beta`` is computed correctly, up to the hardest-negative limit.
    """
    limit = float(torch.finfo(dtype).max)
    if beta_max + 1.0 / tau <= limit:  # False for beta + 1/tau = inf as a Python float too
        return
    what = "every run's and anchor's beta" if per_anchor else "beta"
    hint = "" if dtype == torch.float64 else "; pass float64 embeddings for a larger beta"
    raise ValueError(
        f"{what} must satisfy beta + 1/tau <= {limit:.6g} (the largest {dtype} number: the tilt "
        f"exp(beta S) is computed in the dtype of z), got beta = {beta_max!r}, tau = {tau!r}{hint}"
    )


def _scalar_beta(beta: Any) -> float | None:
    """``beta`` as a validated Python float, or ``None`` when it is a tensor with a shape (per run/anchor)."""
    if isinstance(beta, torch.Tensor | np.ndarray):
        if beta.ndim > 0:
            return None
    elif isinstance(beta, list | tuple):
        return None
    return real("beta", beta, lo=0.0)
