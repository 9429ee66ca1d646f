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
    _setting_text,
    _style_text,
)
from figures.report.summary import SettingGroup, deciding_numbers, own_setting, setting_groups, summarize

__all__ = ["render_markdown"]

_HEAD = "| id | statement | verdict | evidence | figures | command | setting |"


def _inline(text: str) -> str:
    """Escape text of a list item (no table around it: pipes stay as they are)."""
    return str(text).replace("\n", " ").replace("<", "&lt;")


def _summary(rows: list[ClaimRow]) -> list[str]:
    """The summary section: one line per claim, grouped by outcome, with the deciding numbers."""
    groups = summarize(rows)
    out = [
        "## Summary",
        "",
        f"{len(rows)} claims — " + " · ".join(f"{g.title}: {len(g.rows)}" for g in groups) + ".",
    ]
    for g in groups:
        out += ["", f"**{_inline(g.title)}** ({len(g.rows)})", ""]
        for r in g.rows:
            rec = r.record
            line = f"- **{r.id}** {rec.verdict.value} — {_inline(rec.statement)}"
            nums = deciding_numbers(rec)
            if nums:
                line += ": " + _inline("; ".join(nums))
            elif rec.verdict.value == "NOT RUN":
                line += f" — produce with `{_inline(rec.command) or '—'}`"
                if rec.evidence:
                    line += " (smaller-scale evidence in the claims table)"
            extra = "".join(f"; also {o.verdict.value} ({_inline(_setting(o))})" for o in r.others)
            out.append(line + extra)
    return out


def _claims_table(g: SettingGroup) -> list[str]:
    """One setting group of the claims table: a heading, the shared setting and command once, the rows."""
    commands = {r.record.command for r in g.rows}
    shared_cmd = len(g.rows) > 1 and len(commands) == 1 and next(iter(commands))
    out = [f"### {g.ids}", ""]
    if g.shared:
        out += [f"Setting of every claim below: {_md(_setting_text(g.shared))}.", ""]
    if shared_cmd:
        out += [f"Command of every claim below: `{_md(shared_cmd)}`.", ""]
    out += [_HEAD, "|---|---|---|---|---|---|---|"]
    for r in g.rows:
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
        cmd = "as above" if shared_cmd else f"`{_md(rec.command) or '—'}`"
        own = _setting_text(own_setting(rec, g.shared))
        setting = _md(own) or ("as above" if g.shared else "—")
        out.append(
            f"| {r.id} | {_md(rec.statement)} | **{rec.verdict.value}**{_md(extra)} | "
            f"{_md(ev_text) or '—'} | {figs or '—'} | {cmd} | {setting} |"
        )
    out.append("")
    return out


def render_markdown(rows: list[ClaimRow], ctx: Any, env: dict[str, str]) -> str:
    """The markdown report (figures linked as ``<id>.png`` next to it)."""
    out = ["# Claims report", ""]
    out.append(f"Scale **{ctx.scale}**, generated {env['date (UTC)']} UTC by `{env['command']}`.")
    failed = [s for s in ctx.stages if s.status == "failed"]
    if failed:
        out += ["", "**Failed stages:** " + ", ".join(f"`{s.name}` ({_md(s.detail)})" for s in failed)]
    out += ["", *_summary(rows), ""]
    out += ["## Claims", ""]
    for g in setting_groups(rows):
        out += _claims_table(g)
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
