"""The data stages of the main job, and the stage interface through which their producers are swapped.

``python -m figures`` runs (:func:`default_stages`; :mod:`figures.pipeline.runner` runs them, the ones
marked "at once" at the same time when ``--jobs`` > 1):

1. ``theory``    (at once) -- the theory checks T1-T8 and the W-law, and the theory tables of
                    the figures (Harris gap, HUCL at NC, Gram matrices); cached
                    (:mod:`figures.pipeline.cache`);
2. ``synthetic`` (at once) -- the synthetic claim grids at the job's scale, trained through the
                    synthetic package or reused from ``<results>/synthetic``, and its records of
                    S1-S4, R1s-R3s, R4, R5 and O2;
3. ``realdata``  (at once) -- the real-data digits scale (``realdata.claims.run.run_digits``):
                    records R1-R5, W1-W4, tables and WeiNCE score files under ``<results>``;
4. ``weince``    (after realdata) -- the noise-floor simulation and its W5 verdict (cached);
                    POT and link-selection tables from the scores under ``<results>/weince/``;
5. ``pickup``    (after synthetic and realdata) -- claim records ``<results>/records/*.json``
                    and tables ``<results>/tables/<name>.csv``, from the digits stage or from
                    elsewhere (CIFAR-scale runs on a GPU, a cluster);
6. ``render``    -- every selected figure that its data allows, or "not available" with why;
7. ``report``    -- ``report.md`` and ``report.html``.

A stage is any object with a ``name``, ``units(ctx)`` (its share of the progress bar),
``run(ctx) -> str`` (a one-line summary; it raises on failure) and ``after`` (the stages it
waits for). Each data stage takes its producers as constructor arguments (defaults from
:mod:`figures.pipeline.produce_theory`), so a producer can be replaced (in tests, or by one reading a cluster's
results) without touching the runner. A stage that raises is recorded as failed with its
traceback, the remaining stages still run and the report names the failure; :func:`run_stages`
then returns a non-zero status.
"""

from __future__ import annotations

import os
import threading
import traceback
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import pandas as pd

from figures.pipeline import children, inputs, produce_realdata, produce_synthetic, produce_theory
from figures.pipeline import w5 as records
from figures.pipeline.cache import StageCache
from figures.pipeline.context import Context, FigureResult, Stage, StageFailure, StageResult
from figures.pipeline.render import RenderStage, ReportStage, figure_key, render_figure
from figures.plots import frames
from theory import claims

__all__ = [
    "FigureResult",
    "StageResult",
    "StageFailure",
    "Context",
    "Stage",
    "TheoryStage",
    "SyntheticStage",
    "RealdataStage",
    "WeinceStage",
    "PickupStage",
    "RenderStage",
    "ReportStage",
    "default_stages",
    "render_figure",
    "figure_key",
]


TableProducer = Callable[[str, int], pd.DataFrame]


def _cached_table(ctx: Context, cache: StageCache, name: str, producer: TableProducer) -> pd.DataFrame:
    t = cache.read_table(name)
    if t is None:
        t = producer(ctx.scale, ctx.seed)
        cache.write_table(name, t)
    return t


class TheoryStage:
    """Theory checks as claim records (cached as JSON) and the theory tables of the figures.

    Args:
        checks: ``checks(scale, seed) -> list[Claim]`` (default :func:`produce_theory.theory_claims`).
        tables: table name -> ``producer(scale, seed) -> DataFrame``.
    """

    name = "theory"
    after: tuple[str, ...] = ()

    def __init__(
        self,
        checks: Callable[[str, int], list] | None = None,
        tables: Mapping[str, TableProducer] | None = None,
    ) -> None:
        self.checks = checks or (lambda scale, seed: produce_theory.theory_claims(scale, seed))
        self.tables = (
            dict(tables)
            if tables is not None
            else {
                "harris_gap": lambda scale, seed: produce_theory.harris_gap_table(scale, seed),
                "hucl_nc": lambda scale, seed: produce_theory.hucl_nc_table(scale),
                "gram": lambda scale, seed: produce_theory.gram_table(scale),
                "open_landscape": lambda scale, seed: produce_theory.open_landscape_table(scale, seed),
                "open_hessian": lambda scale, seed: produce_theory.open_hessian_table(scale),
            }
        )

    def units(self, ctx: Context) -> int:
        """One unit for the checks and one per theory table a selected figure reads."""
        return 1 + sum(ctx.needs(n) for n in self.tables)

    def run(self, ctx: Context) -> str:
        """Run (or read from the cache) the checks and the tables the figures need; add the records."""
        cache = ctx.cache(self.name)
        recs = cache.read_text("claims.json", parse=claims.from_json)
        if recs is None:  # absent, or bad (then set aside and named in the stage's line)
            recs = self.checks(ctx.scale, ctx.seed)
            cache.write_text("claims.json", claims.to_json(recs))
        ctx.add(recs)
        ctx.tick("theory checks")
        for name, producer in self.tables.items():
            if ctx.needs(name):
                ctx.put(name, _cached_table(ctx, cache, name, producer))
                ctx.tick(name)
        failed = [r.id for r in recs if r.verdict == claims.Verdict.FAIL]
        verdicts = f"{sum(r.verdict == claims.Verdict.PASS for r in recs)} PASS" + (
            f", FAIL: {' '.join(failed)}" if failed else ""
        )
        return f"{verdicts}; {cache.describe()} ({cache.folder})"


