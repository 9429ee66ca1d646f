"""The single source of option literals, the method table and the shared defaults.

Every package (``theory``, ``synthetic``, ``realdata``, ``figures``) takes its literal choices and
defaults from here; nothing else spells them out (``tests/test_layout.py`` fails on an option
tuple defined anywhere else). Two groups: the options of the losses and metrics (the mathematics)
and the options of the experiments that train with them (the synthetic study and the real-data
runs). Validate a choice with :func:`theory.validation.one_of`::

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
    "POSITIVES",
    "ENCODERS",
    "CENTRES",
    "DTYPES",
    "INITS",
    "VIEWS",
    "HEADS",
    "STEMS",
    "PRECISIONS",
    "DDP_LOSS_MODES",
    "FEATURES",
    "Method",
    "METHODS",
    "HCL_METHODS",
    "TWO_VIEW_METHODS",
    "NUM_NEGATIVES",
    "HCL_TAU",
    "WEINCE_TAU",
    "MARGIN",
    "MEMORY_LIMIT",
    "MEMORY_FRACTION",
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

#: The size checks of ``theory`` (:func:`theory.validation.check_size`): a call whose sizes
#: (``num_negatives``, ``num_classes``, ``n_grid``, ``d``, ...) would make it allocate more than
#: ``min(MEMORY_LIMIT, MEMORY_FRACTION * the device's total memory)`` raises ``ValueError`` stating
#: the size, the memory it needs and the limit, instead of failing in the allocator (or driving a
#: shared machine into swap). 16 GiB is far above what any computation of the package needs at the
#: papers' scales (the largest, a class-statistics bank of 21k classes in d = 2048, is 0.4 GiB).
MEMORY_LIMIT = 16 * 2**30
MEMORY_FRACTION = 0.5


# --------------------------------------------------------------------------------------------
# The experiments' options (synthetic study and real-data runs)

#: Positive pairs of the synthetic study: another sample of the same class (``"label"``) or the
#: anchor plus Gaussian noise (``"noise"``, claim S2) (docs/claims.md#synthetic-claims).
POSITIVES = ("label", "noise")

#: Encoders of the synthetic study: one learnable vector per sample, a linear map, an MLP.
ENCODERS = ("free", "linear", "mlp")

#: Class centres of the synthetic data: i.i.d. random directions or an orthonormal frame.
CENTRES = ("random", "orthogonal")

#: Floating dtypes a synthetic run may train in.
DTYPES = ("float32", "float64")

#: How a run's parameters start: a fresh random initialisation, or a state trained to Neural
#: Collapse (claim R4; a source run in the synthetic study, a checkpoint for real data).
INITS = ("random", "nc")

#: The loss whose gap to the optimum a synthetic run's convergence rule watches: the epoch's mean
#: training loss (``"epoch"``) or the deterministic loss of the training set over a fixed partition
#: into the run's batch size with the exact expectation estimator (``"eval"``, for runs whose
#: training loss is a noisy estimate: mini-batches, sampled negatives).
SETTLE_LOSSES = ("epoch", "eval")

#: Views of a real-data step: ``"label"`` (the HCL authors: one un-augmented view, positives are
#: the same-label batch members, the anchor included) or ``"simclr"`` (two augmented views).
VIEWS = ("label", "simclr")

#: Projection heads of the real-data encoders: the HCL authors' (512-BN-ReLU, ``d = C - 1``),
#: the WeiNCE recipe's projector (512-ReLU-64, no batch norm, no biases), none (``z = h``).
HEADS = ("hcl", "weince", "identity")

#: ResNet stems: CIFAR's 3x3 stride-1 convolution without max-pool, or the standard 7x7 one.
STEMS = ("cifar", "imagenet")

#: Numeric precision of a real-data forward pass (``"bf16"``: autocast, losses in float32).
PRECISIONS = ("fp32", "bf16")

#: How the loss of a step is evaluated under DDP: each rank's anchors against the gathered batch
#: (``"local"``) or the whole global loss on every rank (``"replicated"``).
DDP_LOSS_MODES = ("local", "replicated")

#: Which features a frozen-feature evaluation reads: the backbone's ``h`` or the projection ``z``.
FEATURES = ("h", "z")


class Method(NamedTuple):
    """One row of :data:`METHODS`: what a method computes and the recipe of the authors who use it.

    Attributes:
        setting: a :data:`SETTINGS` entry for the hard-negative paper's losses, ``None`` for the
            two-view (anchor, positive) losses InfoNCE and WeiNCE.
        hard: ``beta > 0`` is required (HSCL, HUCL); otherwise ``beta`` must be 0.
        views: the :data:`VIEWS` of the authors' real-data recipe.
        head: the :data:`HEADS` entry of the authors' projection head.
        normalization: the authors' :data:`NORMALIZATIONS` entry (the HCL unit ball; InfoNCE and
            WeiNCE use cosines, so the sphere only fixes the metrics' ``z``).
        tau: the authors' temperature (:data:`HCL_TAU` or :data:`WEINCE_TAU`).
        lr: the authors' Adam learning rate.
        weight_decay: the authors' Adam (L2) weight decay (the HCL authors' UCL folder uses 1e-6).
    """

    setting: str | None
    hard: bool
    views: str
    head: str
    normalization: str
    tau: float
    lr: float
    weight_decay: float


#: Every method the experiments accept: name -> :class:`Method`. SCL / HSCL / UCL / HUCL are
#: :func:`theory.hcl.contrastive_loss` with the given setting; InfoNCE is
#: :func:`theory.infonce.info_nce` and WeiNCE :func:`theory.weince.weince_loss` (two views).
#: The recipe fields are the authors' (arXiv 2311.05139, Sec. 5; arXiv 2606.00262, Sec. 5): the
#: defaults of a real-data run (docs/realdata.md).
METHODS: dict[str, Method] = {
    "SCL": Method("supervised", False, "label", "hcl", "ball", HCL_TAU, 1e-3, 0.0),
    "HSCL": Method("supervised", True, "label", "hcl", "ball", HCL_TAU, 1e-3, 0.0),
    "UCL": Method("unsupervised", False, "label", "hcl", "ball", HCL_TAU, 1e-3, 1e-6),
    "HUCL": Method("unsupervised", True, "label", "hcl", "ball", HCL_TAU, 1e-3, 1e-6),
    "InfoNCE": Method(None, False, "simclr", "weince", "sphere", WEINCE_TAU, 3e-4, 0.0),
    "WeiNCE": Method(None, False, "simclr", "weince", "sphere", WEINCE_TAU, 3e-4, 0.0),
}

#: The hard-negative paper's four losses (the methods with a setting), in table order.
HCL_METHODS: tuple[str, ...] = tuple(m for m, spec in METHODS.items() if spec.setting is not None)

#: The two-view (anchor, positive) losses of the WeiNCE paper.
TWO_VIEW_METHODS: tuple[str, ...] = tuple(m for m, spec in METHODS.items() if spec.setting is None)

#: The sampled estimator's randomness contract (docs/hcl.md#sampled-estimator): one seed per call
#: (per run) from the generator, every uniform from the counter-based SplitMix64 stream of that
#: seed (theory.hcl.sampling.stream_uniforms). Stored sampled runs carry it in their identity, so
#: runs drawn under another contract (before December 2026: ``torch.rand((P, K))`` from the
#: generator) are never reused or extended.
SAMPLED_DRAWS = "splitmix64-stream"
