"""``report.html``: the report as one self-contained page.

It opens offline: CSS inline, every image embedded as a base64 ``data:`` URI, no script and no
external resource; every text is HTML-escaped.
"""

from __future__ import annotations

import base64
import html
import io
from pathlib import Path
from typing import Any

from figures.report.assemble import (
    _EVIDENCE_SHOWN,
    ClaimRow,
    _evidence,
    _fig_id,
    _fig_status,
    _rendered,
    _setting,
    _setting_text,
    _style_text,
)
from figures.report.summary import deciding_numbers, own_setting, setting_groups, summarize

__all__ = ["render_html"]

_THUMB_WIDTH = 300


_CSS = """
body{font-family:system-ui,-apple-system,"Segoe UI",Roboto,Helvetica,Arial,sans-serif;margin:1.5em auto;
max-width:1500px;padding:0 1em;color:#222;line-height:1.4}
h1{font-size:1.6em}h2{margin-top:1.6em;border-bottom:1px solid #ccc;padding-bottom:.2em}
table{border-collapse:collapse;width:100%;font-size:.88em}
th,td{border:1px solid #d0d0d0;padding:.35em .5em;vertical-align:top;text-align:left}
th{background:#f2f2f2}tr:nth-child(even) td{background:#fafafa}
code{font-family:ui-monospace,Menlo,Consolas,monospace;font-size:.92em;word-break:break-word}
.v{font-weight:600;white-space:nowrap;padding:.1em .4em;border-radius:3px;background:#dde6f6;color:#1c3360}
.v-UNDECIDED{background:#e4dcf3;color:#3d2470}
.v-PASS,.v-REPRODUCED{background:#d8f0d8;color:#145214}
.v-FAIL,.v-NOT-REPRODUCED{background:#f6d4d4;color:#7a1010}
.v-PARTLY{background:#fbecc8;color:#6b4a00}.v-NOT-RUN{background:#e6e6e6;color:#444}
.v-UNDECIDED{background:#dde6f6;color:#1c3a6b}
tr.group th{background:#e8eef7;font-weight:normal;border-top:2px solid #9ab}
.shared{font-size:.92em;margin-top:.2em}
ul.summary{margin:.2em 0 .8em 0;padding-left:1.4em}ul.summary li{margin:.15em 0}
h3.outcome{margin:.8em 0 .2em 0;font-size:1.05em}.nums{color:#1f4e82}
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


def _summary_html(rows: list[ClaimRow]) -> list[str]:
    """The summary: one line per claim, grouped by outcome, with the deciding numbers."""
    groups = summarize(rows)
    counts = " · ".join(f"{_e(g.title)}: {len(g.rows)}" for g in groups)
    h = ['<h2 id="summary">Summary</h2>', f"<p>{len(rows)} claims — {counts}.</p>"]
    for g in groups:
        h.append(f'<h3 class="outcome">{_e(g.title)} ({len(g.rows)})</h3><ul class="summary">')
        for r in g.rows:
            rec = r.record
            line = (
                f'<li><a href="#claim-{_e(r.id)}"><strong>{_e(r.id)}</strong></a> '
                f"{_verdict_badge(rec.verdict)} {_e(rec.statement)}"
            )
            nums = deciding_numbers(rec)
            if nums:
                line += ': <span class="nums">' + "; ".join(_e(n) for n in nums) + "</span>"
            elif rec.verdict.value == "NOT RUN":
                line += f" — produce with <code>{_e(rec.command) or '—'}</code>"
                if rec.evidence:
                    line += ' <span class="na">(smaller-scale evidence in the claims table)</span>'
            line += "".join(
                f"; also {_verdict_badge(o.verdict)} <span class='na'>{_e(_setting(o))}</span>"
                for o in r.others
            )
            h.append(line + "</li>")
        h.append("</ul>")
    return h


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
    h += _summary_html(rows)
    h += [
        '<h2 id="claims">Claims</h2>',
        '<table id="claims-table"><thead><tr><th>id</th><th>statement</th>'
        "<th>verdict</th><th>evidence</th><th>figures</th><th>command</th><th>setting</th></tr></thead>",
    ]
    for g in setting_groups(rows):
        commands = {r.record.command for r in g.rows}
        shared_cmd = len(g.rows) > 1 and len(commands) == 1 and next(iter(commands))
        head = f"<strong>{_e(g.ids)}</strong>"
        if g.shared:
            head += f'<div class="shared"><em>setting of every claim below:</em> {_e(_setting_text(g.shared))}</div>'
        if shared_cmd:
            head += f'<div class="shared"><em>command of every claim below:</em> <code>{_e(shared_cmd)}</code></div>'
        h.append(f'<tbody><tr class="group"><th colspan="7">{head}</th></tr>')
        for r in g.rows:
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
            cmd = (
                '<span class="na">as above</span>' if shared_cmd else f"<code>{_e(rec.command) or '—'}</code>"
            )
            own = _setting_text(own_setting(rec, g.shared))
            setting = _e(own) or ('<span class="na">as above</span>' if g.shared else "—")
            h.append(
                f'<tr id="claim-{_e(r.id)}"><td><strong>{_e(r.id)}</strong></td><td>{_e(rec.statement)}</td>'
                f"<td>{_verdict_badge(rec.verdict)}{others}</td><td>{_evidence_html(rec)}</td>"
                f'<td class="thumbs">{"".join(figs) or "—"}</td><td>{cmd}</td>'
                f"<td>{setting}</td></tr>"
            )
        h.append("</tbody>")
    h.append("</table>")
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