class SyntheticStage:
    """The synthetic claim grids at the job's scale (run, or reused), and S1-S4, R1s-R3s, R4, R5, O2.

    The grids train through the synthetic package (:func:`produce_synthetic.run_synthetic`: ``--jobs``
    worker processes, or the ``--scheduler`` cluster) into ``RESULTS/synthetic``; every stored
    run of any scale is then loaded, and the synthetic package judges the claims
    (:func:`produce_synthetic.synthetic_claims`: one record per claim and stored scale). The figures draw,
    per grid, the largest scale stored (paper, else default, else quick:
    :func:`figures.plots.frames.primary_grids`).

    Args:
        train: ``train(results, scale, jobs=, scheduler=, progress=) -> dict`` (default
            :func:`produce_synthetic.run_synthetic`).
        count: ``count(scale) -> int``, the runs ``train`` goes through (progress units; default
            :func:`produce_synthetic.synthetic_runs`).
        load: ``load(results) -> DataFrame`` (default :func:`produce_synthetic.load_synthetic`).
        spectrum: ``spectrum(table) -> DataFrame`` (default :func:`produce_synthetic.spectrum_table`).
        judge: ``judge(table, results=..., scale=...) -> list[Claim]`` (default
            :func:`produce_synthetic.synthetic_claims`).
        criteria: ``criteria() -> DataFrame`` (default :func:`produce_synthetic.synthetic_criteria`).
    """

    name = "synthetic"
    after: tuple[str, ...] = ()
    TABLES = ("synthetic", "spectrum")

    def __init__(
        self,
        train: Callable[..., dict] | None = None,
        count: Callable[[str], int] | None = None,
        load: Callable[[Path], pd.DataFrame] | None = None,
        spectrum: Callable[[pd.DataFrame], pd.DataFrame] | None = None,
        judge: Callable[..., list] | None = None,
        criteria: Callable[[], pd.DataFrame] | None = None,
    ) -> None:
        self.train = train or produce_synthetic.run_synthetic
        self.count = count or produce_synthetic.synthetic_runs
        self.load = load or produce_synthetic.load_synthetic
        self.spectrum = spectrum or produce_synthetic.spectrum_table
        self.judge = judge or produce_synthetic.synthetic_claims
        self.criteria = criteria or produce_synthetic.synthetic_criteria
        self._runs: dict[str, int] = {}

    def _runs_of(self, ctx: Context) -> int:
        if not ctx.wants(*self.TABLES):
            return 0
        if ctx.scale not in self._runs:
            self._runs[ctx.scale] = int(self.count(ctx.scale))
        return self._runs[ctx.scale]

    def units(self, ctx: Context) -> int:
        """Loading and judging, plus one unit per run of the grids it goes through."""
        return 2 + self._runs_of(ctx)

    def run(self, ctx: Context) -> str:
        """Train the grids, load and judge every stored run; :class:`StageFailure` when runs failed."""
        parts, failed = [], []
        if self._runs_of(ctx):
            info = self.train(
                ctx.results,
                ctx.scale,
                jobs=ctx.jobs,
                scheduler=ctx.scheduler,
                progress=lambda n: ctx.tick("synthetic runs", n, stage=self.name),
            )
            parts.append(
                f"grids at scale {ctx.scale}: {info['trained']} runs trained, {info['stored']} reused "
                f"({info['seconds']:.0f} s)"
            )
            failed = list(info.get("failed", ()))
        table = self.load(ctx.results)
        ctx.tick("synthetic results")
        shown = frames.primary_grids(table)
        if len(shown):
            ctx.put("synthetic", shown)
            if ctx.needs("spectrum"):
                spec = self.spectrum(shown)
                if len(spec):
                    ctx.put("spectrum", spec)
        if ctx.needs("synthetic_criteria"):
            ctx.put("synthetic_criteria", self.criteria())
        ctx.add(self.judge(table, results=ctx.results, scale=ctx.scale))
        ctx.tick("synthetic claims")
        if len(table):
            grids = sorted(set(table["grid"].astype(str))) if "grid" in table.columns else []
            runs = table[["grid", "run_key"]] if "grid" in table.columns else table[["run_key"]]
            parts.append(f"{len(runs.drop_duplicates())} stored runs in {len(grids)} grid folders")
            drawn = sorted(set(shown["grid"].astype(str))) if "grid" in shown.columns else []
            if drawn != grids:
                parts.append(f"figures from {', '.join(drawn)}")
        else:
            parts.append(
                f"no synthetic results under {ctx.results} (searched {', '.join(produce_synthetic.SYNTHETIC_DIRS)})"
            )
        left_out = table.attrs.get("left_out", [])
        if left_out:
            parts.append(
                f"{len(left_out)} run files left out (incomplete, corrupt, failed or missing): {left_out[0]}"
            )
        if failed:
            raise StageFailure(f"{len(failed)} synthetic runs failed ({failed[0]}); " + "; ".join(parts))
        return "; ".join(parts)


