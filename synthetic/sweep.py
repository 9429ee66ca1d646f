"""Sweep execution: resumable, parallel runs of a grid, each stored atomically as it finishes.

:func:`run_sweep`: finished runs (a file ``runs/<key>.csv`` in the results folder)
are skipped; the rest run on local processes (joblib) or on a dask.distributed cluster
(``scheduler=ADDRESS``). Each finished run is sent back to this process and stored atomically as
soon as it completes, so a SIGKILL loses at most the runs in flight; restarting the same command
finishes the sweep, and the final ``table.csv`` is byte-identical to the one of an uninterrupted
sweep (runs are deterministic given their config, the table is sorted by config and epoch).

Grids come from :mod:`synthetic.grids`, the store and the table layout from
:mod:`synthetic.results`, the seed-aggregated summary from :mod:`synthetic.summary`.
"""

from __future__ import annotations

import dataclasses
import os
import sys
import time
import traceback
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

import pandas as pd

from synthetic.grids import Grid, load_grid
from synthetic.results import (
    RUN_KEY,
    RUNS_SUBDIR,
    finished_keys,
    load_table,
    remove_temp_files,
    write_run,
)
from synthetic.results import write_table as _write_table  # run_sweep has a write_table flag
from synthetic.summary import format_summary, summarize

__all__ = ["SweepSummary", "run_sweep"]


@dataclasses.dataclass
class SweepSummary:
    """What :func:`run_sweep` did.

    Attributes:
        n_runs: configs in the sweep; n_skipped: already stored; n_done: run and stored now;
        failures: ``{run_key: traceback}`` of runs that raised; seconds: wall time;
        results_dir, table_path: where the results are; table: the sweep's rows (all its
        stored runs); summary: :func:`summarize` of the table.
    """

    n_runs: int
    n_skipped: int
    n_done: int
    failures: dict
    seconds: float
    results_dir: Path
    table_path: Path | None
    table: pd.DataFrame = dataclasses.field(repr=False)
    summary: pd.DataFrame = dataclasses.field(repr=False)

    @property
    def ok(self) -> bool:
        """True when every run of the sweep is stored."""
        return not self.failures and self.n_skipped + self.n_done == self.n_runs

    def format(self) -> str:
        """Human-readable report: counts, time, and the seed-aggregated final metrics."""
        lines = [
            f"sweep: {self.n_runs} runs, {self.n_skipped} already stored, {self.n_done} run now,"
            f" {len(self.failures)} failed, {self.seconds:.1f} s",
            f"results: {self.results_dir}" + (f"  table: {self.table_path}" if self.table_path else ""),
        ]
        for k, tb in self.failures.items():
            last = tb.strip().splitlines()[-1] if tb.strip() else ""
            lines.append(f"FAILED {k}: {last}")
        if len(self.summary):
            lines.append("final epoch, mean ± std over seeds:")
            lines.append(format_summary(self.summary))
        return "\n".join(lines)

    def __str__(self) -> str:
        return self.format()


def _default_runner():
    from synthetic.train import train_run

    return train_run


def _find_stacking():
    """(group_fn, stacked_fn) of synthetic.stacked; import errors propagate."""
    from synthetic.stacked import stack_groups, train_stacked

    return stack_groups, train_stacked


def _execute(
    task: list, runner: Callable | None, stacked_runner: Callable | None, threads: int | None = 1
) -> list:
    """Run one task (a list of configs); return ``[(key, frame or None, error or None)]``.

    Runs in a worker (joblib process or dask worker); never raises so that one failing run does
    not abort the others. ``threads`` fixes torch's intra-op thread count during the task (then
    restores it): results are bit-identical only at equal thread counts, so a sweep gives the
    same numbers whatever ``n_jobs`` or cluster it runs on.
    """
    keys = [c.key() for c in task]
    old_threads = None
    if threads is not None:
        import torch

        old_threads = torch.get_num_threads()
        torch.set_num_threads(threads)
    try:
        return _execute_inner(task, keys, runner, stacked_runner)
    finally:
        if old_threads is not None:
            torch.set_num_threads(old_threads)


def _check_frame(k: str, f: Any) -> None:
    if not isinstance(f, pd.DataFrame):
        raise RuntimeError(f"runner returned {type(f).__name__}, not a DataFrame, for run {k}")
    if RUN_KEY not in f.columns or set(f[RUN_KEY].astype(str)) != {k}:
        raise RuntimeError(f"runner frame for run {k} must carry run_key == {k}")


