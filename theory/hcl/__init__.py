"""The hard-negative paper: Jiang, Nguyen, Aeron, Ishwar, TMLR 2025 (arXiv 2311.05139).

Modules (one concept each):

* :mod:`~theory.hcl.psi` -- the psi family (:func:`apply_psi`; numpy :class:`Psi` for the checks);
* :mod:`~theory.hcl.sampling` -- hardening functions eta, the tilted negative law, the
  exact-expectation and sampled estimators of the negative average;
* :mod:`~theory.hcl.pairs` -- the (anchor, positive) pairs and their order (:func:`positive_pairs`);
* :mod:`~theory.hcl.losses` -- the batch losses :func:`contrastive_loss` (SCL / HSCL / UCL /
  HUCL, one batch or R stacked runs) and :func:`two_view_contrastive_loss`;
* :mod:`~theory.hcl.modules` -- the same as ``nn.Module`` objects: :class:`HardContrastiveLoss`
  and its subclasses :class:`SCL`, :class:`HSCL`, :class:`UCL`, :class:`HUCL`;
* :mod:`~theory.hcl.optima` -- closed-form optima at Neural Collapse (:func:`scl_optimum`, ...);
* :mod:`~theory.hcl.harris` -- Harris-dominance checks and their random instances;
* :mod:`~theory.hcl.convex` -- cvxpy programs over class-mean Gram matrices (imported on first use);
* :mod:`~theory.hcl.symbolic` -- sympy derivations of the closed forms (imported on first use);
The checks of claims T1-T8 (``python -m theory``) are in the verification harness,
:mod:`theory.claims` (apart from the mathematics they verify).

Example::

    from theory.hcl import HSCL, contrastive_loss, scl_optimum, harris_exact_check, minimize_gram

    loss = HSCL(beta=5.0)(z, labels)             # the authors' HSCL batch loss (mean-form psi, tau = 1)

Paper: Jiang, Nguyen, Aeron, Ishwar, TMLR 2025 (arXiv 2311.05139); docs/hcl.md.
"""

from __future__ import annotations

import importlib
from typing import Any

from theory.hcl.harris import (
    CheckResult,
    beta_monotonicity,
    eta_from_hardening,
    harris_exact,
    harris_exact_check,
    harris_monte_carlo,
    random_eta,
    random_instance,
)
from theory.hcl.losses import contrastive_loss, two_view_contrastive_loss
from theory.hcl.modules import HSCL, HUCL, SCL, UCL, HardContrastiveLoss
from theory.hcl.optima import (
    binomial_mixture,
    collision_probability,
    collision_probability_batch,
    etf_negative_gap,
    hucl_at_nc,
    hucl_at_nc_batch,
    nc_optimum,
    plugin_value,
    scl_optimum,
    ucl_optimum,
    weak_bound,
)
from theory.hcl.pairs import Pairs, positive_pairs
from theory.hcl.psi import Psi, apply_psi, make_psi, random_psi
from theory.hcl.sampling import (
    AliasTable,
    alias_table,
    draw_seed,
    expected_hinge,
    hardening,
    log_expected_exp,
    sample_negatives,
    stream_uniforms,
    tilted_log_weights,
)

#: Names served from the modules with heavy imports (cvxpy, sympy), loaded on first access.
_LAZY = {
    **{
        name: "theory.hcl.convex"
        for name in (
            "GramSolution",
            "minimize_gram",
            "minimize_scl",
            "minimize_ucl",
            "population_loss_at_gram",
            "etf_gram_np",
            "SOLVERS",
        )
    },
    **{
        name: "theory.hcl.symbolic"
        for name in (
            "etf_gram_matrix",
            "etf_gram_eigenvalues",
            "etf_gram_eigenvalues_general",
            "check_etf_spectrum",
            "min_mean_pairwise_inner_product",
            "scl_optimum_expr",
            "ucl_optimum_expr",
            "hucl_at_nc_expr",
            "collision_probability_expr",
        )
    },
}

__all__ = [
    # losses
    "contrastive_loss",
    "two_view_contrastive_loss",
    "positive_pairs",
    "Pairs",
    "HardContrastiveLoss",
    "SCL",
    "HSCL",
    "UCL",
    "HUCL",
    # psi
    "apply_psi",
    "Psi",
    "make_psi",
    "random_psi",
    # sampling
    "hardening",
    "tilted_log_weights",
    "log_expected_exp",
    "expected_hinge",
    "sample_negatives",
    "AliasTable",
    "alias_table",
    "draw_seed",
    "stream_uniforms",
    # closed forms
    "etf_negative_gap",
    "collision_probability",
    "collision_probability_batch",
    "binomial_mixture",
    "plugin_value",
    "scl_optimum",
    "ucl_optimum",
    "nc_optimum",
    "hucl_at_nc",
    "hucl_at_nc_batch",
    "weak_bound",
    # Harris checks
    "CheckResult",
    "random_instance",
    "random_eta",
    "eta_from_hardening",
    "harris_exact",
    "harris_exact_check",
    "beta_monotonicity",
    "harris_monte_carlo",
    # convex programs and sympy derivations (lazy)
    *_LAZY,
]


def __getattr__(name: str) -> Any:
    """Load the cvxpy / sympy names on first access (PEP 562)."""
    if name in _LAZY:
        value = getattr(importlib.import_module(_LAZY[name]), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