#: The tables the real-data stage and the WeiNCE diagnostics on its encoders give the figures.
REALDATA_TABLES = (
    "realdata",
    "realdata_spectrum",
    "realdata_eval",
    "weince_gate",
    "pot_exceedances",
    "lambda_profile",
)


class RealdataStage:
    """The real-data digits scale (:func:`produce_realdata.run_digits`): cached and resumable.

    It trains (or reuses) the digits runs and writes ``RESULTS/records/R*.json``, ``W*.json``,
    ``RESULTS/tables/realdata*.csv``, ``weince_gate.csv`` and the WeiNCE score files of
    ``RESULTS/weince/``, which the ``weince`` and ``pickup`` stages read; then the class-mean
    spectra of every stored real-data run (:func:`produce_realdata.realdata_spectrum`). While it trains,
    the progress advances by one unit per digits run found finished in the store (polled every
    second). With more than one job it trains in a child process of its own (its worker pool is
    then apart from the synthetic stage's, which trains at the same time), which an interrupted
    job terminates (the store keeps the finished runs).

    Args:
        train: ``train(results, jobs, scale) -> dict`` (default :func:`produce_realdata.run_digits`).
        spectrum: ``spectrum(results) -> DataFrame`` (default :func:`produce_realdata.realdata_spectrum`).
        isolate: train in a child process (default: when ``ctx.jobs > 1``).
        count: ``count(results, scale) -> (finished, total)`` digits runs (default
            :func:`produce_realdata.digits_progress`; progress units).
        poll: seconds between two looks at the store while training.
    """

    name = "realdata"
    after: tuple[str, ...] = ()

    def __init__(
        self,
        train: Callable[..., dict] | None = None,
        spectrum: Callable[[Path], pd.DataFrame] | None = None,
        isolate: bool | None = None,
        count: Callable[[Path, str], tuple[int, int]] | None = None,
        poll: float = 1.0,
    ) -> None:
        if not isinstance(poll, (int, float)) or isinstance(poll, bool) or not poll > 0:
            raise ValueError(f"poll must be a positive number of seconds, got {poll!r}")
        self.train = train or produce_realdata.run_digits
        self.spectrum = spectrum or produce_realdata.realdata_spectrum
        self.isolate = isolate
        self.count = count or produce_realdata.digits_progress
        self.poll = float(poll)
        self._total: dict[tuple[str, str], int] = {}

    def _runs_of(self, ctx: Context) -> int:
        if not ctx.wants(*REALDATA_TABLES):
            return 0
        key = (str(ctx.results), ctx.scale)
        if key not in self._total:
            self._total[key] = int(self.count(ctx.results, ctx.scale)[1])
        return self._total[key]

    def units(self, ctx: Context) -> int:
        """Records and spectra, plus one unit per digits run of the job's scale it goes through."""
        return 2 + self._runs_of(ctx)

    def _watch(self, ctx: Context, stop: threading.Event) -> None:
        """Tick one unit per digits run found finished.

        It looks at once, then every ``poll`` seconds, and once more when ``stop`` is set.
        """
        total, seen = self._runs_of(ctx), 0
        while True:
            stopped = stop.is_set()
            try:
                done = min(int(self.count(ctx.results, ctx.scale)[0]), total)
            except (OSError, ValueError):  # a store being written: look again later
                done = seen
            if done > seen:
                ctx.tick("digits runs", done - seen, stage=self.name)
                seen = done
            if stopped:
                return
            stop.wait(self.poll)

    def _train(self, ctx: Context) -> dict:
        isolate = ctx.jobs > 1 if self.isolate is None else self.isolate
        if not isolate:
            return self.train(ctx.results, ctx.jobs, ctx.scale)
        import multiprocessing

        mp = multiprocessing.get_context("spawn")
        receive, send = mp.Pipe(duplex=False)
        args = (str(ctx.results), ctx.jobs, ctx.scale)
        proc = mp.Process(
            target=_child_entry, args=(send, os.getpid(), self.train, args), name="figures-realdata"
        )
        proc.start()
        send.close()
        try:
            while not receive.poll(0.5):
                ctx.check_cancelled()  # interrupted: the child is terminated below
            try:
                ok, value, tb = receive.recv()
            except EOFError:
                proc.join()
                raise RuntimeError(
                    f"the digits child process ended with exit code {proc.exitcode} and no result"
                ) from None
        finally:
            if proc.is_alive():
                proc.terminate()
            proc.join()
        if not ok:
            raise RuntimeError(f"in the digits child process: {value}") from _ChildError(tb)
        return value

    def run(self, ctx: Context) -> str:
        """Train or reuse the digits runs, then the spectra; :class:`StageFailure` when runs failed."""
        parts, failed = [], []
        if ctx.wants(*REALDATA_TABLES):
            stop = threading.Event()
            watcher = threading.Thread(
                target=self._watch, args=(ctx, stop), name="realdata-progress", daemon=True
            )
            watcher.start()
            try:
                info = self._train(ctx)
            finally:
                stop.set()
                watcher.join()
            scale = produce_realdata.DIGITS_SCALE[ctx.scale]
            parts.append(
                f"digits scale {scale}: {info['trained']} runs trained, {info['cached']} cached "
                f"({info['seconds']:.0f} s)"
            )
            failed = list(info.get("failed", ()))
        ctx.tick("digits records")
        if ctx.needs("realdata_spectrum"):
            spec = self.spectrum(ctx.results)
            if len(spec):
                ctx.put("realdata_spectrum", spec)
                parts.append(f"spectra of {spec['run_key'].nunique()} real-data runs")
        ctx.tick("real-data spectra")
        if failed:
            raise StageFailure(f"{len(failed)} digits runs failed ({failed[0]}); " + "; ".join(parts))
        return "; ".join(parts) or "nothing to train for the chosen figures"