def _run_single(config: Any, k: str, runner: Callable | None, note: str = "") -> tuple:
    try:
        fn = runner or _default_runner()
        f = fn(config)
        _check_frame(k, f)
        return (k, f, None)
    except Exception:
        return (k, None, note + traceback.format_exc())


def _execute_inner(task: list, keys: list, runner: Callable | None, stacked_runner: Callable | None) -> list:
    """Train a task; a failing stack falls back to training each member alone.

    A stack of several configs that raises (or returns bad frames) is retried member by member
    with the single runner, so one failing run does not fail its whole stack (on every retry);
    only the members that fail alone are reported, with the stack's error noted.
    """
    note = ""
    if len(task) > 1 and stacked_runner is not None:
        try:
            frames = list(stacked_runner(list(task)))
            if len(frames) != len(task):
                raise RuntimeError(f"stacked runner returned {len(frames)} frames for {len(task)} configs")
            for k, f in zip(keys, frames, strict=True):
                _check_frame(k, f)
            return [(k, f, None) for k, f in zip(keys, frames, strict=True)]
        except Exception:
            last = traceback.format_exc().strip().splitlines()[-1]
            note = f"(stacked training of {len(task)} runs failed: {last}; this run then failed alone)\n"
    return [_run_single(c, k, runner, note) for c, k in zip(task, keys, strict=True)]


def _make_tasks(pending: list, all_configs: list, stack: bool, group_fn: Callable | None) -> list:
    if not stack or group_fn is None:
        return [[c] for c in pending]
    # Group the WHOLE grid (not only pending runs), in key order, so a resumed sweep trains exactly
    # the same groups as an uninterrupted one whatever the order of the configs: stacked results
    # may depend on the group composition (float rounding of batched products).
    pending_keys = {c.key() for c in pending}
    tasks = []
    for group in group_fn(sorted(all_configs, key=lambda c: c.key())):
        group = list(group)
        if any(c.key() in pending_keys for c in group):
            tasks.append(group)
    return tasks


def _resolve_configs(grid: Any, config_cls: Any) -> tuple[list, str]:
    if isinstance(grid, Grid):
        return list(grid.configs), grid.name
    if isinstance(grid, (str, os.PathLike, Mapping)):
        g = load_grid(grid, config_cls=config_cls)
        return list(g.configs), g.name
    if isinstance(grid, Iterable):
        configs = list(grid)
        for c in configs:
            if not (hasattr(c, "key") and hasattr(c, "to_dict")):
                raise ValueError(f"grid_or_configs must hold RunConfig objects, got {c!r}")
        seen, out = set(), []
        for c in configs:
            if c.key() not in seen:
                seen.add(c.key())
                out.append(c)
        return out, "sweep"
    raise ValueError(f"grid_or_configs must be a Grid, a TOML path, a mapping or configs, got {grid!r}")


