"""Stages: swappable producers, the cache (cold vs warm), failures, pickup, progress lines."""

from __future__ import annotations

import io
import json

import pandas as pd
import pytest

from figures.pipeline.cache import StageCache, source_key
from figures.pipeline.context import Context
from figures.pipeline.progress import Progress
from figures.pipeline.render import RenderStage, ReportStage
from figures.pipeline.runner import run_stages
from figures.pipeline.stages import PickupStage, SyntheticStage, TheoryStage, WeinceStage
from figures.plots import registry
from figures.plots.spec import availability
from theory import claims

V = claims.Verdict


class Counter:
    def __init__(self, fn):
        self.fn, self.calls = fn, 0

    def __call__(self, *a, **k):
        self.calls += 1
        return self.fn(*a, **k)


def _checks(scale, seed):
    sub = claims.SubCheck.tolerance("x", 0.0, 1e-9)
    return [claims.Claim.from_subchecks(cid, [sub], command="python -m theory") for cid in claims.CHECK_IDS]


def _ctx(tmp_path, ids=("harris_gap", "hucl_at_nc", "noise_floor"), **kw):
    return Context(
        scale="quick",
        results=tmp_path / "res",
        out=tmp_path / "out",
        figures=[registry.get(i) for i in ids],
        **kw,
    )


def _theory(theory_tables, counters):
    return TheoryStage(
        checks=counters["checks"],
        tables={
            "harris_gap": counters["harris"],
            "hucl_nc": lambda s, seed: theory_tables["hucl_nc"],
            "gram": lambda s, seed: theory_tables["gram"],
        },
    )


def test_theory_stage_caches_claims_and_tables(tmp_path, theory_tables):
    counters = {"checks": Counter(_checks), "harris": Counter(lambda s, seed: theory_tables["harris_gap"])}
    for run in range(2):
        ctx = _ctx(tmp_path)
        detail = _theory(theory_tables, counters).run(ctx)
        assert [r.id for r in ctx.records] == list(claims.CHECK_IDS)
        assert "gram" not in ctx.tables  # no selected figure needs it
        pd.testing.assert_frame_equal(
            ctx.tables["harris_gap"], theory_tables["harris_gap"], check_dtype=False
        )
        assert ("cached" in detail) == (run == 1), detail
    assert counters["checks"].calls == 1 and counters["harris"].calls == 1
    ctx = _ctx(tmp_path, refresh=True)  # --refresh recomputes
    _theory(theory_tables, counters).run(ctx)
    assert counters["checks"].calls == 2
    ctx = Context(scale="default", results=tmp_path / "res", out=tmp_path / "out", figures=[])
    _theory(theory_tables, counters).run(ctx)  # another scale: another cache entry
    assert counters["checks"].calls == 3


def test_source_key_follows_the_file_contents(tmp_path):
    a = tmp_path / "a.py"
    a.write_text("x = 1\n")
    k1 = source_key([a], "quick")
    assert source_key([a], "quick") == k1 and source_key([a], "default") != k1
    a.write_text("x = 2\n")
    assert source_key([a], "quick") != k1
    with pytest.raises(ValueError, match="paths must be files"):
        source_key([tmp_path], "quick")


def test_unreadable_cached_table_is_recomputed(tmp_path):
    c = StageCache(tmp_path, "theory", "quick", "0" * 64)
    c.write_table("t", pd.DataFrame({"a": [1.5, 2.25]}))
    assert c.read_table("t")["a"].tolist() == [1.5, 2.25]
    (c.folder / "t.csv").write_bytes(b"\xff\xfe\x00garbage")
    assert c.read_table("t") is None
    with pytest.raises(ValueError, match="stage"):
        StageCache(tmp_path, "../x", "quick", "k")


def test_a_failing_stage_is_named_and_the_report_still_written(tmp_path, theory_tables):
    def boom(results):
        raise RuntimeError("synthetic store unreadable")

    ctx = _ctx(tmp_path)
    stages = [
        _theory(theory_tables, {"checks": _checks, "harris": lambda s, seed: theory_tables["harris_gap"]}),
        SyntheticStage(count=lambda scale: 0, load=boom),  # nothing to train; the store unreadable
        WeinceStage(noise_floor=lambda s, seed: theory_tables["noise_floor"]),
        PickupStage(),
        RenderStage(),
        ReportStage(),
    ]
    status = run_stages(ctx, stages)
    assert status == 1
    assert [s.status for s in ctx.stages] == ["ok", "failed", "ok", "ok", "ok", "ok"]
    md = ctx.report_paths["md"].read_text()
    assert "**Failed stages:** `synthetic` (RuntimeError: synthetic store unreadable)" in md
    assert ctx.report_paths["html"].is_file()
    assert {f.id: f.status for f in ctx.rendered} == {
        "harris_gap": "rendered",
        "hucl_at_nc": "rendered",
        "noise_floor": "rendered",
    }