class _ChildError(Exception):
    """The traceback of an exception raised in a child process (the cause of the parent's error)."""


def _child_entry(conn: Any, parent_pid: int, fn: Callable[..., Any], args: tuple) -> None:
    """A child process of the figures: ``fn(*args)``, its outcome sent back through ``conn``.

    It ignores SIGINT and exits when the main job is gone (:func:`children.worker_init`); the
    main job terminates it when interrupted. Sends ``(True, value, "")`` or ``(False, "Type:
    message", traceback)``.
    """
    children.worker_init(parent_pid)
    try:
        value = children.run_in_child(fn, *args)
    except BaseException as exc:
        conn.send((False, f"{type(exc).__name__}: {exc}", traceback.format_exc()))
    else:
        conn.send((True, value, ""))
    finally:
        conn.close()


class WeinceStage:
    """The noise-floor simulation with its W5 verdict (cached), and EVT tables from stored scores.

    Args:
        noise_floor: ``noise_floor(scale, seed) -> DataFrame`` (default :func:`produce_theory.noise_floor_table`).
        judge_w5: ``judge_w5(table, scale=..., results=...) -> Claim`` (default
            :func:`figures.pipeline.w5.w5_claim`).
        pot: ``pot(scores, source=...) -> dict of tables`` (default :func:`produce_theory.pot_tables`).
        link: ``link(candidates, source=...) -> dict of tables`` (default :func:`produce_theory.link_tables`).
    """

    name = "weince"
    after: tuple[str, ...] = ("realdata",)
    SCORES = Path("weince") / "pot_scores.csv"
    CANDIDATES = Path("weince") / "link_candidates.npz"

    def __init__(
        self,
        noise_floor: TableProducer | None = None,
        judge_w5: Callable[..., Any] | None = None,
        pot: Callable[..., dict] | None = None,
        link: Callable[..., dict] | None = None,
    ) -> None:
        self.noise_floor = noise_floor or (lambda scale, seed: produce_theory.noise_floor_table(scale))
        self.judge_w5 = judge_w5 or records.w5_claim
        self.pot = pot or produce_theory.pot_tables
        self.link = link or produce_theory.link_tables

    def units(self, ctx: Context) -> int:
        """The noise floor, the POT tables and the link selection."""
        return 3

    def run(self, ctx: Context) -> str:
        """The noise floor and its W5 verdict, then the EVT tables of the stored score files."""
        cache = ctx.cache(self.name)
        nf = _cached_table(ctx, cache, "noise_floor", self.noise_floor)
        ctx.put("noise_floor", nf)
        ctx.add([self.judge_w5(nf, scale=ctx.scale, results=str(ctx.results))])
        ctx.tick("noise floor")
        parts = [f"noise floor {cache.describe()}"]
        scores = ctx.results / self.SCORES
        if scores.is_file() and ctx.needs("pot_exceedances"):
            for k, v in self.pot(inputs.read_scores(scores), source=str(scores)).items():
                ctx.put(k, v)
            parts.append(f"POT tables from {scores}")
        ctx.tick("POT")
        cand = ctx.results / self.CANDIDATES
        if cand.is_file() and ctx.needs("lambda_profile"):
            for k, v in self.link(inputs.read_candidates(cand), source=str(cand)).items():
                ctx.put(k, v)
            parts.append(f"link selection from {cand}")
        ctx.tick("link selection")
        return "; ".join(parts)


