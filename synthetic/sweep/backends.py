"""Where the runs of a sweep execute: local processes, a dask cluster, or SLURM through dask-jobqueue.

Every backend is a generator of task results (:func:`local_results`, :func:`dask_results`) that
yields each task's result as soon as it is done and, when closed early (Ctrl-C, an error while
storing), stops the work still queued or running. Results always come back to the calling
process, which alone writes the results folder, so no shared file system is needed.

* Local processes (joblib / loky): each worker watches the process that started it and exits
  within about a second once that process is gone (even after SIGKILL), and ignores SIGINT, so
  Ctrl-C in a terminal reaches only the sweep, which stops the workers itself, with no word from
  them: no KeyboardInterrupt traceback, and no resource-tracker warning about named semaphores a
  stopped worker left behind (tqdm's lock, the one such semaphore a run made, is a thread lock in
  a worker). The stopped pool's own semaphores are the resource tracker's to remove: loky's tracker
  process unlinks whatever a killed process left registered, but when the sweep's process exits
  while its pool is being torn down it may also print a report of that cleanup (seen once in CI:
  "There appear to be 1 leaked semlock objects" about a semaphore already unlinked). The tracker is
  therefore launched with its own warnings ignored (:func:`quiet_resource_tracker`); it still
  cleans up, and nothing else's warnings are filtered.
* dask.distributed: a scheduler address (``tcp://host:8786``), a ``distributed.Client``, or a
  cluster object (``distributed.LocalCluster``, ``dask_jobqueue.SLURMCluster``, ...) — the same
  code path for all; an unreachable scheduler raises
  :class:`synthetic.sweep.errors.SchedulerUnreachable` after ``connect_timeout`` seconds.
* SLURM: :func:`make_slurm_cluster` builds a ``dask_jobqueue.SLURMCluster`` from
  :class:`SlurmOptions` (partition, cores, memory, walltime, jobs, account, extra ``#SBATCH``
  directives); install it with ``pip install 'hardneg-collapse[cluster]'``.
"""

from __future__ import annotations

import dataclasses
import os
import signal
import threading
import time
import warnings
from collections.abc import Callable, Generator, Sequence
from typing import Any

import tqdm

from synthetic.sweep.errors import SchedulerUnreachable

__all__ = [
    "watch_parent",
    "quiet_resource_tracker",
    "local_results",
    "dask_results",
    "SlurmOptions",
    "make_slurm_cluster",
]

#: joblib's warning when its generator is closed before the end.
_EARLY_EXIT = r".*(tasks have been successfully executed|tasks which were still being processed)"

#: Seconds between two checks of a local worker that its parent is alive.
PARENT_POLL_S = 0.5


def watch_parent(parent_pid: int, poll: float = PARENT_POLL_S) -> None:
    """Worker initializer: ignore SIGINT, and exit as soon as the process ``parent_pid`` is gone.

    A daemon thread compares ``os.getppid()`` with ``parent_pid`` every ``poll`` seconds; when
    the parent dies the worker is re-parented and exits with ``os._exit`` (no cleanup to run:
    workers never write the results folder). tqdm's lock becomes a thread lock: tqdm otherwise
    makes it a named semaphore on its first bar (even a disabled one), which a worker stopped by its
    sweep leaves behind and the resource tracker then reports on stderr.
    """
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    tqdm.tqdm.set_lock(threading.RLock())  # one process: a thread lock serialises its bars

    def _watch() -> None:
        while True:
            if os.getppid() != parent_pid:
                os._exit(1)
            time.sleep(poll)

    threading.Thread(target=_watch, name="watch-parent", daemon=True).start()


#: The module of loky's resource tracker, whose warnings its process ignores (see the module docstring).
_TRACKER_MODULE = "joblib.externals.loky.backend.resource_tracker"