def test_failed_check_gives_a_nonzero_status(tmp_path, theory_tables):
    def failing(scale, seed):
        recs = _checks(scale, seed)
        recs[0] = claims.Claim.from_subchecks("T1", [claims.SubCheck.tolerance("x", 1.0, 1e-9)])
        return recs

    ctx = _ctx(tmp_path, ids=())
    stages = [TheoryStage(checks=failing, tables={}), ReportStage()]
    assert run_stages(ctx, stages) == 1 and all(s.status == "ok" for s in ctx.stages)


def test_pickup_reads_claims_and_tables(tmp_path, theory_tables):
    res = tmp_path / "res"
    (res / "records").mkdir(parents=True)
    (res / "tables").mkdir()
    rec = claims.Claim(
        "R1",
        V.PARTLY,
        (claims.Evidence("NCM HSCL beta=5", 55.0, 1.0, "std", n=3, unit="%"),),
        command="python -m realdata train ...",
    )
    (res / "records" / "realdata.json").write_text(claims.to_json([rec]))
    theory_tables["harris_gap"].to_csv(res / "tables" / "harris_gap.csv", index=False)
    ctx = _ctx(tmp_path)
    detail = PickupStage().run(ctx)
    assert "1 claim records" in detail and "harris_gap" in detail
    assert ctx.records[0].id == "R1" and ctx.records[0].verdict == V.PARTLY
    assert len(ctx.tables["harris_gap"]) == len(theory_tables["harris_gap"])
    (res / "records" / "bad.json").write_text(json.dumps({"not": "a list"}))
    with pytest.raises(ValueError, match="bad.json"):
        PickupStage().run(_ctx(tmp_path))


def test_synthetic_stage_with_an_empty_producer_marks_claims_not_run(tmp_path):
    calls = []

    def train(results, scale, **kw):
        calls.append((results, scale, kw["jobs"], kw["scheduler"], callable(kw["progress"])))
        return {"runs": 0, "trained": 0, "stored": 0, "failed": [], "seconds": 0.0}

    ctx = _ctx(tmp_path, ids=("conditions_scl",))
    detail = SyntheticStage(train=train, load=lambda results: pd.DataFrame()).run(ctx)
    assert calls == [(tmp_path / "res", "quick", 1, None, True)]
    assert "no synthetic results" in detail and "synthetic" not in ctx.tables
    ids = [r.id for r in ctx.records]
    assert ids == ["S1", "S2", "S3", "S4", "R1s", "R2s", "R3s", "R4", "R5", "O2"]
    assert all(r.verdict == V.NOT_RUN and "python -m synthetic sweep" in r.command for r in ctx.records)
    assert f"--results {tmp_path / 'res'}/synthetic" in ctx.records[0].command
    assert "--scale quick" in ctx.records[0].command


def test_synthetic_stage_trains_the_quick_grids_then_reuses_them(tmp_path):
    from synthetic.claims.criteria import CLAIM_GRIDS
    from synthetic.sweep.grids import load_grid

    sizes = {name: len(load_grid(name, scale="quick")) for name in dict.fromkeys(CLAIM_GRIDS.values())}
    for run in range(2):
        ctx = _ctx(tmp_path, ids=("conditions_scl", "spectrum_scl"), progress=Progress(0, quiet=True))
        assert run_stages(ctx, [SyntheticStage()]) == 0, ctx.stages[0].error
        detail = ctx.stages[0].detail
        trained = 0 if run else sum(sizes.values())
        assert f"{trained} runs trained, {sum(sizes.values()) - trained} reused" in detail, detail
        assert ctx.progress.done == ctx.progress.total == 2 + sum(sizes.values())
        table = ctx.tables["synthetic"]
        stored = table.groupby("grid")["run_key"].nunique().to_dict()
        assert stored == {f"{name}-quick": n for name, n in sizes.items()}
        for name in sizes:
            assert (tmp_path / "res" / "synthetic" / f"{name}-quick" / "runs").is_dir()
        for fid in ("conditions_scl", "spectrum_scl"):
            assert availability(registry.get(fid), ctx.tables).ok, fid
        by_id = {r.id: r for r in ctx.records}
        assert list(by_id) == [*CLAIM_GRIDS, "O2"]
        for cid, rec in by_id.items():
            assert rec.verdict != V.NOT_RUN and rec.setting.get("scale") == "quick", (cid, rec.setting)


