"""Rendering the figures (reusing unchanged files) and writing the report: the last two stages."""

from __future__ import annotations

import functools
import os
import re
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import matplotlib as mpl
import pandas as pd
from matplotlib.figure import Figure

from figures.pipeline.cache import FORMAT, frame_digest, source_key
from figures.pipeline.context import Context, FigureResult, StageResult
from figures.plots import registry, style
from figures.plots.spec import FigureSpec, availability
from figures.report.write import write_report
from synthetic.store.folders import atomic_write, atomic_write_bytes

__all__ = ["save_figure", "figure_key", "render_figure", "RenderStage", "ReportStage"]


#: A figure id: the file name of its PNG and PDF.
_ID_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_\-]{0,80}$")


def save_figure(fig: Figure, out_dir: str | os.PathLike, figure_id: str) -> dict[str, Path]:
    """Save ``fig`` as ``<out_dir>/<figure_id>.png`` (``style.DPI``) and ``.pdf`` in the theme, atomically.

    Each file goes through :func:`synthetic.store.folders.atomic_write` (a temporary file in
    ``out_dir``, renamed into place), so an interrupted save leaves the previous file or none,
    never a truncated one.

    Args:
        fig: the figure.
        out_dir: destination folder (created if needed).
        figure_id: the figure's id: letters, digits, ``_`` and ``-`` (it becomes the file name).

    Returns:
        ``{"png": path, "pdf": path}``.

    Raises:
        ValueError: a bad ``figure_id`` or ``fig`` not a matplotlib Figure.
    """
    if not isinstance(fig, Figure):
        raise ValueError(f"fig must be a matplotlib Figure, got {type(fig).__name__}")
    if not isinstance(figure_id, str) or not _ID_RE.match(figure_id):
        raise ValueError(f"figure_id must be 1-81 characters from [A-Za-z0-9_-], got {figure_id!r}")
    out = Path(out_dir)
    paths = {}
    with mpl.rc_context(style.THEME):
        for fmt in ("png", "pdf"):
            paths[fmt] = atomic_write(out / f"{figure_id}.{fmt}", functools.partial(_savefig, fig, fmt))
    return paths


def _savefig(fig: Figure, fmt: str, fh: Any) -> None:
    meta = (
        {"Software": "hardneg-collapse figures"} if fmt == "png" else {"Creator": "hardneg-collapse figures"}
    )
    fig.savefig(fh, format=fmt, dpi=style.DPI, metadata=meta)


def _figure_code() -> list[Path]:
    pkg = Path(registry.__file__).resolve().parent
    return sorted(pkg.glob("fig_*.py")) + [
        pkg / "style.py",
        pkg / "frames.py",
        pkg / "registry.py",
        pkg / "spec.py",
    ]


def figure_key(spec: FigureSpec, tables: Mapping[str, pd.DataFrame]) -> str:
    """Digest of what a figure's files depend on: the figure code, its options and input tables."""
    parts = [spec.id, repr(sorted(spec.options.items())), FORMAT]
    parts += [f"{n}:{frame_digest(tables[n])}" for n in spec.table_names if n in tables]
    return source_key(_figure_code(), *parts)


