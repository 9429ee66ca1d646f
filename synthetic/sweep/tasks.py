"""What runs in a worker: one task of a sweep (one config, or a stack of them) -> per-run results.

:func:`execute_task` is sent to local worker processes and dask workers by
:func:`synthetic.sweep.run.run_sweep`; it never raises for a failing run, so one run cannot abort the
others: each run comes back as ``(key, frame, None)`` or ``(key, None, failure info)``
(:func:`synthetic.store.failures.describe_failure`). A frame that is not the complete run of its config
(wrong ``run_key``, not the recorded epochs) is a failure too. Workers never write the results
folder; the sweep stores what comes back.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import pandas as pd

from synthetic.engine.errors import RunFailed
from synthetic.store import schema
from synthetic.store.failures import describe_failure

__all__ = ["Trainer", "execute_task", "expected_of"]


@dataclasses.dataclass(frozen=True)
class Trainer:
    """How a sweep trains its runs: the one point where a sweep meets a training engine.

    The sweep's default is the synthetic engine (:func:`synthetic.sweep.run.engine_trainer`);
    tests and other engines pass their own. The functions are pickled to the workers, so they
    must be module-level functions.

    Attributes:
        run: ``config -> DataFrame``: one run, one row per recorded epoch.
        plan: ``list[config] -> list[list[config]]``: the groups of a whole grid that train
            together (``stack=True``); None trains one run per task.
        train_stack: ``list[config] -> list[DataFrame | Exception]``: one group in one program
            (an exception in place of a frame: that member failed).
        extend: ``(list[config], list[Resume | None]) -> list[(DataFrame, RunState) | Exception]``:
            one group (or one run) continuing from stored states, returning where each run ended
            (:func:`synthetic.engine.train.train_extend_stack`); when given, the sweep trains every
            task with it and keeps the states (docs/claims.md#extending-a-run). None: no states.
    """

    run: Callable[[Any], pd.DataFrame]
    plan: Callable[[list], list[list]] | None = None
    train_stack: Callable[[list], list] | None = None
    extend: Callable[[list, list], list] | None = None

    def __post_init__(self) -> None:
        for name in ("run", "plan", "train_stack", "extend"):
            fn = getattr(self, name)
            if not (fn is None and name != "run") and not callable(fn):
                raise ValueError(f"{name} must be callable, got {fn!r}")
        if (self.plan is None) != (self.train_stack is None):
            raise ValueError("plan and train_stack must be given together (or neither)")


def expected_of(config: Any, stopped: int | None = None) -> list[int] | None:
    """The epochs a complete run of ``config`` records, or None for a config without a schedule.

    A run its convergence rule stopped at ``stopped`` (a recorded epoch) records the schedule up
    to that epoch; a ``stopped`` off the schedule is ignored (the frame is then checked against
    the whole schedule and fails).
    """
    try:
        full = schema.expected_epochs(config)
    except (AttributeError, KeyError, TypeError):
        return None
    # a "stop" off the schedule is no stop: the frame is then checked against the whole schedule
    return full if stopped is None or stopped not in full else schema.expected_epochs(config, stopped)


def _check_frame(k: str, f: Any, config: Any) -> None:
    if not isinstance(f, pd.DataFrame):
        raise RunFailed(f"the runner returned {type(f).__name__}, not a DataFrame", key=k)
    if schema.RUN_KEY not in f.columns or set(f[schema.RUN_KEY].astype(str)) != {k}:
        raise RunFailed(f"the runner's frame must carry run_key == {k}", key=k)
    want = expected_of(config, schema.stopped_at(f) if schema.EPOCH in f.columns else None)
    if want is not None and schema.EPOCH in f.columns and sorted(int(e) for e in f[schema.EPOCH]) != want:
        raise RunFailed(
            f"the runner returned {len(f)} rows, not the {len(want)} recorded epochs of its config", key=k
        )


def execute_task(job: Any, trainer: Trainer, threads: int | None = 1) -> list:
    """Run one task; return ``[(key, frame or None, failure info or None, state or None)]``.

    ``job``: a task (a list of configs), or ``(task, resumes)`` with one
    :class:`synthetic.engine.resume.Resume` or None per config (a trainer with ``extend``).
    Runs in a worker (joblib process or dask worker); never raises so that one failing run does
    not abort the others. ``threads`` fixes torch's intra-op thread count during the task (then
    restores it): results are bit-identical only at equal thread counts, so a sweep gives the
    same numbers whatever ``n_jobs`` or cluster it runs on.
    """
    task, resumes = (job[0], list(job[1])) if isinstance(job, tuple) else (job, [None] * len(job))
    keys = [c.key() for c in task]
    old_threads = None
    if threads is not None:
        import torch

        old_threads = torch.get_num_threads()
        torch.set_num_threads(threads)
    try:
        return _execute_inner(task, keys, resumes, *_trainers(trainer))
    finally:
        if old_threads is not None:
            torch.set_num_threads(old_threads)


def _trainers(trainer: Trainer) -> tuple[Callable | None, Callable]:
    """``(group, one)``: the trainers of a task's group (None: none) and of one run.

    Both give ``(frame, state or None)``: the trainer's ``extend`` when it has one, else its runners.
    """
    extend, stack, run = trainer.extend, trainer.train_stack, trainer.run
    if extend is not None:
        return extend, lambda c, r: extend([c], [r])[0]

    def group(configs: list, resumes: list) -> list:
        return [f if isinstance(f, BaseException) else (f, None) for f in stack(configs)]  # type: ignore[misc]

    return (group if stack is not None else None), lambda c, r: (run(c), None)


def _run_single(config: Any, k: str, resume: Any, one: Callable, note: str = "") -> tuple:
    try:
        got = one(config, resume)
        if isinstance(got, BaseException):
            raise got
        frame, state = got
        _check_frame(k, frame, config)
        return (k, frame, None, state)
    except Exception as exc:
        return (k, None, describe_failure(exc, note), None)


def _execute_inner(task: list, keys: list, resumes: list, group: Callable | None, one: Callable) -> list:
    """Train a task; a failing stack falls back to training each member alone.

    A stack of several configs that raises (or returns bad frames) is retried member by member
    with the single runner, so one failing run does not fail its whole stack (on every retry);
    only the members that fail alone are reported, with the stack's error noted. A stacked
    runner may also return an exception in place of a member's result: that member failed.
    ``group`` and ``one`` give ``(frame, state or None)`` per run (:func:`_trainers`).
    """
    note = ""
    if len(task) > 1 and group is not None:
        try:
            results = list(group(list(task), list(resumes)))
            if len(results) != len(task):
                raise RuntimeError(f"stacked runner returned {len(results)} frames for {len(task)} configs")
            out: list[tuple] = []
            for c, k, res in zip(task, keys, results, strict=True):
                if isinstance(res, BaseException):
                    out.append((k, None, describe_failure(res), None))
                else:
                    _check_frame(k, res[0], c)
                    out.append((k, res[0], None, res[1]))
            return out
        except Exception as exc:
            last = " ".join(str(exc).split()) or type(exc).__name__
            note = f"(stacked training of {len(task)} runs failed: {type(exc).__name__}: {last}; this run then failed alone)"
    return [_run_single(c, k, r, one, note) for c, k, r in zip(task, keys, resumes, strict=True)]