def test_synthetic_stage_reports_failed_runs_as_a_failure(tmp_path):
    def train(results, scale, **kw):
        kw["progress"](3)
        return {"runs": 3, "trained": 2, "stored": 0, "failed": ["g/abc: diverged"], "seconds": 0.1}

    ctx = _ctx(tmp_path, ids=(), progress=Progress(0, quiet=True))
    stage = SyntheticStage(train=train, count=lambda scale: 3, load=lambda results: pd.DataFrame())
    assert run_stages(ctx, [stage]) == 1
    res = ctx.stages[0]
    assert res.status == "failed" and "1 synthetic runs failed (g/abc: diverged)" in res.detail
    assert [r.id for r in ctx.records] == [
        "S1",
        "S2",
        "S3",
        "S4",
        "R1s",
        "R2s",
        "R3s",
        "R4",
        "R5",
        "O2",
    ]  # judged


def test_progress_lines_when_not_a_terminal():
    buf = io.StringIO()
    p = Progress(3, stream=buf, interval=1e-9)
    p.stage("theory")
    p.advance(1, "checks")
    p.stage_done("theory", "ok", 1.0)
    p.close()
    lines = buf.getvalue().splitlines()
    assert lines and all(line.startswith("[figures ") for line in lines)
    assert any("1/3 (33 %) theory: checks" in line for line in lines)
    quiet = io.StringIO()
    q = Progress(1, stream=quiet, quiet=True)
    q.stage("x")
    q.advance()
    assert quiet.getvalue() == ""
    with pytest.raises(ValueError, match="total"):
        Progress(-1)


def test_parallel_rendering_gives_the_same_files(tmp_path, all_tables):
    ids = ("harris_gap", "hucl_at_nc", "gram_etf")
    out = {}
    for jobs in (1, 2):
        ctx = Context(
            scale="quick",
            results=tmp_path,
            out=tmp_path / f"out{jobs}",
            figures=[registry.get(i) for i in ids],
            jobs=jobs,
        )
        ctx.tables = dict(all_tables)
        RenderStage().run(ctx)
        out[jobs] = sorted(p.name for p in ctx.out.iterdir() if not p.name.startswith("."))
        assert [f.status for f in ctx.rendered] == ["rendered"] * 3
    assert out[1] == out[2] == sorted(f"{i}.{e}" for i in ids for e in ("png", "pdf"))


def test_context_validates_its_arguments(tmp_path):
    with pytest.raises(ValueError, match="scale"):
        Context(scale="huge", results=tmp_path, out=tmp_path, figures=[])
    with pytest.raises(ValueError, match="jobs"):
        Context(scale="quick", results=tmp_path, out=tmp_path, figures=[], jobs=0)


def test_unchanged_figures_keep_their_files_and_stale_ones_go(tmp_path, theory_tables):
    from figures.pipeline.render import render_figure

    spec = registry.get("harris_gap")
    tables = {"harris_gap": theory_tables["harris_gap"]}
    first = render_figure(spec, tables, tmp_path, reuse=True)
    assert first.status == "rendered" and not first.reused
    mtime = (tmp_path / "harris_gap.png").stat().st_mtime_ns
    again = render_figure(spec, tables, tmp_path, reuse=True)
    assert again.reused and (tmp_path / "harris_gap.png").stat().st_mtime_ns == mtime
    changed = {"harris_gap": tables["harris_gap"].assign(estimate=tables["harris_gap"]["estimate"] * 2)}
    assert not render_figure(spec, changed, tmp_path, reuse=True).reused
    assert not render_figure(spec, changed, tmp_path, reuse=False).reused
    gone = render_figure(spec, {}, tmp_path, reuse=True)
    assert gone.status == "not available" and not list(tmp_path.iterdir())


class FakeStage:
    """A stage built from a function, for the runner's tests."""

    def __init__(self, name, fn, after=None, units=1):
        self.name, self.fn, self._units = name, fn, units
        if after is not None:
            self.after = after

    def units(self, ctx):
        return self._units

    def run(self, ctx):
        return self.fn(ctx)


def _record(cid):
    return claims.Claim.from_subchecks(cid, [claims.SubCheck.tolerance("x", 0.0, 1e-9)])


