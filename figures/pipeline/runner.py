"""Running the stages of the main job: in order, or the independent ones at the same time.

Each stage may name the stages it waits for in ``after``; a stage without ``after`` waits for
every stage listed before it. With ``ctx.jobs == 1`` the stages run one after the other in list
order. With more jobs, every stage whose predecessors are done starts at once in its own thread
(the stages that train hand their work to worker processes, so the threads mostly wait): the
theory checks run while the synthetic grids and the real-data digits runs train.

A stage that raises is recorded as failed with its traceback; the stages after it still run (a
failed stage counts as done), so the report is written and names the failure, and the job's
status is 1. Records keep the stage order whatever the timing (:meth:`figures.pipeline.context.Context.add`).
A Ctrl-C while stages run at once asks them to stop (``ctx.cancelled``) and is raised in the
caller once they have (or after :data:`GRACE_S` seconds); the stores keep every finished run.
"""

from __future__ import annotations

import queue
import threading
import time
import traceback
from collections.abc import Sequence
from typing import Any

from figures.pipeline.context import Context, Stage, StageFailure, StageResult, set_current_stage
from theory import claims

__all__ = ["dependencies", "run_stages", "wall_times"]


def dependencies(stages: Sequence[Any]) -> dict[str, set[str]]:
    """``{stage: names it waits for}``.

    A stage waits for its ``after`` (restricted to the stages given), else every stage before it.

    Raises:
        ValueError: two stages with one name, or a stage waiting for a stage listed after it.
    """
    names = [s.name for s in stages]
    if len(set(names)) != len(names):
        raise ValueError(f"stage names must be unique, got {names}")
    deps: dict[str, set[str]] = {}
    for i, s in enumerate(stages):
        after = getattr(s, "after", None)
        wanted = set(names[:i]) if after is None else set(after) & set(names)
        late = wanted - set(names[:i])
        if late:
            raise ValueError(f"stage {s.name!r} waits for {sorted(late)}, listed after it")
        deps[s.name] = wanted
    return deps


def _run_one(ctx: Context, st: Stage) -> StageResult:
    set_current_stage(st.name)
    assert ctx.progress is not None
    ctx.progress.stage(st.name)
    t0 = time.perf_counter()
    start = t0 - ctx.started
    try:
        detail = st.run(ctx)
        res = StageResult(st.name, "ok", time.perf_counter() - t0, detail or "", start=start)
    except Exception as exc:
        detail = str(exc) if isinstance(exc, StageFailure) else f"{type(exc).__name__}: {exc}"
        res = StageResult(
            st.name, "failed", time.perf_counter() - t0, detail, traceback.format_exc(), start=start
        )
    left = st.units(ctx) - ctx.ticks(st.name)
    if left > 0:
        ctx.tick("", left)
    ctx.progress.stage_done(st.name, res.status if res.status == "failed" else res.detail, res.seconds)
    with ctx._lock:  # the report stage lists the stages finished before it
        ctx.stages.append(res)
    if st.name == "report" and res.status == "failed":
        _emergency_report(ctx, res)
    set_current_stage("")
    return res


def run_stages(ctx: Context, stages: Sequence[Stage]) -> int:
    """Run the stages; return 0, or 1 when a stage failed or a theory check FAILed.

    Args:
        ctx: the shared context (its ``jobs`` decides whether independent stages overlap).
        stages: the stages (the main job's: :func:`figures.pipeline.stages.default_stages`), in an
            order in which every stage comes after the stages it waits for.
    """
    stages = list(stages)
    deps = dependencies(stages)
    ctx.stage_order = [s.name for s in stages]
    assert ctx.progress is not None
    ctx.progress.add_total(sum(s.units(ctx) for s in stages))
    results: dict[str, StageResult] = {}
    if ctx.jobs <= 1:
        for st in stages:
            results[st.name] = _run_one(ctx, st)
    else:
        results = _run_at_once(ctx, stages, deps)
    ctx.stages = [results[s.name] for s in stages]  # stage order, not completion order
    status = int(any(r.status == "failed" for r in ctx.stages))
    if any(getattr(r, "verdict", None) == claims.Verdict.FAIL for r in ctx.records):
        status = 1
    return status


#: Seconds an interrupted job waits for its running stages to stop before it leaves them.
GRACE_S = 10.0


def _run_at_once(ctx: Context, stages: Sequence[Stage], deps: dict[str, set[str]]) -> dict[str, StageResult]:
    """Every stage in its own (daemon) thread as soon as the stages it waits for are done.

    On Ctrl-C (KeyboardInterrupt in this, the main thread) ``ctx.cancelled`` is set, so that the
    running stages stop at their next unit of progress (:class:`figures.pipeline.context.Cancelled`); it
    waits up to :data:`GRACE_S` seconds for them, then raises the KeyboardInterrupt (a stage still
    running then, e.g. inside one theory check, ends with the process).
    """
    by_name = {s.name: s for s in stages}
    pending = [s.name for s in stages]
    results: dict[str, StageResult] = {}
    finished: queue.Queue = queue.Queue()
    running: dict[str, threading.Thread] = {}

    def target(st: Stage) -> None:
        try:
            finished.put((st.name, _run_one(ctx, st)))
        except KeyboardInterrupt:  # Cancelled, or the producer's own interruption
            finished.put((st.name, None))

    try:
        while pending or running:
            for name in [n for n in pending if deps[n] <= set(results)]:
                pending.remove(name)
                t = threading.Thread(target=target, args=(by_name[name],), name=f"stage-{name}", daemon=True)
                running[name] = t
                t.start()
            try:
                name, res = finished.get(timeout=0.5)
            except queue.Empty:
                continue
            running.pop(name).join()
            if res is None:  # a stage interrupted without a Ctrl-C here: stop the job as one would
                raise KeyboardInterrupt(f"stage {name} was interrupted")
            results[name] = res
    except KeyboardInterrupt:
        ctx.cancelled.set()
        deadline = time.monotonic() + GRACE_S
        for t in running.values():
            t.join(max(0.0, deadline - time.monotonic()))
        raise
    return results


def _emergency_report(ctx: Context, res: StageResult) -> None:
    """When the report itself fails, leave a plain-text note naming the failure."""
    try:
        ctx.out.mkdir(parents=True, exist_ok=True)
        p = ctx.out / "report-failed.txt"
        p.write_text(f"The report stage failed:\n{res.error}\n", encoding="utf-8")
        ctx.report_paths = {"failed": p}
    except OSError:
        pass


def wall_times(ctx: Context) -> dict[str, float]:
    """Seconds per stage so far (and ``total``)."""
    out = {s.name: s.seconds for s in ctx.stages}
    out["total"] = time.perf_counter() - ctx.started
    return out