def quiet_resource_tracker() -> None:
    """Start loky's resource tracker (if it is not running yet) with its cleanup reports ignored.

    The tracker is a separate process that inherits this one's stderr; it is launched here with
    ``PYTHONWARNINGS`` extended by ``ignore::UserWarning:<its module>``, so only warnings raised in
    that module are dropped, in that process only (this process's environment is restored).
    """
    from joblib.externals.loky.backend import resource_tracker

    before = os.environ.get("PYTHONWARNINGS")
    rule = f"ignore::UserWarning:{_TRACKER_MODULE}"
    os.environ["PYTHONWARNINGS"] = rule if not before else f"{before},{rule}"
    try:
        resource_tracker.ensure_running()
    finally:
        if before is None:
            del os.environ["PYTHONWARNINGS"]
        else:
            os.environ["PYTHONWARNINGS"] = before


def local_results(fn: Callable, tasks: Sequence, args: tuple, n_jobs: int) -> Generator[Any, None, None]:
    """Yield ``fn(task, *args)`` for every task, in completion order, on ``n_jobs`` processes.

    ``n_jobs == 1`` runs in this process. Closing the generator early terminates the workers.
    """
    if n_jobs == 1:
        for t in tasks:
            yield fn(t, *args)
        return
    from joblib import Parallel, delayed
    from joblib.parallel import LokyBackend

    quiet_resource_tracker()
    backend = LokyBackend(initializer=watch_parent, initargs=(os.getpid(),))
    par = Parallel(n_jobs=n_jobs, backend=backend, return_as="generator_unordered")
    gen = par(delayed(fn)(t, *args) for t in tasks)
    try:
        while True:
            # joblib warns about tasks left unused when stopped early (Ctrl-C): that is the point
            with warnings.catch_warnings():
                warnings.filterwarnings("ignore", message=_EARLY_EXIT, category=UserWarning)
                try:
                    item = next(gen)
                except StopIteration:
                    return
            yield item
    finally:
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message=_EARLY_EXIT, category=UserWarning)
            gen.close()  # on early exit joblib aborts the remaining tasks and stops the workers


def _connect(target: Any, connect_timeout: float) -> tuple[Any, bool]:
    """(client, owned): a Client for an address, a Client, or a cluster object."""
    from distributed import Client

    if isinstance(target, Client):
        return target, False
    if isinstance(target, str):
        where = target
    elif hasattr(target, "scheduler_address") or hasattr(target, "scheduler"):
        where = f"the cluster {type(target).__name__}"
    else:
        raise ValueError(
            f"scheduler must be an address string, a distributed.Client or a dask cluster, got {target!r}"
        )
    try:
        return Client(target, timeout=connect_timeout), True
    except OSError as exc:
        raise SchedulerUnreachable(
            f"cannot reach the dask scheduler at {where} within {connect_timeout:g} s "
            f"({' '.join(str(exc).split()) or type(exc).__name__}); check the address or raise --connect-timeout"
        ) from None


def dask_results(
    fn: Callable,
    tasks: Sequence,
    args: tuple,
    target: Any,
    *,
    connect_timeout: float = 10.0,
    name: Callable[[Any, int], str] | None = None,
) -> Generator[Any, None, None]:
    """Yield ``fn(task, *args)`` for every task, in completion order, on a dask cluster.

    Args:
        fn: the function of a task (importable by the workers).
        tasks: the tasks.
        args: further arguments of ``fn``.
        target: a scheduler address, a ``distributed.Client`` (left open) or a cluster object.
        connect_timeout: seconds to wait for the scheduler.
        name: ``(task, index) -> dask key`` (default ``sweep-<index>``).

    Closing the generator early cancels the futures still pending.
    """
    from distributed import as_completed

    client, owned = _connect(target, connect_timeout)
    futures = []
    try:
        for i, t in enumerate(tasks):
            key = name(t, i) if name is not None else f"sweep-{i}"
            futures.append(client.submit(fn, t, *args, pure=False, key=key))
        for fut in as_completed(futures):
            result = fut.result()
            fut.release()
            yield result
    finally:
        pending = [f for f in futures if not f.done()]
        if pending:
            try:
                client.cancel(pending)
            except Exception:  # the connection may already be gone
                pass
        if owned:
            client.close()