@pytest.mark.parametrize("jobs", [1, 2])
def test_runner_overlaps_independent_stages_and_keeps_the_stage_order(tmp_path, jobs):
    import threading

    b_started, seen = threading.Event(), {}

    def a(ctx):
        seen["overlap"] = b_started.wait(2.0 if jobs > 1 else 0.2)
        ctx.add([_record("T1")])
        return "a done"

    def b(ctx):
        b_started.set()
        ctx.add([_record("T2")])  # before a's record, when they overlap
        return "b done"

    def boom(ctx):
        raise RuntimeError("stage boom broke")

    def last(ctx):
        seen["before_last"] = sorted(s.name for s in ctx.stages)
        return "last done"

    stages = [
        FakeStage("a", a, after=()),
        FakeStage("b", b, after=(), units=3),
        FakeStage("boom", boom, after=("a",)),
        FakeStage("last", last),  # no `after`: waits for every stage listed before it
    ]
    ctx = _ctx(tmp_path, ids=(), jobs=jobs, progress=Progress(0, quiet=True))
    assert run_stages(ctx, stages) == 1
    assert [(s.name, s.status) for s in ctx.stages] == [
        ("a", "ok"),
        ("b", "ok"),
        ("boom", "failed"),
        ("last", "ok"),
    ]
    assert ctx.stages[2].detail == "RuntimeError: stage boom broke" and "Traceback" in ctx.stages[2].error
    assert seen["overlap"] is (jobs > 1)
    assert seen["before_last"] == ["a", "b", "boom"]
    assert [r.id for r in ctx.records] == ["T1", "T2"]  # stage order, not the order of the calls
    assert ctx.progress.done == ctx.progress.total == 6  # units a stage did not tick are filled in
    by = {s.name: s for s in ctx.stages}
    assert by["last"].start >= by["boom"].start + by["boom"].seconds - 1e-6


def test_runner_rejects_bad_stage_lists(tmp_path):
    from figures.pipeline.runner import dependencies

    ok = FakeStage("a", lambda ctx: "")
    with pytest.raises(ValueError, match="unique"):
        dependencies([ok, FakeStage("a", lambda ctx: "")])
    with pytest.raises(ValueError, match="listed after it"):
        dependencies([FakeStage("b", lambda ctx: "", after=("a",)), ok])
    assert dependencies([ok, FakeStage("b", lambda ctx: "")]) == {"a": set(), "b": {"a"}}


def test_realdata_stage_ticks_once_per_finished_run(tmp_path):
    import time

    from figures.pipeline.stages import RealdataStage

    state = {"done": 1}  # one run stored before

    def count(results, scale):
        return state["done"], 4

    def train(results, jobs, scale):
        for _ in range(3):
            time.sleep(0.1)
            state["done"] += 1
        return {"trained": 3, "cached": 1, "failed": [], "seconds": 0.3, "numbers": {}}

    buf = io.StringIO()
    ctx = _ctx(tmp_path, ids=(), progress=Progress(0, stream=buf, interval=1e-9))
    stage = RealdataStage(train=train, count=count, spectrum=lambda results: pd.DataFrame(), poll=0.02)
    assert stage.units(ctx) == 2 + 4
    assert run_stages(ctx, [stage]) == 0, ctx.stages[0].error
    assert "digits scale quick: 3 runs trained, 1 cached" in ctx.stages[0].detail
    ticks = [line for line in buf.getvalue().splitlines() if "realdata: digits runs" in line]
    assert len(ticks) >= 2, buf.getvalue()  # the runs are counted while they train
    assert ctx.ticks("realdata") == ctx.progress.done == ctx.progress.total == 6
    with pytest.raises(ValueError, match="poll"):
        RealdataStage(poll=0)


def _square(i):
    return i * i


def _digits_with_a_worker_pool(results, jobs, scale):
    from joblib import Parallel, delayed

    vals = Parallel(n_jobs=2, backend="loky")(delayed(_square)(i) for i in range(4))
    return {"trained": sum(vals), "cached": 0, "failed": [], "seconds": 0.0, "numbers": {}}


def test_realdata_stage_in_a_child_process_ends_when_its_work_does(tmp_path):
    """With --jobs > 1 the digits train in a child process; its joblib workers must not keep it
    alive (they idle for 300 s, and a multiprocessing child waits for its children at exit)."""
    import threading
    import time

    from figures.pipeline.stages import RealdataStage

    stage = RealdataStage(
        train=_digits_with_a_worker_pool,
        count=lambda results, scale: (0, 0),
        spectrum=lambda r: pd.DataFrame(),
    )
    ctx = _ctx(tmp_path, ids=(), jobs=2, progress=Progress(0, quiet=True))
    out, t0 = {}, time.perf_counter()
    worker = threading.Thread(target=lambda: out.update(detail=stage.run(ctx)), daemon=True)
    worker.start()
    worker.join(90)
    assert not worker.is_alive(), "the child process of the realdata stage did not end"
    assert "14 runs trained" in out["detail"] and time.perf_counter() - t0 < 90


