"""What a sweep will cost, measured before it starts (``python -m synthetic sweep`` prints it).

Each task of a sweep (a stacked group, or one run) is **probed**: trained on this machine with the
sweep's thread count for one untimed step (first-use costs such as compiling the sampled
estimator's kernels in a fresh clone), then timed for 0 epochs, :data:`PROBE_STEPS` and twice as
many optimisation steps (recording only the first and the last state; no convergence rule), which
gives its three costs by differences:

* the step ``T = (t(2k) - t(k)) / k`` (``t(k) = S + 2V + kT``);
* one evaluation ``V = t(k) - t(0) - kT`` (the metric row of every run of the task);
* the set-up ``S = t(0) - V`` (data, models). A near-NC task (``init="nc"``) is probed from a
  random initialisation, and its sources' training (``init_epochs`` epochs of runs of the same
  shape, one per distinct source) is added as ``init_epochs * steps_per_epoch * T * sources / runs``.

The task then costs ``S + R_e V + n T`` with ``n`` its steps and ``R_e`` its recorded epochs at its
whole budget: **an upper bound** for runs with a convergence rule, which stop when they settle. The
sweep's cost is the sum over tasks (core time at the sweep's threads per worker) and its wall time
the makespan of the tasks on the workers, longest first. Tasks that differ only in their runs' seeds,
betas and methods (:func:`signature`) are probed once. Timings are noisy (a busy machine, the
first call's warm-up), so the line says what was measured and how long the probe took; a probe
never writes to the store.
"""

from __future__ import annotations

import heapq
import math
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from synthetic.store.schema import recorded_epochs
from synthetic.sweep.progress import format_seconds

__all__ = [
    "PROBE_STEPS",
    "TaskCost",
    "SweepCost",
    "probe_task",
    "signature",
    "remaining",
    "estimate",
    "makespan",
]


#: Optimisation steps of the shorter probe (the longer one takes twice as many).
PROBE_STEPS = 8


@dataclass(frozen=True)
class TaskCost:
    """The measured costs of one task (seconds) and its budget."""

    setup: float
    evaluation: float
    step: float
    steps: int
    records: int
    sources: float = 0.0

    @property
    def seconds(self) -> float:
        """``setup + sources + records * evaluation + steps * step``: the task's cost at its whole budget."""
        return self.setup + self.sources + self.records * self.evaluation + self.steps * self.step


@dataclass(frozen=True)
class SweepCost:
    """A sweep's estimated cost: core seconds, wall seconds on ``jobs`` workers, probe seconds."""

    core_seconds: float
    wall_seconds: float
    jobs: int
    threads: int
    probe_seconds: float
    tasks: int
    probed: int
    task_seconds: tuple[float, ...] = ()

    def text(self) -> str:
        """One line: ``cost estimate: 0.093 core-hours ... about 2m48s wall on 2 workers ...``."""
        return (
            f"cost estimate: {self.core_seconds / 3600:.3g} core-hours at {self.threads} thread(s) per "
            f"worker (every run to its budget, a run continuing from a stored state from there; runs that "
            f"settle stop earlier), about "
            f"{format_seconds(self.wall_seconds)} wall on {self.jobs} worker(s); measured by training "
            f"{self.probed} of its {self.tasks} task(s) (one per shape) for 0 epochs, {PROBE_STEPS} and "
            f"{2 * PROBE_STEPS} steps ({format_seconds(self.probe_seconds)})"
        )


#: A probe keeps its run's rule (a rule may add work to each metric step: the evaluation loss of
#: ``settle_loss = "eval"``) with zero tolerances, so that no probe is stopped by it.
_NEVER_SETTLES = dict(settle_etf=0.0, settle_wcv=0.0, settle_rank=0, settle_erank=0.0, settle_gap=0.0)


def _probe_configs(configs: Sequence[Any], steps: int) -> list[Any]:
    def probe(c: Any, **fields: Any) -> Any:
        rule = _NEVER_SETTLES if getattr(c, "settle_window", 0) > 0 else {}
        return c.replace(init="random", **rule, **fields)

    if steps == 0:
        return [probe(c, epochs=0, max_steps=0) for c in configs]
    return [probe(c, max_steps=steps, eval_every=10**6) for c in configs]  # the first and last state only


