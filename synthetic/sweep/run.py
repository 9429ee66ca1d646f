"""Sweep execution: resumable, parallel runs of a grid, each stored atomically as it finishes.

:func:`run_sweep` trains every run of a grid that is not stored yet, on local processes (joblib),
a dask cluster (``scheduler=ADDRESS``), or any dask cluster object (``cluster=``, e.g. a SLURM
cluster from :func:`synthetic.sweep.backends.make_slurm_cluster`), and stores each finished run in the
calling process as soon as it comes back. Guarantees:

* **Resumable.** A SIGKILL loses at most the runs in flight; restarting the same command
  finishes the sweep, and the final ``table.csv`` is byte-identical to the one of an
  uninterrupted sweep (runs are deterministic given their config, the table is sorted).
* **Complete or absent.** A run counts as stored only when its file matches its completion
  record (:mod:`synthetic.store.runs`). A run file without a record (an older store's) is adopted
  only when its rows are complete and its config columns hash to its name (checked with the
  sweep's config class); incomplete, corrupt, foreign and unverifiable run files are named, moved
  to ``quarantine/`` and rerun; ``table.csv`` is rebuilt whenever a run file changed.
* **Failures are failures.** A run that raises (the engine raises
  :class:`synthetic.engine.errors.NonFiniteRun` when it diverges) gets a failure record in
  ``failures/<key>.json``, is counted in the summary, never enters the table, and makes
  :attr:`SweepSummary.ok` false. Later sweeps do not retry it unless ``retry_failed=True``.
* **One writer.** The folder is locked for the sweep (:mod:`synthetic.store.locking`); a second sweep
  waits (``wait=True``) or stops with :class:`synthetic.store.errors.StoreLocked` naming the holder.
* **Nothing lost.** The folder's writability is checked before anything is trained; should a
  write still fail, the finished run is saved in a rescue folder named in the error. Ctrl-C or
  SIGTERM stops the workers and raises :class:`synthetic.sweep.errors.SweepInterrupted` (how many runs
  are stored); local workers never outlive the sweep (:mod:`synthetic.sweep.backends`).

Grids come from :mod:`synthetic.sweep.grids`, the store from :mod:`synthetic.store.read`, the
seed-aggregated summary from :mod:`synthetic.store.summary`, the progress display from
:mod:`synthetic.sweep.progress`.
"""

from __future__ import annotations

import dataclasses
import os
import tempfile
import time
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

import pandas as pd

from synthetic.store.errors import StoreError, StoreNotWritable
from synthetic.store.failures import clear_failure, failure_line, read_failures, write_failure
from synthetic.store.folders import (
    FAILURES_SUBDIR,
    QUARANTINE_SUBDIR,
    RUNS_SUBDIR,
    TABLE_FILE,
    check_writable,
    remove_temp_files,
)
from synthetic.store.locking import SweepLock, describe_holder
from synthetic.store.runs import adopt_unrecorded, finished_keys, quarantine, scan_store, write_run
from synthetic.store.schema import stopped_at
from synthetic.store.summary import format_summary, summarize
from synthetic.store.tables import load_table, table_is_current, write_table
from synthetic.sweep.backends import dask_results, local_results
from synthetic.sweep.cost import estimate as estimate_cost
from synthetic.sweep.errors import SweepInterrupted, TerminationRequested
from synthetic.sweep.extend import STATES_SUBDIR, find_resumes, split_tasks, store_state
from synthetic.sweep.grids import Grid, load_grid
from synthetic.sweep.progress import SweepProgress
from synthetic.sweep.tasks import Trainer, execute_task, expected_of

__all__ = ["SweepSummary", "engine_trainer", "estimate_grid", "run_sweep"]


