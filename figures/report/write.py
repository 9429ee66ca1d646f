"""Write the report: ``report.md`` and ``report.html`` from the main job's context, atomically."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from figures.report.assemble import assemble, environment
from figures.report.html import render_html
from figures.report.markdown import render_markdown
from synthetic.store.folders import atomic_write_bytes

__all__ = ["write_report"]


def write_report(ctx: Any, extra_stages: Sequence[Any] = ()) -> dict[str, Path]:
    """Write ``report.md`` and ``report.html`` into ``ctx.out`` (atomically); return their paths.

    Args:
        ctx: the main job's context (``figures.pipeline.context.Context``: records, rendered
            figures, stage results, scale, folders).
        extra_stages: stage rows shown after ``ctx.stages`` (the report stage passes its own row
            and the total so far: its own time is not yet known when it writes).
    """
    ctx.out.mkdir(parents=True, exist_ok=True)
    rows = assemble(ctx.records, ctx.rendered, results=str(ctx.results), scale=ctx.scale)
    env = environment(ctx)
    stages_before = list(ctx.stages)
    ctx.stages = stages_before + list(extra_stages)
    try:
        md = render_markdown(rows, ctx, env)
        page = render_html(rows, ctx, env)
    finally:
        ctx.stages = stages_before
    paths = {"md": ctx.out / "report.md", "html": ctx.out / "report.html"}
    atomic_write_bytes(paths["md"], md.encode("utf-8"))
    atomic_write_bytes(paths["html"], page.encode("utf-8"))
    return paths