def run_sweep(
    grid_or_configs: Any,
    results_dir: str | os.PathLike,
    *,
    n_jobs: int = 1,
    scheduler: Any = None,
    stack: bool = False,
    progress: bool | None = None,
    runner: Callable | None = None,
    stacked_runner: Callable | None = None,
    group_fn: Callable | None = None,
    write_table: bool = True,
    config_cls: Any = None,
    threads: int | None = 1,
) -> SweepSummary:
    """Run every not-yet-stored run of a sweep and store each one atomically as it finishes.

    Args:
        grid_or_configs: a :class:`Grid`, a grid TOML path / shipped name / mapping (default
            scale), or an iterable of run configs.
        results_dir: the results folder (``runs/<key>.csv`` per run, ``table.csv``).
        n_jobs: local worker processes (joblib; 1 runs in this process, -1 all cores).
            Ignored when ``scheduler`` is given.
        scheduler: a dask.distributed scheduler address (``"tcp://host:8786"``) or a
            ``distributed.Client``; runs then execute on that cluster and come back here to be
            stored (no shared file system needed).
        stack: train groups of stackable configs in one tensor program
            (``synthetic.stacked``), grouped over the whole grid so resuming trains the same
            groups. A stack that fails is retried run by run with ``runner``.
        progress: tqdm bar with ETA; default: only when stderr is a terminal.
        runner: ``config -> DataFrame`` (default ``synthetic.train.train_run``); must be
            picklable (a module-level function) for processes and dask.
        stacked_runner: overrides the stacked trainer (``list[config] -> list[frame]``).
        group_fn: overrides the stacking groups (``list[config] -> list[list[config]]``).
        write_table: write ``table.csv`` (all runs stored in the folder) at the end.
        config_cls: see :func:`synthetic.grids.expand_grid` (only used for a path or mapping).
        threads: torch threads per run (default 1, the same in every worker so that the numbers
            do not depend on ``n_jobs``); None leaves the worker's setting alone.

    Returns:
        A :class:`SweepSummary`. Failed runs are reported there (and not stored); they are
        retried by the next call.
    """
    if not isinstance(n_jobs, int) or isinstance(n_jobs, bool) or n_jobs == 0 or n_jobs < -1:
        raise ValueError(f"n_jobs must be a positive int or -1, got {n_jobs!r}")
    if runner is not None and not callable(runner):
        raise ValueError(f"runner must be callable, got {runner!r}")
    if threads is not None and (not isinstance(threads, int) or isinstance(threads, bool) or threads < 1):
        raise ValueError(f"threads must be a positive int or None, got {threads!r}")
    if progress is not None and not isinstance(progress, bool):
        raise ValueError(f"progress must be True, False or None, got {progress!r}")
    t0 = time.perf_counter()
    configs, _ = _resolve_configs(grid_or_configs, config_cls)
    results = Path(results_dir)
    if str(results_dir) == "":
        raise ValueError("results_dir must be a non-empty path")
    (results / RUNS_SUBDIR).mkdir(parents=True, exist_ok=True)
    remove_temp_files(results)

    done = finished_keys(results)
    keys = [c.key() for c in configs]
    pending = [c for c, k in zip(configs, keys, strict=True) if k not in done]
    n_skipped = len(configs) - len(pending)

    stacking = None
    if stack:
        if stacked_runner is not None and group_fn is not None:
            stacking = (group_fn, stacked_runner)
        else:
            found = _find_stacking()
            stacking = (group_fn or found[0], stacked_runner or found[1])
    tasks = _make_tasks(pending, configs, stacking is not None, stacking[0] if stacking else None)
    s_runner = stacking[1] if stacking else None

    if progress is None:
        progress = bool(getattr(sys.stderr, "isatty", lambda: False)())
    from tqdm.auto import tqdm

    bar = tqdm(total=len(pending), unit="run", desc="sweep", disable=not progress, dynamic_ncols=True)
    failures: dict[str, str] = {}
    n_done = 0
    pending_keys = {c.key() for c in pending}

    def _store(result: list) -> None:
        nonlocal n_done
        for k, frame, err in result:
            if k not in pending_keys:
                continue  # a finished member of a re-trained stack group: already stored
            if err is not None:
                failures[k] = err
            else:
                write_run(results, frame, key=k)
                n_done += 1
            pending_keys.discard(k)
            bar.update(1)

    try:
        if not tasks:
            pass
        elif scheduler is not None:
            _run_dask(tasks, scheduler, runner, s_runner, threads, _store)
        else:
            from joblib import Parallel, delayed

            par = Parallel(n_jobs=n_jobs, return_as="generator_unordered")
            for result in par(delayed(_execute)(t, runner, s_runner, threads) for t in tasks):
                _store(result)
    finally:
        bar.close()

    table_path = _write_table(results) if write_table else None
    stored = finished_keys(results)
    mine = [k for k in dict.fromkeys(keys) if k in stored]
    table = load_table(results, keys=mine) if mine else pd.DataFrame()
    summary = summarize(table) if len(table) else pd.DataFrame()
    return SweepSummary(
        n_runs=len(configs),
        n_skipped=n_skipped,
        n_done=n_done,
        failures=failures,
        seconds=time.perf_counter() - t0,
        results_dir=results,
        table_path=table_path,
        table=table,
        summary=summary,
    )


def _run_dask(tasks: list, scheduler: Any, runner, s_runner, threads, on_result: Callable) -> None:
    from distributed import Client, as_completed

    own = not isinstance(scheduler, Client)
    if own and not isinstance(scheduler, str):
        raise ValueError(f"scheduler must be an address string or a distributed.Client, got {scheduler!r}")
    client = Client(scheduler) if own else scheduler
    try:
        futures = [
            client.submit(_execute, t, runner, s_runner, threads, pure=False, key=f"sweep-{t[0].key()}-{i}")
            for i, t in enumerate(tasks)
        ]
        for fut in as_completed(futures):
            on_result(fut.result())
            fut.release()
    finally:
        if own:
            client.close()
