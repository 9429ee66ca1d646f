"""The single source of option literals, the method table and the shared defaults.

Every module of ``theory`` and ``synthetic`` takes its literal choices and defaults from here;
nothing else spells them out. Validate a choice with :func:`theory.validation.one_of`::

    psi = one_of("psi", psi, PSI_FORMS)   # "psi must be one of ('mean', 'sum', 'triplet'), got 'max'"

Naming rule (one name per concept): the counts that contrastive libraries name descriptively keep
descriptive names, ``num_classes`` (the symbol ``C`` of the formulas) and ``num_negatives``
(``K``); everything else uses the papers' symbols (``z``, ``labels``, ``mu``, ``beta``, ``tau``,
``d``, ``margin``). The psi family is always ``psi``, the hardening family ``eta``, the
normalisation ``normalization``.

References:
    Jiang, Nguyen, Aeron, Ishwar, TMLR 2025 (arXiv 2311.05139): docs/hcl.md (losses, psi, hardening);
    Erol et al., ICML 2026 (arXiv 2606.00262): docs/weince.md (WeiNCE, the released recipe).
"""

from __future__ import annotations

from typing import NamedTuple

__all__ = [
    "SETTINGS",
    "PSI_FORMS",
    "ESTIMATORS",
    "REDUCTIONS",
    "NORMALIZATIONS",
    "HARDENINGS",
    "RECIPES",
    "Method",
    "METHODS",
    "HCL_METHODS",
    "TWO_VIEW_METHODS",
    "NUM_NEGATIVES",
    "HCL_TAU",
    "WEINCE_TAU",
    "MARGIN",
]

#: Negative sets of the hard-negative paper: ``"supervised"`` (other-label batch members, SCL /
#: HSCL) or ``"unsupervised"`` (the whole batch, class collisions included, UCL / HUCL).
SETTINGS = ("supervised", "unsupervised")

#: The psi family (docs/hcl.md#the-psi-family), applied to ``t / tau``: ``"mean"`` (the authors' form)
#: ``log(1 + (1/K) sum exp)``, ``"sum"`` ``log(1 + sum exp)``, ``"triplet"`` the mean of hinges.
PSI_FORMS = ("mean", "sum", "triplet")

#: Estimators of the per-pair negative average: the exact tilted expectation (deterministic) or
#: the authors' K draws with replacement per (anchor, positive) pair.
ESTIMATORS = ("expectation", "sampled")

#: How the batch losses combine their per-(anchor, positive)-pair values (docs/hcl.md#reductions):
#: ``"mean"`` over the P pairs (the authors' normalisation, the default), ``"sum"``, ``"none"``
#: (the P values, in pair order) and ``"anchor_mean"`` (each anchor's mean over its positives,
#: then the mean over anchors: SupCon's normalisation, Khosla et al. 2020).
REDUCTIONS = ("mean", "sum", "none", "anchor_mean")

#: Row-wise normalisation of embeddings: identity, the authors' unit-ball projection
#: ``z / max(1, ||z||)``, or the unit sphere ``z / ||z||``.
NORMALIZATIONS = ("none", "ball", "sphere")

#: Hardening functions eta (docs/hcl.md#hardening-functions): ``exp(beta t)``, a step, a shifted power.
HARDENINGS = ("exponential", "step", "polynomial")

#: WeiNCE recipes: ``"core"`` (the paper's loss) or ``"released"`` (plus the released code's
#: auxiliary Weibit / Plackett-Luce terms, docs/weince.md#core-and-released-recipes).
RECIPES = ("core", "released")


class Method(NamedTuple):
    """One row of :data:`METHODS`.

    Attributes:
        setting: a :data:`SETTINGS` entry for the hard-negative paper's losses, ``None`` for the
            two-view (anchor, positive) losses InfoNCE and WeiNCE.
        hard: ``beta > 0`` is required (HSCL, HUCL); otherwise ``beta`` must be 0.
    """

    setting: str | None
    hard: bool


#: Every method the experiments accept: name -> :class:`Method`. SCL / HSCL / UCL / HUCL are
#: :func:`theory.hcl.contrastive_loss` with the given setting; InfoNCE is
#: :func:`theory.infonce.info_nce` and WeiNCE :func:`theory.weince.weince_loss` (two views).
METHODS: dict[str, Method] = {
    "SCL": Method("supervised", False),
    "HSCL": Method("supervised", True),
    "UCL": Method("unsupervised", False),
    "HUCL": Method("unsupervised", True),
    "InfoNCE": Method(None, False),
    "WeiNCE": Method(None, False),
}

#: The hard-negative paper's four losses (the methods with a setting), in table order.
HCL_METHODS: tuple[str, ...] = tuple(m for m, spec in METHODS.items() if spec.setting is not None)

#: The two-view (anchor, positive) losses of the WeiNCE paper.
TWO_VIEW_METHODS: tuple[str, ...] = tuple(m for m, spec in METHODS.items() if spec.setting is None)

#: K, the number of negatives per (anchor, positive) pair: the HCL authors' 256. The default of
#: the batch losses, the closed forms and the sympy expressions alike. (The cvxpy Gram programs
#: enumerate multisets of negatives and take it as a required argument.)
NUM_NEGATIVES = 256

#: Temperature of the hard-negative family (losses, psi, closed forms, convex and sympy
#: programs): the HCL authors use no temperature, i.e. tau = 1.
HCL_TAU = 1.0

#: Temperature of two-view InfoNCE and WeiNCE: 0.5, the WeiNCE recipe's value (and SimCLR's).
WEINCE_TAU = 0.5

#: Triplet margin of the ``"triplet"`` psi form.
MARGIN = 1.0