def render_figure(
    spec: FigureSpec, tables: Mapping[str, pd.DataFrame], out: Path, *, reuse: bool = False
) -> FigureResult:
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
    base: dict[str, Any] = dict(
        id=spec.id,
        title=spec.title,
        claims=spec.claims,
        description=spec.description,
        style_note=spec.style_note,
    )
    files = {fmt: out / f"{spec.id}.{fmt}" for fmt in ("png", "pdf")}
    key_file = out / f".{spec.id}.key"
    avail = availability(spec, tables)
    if not avail.ok:
        if key_file.is_file():  # files this job wrote earlier, from data that is gone: remove them
            for p in (*files.values(), key_file):
                p.unlink(missing_ok=True)
        return FigureResult(status="not available", reason=avail.reason, produce=spec.produce, **base)
    t0 = time.perf_counter()
    try:
        key = figure_key(spec, tables)
        if (
            reuse
            and key_file.is_file()
            and key_file.read_text() == key
            and all(p.is_file() for p in files.values())
        ):
            return FigureResult(
                status="rendered",
                files={k: str(v) for k, v in files.items()},
                seconds=time.perf_counter() - t0,
                reused=True,
                **base,
            )
        key_file.unlink(missing_ok=True)
        fig = spec.build(tables)
        paths = save_figure(fig, out, spec.id)
        atomic_write_bytes(key_file, key.encode())
    except Exception as exc:
        return FigureResult(
            status="failed",
            reason=f"{type(exc).__name__}: {exc}",
            produce=spec.produce,
            seconds=time.perf_counter() - t0,
            **base,
        )
    return FigureResult(
        status="rendered",
        files={k: str(v) for k, v in paths.items()},
        seconds=time.perf_counter() - t0,
        **base,
    )


def _render_by_id(figure_id: str, tables: dict[str, pd.DataFrame], out: str, reuse: bool) -> FigureResult:
    return render_figure(registry.get(figure_id), tables, Path(out), reuse=reuse)


class RenderStage:
    """Render every selected figure (in ``jobs`` worker processes when ``jobs > 1``).

    A figure whose code, options and input tables are unchanged since its files were written keeps
    them (unless ``--refresh``); the files of a figure that is no longer available are removed.
    """

    name = "render"
    after: tuple[str, ...] = ("theory", "synthetic", "realdata", "weince", "pickup")

    def units(self, ctx: Context) -> int:
        """One unit per selected figure."""
        return len(ctx.figures)

    def run(self, ctx: Context) -> str:
        """Render (or keep) every selected figure; a figure that failed to render raises."""
        ctx.out.mkdir(parents=True, exist_ok=True)
        results: dict[str, FigureResult] = {}
        if ctx.jobs > 1 and len(ctx.figures) > 1:
            from joblib import Parallel, delayed

            tasks = (
                delayed(_render_by_id)(
                    s.id,
                    {k: ctx.tables[k] for k in s.table_names if k in ctx.tables},
                    str(ctx.out),
                    not ctx.refresh,
                )
                for s in ctx.figures
            )
            for r in Parallel(n_jobs=ctx.jobs, return_as="generator_unordered")(tasks):
                results[r.id] = r
                ctx.tick(r.id)
        else:
            for s in ctx.figures:
                r = render_figure(s, ctx.tables, ctx.out, reuse=not ctx.refresh)
                results[r.id] = r
                ctx.tick(r.id)
        ctx.rendered = [results[s.id] for s in ctx.figures]
        counts = {
            k: sum(r.status == k for r in ctx.rendered) for k in ("rendered", "not available", "failed")
        }
        failed = [r.id for r in ctx.rendered if r.status == "failed"]
        if failed:
            raise RuntimeError(
                f"figures failed to render: {', '.join(failed)} "
                f"({counts['rendered']} rendered, {counts['not available']} not available)"
            )
        reused = sum(r.reused for r in ctx.rendered)
        return (
            f"{counts['rendered']} rendered ({reused} unchanged, files kept), "
            f"{counts['not available']} not available"
        )


class ReportStage:
    """Write ``report.md`` and ``report.html`` into the output folder."""

    name = "report"
    after: tuple[str, ...] = ("render",)

    def units(self, ctx: Context) -> int:
        """One unit."""
        return 1

    def run(self, ctx: Context) -> str:
        """Write the report files into the output folder."""
        extra = [
            StageResult("report", "ok", 0.0, "this report"),
            StageResult(
                "total", "ok", time.perf_counter() - ctx.started, "wall time of the whole job so far"
            ),
        ]
        ctx.report_paths = write_report(ctx, extra)
        ctx.tick("report")
        return f"{ctx.report_paths['html']}"
