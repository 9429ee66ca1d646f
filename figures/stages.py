"""The stages of the main job and the stage interface through which their producers are swapped.

``python -m figures`` runs, in order (:func:`default_stages`):

1. ``theory``    -- the theory checks T1-T8 and the W-law, and the theory tables of the figures
                    (Harris gap, HUCL at NC, Gram matrices); cached (:mod:`figures.cache`);
2. ``synthetic`` -- reads the synthetic grid results stored under the results folder and the
                    synthetic package's verdicts of S1-S4 and R5 (NOT RUN, with the command,
                    where nothing is stored; R4 has no grid yet);
3. ``weince``    -- the noise-floor simulation and its W5 verdict (cached); POT and link-
                    selection tables from scores stored under ``<results>/weince/``;
4. ``pickup``    -- results produced elsewhere (real-data runs, clusters): claim records in
                    ``<results>/records/*.json`` and tables in ``<results>/tables/<name>.csv``;
5. ``render``    -- every selected figure that its data allows, or "not available" with why;
6. ``report``    -- ``report.md`` and ``report.html``.

A stage is any object with a ``name``, ``units(ctx)`` (its share of the progress bar) and
``run(ctx) -> str`` (a one-line summary; it raises on failure). Each data stage takes its
producers as constructor arguments (defaults from :mod:`figures.sources`), so a producer that
trains missing runs, or reads a cluster's results, replaces the current one without touching the
runner. A stage that raises is recorded as failed with its traceback, the remaining stages still
run and the report names the failure; :func:`run_stages` then returns a non-zero status.
"""

from __future__ import annotations

import time
import traceback
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import pandas as pd

from figures import inputs, records, sources
from figures.cache import StageCache
from figures.context import Context, FigureResult, Stage, StageResult
from figures.render import RenderStage, ReportStage, figure_key, render_figure

__all__ = [
    "FigureResult",
    "StageResult",
    "Context",
    "Stage",
    "TheoryStage",
    "SyntheticStage",
    "WeinceStage",
    "PickupStage",
    "RenderStage",
    "ReportStage",
    "default_stages",
    "run_stages",
    "render_figure",
    "figure_key",
]

