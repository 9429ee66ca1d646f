"""``report.md``: the claims table, the figure gallery, the stages and the environment, in Markdown.

The figures are linked as the PNG files next to the report; figures that are not available are
listed with why and the command that produces their data.
"""

from __future__ import annotations

from typing import Any

from figures.report.assemble import (
    _EVIDENCE_SHOWN,
    ClaimRow,
    _evidence,
    _fig_id,
    _fig_status,
    _md,
    _rendered,
    _setting,
    _style_text,
)

__all__ = ["render_markdown"]


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