@dataclasses.dataclass
class SweepSummary:
    """What :func:`run_sweep` did.

    Attributes:
        n_runs: configs in the sweep; n_skipped: already stored; n_done: run and stored now;
        failures: ``{run_key: failure info}`` of the runs that failed now (``reason``,
        ``exception``, ``epoch``, ``traceback``; also in ``failures/<key>.json``);
        failed_before: ``{run_key: failure record}`` of runs that failed in an earlier sweep and
        were not retried (``retry_failed=False``); quarantined: ``"<path>: <reason>"`` of the
        run files set aside; adopted: run files of an older store given a completion record;
        stale_lock: the holder record of a dead sweep whose lock was taken over; seconds: wall
        time; results_dir, table_path: where the results are; table: the sweep's rows (all its
        stored runs); summary: :func:`summarize` of the table; read_only: the folder could not
        be written (nothing needed writing); resumed: runs of ``n_done`` that continued from a
        stored state (docs/claims.md#extending-a-run), of which ``complete`` had settled within
        the new budget (nothing trained).
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
    failed_before: dict = dataclasses.field(default_factory=dict)
    quarantined: list = dataclasses.field(default_factory=list)
    adopted: int = 0
    stale_lock: dict | None = None
    read_only: bool = False
    resumed: int = 0
    complete: int = 0

    @property
    def ok(self) -> bool:
        """True when every run of the sweep is stored (none failed, now or before)."""
        return not self.failures and not self.failed_before and self.n_skipped + self.n_done == self.n_runs

    def format(self) -> str:
        """Human-readable report: counts, time, what was set aside, failures, the final metrics."""
        counts = (
            f"sweep: {self.n_runs} runs, {self.n_skipped} already stored, {self.n_done} run now,"
            f" {len(self.failures)} failed"
        )
        if self.failed_before:
            counts += f", {len(self.failed_before)} failed before (not retried: --retry-failed)"
        lines = [counts + f", {self.seconds:.1f} s"]
        if self.resumed:
            lines.append(
                f"extended: {self.resumed} of the runs trained now continued from a stored state in "
                f"{self.results_dir / STATES_SUBDIR} ({self.complete} had settled within the new budget: "
                f"nothing to train), instead of starting over"
            )
        if self.stale_lock:
            lines.append(
                f"lock: taken over from a sweep that ended without releasing it ({describe_holder(self.stale_lock)})"
            )
        if self.quarantined:
            lines.append(
                f"set aside {len(self.quarantined)} incomplete, corrupt or foreign run file(s) in "
                f"{self.results_dir / QUARANTINE_SUBDIR}; the grid's runs among them were trained again:"
            )
            lines.extend(f"  {q}" for q in self.quarantined)
        if self.adopted:
            lines.append(
                f"gave {self.adopted} run file(s) of an older store a completion record (their rows are "
                "complete and their config columns hash to their names)"
            )
        lines.append(
            f"results: {self.results_dir}"
            + (f"  table: {self.table_path}" if self.table_path else "")
            + ("  (read-only folder: nothing written)" if self.read_only else "")
        )
        for k, info in self.failures.items():
            lines.append(f"FAILED {failure_line(k, info)}")
        for k, info in self.failed_before.items():
            lines.append(f"FAILED BEFORE {failure_line(k, info)}")
        if self.failures or self.failed_before:
            lines.append(f"failure records: {self.results_dir / FAILURES_SUBDIR}")
        if len(self.summary):
            lines.append("final epoch, mean ± std over seeds:")
            lines.append(format_summary(self.summary))
        return "\n".join(lines)

    def __str__(self) -> str:
        return self.format()


# --------------------------------------------------------------------------------------------
# The engine: the one hand-off point
# --------------------------------------------------------------------------------------------


def engine_trainer() -> Trainer:
    """The synthetic training engine as the sweep's :class:`~synthetic.sweep.tasks.Trainer`.

    One run: :func:`synthetic.engine.train.train_run`; groups of the whole grid:
    :func:`synthetic.engine.plan.stack_groups`; one group: :func:`synthetic.engine.train.train_stack`;
    runs continuing from stored states, and the states they end in:
    :func:`synthetic.engine.train.train_extend_stack`.
    """
    # lazy: the engine loads torch, which only a sweep that trains needs (--help, summary and
    # claims of python -m synthetic stay quick)
    from synthetic.engine.plan import stack_groups
    from synthetic.engine.train import train_extend_stack, train_run, train_stack

    return Trainer(train_run, stack_groups, train_stack, train_extend_stack)


def estimate_grid(grid: Grid, *, jobs: int = 1, threads: int = 1, stack: bool = True) -> Any:
    """The measured cost of training every run of ``grid`` (stored or not), nothing stored.

    The tasks are those a sweep with ``stack`` would train (the engine's plan over the whole
    grid); :func:`synthetic.sweep.cost.estimate` probes one task per shape. Used by ``python -m
    synthetic sweep --estimate-only`` (the README's paper-scale cost).

    Returns:
        A :class:`synthetic.sweep.cost.SweepCost` (``.text()`` is the printed line).
    """
    if not isinstance(grid, Grid):
        raise ValueError(f"grid must be a Grid, got {type(grid).__name__}")
    if isinstance(jobs, bool) or not isinstance(jobs, int) or jobs < 1:
        raise ValueError(f"jobs must be a positive integer, got {jobs!r}")
    if isinstance(threads, bool) or not isinstance(threads, int) or threads < 1:
        raise ValueError(f"threads must be a positive integer, got {threads!r}")
    if not isinstance(stack, bool):
        raise ValueError(f"stack must be True or False, got {stack!r}")
    trainer = engine_trainer()
    assert trainer.train_stack is not None  # the engine trains groups
    configs = list(grid.configs)
    tasks = _make_tasks(configs, configs, trainer.plan if stack else None)
    return estimate_cost(tasks, trainer.train_stack, jobs=jobs, threads=threads)


def _make_tasks(pending: list, all_configs: list, group_fn: Callable | None) -> list:
    if group_fn is None:
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


def _resolve_configs(grid: Any) -> tuple[list, str]:
    if isinstance(grid, Grid):
        return list(grid.configs), grid.name
    if isinstance(grid, (str, os.PathLike, Mapping)):
        g = load_grid(grid)
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


def _check_args(n_jobs, trainer, threads, progress, connect_timeout) -> None:
    if not isinstance(n_jobs, int) or isinstance(n_jobs, bool) or n_jobs == 0 or n_jobs < -1:
        raise ValueError(f"n_jobs must be a positive int or -1, got {n_jobs!r}")
    if trainer is not None and not isinstance(trainer, Trainer):
        raise ValueError(f"trainer must be a synthetic.sweep.tasks.Trainer, got {trainer!r}")
    if threads is not None and (not isinstance(threads, int) or isinstance(threads, bool) or threads < 1):
        raise ValueError(f"threads must be a positive int or None, got {threads!r}")
    if progress is not None and not isinstance(progress, (bool, SweepProgress)):
        raise ValueError(f"progress must be True, False, None or a SweepProgress, got {progress!r}")
    if not isinstance(connect_timeout, (int, float)) or not connect_timeout > 0:
        raise ValueError(f"connect_timeout must be a positive number of seconds, got {connect_timeout!r}")


def _rescue(
    frame: pd.DataFrame, key: str, expected: list[int] | None, folder: Path, exc: OSError
) -> StoreError:
    """Save a finished run that could not be written to ``folder`` elsewhere; the error to raise."""
    why = exc.strerror or str(exc)
    try:
        spare = Path(tempfile.mkdtemp(prefix="synthetic-unsaved-"))
        write_run(spare, frame, key=key, expected=expected)
    except OSError:
        return StoreNotWritable(f"cannot write run {key} to {folder} ({why}), nor to a rescue folder")
    return StoreNotWritable(
        f"cannot write run {key} to {folder} ({why}); it is saved in {spare}: copy "
        f"{spare / RUNS_SUBDIR}/* into {folder / RUNS_SUBDIR}/ and run the same command again"
    )


def run_sweep(
    grid_or_configs: Any,
    results_dir: str | os.PathLike,
    *,
    n_jobs: int = 1,
    scheduler: Any = None,
    cluster: Any = None,
    connect_timeout: float = 10.0,
    stack: bool = False,
    progress: bool | SweepProgress | None = None,
    trainer: Trainer | None = None,
    write_table: bool = True,
    threads: int | None = 1,
    retry_failed: bool = False,
    estimate: bool = False,
    wait: bool | float = False,
) -> SweepSummary:
    """Run every not-yet-stored run of a sweep and store each one atomically as it finishes.

    Args:
        grid_or_configs: a :class:`Grid`, a grid TOML path / shipped name / mapping (default
            scale), or an iterable of run configs.
        results_dir: the results folder (``runs/<key>.csv`` per run, ``table.csv``; see
            :mod:`synthetic.store.folders`).
        n_jobs: local worker processes (joblib; 1 runs in this process, -1 all cores).
            Ignored with ``scheduler`` or ``cluster``.
        scheduler: a dask.distributed scheduler address (``"tcp://host:8786"``) or a
            ``distributed.Client``; runs then execute on that cluster and come back here to be
            stored (no shared file system needed).
        cluster: a dask cluster object (``distributed.LocalCluster``,
            ``dask_jobqueue.SLURMCluster``, ...), used through the same code path as
            ``scheduler``; the caller scales and closes it.
        connect_timeout: seconds to wait for the scheduler before
            :class:`synthetic.sweep.errors.SchedulerUnreachable`.
        stack: train the groups of the trainer's ``plan`` in one tensor program each
            (:func:`synthetic.engine.plan.stack_groups`), grouped over the whole grid so resuming
            trains the same groups. A stack that fails is retried run by run.
        progress: a :class:`synthetic.sweep.progress.SweepProgress` shared by several sweeps; True:
            always a bar; False: nothing; None: a bar on a terminal, else periodic lines.
        trainer: how runs are trained (:class:`synthetic.sweep.tasks.Trainer`; default the
            synthetic engine, :func:`engine_trainer`); its functions must be picklable
            (module-level) for processes and dask.
        write_table: write ``table.csv`` (all runs stored in the folder) when it is not current.
        threads: torch threads per run (default 1, the same in every worker so that the numbers
            do not depend on ``n_jobs``); None leaves the worker's setting alone.
        retry_failed: also rerun the runs that have a failure record from an earlier sweep
            (default: report them and leave them alone: a diverging run diverges again).
        estimate: before training, measure and print (to stdout) the sweep's cost (core-hours and
            wall time on the workers, :mod:`synthetic.sweep.cost`; ``python -m synthetic sweep``
            does): local sweeps of the engine only (not with an injected ``trainer``, a scheduler
            or a cluster, whose workers this machine cannot time).
        wait: when another sweep holds the folder's lock: False stops at once
            (:class:`synthetic.store.errors.StoreLocked`), True waits, a number waits that many seconds.

    Returns:
        A :class:`SweepSummary`; failed runs are reported there and in ``failures/``.

    Raises:
        StoreError: the folder is a file, is locked, or cannot be written while runs need
            training (nothing is trained then); SchedulerUnreachable: no scheduler;
            SweepInterrupted: Ctrl-C / SIGTERM (the finished runs are stored).
    """
    _check_args(n_jobs, trainer, threads, progress, connect_timeout)
    t0 = time.perf_counter()
    configs, _ = _resolve_configs(grid_or_configs)
    if str(results_dir) == "":
        raise ValueError("results_dir must be a non-empty path")
    results = Path(results_dir)
    if results.exists() and not results.is_dir():
        raise StoreError(f"results folder {results} is a file, not a folder")

    unwritable: StoreNotWritable | None = None
    try:
        check_writable(results)
    except StoreNotWritable as exc:
        unwritable = exc
    own_progress = not isinstance(progress, SweepProgress)
    if isinstance(progress, SweepProgress):
        bar = progress
    else:
        mode = None if progress is None else ("bar" if progress else "off")
        bar = SweepProgress(len(configs), mode=mode)
    lock = SweepLock(results, wait=wait, on_wait=lambda m: print(m, file=bar.stream, flush=True))
    try:
        if unwritable is None:
            lock.acquire()
        return _sweep_locked(
            configs,
            results,
            bar,
            lock,
            unwritable,
            t0,
            dict(
                n_jobs=n_jobs,
                scheduler=scheduler,
                cluster=cluster,
                connect_timeout=connect_timeout,
                stack=stack,
                trainer=trainer,
                write_table=write_table,
                threads=threads,
                retry_failed=retry_failed,
                estimate=estimate,
            ),
        )
    finally:
        lock.release()
        if own_progress:
            bar.close()


def _sweep_locked(
    configs: list,
    results: Path,
    bar: SweepProgress,
    lock: SweepLock,
    unwritable: Exception | None,
    t0: float,
    opt: dict,
) -> SweepSummary:
    if unwritable is None:
        remove_temp_files(results)
    scan = scan_store(results, key_of=_key_of(configs))
    keys = [c.key() for c in configs]
    failed = read_failures(results)
    mine = set(keys)
    failed_before = {k: v for k, v in failed.items() if k in mine and k not in scan.ok}
    if opt["retry_failed"]:
        failed_before = {}
    pending = [c for c, k in zip(configs, keys, strict=True) if k not in scan.ok and k not in failed_before]

    if unwritable is not None:
        if pending or scan.bad:
            what = f"{len(pending)} run(s) to train" + (
                f", {len(scan.bad)} bad run file(s)" if scan.bad else ""
            )
            raise StoreNotWritable(f"{unwritable} ({what}; nothing was trained)")
        return _finish(configs, keys, results, scan, t0, 0, {}, failed_before, [], 0, None, False, True)

    quarantined = [c.describe() for c in scan.bad]
    quarantine(results, scan.bad)
    adopted = adopt_unrecorded(results, scan.ok.values())
    n_skipped = len(configs) - len(pending) - len(failed_before)
    bar.already_done(n_skipped + len(failed_before))

    # resolved here, not in the workers, so that they run what this process would run
    trainer = opt["trainer"] or engine_trainer()
    tasks = _make_tasks(pending, configs, trainer.plan if opt["stack"] else None)
    resumes: dict = {}
    stored_steps: dict[str, int] = {}
    if trainer.extend is not None and pending:
        resumes, set_aside_states, stored_steps = find_resumes(results, pending)
        quarantined.extend(set_aside_states)
        tasks = split_tasks(tasks, resumes)
    remote = opt["cluster"] is not None or opt["scheduler"] is not None
    stacked_trainer = trainer.train_stack  # the engine's; a runner-only Trainer (tests) has none
    if opt["estimate"] and tasks and opt["trainer"] is None and stacked_trainer is not None and not remote:
        workers = max(1, opt["n_jobs"] if opt["n_jobs"] > 0 else (os.cpu_count() or 1))
        done = {k: (None if r.complete else r.state.steps) for k, r in resumes.items()}
        cost = estimate_cost(tasks, stacked_trainer, jobs=workers, threads=opt["threads"] or 1, done=done)
        print(cost.text(), flush=True)
        bar.weigh({c.key(): sec / len(t) for t, sec in zip(tasks, cost.task_seconds, strict=True) for c in t})
    if not opt["stack"]:
        trainer = Trainer(trainer.run, extend=trainer.extend)
    by_key = {c.key(): c for c in pending}
    failures: dict[str, dict] = {}
    n_done = 0

    def _store(result: list) -> None:
        nonlocal n_done
        for k, frame, info, state in result:
            if k not in by_key:
                continue  # a finished member of a re-trained stack group: already stored
            config = by_key.pop(k)
            if info is not None:
                failures[k] = info
                record = {**info, "config": _config_dict(config)}
                try:
                    write_failure(results, k, record)
                except OSError as exc:
                    raise StoreNotWritable(
                        f"cannot write the failure record of run {k} to {results}: {exc}"
                    ) from None
            else:
                want = expected_of(config, stopped_at(frame))  # a settled run stops early
                try:
                    write_run(results, frame, key=k, expected=want)
                except OSError as exc:
                    raise _rescue(frame, k, want, results, exc) from None
                clear_failure(results, k)
                n_done += 1
                if state is not None:
                    try:
                        store_state(results, config, state, stored_steps)
                    except OSError as exc:  # the run is stored; only a later extension is lost
                        print(
                            f"warning: cannot keep the final state of run {k}: {exc}",
                            file=bar.stream,
                            flush=True,
                        )
            bar.advance(info is None, key=k)

    args = (trainer, opt["threads"])
    jobs: list = tasks if trainer.extend is None else [(t, [resumes.get(c.key()) for c in t]) for t in tasks]
    target = opt["cluster"] if opt["cluster"] is not None else opt["scheduler"]
    try:
        if jobs:
            if target is not None:
                gen = dask_results(
                    execute_task,
                    jobs,
                    args,
                    target,
                    connect_timeout=opt["connect_timeout"],
                    name=lambda t, i: f"sweep-{(t[0] if isinstance(t, tuple) else t)[0].key()}-{i}",
                )
            else:
                gen = local_results(execute_task, jobs, args, opt["n_jobs"])
            try:
                for result in gen:
                    _store(result)
            finally:
                gen.close()
    except KeyboardInterrupt as exc:
        stored = len(mine & finished_keys(results))
        signal_name = "SIGTERM" if isinstance(exc, TerminationRequested) else "SIGINT"
        raise SweepInterrupted(stored, len(configs), str(results), signal_name) from None

    scan = scan_store(results)
    table_path = results / TABLE_FILE if (results / TABLE_FILE).is_file() else None
    if opt["write_table"] and not table_is_current(results, scan):
        table_path = write_table(results, scan=scan)
    return _finish(
        configs,
        keys,
        results,
        scan,
        t0,
        n_done,
        failures,
        failed_before,
        quarantined,
        len(adopted),
        lock.stale,
        table_path,
        False,
        resumed=sum(1 for k in resumes if k not in by_key and k not in failures),
        complete=sum(1 for k, r in resumes.items() if r.complete and k not in by_key and k not in failures),
    )


def _key_of(configs: list) -> Callable[[dict], str] | None:
    """``config columns -> run key`` of the sweep's config class: what verifies an unrecorded run file.

    None when the configs cannot be rebuilt from their columns (no ``from_dict``): then no file
    without a completion record is adopted.
    """
    cls = type(configs[0]) if configs else None
    from_dict = getattr(cls, "from_dict", None)
    if from_dict is None:
        return None
    return lambda columns: str(from_dict(dict(columns)).key())


def _config_dict(config: Any) -> dict:
    try:
        return dict(config.to_dict())
    except Exception:  # a config that cannot describe itself still gets a failure record
        return {"repr": repr(config)}


def _finish(
    configs,
    keys,
    results,
    scan,
    t0,
    n_done,
    failures,
    failed_before,
    quarantined,
    adopted,
    stale,
    table_path,
    read_only,
    resumed: int = 0,
    complete: int = 0,
) -> SweepSummary:
    mine = [k for k in dict.fromkeys(keys) if k in scan.ok]
    table = load_table(results, keys=mine, scan=scan) if mine else pd.DataFrame()
    summary = summarize(table) if len(table) else pd.DataFrame()
    n_skipped = len(configs) - n_done - len(failures) - len(failed_before)
    if read_only:
        table_path = results / TABLE_FILE if (results / TABLE_FILE).is_file() else None
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
        failed_before=failed_before,
        quarantined=quarantined,
        adopted=adopted,
        stale_lock=stale,
        read_only=read_only,
        resumed=resumed,
        complete=complete,
    )
