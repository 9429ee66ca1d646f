"""The hard-negative losses as ``nn.Module`` objects: :class:`HardContrastiveLoss` and SCL / HSCL / UCL / HUCL.

Jiang, Nguyen, Aeron, Ishwar, TMLR 2025 (arXiv 2311.05139); docs/hcl.md#loss-modules. In the
conventions of lightly's ``NTXentLoss`` and pytorch-metric-learning: every hyper-parameter is
validated once in ``__init__`` (a ``ValueError`` naming the argument), ``forward`` takes the
batch, and ``repr`` shows the configuration::

    loss_fn = HSCL(beta=5.0)                       # supervised, hard negatives, the authors' defaults
    loss = loss_fn(z, labels)                      # z (B, d) -> scalar
    per_run = HUCL(beta=2.0)(z_runs, labels_runs)  # z (R, B, d) -> (R,)
    part = loss_fn(z, labels, anchors)             # the terms of the rows `anchors` (a reference batch)

The forward pass is :func:`theory.hcl.contrastive_loss` with the stored options (one code path).
The method table (setting, whether ``beta > 0`` is required) is
:data:`theory.options.METHODS`.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from theory.hcl._estimators import Generators
from theory.hcl._options import _options
from theory.hcl.losses import _loss
from theory.options import HCL_TAU, MARGIN, METHODS, NUM_NEGATIVES
from theory.validation import real

__all__ = ["HardContrastiveLoss", "SCL", "HSCL", "UCL", "HUCL"]


class HardContrastiveLoss(nn.Module):
    """Hard-negative supervised / unsupervised contrastive loss (SCL, HSCL, UCL, HUCL).

    ``L = (1/P) sum_{(i, j)} psi({S[i, n_r] - S[i, j]}_r)``, ``n_r ~ q_i(n) ∝ exp(beta S[i, n])``
    over the allowed negatives of anchor ``i`` (docs/hcl.md#the-batched-loss; arXiv 2311.05139). ``setting="supervised"`` draws negatives among other-label members (SCL for ``beta = 0``,
    HSCL for ``beta > 0``), ``"unsupervised"`` among all members (UCL, HUCL).

    Args:
        setting: ``"supervised"`` or ``"unsupervised"`` (:data:`theory.options.SETTINGS`).
        beta: hardness ``>= 0`` of the exponential tilt (a Python number).
        tau: temperature ``> 0`` (default :data:`theory.options.HCL_TAU` = 1, the authors').
        psi: ``"mean"`` (the authors'), ``"sum"`` or ``"triplet"`` (docs/hcl.md#the-psi-family).
        estimator: ``"expectation"`` (exact, deterministic) or ``"sampled"`` (the authors' K
            draws per pair; docs/hcl.md#the-two-estimators).
        num_negatives: K per (anchor, positive) pair (default 256, the authors').
        margin: triplet margin ``>= 0``.
        reduction: ``"mean"``, ``"sum"``, ``"none"`` or ``"anchor_mean"`` (docs/hcl.md#reductions).
        self_positive: the anchor is one of its own positives (the authors' choice).
        self_negative: unsupervised: the anchor may be drawn as its own negative (the authors').
        detach_weights: no gradient through the tilt weights (the authors'; expectation only if
            ``False``).
        num_classes: optional ``C`` for the label range check.
        check_inputs: run the data-dependent input checks in ``forward`` (they synchronise with
            the device); ``False`` for a forward pass that never reads tensor data on the host.

    Shape:
        ``z`` ``(B, d)`` and ``labels`` ``(B,)`` -> ``()``; ``z`` ``(R, B, d)`` and ``labels``
        ``(R, B)`` or ``(B,)`` -> ``(R,)``; ``reduction="none"`` -> ``(P,)``.

    Raises:
        ValueError: an invalid argument, named in the message.
    """

    def __init__(
        self,
        setting: str,
        beta: float = 0.0,
        *,
        tau: float = HCL_TAU,
        psi: str = "mean",
        estimator: str = "expectation",
        num_negatives: int = NUM_NEGATIVES,
        margin: float = MARGIN,
        reduction: str = "mean",
        self_positive: bool = True,
        self_negative: bool = True,
        detach_weights: bool = True,
        num_classes: int | None = None,
        check_inputs: bool = True,
    ) -> None:
        super().__init__()
        self.options = _options(
            setting=setting,
            tau=tau,
            psi=psi,
            estimator=estimator,
            num_negatives=num_negatives,
            margin=margin,
            reduction=reduction,
            self_positive=self_positive,
            self_negative=self_negative,
            detach_weights=detach_weights,
            num_classes=num_classes,
            check_inputs=check_inputs,
        )
        self.beta = real("beta", beta, lo=0.0)

    # read-only views of the validated options
    @property
    def setting(self) -> str:
        """``"supervised"`` or ``"unsupervised"``."""
        return self.options.setting

    @property
    def tau(self) -> float:
        """Temperature."""
        return self.options.tau

    @property
    def psi(self) -> str:
        """The psi form."""
        return self.options.psi

    @property
    def estimator(self) -> str:
        """``"expectation"`` or ``"sampled"``."""
        return self.options.estimator

    @property
    def num_negatives(self) -> int:
        """K, negatives per (anchor, positive) pair."""
        return self.options.num_negatives

    @property
    def reduction(self) -> str:
        """How the per-pair values are combined."""
        return self.options.reduction

    def forward(
        self,
        z: torch.Tensor,
        labels: torch.Tensor,
        anchors: torch.Tensor | None = None,
        *,
        positive_groups: torch.Tensor | None = None,
        generator: Generators = None,
    ) -> torch.Tensor:
        """The loss of one batch (or of ``R`` stacked runs).

        Args:
            z: embeddings ``(B, d)`` or ``(R, B, d)``.
            labels: ``(B,)`` integer labels (``(R, B)`` or shared ``(B,)`` for a 3-D ``z``).
            anchors: optional ``(b,)`` sorted, unique rows of a 2-D ``z``: only their terms,
                against the whole batch, normalised as the whole batch's loss
                (docs/hcl.md#reference-batches-anchors).
            positive_groups: optional ids defining positives instead of ``labels``
                (docs/hcl.md#instance-positives-and-two-views).
            generator: the sampled estimator's ``torch.Generator`` (or one per run).

        Returns:
            The reduced loss: ``()`` or ``(R,)``; ``(P,)`` for ``reduction="none"`` (the
            selected anchors' pairs with ``anchors``).
        """
        return _loss(
            self.options,
            z,
            labels,
            self.beta,
            positive_groups=positive_groups,
            generator=generator,
            anchors=anchors,
        )

    def extra_repr(self) -> str:
        """The configuration shown by ``repr`` (defaults of the flags omitted)."""
        o = self.options
        parts = [f"setting={o.setting!r}", f"beta={self.beta:g}", f"tau={o.tau:g}", f"psi={o.psi!r}"]
        parts += [f"estimator={o.estimator!r}", f"num_negatives={o.num_negatives}"]
        if o.psi == "triplet":
            parts.append(f"margin={o.margin:g}")
        parts.append(f"reduction={o.reduction!r}")
        defaults = {
            "self_positive": True,
            "self_negative": True,
            "detach_weights": True,
            "check_inputs": True,
        }
        parts += [f"{k}={getattr(o, k)}" for k, v in defaults.items() if getattr(o, k) != v]
        if o.num_classes is not None:
            parts.append(f"num_classes={o.num_classes}")
        return ", ".join(parts)


def _method(name: str, beta: Any, kwargs: dict[str, Any]) -> tuple[str, float]:
    """Setting and validated beta of method ``name`` of :data:`theory.options.METHODS`."""
    spec = METHODS[name]
    assert spec.setting is not None
    if "setting" in kwargs:
        raise ValueError(
            f"{name} fixes setting={spec.setting!r}; use HardContrastiveLoss for another setting"
        )
    if not spec.hard:
        if "beta" in kwargs:
            raise ValueError(f"{name} has beta = 0; use H{name} for beta > 0")
        return spec.setting, 0.0
    b = real("beta", beta, lo=0.0)
    if not b > 0.0:
        raise ValueError(f"{name} needs beta > 0 (hardness), got {beta!r}; use {name[1:]} for beta = 0")
    return spec.setting, b


class SCL(HardContrastiveLoss):
    """Supervised contrastive loss: other-label negatives, uniform (``beta = 0``).

    :class:`HardContrastiveLoss` with ``setting="supervised"``, ``beta=0`` (docs/hcl.md#loss-modules;
    arXiv 2311.05139). Keyword arguments as :class:`HardContrastiveLoss` (no ``beta``).
    """

    def __init__(self, **kwargs: Any) -> None:
        setting, beta = _method("SCL", 0.0, kwargs)
        super().__init__(setting, beta, **kwargs)


class HSCL(HardContrastiveLoss):
    """Hard-negative SCL: other-label negatives tilted by ``exp(beta z_i.z_n)``, ``beta > 0``.

    :class:`HardContrastiveLoss` with ``setting="supervised"`` (docs/hcl.md#loss-modules; arXiv
    2311.05139). ``beta`` is required and must be ``> 0`` (use :class:`SCL` for 0).
    """

    def __init__(self, beta: float, **kwargs: Any) -> None:
        setting, b = _method("HSCL", beta, kwargs)
        super().__init__(setting, b, **kwargs)


class UCL(HardContrastiveLoss):
    """Unsupervised contrastive loss: negatives from the whole batch, uniform (``beta = 0``).

    :class:`HardContrastiveLoss` with ``setting="unsupervised"``, ``beta=0``
    (docs/hcl.md#loss-modules; arXiv 2311.05139). Keyword arguments as
    :class:`HardContrastiveLoss` (no ``beta``).
    """

    def __init__(self, **kwargs: Any) -> None:
        setting, beta = _method("UCL", 0.0, kwargs)
        super().__init__(setting, beta, **kwargs)


class HUCL(HardContrastiveLoss):
    """Hard-negative UCL: negatives from the whole batch tilted by ``exp(beta z_i.z_n)``, ``beta > 0``.

    :class:`HardContrastiveLoss` with ``setting="unsupervised"`` (docs/hcl.md#loss-modules; arXiv
    2311.05139). ``beta`` is required and must be ``> 0`` (use :class:`UCL` for 0).
    """

    def __init__(self, beta: float, **kwargs: Any) -> None:
        setting, b = _method("HUCL", beta, kwargs)
        super().__init__(setting, b, **kwargs)
