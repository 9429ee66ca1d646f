"""WeiNCE: Erol et al., "When Softmax Fails at the Top", ICML 2026 (arXiv 2606.00262).

Documentation: ``docs/weince.md``.

The loss:

* :mod:`~theory.weince.config` -- :class:`GateConfig` (the gate's seven hyper-parameters) and
  :class:`ReleasedConfig` (the released recipe), frozen and validated: the one place of the
  defaults;
* :mod:`~theory.weince.logits` -- the T_lambda logits and the fused T_lambda cross-entropy;
* :mod:`~theory.weince.tailfit` -- tail-size rules and the two least-squares tail fits (pure
  numerics shared by the gate and the diagnostics);
* :mod:`~theory.weince.gate` -- the per-anchor rho / dAIC gate lambda;
* :mod:`~theory.weince.recipe` -- the released recipe's EMA state;
* :mod:`~theory.weince.loss` -- :func:`weince_loss`, :class:`WeiNCELoss`; :mod:`~theory.weince.label` --
  :func:`weince_label_loss`.

The extreme-value diagnostics, which never depend on the loss:

* :mod:`~theory.weince.gpd` -- GPD / POT / GEV fits; :mod:`~theory.weince.tails` -- per-anchor
  tail-AIC fits; :mod:`~theory.weince.links` -- link selection in the T_lambda family;
  :mod:`~theory.weince.noise_floor` -- the softmax-vs-Weibit noise floor;
* :mod:`~theory.weince.symbolic` -- sympy: the T_lambda derivative, the Weibull top-1 law;
* :mod:`~theory.claims.checks_weince` -- the W-law check of ``python -m theory``.

Every public name is loaded from its module on first access, so importing a diagnostics module
never loads the loss. Example::

    from theory.weince import GateConfig, WeiNCELoss, weince_loss, pot_fit, link_select
"""

from __future__ import annotations

import importlib
from typing import Any

#: Every public name -> the module that defines it, loaded on first access (PEP 562), so that
#: importing one module (e.g. the diagnostics) never loads the others (e.g. the loss).
_LAZY = {
    **{name: "theory.weince.loss" for name in ("weince_loss", "WeiNCELoss", "WeiNCEDiagnostics")},
    "weince_label_loss": "theory.weince.label",
    "GateConfig": "theory.weince.config",
    "ReleasedConfig": "theory.weince.config",
    "WeibullBetaState": "theory.weince.recipe",
    "tlambda_logits": "theory.weince.logits",
    "GateStats": "theory.weince.gate",
    "weince_gate": "theory.weince.gate",
    **{name: "theory.weince.tailfit" for name in ("tail_size", "rho0_index", "TailFits", "tail_fits")},
    **{
        name: "theory.weince.gpd"
        for name in (
            "gpd_loglik",
            "gpd_quantile",
            "profile_sigma",
            "GPDFit",
            "fit_gpd",
            "POTResult",
            "pot_fit",
            "threshold_stability",
            "lower_triangle_scores",
            "embedding_scores",
            "scipy_gpd_fit",
            "gev_fit",
        )
    },
    **{name: "theory.weince.tails" for name in ("TailAICFit", "tail_aic_fit", "tail_aic_fits")},
    **{
        name: "theory.weince.links"
        for name in (
            "tlambda_loglik",
            "candidates_from_similarity",
            "two_view_link_candidates",
            "LinkSelection",
            "link_select",
        )
    },
    **{
        name: "theory.weince.noise_floor"
        for name in ("NoiseFloorTheory", "noise_floor_theory", "softmax_link_mle", "noise_floor_experiment")
    },
    **{
        name: "theory.weince.symbolic"
        for name in (
            "tlambda",
            "tlambda_derivative",
            "check_tlambda_derivative",
            "weibull_top1_probabilities",
            "check_weibull_top1_law",
        )
    },
}

__all__ = list(_LAZY)


def __getattr__(name: str) -> Any:
    """Load a public name from its module on first access (PEP 562)."""
    if name in _LAZY:
        value = getattr(importlib.import_module(_LAZY[name]), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
