"""The claims report: ``report.md`` and a self-contained ``report.html``.

Both list every claim id of the catalogue (``theory.claims.CATALOGUE``: T1-T8, W-law, S1-S4,
R1-R5, W1-W5) exactly once, in catalogue order, with its statement, verdict, evidence (numbers
with their spread), the figures that show it, the exact command that reproduces it and the
setting it was tested in. A claim without results reads NOT RUN and gives the command that
produces them. Then: the figure gallery (and the figures that are not available, with why and
the command that produces their data), the stages with their wall times and failures, and the
environment (package versions, git commit, device, scale).

``report.html`` opens offline: CSS inline, every image embedded as a base64 ``data:`` URI, no
script and no external resource; every text is HTML-escaped. ``report.md`` links the PNG files
next to it.

When several records exist for one claim (e.g. results at two scales, or a record picked up from
another machine), the first one with a result (not NOT RUN) is the claim's row and the others
are listed under it as further results.
"""

from __future__ import annotations

import base64
import datetime as _dt
import html
import importlib.metadata
import io
import platform
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from figures import registry, sources
from figures.cache import atomic_write_bytes
from figures.commands import command_for

__all__ = [
    "ClaimRow",
    "assemble",
    "environment",
    "write_report",
    "render_markdown",
    "render_html",
    "PACKAGES",
]

claims = sources.claims

#: Packages whose versions the environment block lists.
PACKAGES = (
    "numpy",
    "scipy",
    "torch",
    "pandas",
    "matplotlib",
    "seaborn",
    "cvxpy",
    "clarabel",
    "scs",
    "sympy",
    "scikit-learn",
    "tqdm",
    "joblib",
    "dask",
)
_EVIDENCE_SHOWN = 6
_THUMB_WIDTH = 300


@dataclass
class ClaimRow:
    """One row of the claims table: the catalogue entry, its record, further records, its figures."""

    id: str
    entry: Any
    record: Any
    others: list[Any] = field(default_factory=list)
    figures: list[Any] = field(default_factory=list)  # FigureResult or bare ids


def assemble(
    records: list[Any], figure_results: list[Any], *, results: str = "results", scale: str = "default"
) -> list[ClaimRow]:
    """One :class:`ClaimRow` per catalogue id, in catalogue order.

    Args:
        records: claim records from every stage (any order; several per id allowed).
        figure_results: the figures' outcomes (``FigureResult``).
        results: the results folder (for the NOT RUN commands).
        scale: the scale (for the NOT RUN commands).

    Raises:
        ValueError: a record with an id outside the catalogue.
    """
    by_id: dict[str, list[Any]] = {cid: [] for cid in claims.CATALOGUE}
    for r in records:
        if r.id not in by_id:
            raise ValueError(f"record id must be a catalogue id, got {r.id!r}")
        by_id[r.id].append(r)
    figs = {f.id: f for f in figure_results}
    all_specs = registry.all_figures()
    rows = []
    for cid, entry in claims.CATALOGUE.items():
        recs = by_id[cid]
        ran = [r for r in recs if r.verdict != claims.Verdict.NOT_RUN]
        if ran:
            primary = ran[0]
        elif recs:
            primary = recs[0]
        else:
            primary = claims.not_run(
                cid,
                command_for(cid, results=results, scale=scale),
                notes="no stage produced a result for this claim",
            )
        others = [r for r in recs if r is not primary and (r.verdict != claims.Verdict.NOT_RUN)]
        ids: list[str] = []
        for r in [primary, *others]:
            ids += [f for f in r.figures if f not in ids]
        ids += [s.id for s in all_specs if cid in s.claims and s.id not in ids]
        rows.append(ClaimRow(cid, entry, primary, others, [figs.get(i, i) for i in ids]))
    return rows


# --------------------------------------------------------------------------------------------
# environment
# --------------------------------------------------------------------------------------------


def _version(pkg: str) -> str:
    try:
        return importlib.metadata.version(pkg)
    except importlib.metadata.PackageNotFoundError:
        return "not installed"


