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
                    ``<results>/claims/*.json`` and tables in ``<results>/tables/<name>.csv``;
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
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import pandas as pd

from figures import inputs, judges, registry, sources
from figures.cache import FORMAT, StageCache, atomic_write_bytes, frame_digest, source_key
from figures.progress import Progress
from figures.registry import FigureSpec

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
]

claims = sources.claims


@dataclass
class FigureResult:
    """What happened to one figure: ``status`` is ``"rendered"``, ``"not available"`` or ``"failed"``."""

    id: str
    title: str
    claims: tuple[str, ...]
    status: str
    reason: str = ""
    produce: str = ""
    files: dict[str, str] = field(default_factory=dict)
    seconds: float = 0.0
    description: str = ""
    style_note: str = ""
    reused: bool = False


@dataclass
class StageResult:
    """One stage's outcome: ``status`` ``"ok"`` or ``"failed"``; ``detail`` a one-line summary."""

    name: str
    status: str
    seconds: float
    detail: str = ""
    error: str = ""


@dataclass
class Context:
    """Everything the stages share.

    Args:
        scale: ``"quick"``, ``"default"`` or ``"paper"``.
        results: the results folder (read; the cache lives in ``results/cache/figures``).
        out: the output folder of figures and report.
        figures: the selected figures.
        jobs: worker processes for rendering (1 = in this process).
        scheduler: dask scheduler address for stages that train (recorded; see ``--help``).
        seed: seed of the theory checks and producers.
        refresh: ignore cached results (recompute and overwrite them).
        progress: the progress display.
        argv: the command line, for the report.
    """

    scale: str
    results: Path
    out: Path
    figures: list[FigureSpec]
    jobs: int = 1
    scheduler: str | None = None
    seed: int = 0
    refresh: bool = False
    progress: Progress | None = None
    argv: Sequence[str] = ()
    tables: dict[str, pd.DataFrame] = field(default_factory=dict)
    records: list[Any] = field(default_factory=list)
    rendered: list[FigureResult] = field(default_factory=list)
    stages: list[StageResult] = field(default_factory=list)
    report_paths: dict[str, Path] = field(default_factory=dict)
    started: float = field(default_factory=time.perf_counter)

    def __post_init__(self) -> None:
        if self.scale not in sources.SCALES:
            raise ValueError(f"scale must be one of {sources.SCALES}, got {self.scale!r}")
        if isinstance(self.jobs, bool) or not isinstance(self.jobs, int) or self.jobs < 1:
            raise ValueError(f"jobs must be a positive integer, got {self.jobs!r}")
        self.results = Path(self.results)
        self.out = Path(self.out)
        if self.progress is None:
            self.progress = Progress(0, quiet=True)

    def needs(self, table: str) -> bool:
        """True when a selected figure reads ``table``."""
        return any(table in s.table_names for s in self.figures)

    @property
    def cache_root(self) -> Path:
        """``<results>/cache/figures``."""
        return self.results / "cache" / "figures"

    def cache(self, stage: str, package: str = "theory") -> StageCache:
        """The cache of ``stage``, keyed by the scale, the seed and the sources of ``package``."""
        key = source_key(sources.source_paths(package), self.scale, str(self.seed), FORMAT)
        return StageCache(self.cache_root, stage, self.scale, key, enabled=not self.refresh)

    def add(self, records: Sequence[Any]) -> None:
        """Add claim records."""
        self.records.extend(records)

    def tick(self, what: str = "") -> None:
        """One unit done."""
        assert self.progress is not None
        self.progress.advance(1, what)


class Stage(Protocol):
    """The stage interface."""

    name: str

    def units(self, ctx: Context) -> int:
        """Progress units of the stage."""

    def run(self, ctx: Context) -> str:
        """Run; return a one-line summary; raise on failure."""


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

    def __init__(self, checks: Callable[[str, int], list] | None = None,
                 tables: Mapping[str, TableProducer] | None = None) -> None:
        self.checks = checks or (lambda scale, seed: sources.theory_claims(scale, seed))
        self.tables = dict(tables) if tables is not None else {
            "harris_gap": lambda scale, seed: sources.harris_gap_table(scale, seed),
            "hucl_nc": lambda scale, seed: sources.hucl_nc_table(scale),
            "gram": lambda scale, seed: sources.gram_table(scale),
        }

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
            f", FAIL: {' '.join(failed)}" if failed else "")
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

    def __init__(self, load: Callable[[Path], pd.DataFrame] | None = None,
                 spectrum: Callable[[pd.DataFrame], pd.DataFrame] | None = None,
                 judge: Callable[..., list] | None = None) -> None:
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
        judge_w5: ``judge_w5(table, scale=..., results=...) -> Claim`` (default :func:`figures.judges.w5_claim`).
        pot: ``pot(scores, source=...) -> dict of tables`` (default :func:`sources.pot_tables`).
        link: ``link(candidates, source=...) -> dict of tables`` (default :func:`sources.link_tables`).
    """

    name = "weince"
    SCORES = Path("weince") / "pot_scores.csv"
    CANDIDATES = Path("weince") / "link_candidates.npz"

    def __init__(self, noise_floor: TableProducer | None = None, judge_w5: Callable[..., Any] | None = None,
                 pot: Callable[..., dict] | None = None, link: Callable[..., dict] | None = None) -> None:
        self.noise_floor = noise_floor or (lambda scale, seed: sources.noise_floor_table(scale))
        self.judge_w5 = judge_w5 or judges.w5_claim
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
    """Claim records and tables produced elsewhere, from ``<results>/claims`` and ``<results>/tables``.

    Claim files hold a JSON array in the ``theory.claims`` format; table files are tidy CSV tables
    named after a table of :mod:`figures.registry` (a ``synthetic.csv`` is appended to the
    synthetic table; other names fill tables no earlier stage produced).
    """

    name = "pickup"
    CLAIMS = "claims"
    TABLES = "tables"

    def units(self, ctx: Context) -> int:
        return 1

    def run(self, ctx: Context) -> str:
        n_claims, names = 0, []
        cdir = ctx.results / self.CLAIMS
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


def _figure_code() -> list[Path]:
    pkg = Path(registry.__file__).resolve().parent
    return sorted(pkg.glob("fig_*.py")) + [pkg / "style.py", pkg / "frames.py", pkg / "registry.py"]


def figure_key(spec: FigureSpec, tables: Mapping[str, pd.DataFrame]) -> str:
    """Digest of what a figure's files depend on: the figure code, its options and input tables."""
    parts = [spec.id, repr(sorted(spec.options.items())), FORMAT]
    parts += [f"{n}:{frame_digest(tables[n])}" for n in spec.table_names if n in tables]
    return source_key(_figure_code(), *parts)


def render_figure(spec: FigureSpec, tables: Mapping[str, pd.DataFrame], out: Path, *,
                  reuse: bool = False) -> FigureResult:
    """Render and save one figure, or report it not available; never raises for a figure's fault.

    Args:
        spec: the figure.
        tables: the available tables.
        out: the output folder.
        reuse: keep the figure's files when they exist and were written from the same code, options
            and input tables (recorded in ``out/.<id>.key``); otherwise render.

    Returns:
        The :class:`FigureResult`.
    """
    from figures import style

    base = dict(id=spec.id, title=spec.title, claims=spec.claims, description=spec.description,
                style_note=spec.style_note)
    files = {fmt: out / f"{spec.id}.{fmt}" for fmt in ("png", "pdf")}
    key_file = out / f".{spec.id}.key"
    avail = registry.availability(spec, tables)
    if not avail.ok:
        if key_file.is_file():  # files this job wrote earlier, from data that is gone: remove them
            for p in (*files.values(), key_file):
                p.unlink(missing_ok=True)
        return FigureResult(status="not available", reason=avail.reason, produce=spec.produce, **base)
    t0 = time.perf_counter()
    try:
        key = figure_key(spec, tables)
        if reuse and key_file.is_file() and key_file.read_text() == key and all(p.is_file() for p in files.values()):
            return FigureResult(status="rendered", files={k: str(v) for k, v in files.items()},
                                seconds=time.perf_counter() - t0, reused=True, **base)
        key_file.unlink(missing_ok=True)
        fig = spec.build(tables)
        paths = style.save_figure(fig, out, spec.id)
        atomic_write_bytes(key_file, key.encode())
    except Exception as exc:  # noqa: BLE001 - a failing figure is reported, the others still render
        return FigureResult(status="failed", reason=f"{type(exc).__name__}: {exc}",
                            produce=spec.produce, seconds=time.perf_counter() - t0,
                            **base)
    return FigureResult(status="rendered", files={k: str(v) for k, v in paths.items()},
                        seconds=time.perf_counter() - t0, **base)


def _render_by_id(figure_id: str, tables: dict[str, pd.DataFrame], out: str, reuse: bool) -> FigureResult:
    return render_figure(registry.get(figure_id), tables, Path(out), reuse=reuse)


class RenderStage:
    """Render every selected figure (in ``jobs`` worker processes when ``jobs > 1``).

    A figure whose code, options and input tables are unchanged since its files were written keeps
    them (unless ``--refresh``); the files of a figure that is no longer available are removed.
    """

    name = "render"

    def units(self, ctx: Context) -> int:
        return len(ctx.figures)

    def run(self, ctx: Context) -> str:
        ctx.out.mkdir(parents=True, exist_ok=True)
        results: dict[str, FigureResult] = {}
        if ctx.jobs > 1 and len(ctx.figures) > 1:
            from joblib import Parallel, delayed

            tasks = (delayed(_render_by_id)(s.id, {k: ctx.tables[k] for k in s.table_names if k in ctx.tables},
                                            str(ctx.out), not ctx.refresh) for s in ctx.figures)
            for r in Parallel(n_jobs=ctx.jobs, return_as="generator_unordered")(tasks):
                results[r.id] = r
                ctx.tick(r.id)
        else:
            for s in ctx.figures:
                r = render_figure(s, ctx.tables, ctx.out, reuse=not ctx.refresh)
                results[r.id] = r
                ctx.tick(r.id)
        ctx.rendered = [results[s.id] for s in ctx.figures]
        counts = {k: sum(r.status == k for r in ctx.rendered) for k in ("rendered", "not available", "failed")}
        failed = [r.id for r in ctx.rendered if r.status == "failed"]
        if failed:
            raise RuntimeError(f"figures failed to render: {', '.join(failed)} "
                               f"({counts['rendered']} rendered, {counts['not available']} not available)")
        reused = sum(r.reused for r in ctx.rendered)
        return (f"{counts['rendered']} rendered ({reused} unchanged, files kept), "
                f"{counts['not available']} not available")


class ReportStage:
    """Write ``report.md`` and ``report.html`` into the output folder."""

    name = "report"

    def units(self, ctx: Context) -> int:
        return 1

    def run(self, ctx: Context) -> str:
        from figures import report

        ctx.report_paths = report.write_report(ctx)
        ctx.tick("report")
        return f"{ctx.report_paths['html']}"


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
        except Exception as exc:  # noqa: BLE001 - reported in the report and the exit status
            res = StageResult(st.name, "failed", time.perf_counter() - t0, f"{type(exc).__name__}: {exc}",
                              traceback.format_exc())
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