class PickupStage:
    """Claim records and tables produced elsewhere, from ``<results>/records`` and ``<results>/tables``.

    Claim files hold a JSON array in the ``theory.claims`` format; table files are tidy CSV tables
    named after a table of :mod:`figures.plots.registry` (a ``synthetic.csv`` is appended to the
    synthetic table; other names fill tables no earlier stage produced).
    """

    name = "pickup"
    after: tuple[str, ...] = ("synthetic", "realdata")
    RECORDS = "records"
    TABLES = "tables"

    def units(self, ctx: Context) -> int:
        """One unit."""
        return 1

    def run(self, ctx: Context) -> str:
        """Add the stored claim records and tables; a records file that is not claims JSON raises."""
        n_claims, names = 0, []
        cdir = ctx.results / self.RECORDS
        for p in sorted(cdir.glob("*.json")) if cdir.is_dir() else []:
            try:
                recs = claims.from_json(p.read_text(encoding="utf-8"))
            except ValueError as exc:
                raise ValueError(f"{p}: not a claims file ({exc})") from exc
            ctx.add(recs)
            n_claims += len(recs)
        tdir = ctx.results / self.TABLES
        for p in sorted(tdir.glob("*.csv")) if tdir.is_dir() else []:
            t = pd.read_csv(p)
            name = p.stem
            if name == "synthetic" and "synthetic" in ctx.tables:
                ctx.put(name, pd.concat([ctx.tables[name], t], ignore_index=True, sort=False))
            elif name not in ctx.tables:
                ctx.put(name, t)
            else:
                continue
            names.append(name)
        ctx.tick("pickup")
        return f"{n_claims} claim records from {cdir}, tables {names or 'none'} from {tdir}"


def default_stages() -> list[Stage]:
    """The stages of ``python -m figures`` in order (see the module docstring)."""
    return [
        TheoryStage(),
        SyntheticStage(),
        RealdataStage(),
        WeinceStage(),
        PickupStage(),
        RenderStage(),
        ReportStage(),
    ]
