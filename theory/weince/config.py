"""The frozen configurations of WeiNCE: the gate's seven hyper-parameters and the released recipe.

Erol et al., "When Softmax Fails at the Top: Extreme-Value Corrections for InfoNCE", ICML 2026
(arXiv 2606.00262): the gate and the authors' released training script; see
``docs/weince.md#the-gate`` and ``docs/weince.md#core-and-released-recipes``.

This module is the single place where the defaults are written::

    from theory.weince import GateConfig, ReleasedConfig, weince_loss

    gate = GateConfig(margin=6.0, kappa_rho=20.0)        # one point of the authors' grid
    loss = weince_loss(z1, z2, gate=gate)

Both classes are frozen dataclasses validated in ``__post_init__``: a bad value raises
``ValueError`` naming the field and the value (``"q must be in [0.0, 1.0], got 1.5"``). It imports
neither the loss nor the gate, so the extreme-value diagnostics (``theory.weince.tails``) can take a
:class:`GateConfig` without loading the loss.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from theory.validation import integer, real

__all__ = ["GateConfig", "ReleasedConfig", "DEFAULT_GATE", "DEFAULT_RELEASED"]


def _check_bool(name: str, value: Any) -> bool:
    if not isinstance(value, bool):
        raise ValueError(f"{name} must be a bool, got {value!r}")
    return value


@dataclass(frozen=True)
class GateConfig:
    """The seven hyper-parameters of the per-anchor WeiNCE gate (the authors' defaults).

    ``lambda_i = sigmoid(kappa_rho log(rho0 / rho_i)) * sigmoid(kappa_aic (dAIC_i - margin))``
    with ``rho0`` the ``round(q (A - 1))``-th smallest cap proximity and ``dAIC_i`` the tail
    "AIC" difference on the anchor's ``k_tail`` hardest negatives
    (arXiv 2606.00262, the WeiNCE gate; ``docs/weince.md#the-gate``).

    Attributes:
        q: quantile of ``rho`` that defines the pivot ``rho0``, in ``[0, 1]`` (the authors clip
            values outside; here they are rejected).
        tail_frac: tail fraction of ``K`` negatives in the tail-size rule, ``>= 0``.
        min_tail: minimal tail size of that rule, an integer ``>= 0``.
        margin: AIC margin ``m``, a real number; ``+inf`` switches the gate off (``lambda = 0``,
            InfoNCE exactly).
        kappa_rho: slope of the cap-proximity sigmoid, ``>= 0``.
        kappa_aic: slope of the AIC sigmoid, ``>= 0`` (``0`` gives ``lambda_AIC = 1/2``).
        eps: clamp of shortfalls ``max(1 - s, eps)`` and of ``s`` in the Weibit branch, in
            ``(0, 0.5]``.

    Raises:
        ValueError: a field out of range, naming the field and the value.
    """

    q: float = 0.2
    tail_frac: float = 0.1
    min_tail: int = 32
    margin: float = 2.0
    kappa_rho: float = 10.0
    kappa_aic: float = 1.0
    eps: float = 1e-6

    def __post_init__(self) -> None:
        checked = {
            "q": real("q", self.q, lo=0.0, hi=1.0),
            "tail_frac": real("tail_frac", self.tail_frac, lo=0.0),
            "min_tail": integer("min_tail", self.min_tail, lo=0),
            "margin": real("margin", self.margin, allow_inf=True),
            "kappa_rho": real("kappa_rho", self.kappa_rho, lo=0.0),
            "kappa_aic": real("kappa_aic", self.kappa_aic, lo=0.0),
            "eps": real("eps", self.eps, lo=0.0, lo_open=True, hi=0.5),
        }
        for name, value in checked.items():  # normalised Python floats / ints (numpy scalars in)
            object.__setattr__(self, name, value)


@dataclass(frozen=True)
class ReleasedConfig:
    """Settings of the released recipe's two auxiliary terms and of its batch-beta EMA.

    The authors' released WeiNCE script trains
    ``L = L_core + weib_weight CE_Weibit-top-M(beta_t) + pl_weight CE_PL-top-M`` over the positive
    and the ``M`` hardest negatives of each anchor; ``beta_t`` is an EMA of a batch-global Weibull
    slope (``docs/weince.md#core-and-released-recipes``, ``docs/weince.md#the-batch-beta-ema``).
    The shortfall clamp is the gate's ``eps`` (:class:`GateConfig`), one ``eps`` for the whole loss
    as in the authors' code.

    Attributes:
        weib_weight: weight of the Weibit top-M term, ``>= 0`` (0 drops it).
        weib_top_m: ``M`` of the Weibit term, an integer ``>= 1`` (capped at ``2N - 2``).
        pl_weight: weight of the Plackett-Luce (softmax) top-M term, ``>= 0``.
        pl_top_m: ``M`` of the PL term, an integer ``>= 1`` (capped at ``2N - 2``).
        beta_init: initial (and, with ``auto_beta=False``, fixed) ``beta_t``, ``> 0``.
        auto_beta: update ``beta_t`` from every batch (the released script: True).
        momentum: EMA momentum in ``[0, 1]``: ``beta <- momentum beta + (1 - momentum) beta_hat``.
        r2_min: trust threshold on the fit's ``R^2``, in ``[0, 1]``.
        beta_min: lower clip of ``beta_hat`` before the EMA, ``> 0``.
        beta_max: upper clip, ``>= beta_min``.
        beta_tail_frac: fraction of the ``A (A - 2)`` negative entries in the global fit, in
            ``[0, 1]``.
        beta_min_tail: minimal number of entries in that fit, an integer ``>= 1``.

    Raises:
        ValueError: a field out of range, naming the field and the value.
    """

    weib_weight: float = 0.5
    weib_top_m: int = 50
    pl_weight: float = 0.5
    pl_top_m: int = 50
    beta_init: float = 4.0
    auto_beta: bool = True
    momentum: float = 0.9
    r2_min: float = 0.85
    beta_min: float = 0.5
    beta_max: float = 16.0
    beta_tail_frac: float = 0.05
    beta_min_tail: int = 1024

    def __post_init__(self) -> None:
        checked: dict[str, Any] = {
            "weib_weight": real("weib_weight", self.weib_weight, lo=0.0),
            "weib_top_m": integer("weib_top_m", self.weib_top_m, lo=1),
            "pl_weight": real("pl_weight", self.pl_weight, lo=0.0),
            "pl_top_m": integer("pl_top_m", self.pl_top_m, lo=1),
            "beta_init": real("beta_init", self.beta_init, lo=0.0, lo_open=True),
            "auto_beta": _check_bool("auto_beta", self.auto_beta),
            "momentum": real("momentum", self.momentum, lo=0.0, hi=1.0),
            "r2_min": real("r2_min", self.r2_min, lo=0.0, hi=1.0),
            "beta_min": real("beta_min", self.beta_min, lo=0.0, lo_open=True),
            "beta_max": real("beta_max", self.beta_max),
            "beta_tail_frac": real("beta_tail_frac", self.beta_tail_frac, lo=0.0, hi=1.0),
            "beta_min_tail": integer("beta_min_tail", self.beta_min_tail, lo=1),
        }
        if checked["beta_max"] < checked["beta_min"]:
            raise ValueError(f"beta_max must be >= beta_min={checked['beta_min']}, got {self.beta_max!r}")
        for name, value in checked.items():
            object.__setattr__(self, name, value)


#: The authors' gate hyper-parameters: the default ``gate`` of every entry point.
DEFAULT_GATE = GateConfig()

#: The released script's settings: the default of :class:`theory.weince.recipe.WeibullBetaState`.
DEFAULT_RELEASED = ReleasedConfig()