claims = sources.claims


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
        checks: ``checks(scale, seed) -> list[Claim]`` (default :func:`sources.theory_claims`).
        tables: table name -> ``producer(scale, seed) -> DataFrame``.
    """

    name = "theory"

    def __init__(
        self,
        checks: Callable[[str, int], list] | None = None,
        tables: Mapping[str, TableProducer] | None = None,
    ) -> None:
        self.checks = checks or (lambda scale, seed: sources.theory_claims(scale, seed))
        self.tables = (
            dict(tables)
            if tables is not None
            else {
                "harris_gap": lambda scale, seed: sources.harris_gap_table(scale, seed),
                "hucl_nc": lambda scale, seed: sources.hucl_nc_table(scale),
                "gram": lambda scale, seed: sources.gram_table(scale),
            }
        )

    def units(self, ctx: Context) -> int:
        return 1 + sum(ctx.needs(n) for n in self.tables)

    def run(self, ctx: Context) -> str:
        cache = ctx.cache(self.name)
        text = cache.read_text("claims.json")
        if text is None:
            recs = self.checks(ctx.scale, ctx.seed)
            cache.write_text("claims.json", claims.to_json(recs))
        else:
            recs = claims.from_json(text)
        ctx.add(recs)
        ctx.tick("theory checks")
        for name, producer in self.tables.items():
            if ctx.needs(name):
                ctx.tables[name] = _cached_table(ctx, cache, name, producer)
                ctx.tick(name)
        failed = [r.id for r in recs if r.verdict == claims.Verdict.FAIL]
        verdicts = f"{sum(r.verdict == claims.Verdict.PASS for r in recs)} PASS" + (
            f", FAIL: {' '.join(failed)}" if failed else ""
        )
        return f"{verdicts}; {cache.describe()} ({cache.folder})"


class SyntheticStage:
    """Synthetic grid results found under the results folder, and the verdicts of S1-S4, R5.

    Args:
        load: ``load(results) -> DataFrame`` (default :func:`sources.load_synthetic`).
        spectrum: ``spectrum(table) -> DataFrame`` (default :func:`sources.spectrum_table`).
        judge: ``judge(table, results=..., scale=...) -> list[Claim]`` (default
            :func:`sources.synthetic_claims`).
    """

    name = "synthetic"

    def __init__(
        self,
        load: Callable[[Path], pd.DataFrame] | None = None,
        spectrum: Callable[[pd.DataFrame], pd.DataFrame] | None = None,
        judge: Callable[..., list] | None = None,
    ) -> None:
        self.load = load or sources.load_synthetic
        self.spectrum = spectrum or sources.spectrum_table
        self.judge = judge or sources.synthetic_claims

    def units(self, ctx: Context) -> int:
        return 2

    def run(self, ctx: Context) -> str:
        table = self.load(ctx.results)
        ctx.tick("synthetic results")
        if len(table):
            ctx.tables["synthetic"] = table
            if ctx.needs("spectrum"):
                spec = self.spectrum(table)
                if len(spec):
                    ctx.tables["spectrum"] = spec
        recs = self.judge(table, results=str(ctx.results), scale=ctx.scale)
        ctx.add(recs)
        ctx.tick("synthetic claims")
        if not len(table):
            return f"no synthetic results under {ctx.results} (searched {', '.join(sources.SYNTHETIC_DIRS)})"
        n_runs = table["run_key"].nunique() if "run_key" in table.columns else len(table)
        grids = sorted(set(table["grid"].astype(str))) if "grid" in table.columns else []
        return f"{n_runs} runs in {len(grids)} grid folders ({', '.join(grids)})"


class WeinceStage:
    """The noise-floor simulation with its W5 verdict (cached), and EVT tables from stored scores.

    Args:
        noise_floor: ``noise_floor(scale, seed) -> DataFrame`` (default :func:`sources.noise_floor_table`).
        judge_w5: ``judge_w5(table, scale=..., results=...) -> Claim`` (default :func:`figures.records.w5_claim`).
        pot: ``pot(scores, source=...) -> dict of tables`` (default :func:`sources.pot_tables`).
        link: ``link(candidates, source=...) -> dict of tables`` (default :func:`sources.link_tables`).
    """

    name = "weince"
    SCORES = Path("weince") / "pot_scores.csv"
    CANDIDATES = Path("weince") / "link_candidates.npz"

    def __init__(
        self,
        noise_floor: TableProducer | None = None,
        judge_w5: Callable[..., Any] | None = None,
        pot: Callable[..., dict] | None = None,
        link: Callable[..., dict] | None = None,
    ) -> None:
        self.noise_floor = noise_floor or (lambda scale, seed: sources.noise_floor_table(scale))
        self.judge_w5 = judge_w5 or records.w5_claim
        self.pot = pot or sources.pot_tables
        self.link = link or sources.link_tables

    def units(self, ctx: Context) -> int:
        return 3

    def run(self, ctx: Context) -> str:
        cache = ctx.cache(self.name)
        nf = _cached_table(ctx, cache, "noise_floor", self.noise_floor)
        ctx.tables["noise_floor"] = nf
        ctx.add([self.judge_w5(nf, scale=ctx.scale, results=str(ctx.results))])
        ctx.tick("noise floor")
        parts = [f"noise floor {cache.describe()}"]
        scores = ctx.results / self.SCORES
        if scores.is_file() and ctx.needs("pot_exceedances"):
            ctx.tables.update(self.pot(inputs.read_scores(scores), source=str(scores)))
            parts.append(f"POT tables from {scores}")
        ctx.tick("POT")
        cand = ctx.results / self.CANDIDATES
        if cand.is_file() and ctx.needs("lambda_profile"):
            ctx.tables.update(self.link(inputs.read_candidates(cand), source=str(cand)))
            parts.append(f"link selection from {cand}")
        ctx.tick("link selection")
        return "; ".join(parts)


class PickupStage:
    """Claim records and tables produced elsewhere, from ``<results>/records`` and ``<results>/tables``.

    Claim files hold a JSON array in the ``theory.claims`` format; table files are tidy CSV tables
    named after a table of :mod:`figures.registry` (a ``synthetic.csv`` is appended to the
    synthetic table; other names fill tables no earlier stage produced).
    """

    name = "pickup"
    RECORDS = "records"
    TABLES = "tables"

    def units(self, ctx: Context) -> int:
        return 1

    def run(self, ctx: Context) -> str:
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
                ctx.tables[name] = pd.concat([ctx.tables[name], t], ignore_index=True, sort=False)
            elif name not in ctx.tables:
                ctx.tables[name] = t
            else:
                continue
            names.append(name)
        ctx.tick("pickup")
        return f"{n_claims} claim records from {cdir}, tables {names or 'none'} from {tdir}"


def default_stages() -> list[Stage]:
    """The stages of ``python -m figures`` in order."""
    return [TheoryStage(), SyntheticStage(), WeinceStage(), PickupStage(), RenderStage(), ReportStage()]


def run_stages(ctx: Context, stages: Sequence[Stage] | None = None) -> int:
    """Run the stages in order; return 0, or 1 when a stage failed or a theory check FAILed.

    A failing stage is recorded with its traceback; the later stages still run, so the report is
    written and names the failure. The report stage runs last and sees every earlier result.
    """
    stages = list(default_stages() if stages is None else stages)
    assert ctx.progress is not None
    ctx.progress.add_total(sum(s.units(ctx) for s in stages))
    status = 0
    for st in stages:
        ctx.progress.stage(st.name)
        t0 = time.perf_counter()
        before = ctx.progress.done
        try:
            detail = st.run(ctx)
            res = StageResult(st.name, "ok", time.perf_counter() - t0, detail or "")
        except Exception as exc:
            res = StageResult(
                st.name,
                "failed",
                time.perf_counter() - t0,
                f"{type(exc).__name__}: {exc}",
                traceback.format_exc(),
            )
            status = 1
        left = st.units(ctx) - (ctx.progress.done - before)
        if left > 0:
            ctx.progress.advance(left)
        ctx.stages.append(res)
        ctx.progress.stage_done(st.name, res.status if res.status == "failed" else res.detail, res.seconds)
        if st.name == "report" and res.status == "failed":
            _emergency_report(ctx, res)
    if any(getattr(r, "verdict", None) == claims.Verdict.FAIL for r in ctx.records):
        status = 1
    return status


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