@dataclasses.dataclass(frozen=True)
class SlurmOptions:
    """Options of a SLURM cluster (``python -m synthetic sweep --cluster slurm``).

    Attributes:
        partition: the SLURM partition (queue), ``#SBATCH -p``; None: the site default.
        cores: CPU cores per job (``--cpus-per-task``).
        processes: dask worker processes per job (default: one per core, each single-threaded,
            matching ``--threads 1``).
        memory: memory per job (``"16GB"``; ``--mem``).
        walltime: time limit per job (``"HH:MM:SS"``; ``-t``).
        jobs: number of SLURM jobs to start.
        account: the account to charge (``-A``); None: the default.
        directives: extra ``#SBATCH`` lines (``"--gres=gpu:1"``, ``"--qos=long"``).
        prologue: shell lines run before the worker starts (e.g. ``"module load python"``).
        interface: network interface of the scheduler and workers (``"ib0"``); None: the default.
        python: the Python of the workers (default: this one).
    """

    partition: str | None = None
    cores: int = 1
    processes: int | None = None
    memory: str = "4GB"
    walltime: str = "01:00:00"
    jobs: int = 1
    account: str | None = None
    directives: tuple[str, ...] = ()
    prologue: tuple[str, ...] = ()
    interface: str | None = None
    python: str | None = None

    def __post_init__(self) -> None:
        for name in ("cores", "jobs"):
            v = getattr(self, name)
            if not isinstance(v, int) or isinstance(v, bool) or v < 1:
                raise ValueError(f"{name} must be an integer >= 1, got {v!r}")
        if self.processes is not None and (
            not isinstance(self.processes, int) or not 1 <= self.processes <= self.cores
        ):
            raise ValueError(
                f"processes must be an integer in [1, cores={self.cores}], got {self.processes!r}"
            )
        if not isinstance(self.walltime, str) or not self.walltime:
            raise ValueError(f"walltime must be a SLURM time such as '01:00:00', got {self.walltime!r}")
        if not isinstance(self.memory, str) or not self.memory:
            raise ValueError(f"memory must be a size such as '4GB', got {self.memory!r}")
        object.__setattr__(self, "directives", tuple(self.directives))
        object.__setattr__(self, "prologue", tuple(self.prologue))


def make_slurm_cluster(options: SlurmOptions, *, threads: int = 1, **kwargs: Any) -> Any:
    """A ``dask_jobqueue.SLURMCluster`` for ``options`` (no job is submitted until it is scaled).

    Args:
        options: the SLURM options.
        threads: torch threads per run; exported as ``OMP_NUM_THREADS`` in the job script.
        **kwargs: passed on to ``SLURMCluster`` (e.g. ``scheduler_options``).

    Raises:
        ImportError: dask-jobqueue is not installed (the message says how to install it).
    """
    if not isinstance(options, SlurmOptions):
        raise ValueError(f"options must be SlurmOptions, got {type(options).__name__}")
    try:
        from dask_jobqueue import SLURMCluster
    except ImportError:
        raise ImportError(
            "--cluster slurm needs dask-jobqueue: pip install 'hardneg-collapse[cluster]' (or dask-jobqueue)"
        ) from None
    extra = dict(kwargs)
    if options.python:
        extra.setdefault("python", options.python)
    if options.interface:
        extra.setdefault("interface", options.interface)
    return SLURMCluster(
        queue=options.partition,
        account=options.account,
        cores=options.cores,
        processes=options.processes or options.cores,
        memory=options.memory,
        walltime=options.walltime,
        job_extra_directives=list(options.directives),
        job_script_prologue=[f"export OMP_NUM_THREADS={threads}", *options.prologue],
        **extra,
    )