def probe_task(
    configs: Sequence[Any], train: Callable[[list[Any]], Any], steps: int = PROBE_STEPS
) -> TaskCost:
    """Measure one task: ``train`` (the sweep's stack trainer) on 0-epoch, k-step and 2k-step copies.

    An untimed 1-step copy runs first, so that one-time costs of the first use (the compiled
    kernels of the sampled estimator compile in a fresh clone, lazy initialisations) are not
    taken for the task's own (measured: in a fresh clone they made one grid's estimate 5x too high).

    Args:
        configs: the task's run configs (``RunConfig``: ``replace``, ``num_steps``,
            ``num_epochs``, ``eval_every``, ``steps_per_epoch``).
        train: trains a list of configs (``Trainer.train_stack``, or a loop of ``Trainer.run``).
        steps: k, the steps of the shorter probe (>= 1).

    Returns:
        The task's :class:`TaskCost` (negative differences, from timing noise, are taken as 0).
    """
    if steps < 1:
        raise ValueError(f"steps must be >= 1, got {steps}")
    train(_probe_configs(configs, 1))  # first-use costs, untimed
    t = []
    for n in (0, steps, 2 * steps):
        probe = _probe_configs(configs, n)
        start = time.perf_counter()
        train(probe)
        t.append(time.perf_counter() - start)
    step = max(t[2] - t[1], 0.0) / steps
    evaluation = max(t[1] - t[0] - steps * step, 0.0)
    setup = max(t[0] - evaluation, 0.0)
    budget = max(int(c.num_steps) for c in configs)
    records = max(len(recorded_epochs(int(c.num_epochs), int(c.eval_every))) for c in configs)
    # near-NC runs (claim R4) first train their sources: init_epochs epochs of runs of the same shape
    sources = {c.source_config().key(): c.init_epochs * c.steps_per_epoch for c in configs if c.init == "nc"}
    return TaskCost(setup, evaluation, step, budget, records, sum(sources.values()) * step / len(configs))


def makespan(costs: Sequence[float], jobs: int) -> float:
    """Wall time of ``costs`` on ``jobs`` workers, the longest first to the least loaded worker."""
    if jobs < 1:
        raise ValueError(f"jobs must be >= 1, got {jobs}")
    loads = [0.0] * min(jobs, max(1, len(costs)))
    heapq.heapify(loads)
    for c in sorted(costs, reverse=True):
        heapq.heappush(loads, heapq.heappop(loads) + c)
    return max(loads) if costs else 0.0


def signature(task: Sequence[Any]) -> tuple:
    """What a task's cost depends on: its size and its runs' configs less seed, beta and method.

    Tasks with equal signatures (the seeds and betas of one setting) are probed once.
    """
    drop = ("seed", "beta", "method")
    shapes = sorted(tuple(sorted((k, str(v)) for k, v in c.to_dict().items() if k not in drop)) for c in task)
    return (len(task), tuple(dict.fromkeys(shapes)))


def remaining(cost: TaskCost, configs: Sequence[Any], done: Mapping[str, int | None]) -> float:
    """The cost of a task whose runs continue from stored states (docs/claims.md#extending-a-run).

    ``done``: run key -> the steps its state has already trained (None: the run is complete,
    nothing to train). The steps left are the largest over the task's runs, the metric steps
    shrink in proportion, and near-NC sources are trained only for runs that start afresh.
    """
    left = []
    for c in configs:
        k = c.key()
        if k not in done:
            left.append(int(c.num_steps))
        elif done[k] is not None:
            left.append(max(int(c.num_steps) - int(done[k] or 0), 0))
    steps = max(left, default=0)
    records = math.ceil(cost.records * steps / cost.steps) if cost.steps else 0
    fresh = any(c.key() not in done for c in configs)
    return cost.setup + (cost.sources if fresh else 0.0) + records * cost.evaluation + steps * cost.step


def estimate(
    tasks: Sequence[Sequence[Any]],
    train: Callable[[list[Any]], Any],
    *,
    jobs: int,
    threads: int,
    done: Mapping[str, int | None] | None = None,
) -> SweepCost:
    """Probe the tasks and sum: core seconds and the makespan on ``jobs``.

    Each :func:`signature` is probed once (:func:`probe_task`).

    Args:
        tasks: the sweep's tasks (lists of configs, as the workers receive them).
        train: the sweep's stack trainer.
        jobs: worker processes (>= 1).
        threads: torch threads per worker (the probe runs with as many).
        done: run key -> steps already trained by a stored state the run continues from (None:
            complete), see :func:`remaining`; default none.
    """
    import torch  # lazy: the store and the sweep's other modules do not need torch

    before = torch.get_num_threads()
    start = time.perf_counter()
    measured: dict[tuple, TaskCost] = {}
    try:
        torch.set_num_threads(max(1, int(threads)))
        costs = []
        for t in tasks:
            sig = signature(t)
            if sig not in measured:
                measured[sig] = probe_task(list(t), train)
            costs.append(remaining(measured[sig], t, done or {}))
    finally:
        torch.set_num_threads(before)
    return SweepCost(
        core_seconds=sum(costs),
        wall_seconds=makespan(costs, jobs),
        jobs=jobs,
        threads=max(1, int(threads)),
        probe_seconds=time.perf_counter() - start,
        tasks=len(tasks),
        probed=len(measured),
        task_seconds=tuple(costs),
    )