def _digits_that_fail(results, jobs, scale):
    raise ValueError("digits store unreadable")


def _digits_that_hang(results, jobs, scale):
    import os
    import time
    from pathlib import Path

    Path(results).mkdir(parents=True, exist_ok=True)
    (Path(results) / "child.pid").write_text(str(os.getpid()))
    time.sleep(120)
    return {}


def test_realdata_child_errors_are_named_and_an_interrupt_ends_the_child(tmp_path):
    import os
    import threading
    import time

    from figures.pipeline.context import Cancelled
    from figures.pipeline.stages import RealdataStage

    def stage(train):
        return RealdataStage(
            train=train, count=lambda results, scale: (0, 0), spectrum=lambda r: pd.DataFrame()
        )

    ctx = _ctx(tmp_path, ids=(), jobs=2, progress=Progress(0, quiet=True))
    assert run_stages(ctx, [stage(_digits_that_fail)]) == 1
    res = ctx.stages[0]
    assert (
        res.status == "failed"
        and "in the digits child process: ValueError: digits store unreadable" in res.detail
    )
    assert "_digits_that_fail" in res.error  # the child's traceback

    ctx = _ctx(tmp_path, ids=(), jobs=2, progress=Progress(0, quiet=True))
    pid_file = tmp_path / "res" / "child.pid"

    def interrupt():
        while not pid_file.is_file():
            time.sleep(0.05)
        ctx.cancelled.set()

    threading.Thread(target=interrupt, daemon=True).start()
    t0 = time.perf_counter()
    with pytest.raises(Cancelled):
        stage(_digits_that_hang).run(ctx)
    assert time.perf_counter() - t0 < 60
    with pytest.raises(ProcessLookupError):  # terminated and reaped
        os.kill(int(pid_file.read_text()), 0)


@pytest.mark.timeout(60)  # the stage loops until it is cancelled: a hang is the failure
def test_ctrl_c_with_stages_at_once_stops_them_and_is_raised(tmp_path, sigint_handled):
    import _thread
    import threading
    import time

    stopped = threading.Event()

    def ticking(ctx):
        try:
            while True:  # ends only through Cancelled, raised by ctx.tick
                time.sleep(0.02)
                ctx.tick("step")
        finally:
            stopped.set()

    ctx = _ctx(tmp_path, ids=(), jobs=2, progress=Progress(0, quiet=True))
    stages = [FakeStage("a", ticking, after=(), units=10**6), FakeStage("b", lambda ctx: "b", after=())]
    timer = threading.Timer(0.5, _thread.interrupt_main)  # a Ctrl-C in the main thread
    timer.start()
    t0 = time.perf_counter()
    with pytest.raises(KeyboardInterrupt):
        run_stages(ctx, stages)
    timer.join()
    assert ctx.cancelled.is_set() and stopped.wait(5) and time.perf_counter() - t0 < 5


def test_the_main_job_leaves_out_a_grid_whose_main_job_scales_omit_the_scale():
    from figures.pipeline import produce_synthetic
    from synthetic.claims.criteria import CLAIM_GRIDS
    from synthetic.sweep.grids import load_grid

    names = list(dict.fromkeys(CLAIM_GRIDS.values()))
    # every other grid is trained at every scale
    for scale in ("quick", "default", "paper"):
        kept = {g.name for g in produce_synthetic._claim_grids(scale)}
        assert kept >= set(names) - {"r1r3_analogue"}, scale
    assert "r1r3_analogue" in {g.name for g in produce_synthetic._claim_grids("paper")}
    # the analogue of R1-R3 is too costly for the default job (its grid says why); quick keeps it
    assert "r1r3_analogue" not in {g.name for g in produce_synthetic._claim_grids("default")}
    assert "r1r3_analogue" in {g.name for g in produce_synthetic._claim_grids("quick")}
    assert produce_synthetic.synthetic_runs("default") == sum(
        len(load_grid(n)) for n in names if n != "r1r3_analogue"
    )
    assert produce_synthetic.synthetic_runs("default") == 93  # the README's count
