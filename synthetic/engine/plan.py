"""Which runs train together, and how: the execution plan of a list of run configs.

:func:`plan` partitions configs into :class:`Group` s that :func:`synthetic.engine.train.train_runs`
trains as one tensor program (``mode="stacked"``) or one run at a time (``"sequential"``); the
sweep calls it and then :func:`train_group` on each group.

**Which runs can stack** (:func:`stack_key`): runs whose tensors have the same shapes, i.e. that
differ only in ``seed``, ``beta`` and the method inside one family (SCL/HSCL/UCL/HUCL may mix;
InfoNCE and WeiNCE each stack only with themselves). Runs that start from a Neural-Collapse state
(``init="nc"``) are kept together with every other run of the same source, so each source is
trained once per group (chunks of at most ``max_stack`` runs never split a source).

**Stacked or sequential** (:func:`stack_gain`): a modelled cost, not a timed probe, so that the
plan (and hence the float rounding of a stacked run) is the same on every machine and every
restart of a sweep. Per step a run costs a fixed dispatch overhead (Python, op launches, Adam)
plus its arithmetic; stacking R runs pays the overhead once and the arithmetic R times, so its
gain is ``R (o + w) / (o + R w)`` with ``w`` the run's floating-point work per step in units of
the overhead ``o`` (:data:`OVERHEAD_FLOP`, calibrated with ``benchmarks/bench_stacked.py`` on
2 CPU cores). A group is stacked when the modelled gain is at least :data:`MIN_GAIN`; where the
arithmetic dominates (large full batches, the sampled estimator's per-run draws) stacking gains
nothing and is not done, so a group is never planned slower than its runs one by one.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from synthetic.engine.config import RunConfig
from theory.options import HCL_METHODS

__all__ = [
    "MODES",
    "MAX_STACK",
    "OVERHEAD_FLOP",
    "MIN_GAIN",
    "Group",
    "stack_key",
    "step_flop",
    "stack_gain",
    "plan",
    "stack_groups",
]

MODES = ("stacked", "sequential")
#: Most runs in one stacked group.
MAX_STACK = 16
#: Dispatch overhead of one optimisation step, in floating-point operations of arithmetic that
#: take the same time (about 1 ms of Python and op launches against ~10 GFLOP/s per core).
OVERHEAD_FLOP = 1.5e7
#: Smallest modelled gain for which a group is stacked.
MIN_GAIN = 1.5
#: Fields that may differ between the runs of one stack (``method`` only within its family).
VARYING_FIELDS = ("seed", "beta", "method")


def stack_key(config: RunConfig) -> tuple:
    """Hashable key: configs with equal keys can be trained in one stack.

    Every resolved field except :data:`VARYING_FIELDS`, plus the method's family (``"hcl"`` for
    SCL/HSCL/UCL/HUCL, the method itself for InfoNCE/WeiNCE).
    """
    if not isinstance(config, RunConfig):
        raise ValueError(f"config must be a RunConfig, got {type(config).__name__}")
    d = config.to_dict()
    family = "hcl" if config.method in HCL_METHODS else config.method
    return (family,) + tuple((k, d[k]) for k in sorted(d) if k not in VARYING_FIELDS)


def step_flop(config: RunConfig) -> float:
    """Modelled floating-point work of one optimisation step of one run (forward + backward).

    Encoder: ``6 B (sum of layer in x out)`` (free features: ``6 B d``); loss: ``8 B'^2 d`` for
    the similarity matrix and its gradient with ``B'`` = B (2B with noise positives); the sampled
    estimator adds ``40 P K`` for its draws (P ~ B^2 / C + B pairs, K negatives: inverse-CDF
    search and gathers); two-view losses ``8 (2B)^2 d``; Adam ``20`` per parameter (every
    parameter is updated at every step: for free features all ``N d`` of them, whatever B).
    """
    B = config.batch
    d, D, h = config.embed_dim, config.input_dim, config.hidden
    if config.encoder == "free":
        enc, params = 6.0 * B * d, config.num_train * d
    elif config.encoder == "linear":
        enc, params = 6.0 * B * D * d, (D + 1) * d
    else:
        enc = 6.0 * B * (D * h + (config.depth - 1) * h * h + h * d)
        params = (D + 1) * h + (config.depth - 1) * (h + 1) * h + (h + 1) * d
    views = 2 if config.positives == "noise" or config.method not in HCL_METHODS else 1
    loss = 8.0 * (views * B) ** 2 * d
    if config.method in HCL_METHODS and config.estimator == "sampled":
        pairs = B * B / config.num_classes + B
        loss += 40.0 * pairs * config.num_negatives
    return views * enc + loss + 20.0 * params


def stack_gain(config: RunConfig, R: int) -> float:
    """Modelled throughput of R stacked runs over R sequential ones: ``R (1 + w) / (1 + R w)``.

    ``w`` = :func:`step_flop` / :data:`OVERHEAD_FLOP`. The sampled estimator and the two-view
    losses evaluate their loss one run at a time, so only the encoder part of their step stacks.
    """
    if R < 1:
        raise ValueError(f"R must be >= 1, got {R}")
    w = step_flop(config) / OVERHEAD_FLOP
    per_run_loop = (
        config.method not in HCL_METHODS or config.estimator == "sampled" or config.psi == "triplet"
    )
    if per_run_loop:  # the loss costs one overhead per run in either mode
        return R * (1.0 + w) / (1.0 + R * (0.5 + w))
    return R * (1.0 + w) / (1.0 + R * w)


@dataclass(frozen=True)
class Group:
    """Runs trained together: ``configs`` and ``mode`` (``"stacked"`` or ``"sequential"``).

    Attributes:
        configs: the runs (a tuple of RunConfig sharing one :func:`stack_key`).
        mode: ``"stacked"`` (one tensor program of R runs) or ``"sequential"`` (one run at a time).
        gain: the modelled throughput gain of stacking (:func:`stack_gain`).
    """

    configs: tuple[RunConfig, ...]
    mode: str
    gain: float

    def __post_init__(self) -> None:
        if self.mode not in MODES:
            raise ValueError(f"mode must be one of {MODES}, got {self.mode!r}")
        if not self.configs:
            raise ValueError("a group needs at least one config")

    def __len__(self) -> int:
        return len(self.configs)


def _source_key(c: RunConfig) -> str:
    s = c.source_config()
    return "" if s is None else s.key()


def plan(configs: Sequence[RunConfig], *, max_stack: int = MAX_STACK, stack: bool = True) -> list[Group]:
    """Partition ``configs`` into groups, each with its mode (see the module docstring).

    Groups follow the first appearance of each :func:`stack_key`; within a group the input order
    is kept, except that runs sharing an ``init="nc"`` source are kept in one chunk of at most
    ``max_stack`` runs (a source's runs fill a chunk before the next source's). A chunk that is
    not worth stacking becomes one ``"sequential"`` group per run (so a sweep spreads them over
    its workers), except a chunk of runs of one source, which stays one group that trains its
    source once. Duplicate configs (equal ``key()``) are kept (the caller decides).

    Args:
        configs: the runs.
        max_stack: most runs per group.
        stack: False plans every group ``"sequential"``.

    Returns:
        The groups; every config appears in exactly one.

    Raises:
        ValueError: ``max_stack < 1`` or a non-RunConfig element.
    """
    if isinstance(max_stack, bool) or not isinstance(max_stack, int) or max_stack < 1:
        raise ValueError(f"max_stack must be an integer >= 1, got {max_stack!r}")
    buckets: dict[tuple, list[RunConfig]] = {}
    for c in configs:
        buckets.setdefault(stack_key(c), []).append(c)
    out: list[Group] = []
    for members in buckets.values():
        by_source: dict[str, list[RunConfig]] = {}
        for c in members:
            by_source.setdefault(_source_key(c), []).append(c)
        chunks: list[list[RunConfig]] = []
        for runs in by_source.values():
            for i in range(0, len(runs), max_stack):
                part = runs[i : i + max_stack]
                last = chunks[-1] if chunks else None
                if last is not None and len(last) + len(part) <= max_stack and not _source_key(part[0]):
                    last.extend(part)
                else:
                    chunks.append(list(part))
        for chunk in chunks:
            gain = stack_gain(chunk[0], len(chunk)) if len(chunk) > 1 else 1.0
            if stack and len(chunk) > 1 and gain >= MIN_GAIN:
                out.append(Group(tuple(chunk), "stacked", gain))
            elif _source_key(chunk[0]):  # runs of one source: train it once, then each run alone
                out.append(Group(tuple(chunk), "sequential", gain))
            else:  # independent runs: one group each, so a sweep can spread them over workers
                out.extend(Group((c,), "sequential", gain) for c in chunk)
    return out


def stack_groups(configs: Sequence[RunConfig], max_stack: int = MAX_STACK) -> list[list[RunConfig]]:
    """The groups of :func:`plan` as lists of configs (the sweep's tasks)."""
    return [list(g.configs) for g in plan(list(configs), max_stack=max_stack)]