def _git(*args: str) -> str:
    root = Path(__file__).resolve().parent.parent
    try:
        out = subprocess.run(["git", "-C", str(root), *args], capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return ""
    return out.stdout.strip() if out.returncode == 0 else ""


def environment(ctx: Any) -> dict[str, str]:
    """Package versions, git commit, device, scale, command line and date of the run."""
    commit = _git("rev-parse", "HEAD") or "unknown (not a git checkout)"
    dirty = _git("status", "--porcelain", "--untracked-files=no")
    if commit and dirty:
        commit += " (with uncommitted changes)"
    env = {
        "date (UTC)": _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%d %H:%M:%S"),
        "command": " ".join(["python -m figures", *ctx.argv]),
        "scale": ctx.scale,
        "results folder": str(ctx.results),
        "output folder": str(ctx.out),
        "git commit": commit,
        "device": sources.device_description(),
        "python": f"{platform.python_version()} ({sys.executable})",
        "platform": platform.platform(),
        "jobs": str(ctx.jobs),
    }
    if ctx.scheduler:
        env["scheduler"] = ctx.scheduler
    for p in PACKAGES:
        env[p] = _version(p)
    return env


# --------------------------------------------------------------------------------------------
# text helpers
# --------------------------------------------------------------------------------------------


def _evidence(rec: Any) -> list[str]:
    return [e.text() for e in rec.evidence]


def _setting(rec: Any) -> str:
    return ", ".join(f"{k}={v}" for k, v in rec.setting.items())


def _md(text: str) -> str:
    """Escape a cell of a markdown table."""
    return (
        str(text)
        .replace("\\", "\\\\")
        .replace("|", "\\|")
        .replace("\n", " ")
        .replace("<", "&lt;")
        .replace(">", "&gt;")
    )


def _fig_id(f: Any) -> str:
    return f if isinstance(f, str) else f.id


def _rendered(f: Any) -> bool:
    return not isinstance(f, str) and f.status == "rendered"


def _fig_status(f: Any) -> str:
    """``"not available"``, ``"failed"`` or, for a figure this run did not select, ``"not rendered in this run"``."""
    return "not rendered in this run" if isinstance(f, str) else f.status


def _style_text(note: str) -> str:
    return f"reproduced in the style of the authors' notebooks ({note})" if note else ""


# --------------------------------------------------------------------------------------------
# markdown
# --------------------------------------------------------------------------------------------


def render_markdown(rows: list[ClaimRow], ctx: Any, env: dict[str, str]) -> str:
    """The markdown report (figures linked as ``<id>.png`` next to it)."""
    out = ["# Claims report", ""]
    out.append(f"Scale **{ctx.scale}**, generated {env['date (UTC)']} UTC by `{env['command']}`.")
    failed = [s for s in ctx.stages if s.status == "failed"]
    if failed:
        out += ["", "**Failed stages:** " + ", ".join(f"`{s.name}` ({_md(s.detail)})" for s in failed)]
    counts: dict[str, int] = {}
    for r in rows:
        counts[r.record.verdict.value] = counts.get(r.record.verdict.value, 0) + 1
    out += [
        "",
        "Verdicts: " + ", ".join(f"{k} {v}" for k, v in counts.items()) + f" ({len(rows)} claims).",
        "",
    ]
    out += [
        "## Claims",
        "",
        "| id | statement | verdict | evidence | figures | command | setting |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        rec = r.record
        ev = _evidence(rec)
        ev_text = "; ".join(ev[:_EVIDENCE_SHOWN]) + (
            f"; … {len(ev) - _EVIDENCE_SHOWN} more" if len(ev) > _EVIDENCE_SHOWN else ""
        )
        if rec.notes:
            ev_text = (ev_text + "; " if ev_text else "") + rec.notes
        figs = ", ".join(
            f"[{_fig_id(f)}]({_fig_id(f)}.png)" if _rendered(f) else f"{_fig_id(f)} ({_fig_status(f)})"
            for f in r.figures
        )
        extra = "".join(f" · also: {o.verdict.value} ({_md(_setting(o))})" for o in r.others)
        out.append(
            f"| {r.id} | {_md(rec.statement)} | **{rec.verdict.value}**{_md(extra)} | {_md(ev_text) or '—'} | "
            f"{figs or '—'} | `{_md(rec.command) or '—'}` | {_md(_setting(rec)) or '—'} |"
        )
    out += ["", "## Figures", ""]
    for f in ctx.rendered:
        if f.status != "rendered":
            continue
        out += [f"### {f.title} (`{f.id}`)", ""]
        line = f.description + (f" Claims: {', '.join(f.claims)}." if f.claims else "")
        if f.style_note:
            line += f" {_style_text(f.style_note).capitalize()}."
        out += [
            line,
            "",
            f"![{f.title}]({f.id}.png)",
            "",
            f"Files: [{f.id}.png]({f.id}.png), [{f.id}.pdf]({f.id}.pdf)",
            "",
        ]
    missing = [f for f in ctx.rendered if f.status != "rendered"]
    if missing:
        out += [
            "## Figures not produced",
            "",
            "| figure | status | why | command that produces its data |",
            "|---|---|---|---|",
        ]
        for f in missing:
            out.append(
                f"| `{f.id}` ({_md(f.title)}) | {f.status} | {_md(f.reason)} | "
                f"`{_md(f.produce.format(results=ctx.results))}` |"
            )
        out.append("")
    out += ["## Stages", "", "| stage | status | wall time (s) | detail |", "|---|---|---|---|"]
    for s in ctx.stages:
        out.append(f"| {s.name} | {s.status} | {s.seconds:.1f} | {_md(s.detail)} |")
    for s in failed:
        out += ["", f"Traceback of stage `{s.name}`:", "", "```", s.error.rstrip(), "```"]
    out += ["", "## Environment", "", "| | |", "|---|---|"]
    out += [f"| {_md(k)} | {_md(v)} |" for k, v in env.items()]
    return "\n".join(out) + "\n"


# --------------------------------------------------------------------------------------------
# html
# --------------------------------------------------------------------------------------------

_CSS = """
body{font-family:system-ui,-apple-system,"Segoe UI",Roboto,Helvetica,Arial,sans-serif;margin:1.5em auto;
max-width:1500px;padding:0 1em;color:#222;line-height:1.4}
h1{font-size:1.6em}h2{margin-top:1.6em;border-bottom:1px solid #ccc;padding-bottom:.2em}
table{border-collapse:collapse;width:100%;font-size:.88em}
th,td{border:1px solid #d0d0d0;padding:.35em .5em;vertical-align:top;text-align:left}
th{background:#f2f2f2}tr:nth-child(even) td{background:#fafafa}
code{font-family:ui-monospace,Menlo,Consolas,monospace;font-size:.92em;word-break:break-word}
.v{font-weight:600;white-space:nowrap;padding:.1em .4em;border-radius:3px}
.v-PASS,.v-REPRODUCED{background:#d8f0d8;color:#145214}
.v-FAIL,.v-NOT-REPRODUCED{background:#f6d4d4;color:#7a1010}
.v-PARTLY{background:#fbecc8;color:#6b4a00}.v-NOT-RUN{background:#e6e6e6;color:#444}
.thumbs a{display:inline-block;margin:2px}.thumbs img{width:150px;border:1px solid #ccc}
.na{color:#777;font-size:.9em}
figure{margin:1em 0 2em 0}figure img{max-width:100%;border:1px solid #ddd}
figcaption{font-size:.9em;color:#444}
details summary{cursor:pointer;color:#225}
pre{background:#f6f6f6;padding:.6em;overflow-x:auto;font-size:.85em}
.failed{background:#fde8e8;border:1px solid #e0a0a0;padding:.6em}
"""


def _e(x: Any) -> str:
    return html.escape(str(x), quote=True)


def _verdict_badge(v: Any) -> str:
    return f'<span class="v v-{_e(v.value.replace(" ", "-"))}">{_e(v.value)}</span>'


def _data_uri(path: str | Path, width: int | None = None) -> str:
    data = Path(path).read_bytes()
    if width is not None:
        try:
            from PIL import Image

            with Image.open(io.BytesIO(data)) as im:
                im.thumbnail((width, width * 4))
                buf = io.BytesIO()
                im.save(buf, format="PNG", optimize=True)
                data = buf.getvalue()
        except Exception:
            pass
    return "data:image/png;base64," + base64.b64encode(data).decode("ascii")


def _evidence_html(rec: Any) -> str:
    ev = _evidence(rec)
    parts = []
    if ev:
        head = "".join(f"<li>{_e(t)}</li>" for t in ev[:_EVIDENCE_SHOWN])
        parts.append(f"<ul>{head}</ul>")
        if len(ev) > _EVIDENCE_SHOWN:
            rest = "".join(f"<li>{_e(t)}</li>" for t in ev[_EVIDENCE_SHOWN:])
            parts.append(
                f"<details><summary>{len(ev) - _EVIDENCE_SHOWN} more</summary><ul>{rest}</ul></details>"
            )
    if rec.subchecks:
        items = []
        for s in rec.subchecks:
            first = s.evidence[0].text() if s.evidence else ""
            note = f" [{s.note}]" if s.note else ""
            items.append(
                f"<li>{_verdict_badge(s.verdict)} {_e(s.what)}: {_e(first)} (n={s.instances}){_e(note)}</li>"
            )
        parts.append(
            f"<details><summary>{len(rec.subchecks)} sub-checks</summary><ul>{''.join(items)}</ul></details>"
        )
    if rec.notes:
        parts.append(f"<p>{_e(rec.notes)}</p>")
    if rec.criterion:
        parts.append(f"<p><em>criterion:</em> {_e(rec.criterion)}</p>")
    return "".join(parts) or "—"


def render_html(rows: list[ClaimRow], ctx: Any, env: dict[str, str]) -> str:
    """The self-contained HTML report."""
    thumbs = {f.id: _data_uri(f.files["png"], _THUMB_WIDTH) for f in ctx.rendered if f.status == "rendered"}
    h = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        "<title>Claims report</title>",
        f"<style>{_CSS}</style></head><body>",
        "<h1>Claims report</h1>",
        f"<p>Scale <strong>{_e(ctx.scale)}</strong>, generated {_e(env['date (UTC)'])} UTC by "
        f"<code>{_e(env['command'])}</code>.</p>",
    ]
    failed = [s for s in ctx.stages if s.status == "failed"]
    if failed:
        h.append(
            '<div class="failed"><strong>Failed stages:</strong> '
            + ", ".join(f"<code>{_e(s.name)}</code> ({_e(s.detail)})" for s in failed)
            + "</div>"
        )
    h += [
        '<h2 id="claims">Claims</h2>',
        '<table id="claims-table"><thead><tr><th>id</th><th>statement</th>'
        "<th>verdict</th><th>evidence</th><th>figures</th><th>command</th><th>setting</th></tr></thead><tbody>",
    ]
    for r in rows:
        rec = r.record
        figs = []
        for f in r.figures:
            fid = _fig_id(f)
            if _rendered(f):
                figs.append(
                    f'<a href="#fig-{_e(fid)}" title="{_e(f.title)}"><img alt="{_e(fid)}" '
                    f'src="{thumbs[fid]}"></a>'
                )
            else:
                figs.append(f'<div class="na">{_e(fid)} ({_e(_fig_status(f))})</div>')
        others = "".join(
            f"<div>also: {_verdict_badge(o.verdict)} <span class='na'>{_e(_setting(o))}</span></div>"
            for o in r.others
        )
        h.append(
            f'<tr id="claim-{_e(r.id)}"><td><strong>{_e(r.id)}</strong></td><td>{_e(rec.statement)}</td>'
            f"<td>{_verdict_badge(rec.verdict)}{others}</td><td>{_evidence_html(rec)}</td>"
            f'<td class="thumbs">{"".join(figs) or "—"}</td><td><code>{_e(rec.command) or "—"}</code></td>'
            f"<td>{_e(_setting(rec)) or '—'}</td></tr>"
        )
    h.append("</tbody></table>")
    h.append('<h2 id="gallery">Figures</h2>')
    for f in ctx.rendered:
        if f.status != "rendered":
            continue
        cap = _e(f.description)
        if f.claims:
            cap += " Claims: " + ", ".join(f'<a href="#claim-{_e(c)}">{_e(c)}</a>' for c in f.claims) + "."
        if f.style_note:
            cap += " " + _e(_style_text(f.style_note).capitalize()) + "."
        cap += f' Files: <a href="{_e(f.id)}.png">{_e(f.id)}.png</a>, <a href="{_e(f.id)}.pdf">{_e(f.id)}.pdf</a>.'
        h.append(
            f'<figure id="fig-{_e(f.id)}"><h3>{_e(f.title)} <code>{_e(f.id)}</code></h3>'
            f'<img alt="{_e(f.title)}" src="{_data_uri(f.files["png"])}"><figcaption>{cap}</figcaption></figure>'
        )
    missing = [f for f in ctx.rendered if f.status != "rendered"]
    if missing:
        h += [
            '<h2 id="not-available">Figures not produced</h2>',
            "<table><thead><tr><th>figure</th><th>status</th><th>why</th><th>command that produces its data</th>"
            "</tr></thead><tbody>",
        ]
        for f in missing:
            h.append(
                f"<tr><td><code>{_e(f.id)}</code><br>{_e(f.title)}</td><td>{_e(f.status)}</td>"
                f"<td>{_e(f.reason)}</td><td><code>{_e(f.produce.format(results=ctx.results))}</code></td></tr>"
            )
        h.append("</tbody></table>")
    h += [
        '<h2 id="stages">Stages</h2>',
        "<table><thead><tr><th>stage</th><th>status</th><th>wall time (s)</th>"
        "<th>detail</th></tr></thead><tbody>",
    ]
    for s in ctx.stages:
        h.append(
            f"<tr><td>{_e(s.name)}</td><td>{_e(s.status)}</td><td>{s.seconds:.1f}</td><td>{_e(s.detail)}</td></tr>"
        )
    h.append("</tbody></table>")
    for s in failed:
        h.append(
            f"<details open><summary>traceback of stage {_e(s.name)}</summary><pre>{_e(s.error)}</pre></details>"
        )
    h += ['<h2 id="environment">Environment</h2>', "<table><tbody>"]
    h += [f"<tr><th>{_e(k)}</th><td>{_e(v)}</td></tr>" for k, v in env.items()]
    h += ["</tbody></table>", "</body></html>"]
    return "\n".join(h) + "\n"


def write_report(ctx: Any) -> dict[str, Path]:
    """Write ``report.md`` and ``report.html`` into ``ctx.out`` (atomically); return their paths.

    The report stage's own time is not yet known when it writes, so its row reads the time so far.
    """
    from figures.context import StageResult

    ctx.out.mkdir(parents=True, exist_ok=True)
    rows = assemble(ctx.records, ctx.rendered, results=str(ctx.results), scale=ctx.scale)
    env = environment(ctx)
    stages_before = list(ctx.stages)
    total = time.perf_counter() - ctx.started
    ctx.stages = stages_before + [
        StageResult("report", "ok", 0.0, "this report"),
        StageResult("total", "ok", total, "wall time of the whole job so far"),
    ]
    try:
        md = render_markdown(rows, ctx, env)
        page = render_html(rows, ctx, env)
    finally:
        ctx.stages = stages_before
    paths = {"md": ctx.out / "report.md", "html": ctx.out / "report.html"}
    atomic_write_bytes(paths["md"], md.encode("utf-8"))
    atomic_write_bytes(paths["html"], page.encode("utf-8"))
    return paths
