"""The report: every claim id exactly once, images that exist, HTML that parses and renders in a browser."""

from __future__ import annotations

import base64
import os
import re
import shutil
import subprocess
from html.parser import HTMLParser

import pytest

from figures.pipeline.context import Context, StageResult
from figures.pipeline.render import render_figure
from figures.plots import registry
from figures.report import assemble
from figures.report.write import write_report
from theory import claims

V = claims.Verdict
BROWSERS = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")


def _records():
    sub = claims.SubCheck.tolerance("closed form vs NC batch", value=3e-16, tol=1e-12, instances=60)
    return [
        claims.Claim.from_subchecks("T4", [sub], command="python -m theory --quick"),
        claims.Claim(
            "S1",
            V.REPRODUCED,
            (claims.Evidence("etf_mean <b>", 1e-3, 2e-4, "std", n=3),),
            setting={"data": "synthetic", "normalization": "ball"},
            command="python -m synthetic sweep s1",
            figures=("conditions_scl",),
            notes="note with <script>alert('x')</script> & ampersand",
        ),
        claims.Claim(
            "S1", V.PARTLY, setting={"scale": "paper"}, command="python -m synthetic sweep s1 --scale paper"
        ),
        claims.Claim(
            "S3", V.NOT_REPRODUCED, (claims.Evidence("etf_mean HUCL beta=30", 0.4, 0.02, "std", n=3),)
        ),
        claims.Claim("W5", V.PARTLY, (claims.Evidence("ratio", 1.0, 0.01, "ci", n=100, level=0.99),)),
        claims.not_run("R1", "python -m realdata train ..."),
    ]


@pytest.fixture()
def ctx(all_tables, tmp_path):
    specs = [registry.get(i) for i in ("conditions_scl", "harris_gap", "near_nc_init", "pot_exceedances")]
    c = Context(
        scale="quick",
        results=tmp_path / "results",
        out=tmp_path / "out",
        figures=specs,
        argv=["--scale", "quick"],
    )
    tables = {k: v for k, v in all_tables.items() if not k.startswith("pot_")}
    c.rendered = [render_figure(s, tables, c.out) for s in specs]
    c.records = _records()
    c.stages = [
        StageResult("theory", "ok", 1.5, "9 PASS"),
        StageResult("synthetic", "failed", 0.2, "ValueError: <bad> table", "Traceback ...\nValueError"),
    ]
    return c


def _table_ids_md(text: str) -> list[str]:
    part = text.split("## Claims", 1)[1].split("## Figures", 1)[0]
    return [m.group(1) for m in re.finditer(r"^\| ([A-Za-z0-9-]+) \|", part, re.M) if m.group(1) != "id"]


def test_report_lists_every_claim_exactly_once_and_its_images_exist(ctx):
    paths = write_report(ctx)
    md = paths["md"].read_text()
    assert _table_ids_md(md) == list(claims.CATALOGUE)
    for link in re.findall(r"\]\(([^)]+)\)", md):
        assert (ctx.out / link).is_file(), link
    assert "**NOT RUN**" in md and "python -m realdata train" in md
    assert "synthetic" in md.split("**Failed stages:**", 1)[1].splitlines()[0]
    # a claim without any record reads NOT RUN with its command
    r2 = next(line for line in md.splitlines() if line.startswith("| R2 |"))
    assert "NOT RUN" in r2 and "python -m realdata" in r2
    # the further S1 record is listed under the first
    s1 = next(line for line in md.splitlines() if line.startswith("| S1 |"))
    assert "REPRODUCED" in s1 and "also: PARTLY" in s1
    assert (
        "pot_exceedances (not available)" in md
        and "pot_exceedances" in md.split("## Figures not produced")[1]
    )
    assert "[near_nc_init](near_nc_init.png)" in md
    assert "spectrum_scl (not rendered in this run)" in md  # not selected, not "not available"


class _Collector(HTMLParser):
    VOID = frozenset({"meta", "img", "br", "hr", "link", "input", "col", "source"})

    def __init__(self):
        super().__init__()
        self.stack, self.rows, self.imgs, self.links, self.scripts, self.errors = [], [], [], [], 0, []
        self._in_claims = False

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag not in self.VOID:
            self.stack.append(tag)
        if tag == "table" and a.get("id") == "claims-table":
            self._in_claims = True
        if tag == "tr" and self._in_claims and a.get("id", "").startswith("claim-"):
            self.rows.append(a["id"][6:])
        if tag == "img":
            self.imgs.append(a.get("src", ""))
        if tag in ("link", "script") or (tag == "a" and a.get("href", "").startswith("http")):
            self.scripts += 1
        if tag == "a":
            self.links.append(a.get("href", ""))

    def handle_endtag(self, tag):
        if tag in self.VOID:
            return
        if not self.stack or self.stack[-1] != tag:
            self.errors.append(f"unbalanced </{tag}> (open: {self.stack[-3:]})")
            return
        self.stack.pop()
        if tag == "table":
            self._in_claims = False


def test_html_parses_is_self_contained_and_escaped(ctx):
    paths = write_report(ctx)
    page = paths["html"].read_text()
    p = _Collector()
    p.feed(page)
    p.close()
    assert not p.errors and p.stack == []
    assert p.rows == list(claims.CATALOGUE)
    assert p.scripts == 0  # no script, stylesheet link or external URL
    assert "<script>alert" not in page and "&lt;script&gt;alert" in page and "&lt;bad&gt;" in page
    assert p.imgs and all(s.startswith("data:image/png;base64,") for s in p.imgs)
    for s in p.imgs:
        assert base64.b64decode(s.split(",", 1)[1])[:4] == b"\x89PNG"
    for href in p.links:  # in-page anchors or files next to the report
        if href.startswith("#"):
            assert f'id="{href[1:]}"' in page, href
        else:
            assert (ctx.out / href).is_file(), href


def _browser() -> str | None:
    for name in BROWSERS:
        path = shutil.which(name)
        if path:
            return path
    return None


def test_html_opens_in_a_headless_browser(ctx, tmp_path):
    browser = _browser()
    if browser is None:
        pytest.skip(
            f"no headless browser found (looked for {', '.join(BROWSERS)}); .ci/run installs chromium"
        )
    paths = write_report(ctx)
    flags = [
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-quic",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        f"--user-data-dir={tmp_path / 'profile'}",
        "--enable-logging=stderr",
        "--v=0",
    ]
    url = paths["html"].resolve().as_uri()
    env = {**os.environ, "HOME": str(tmp_path)}
    dom = subprocess.run(
        [browser, *flags, "--dump-dom", url], capture_output=True, text=True, timeout=90, env=env
    )
    assert dom.returncode == 0, dom.stderr[-2000:]
    assert 'id="claims-table"' in dom.stdout
    for cid in claims.CATALOGUE:
        assert f'id="claim-{cid}"' in dom.stdout, cid
    console = [ln for ln in dom.stderr.splitlines() if "CONSOLE" in ln or "Uncaught" in ln]
    assert not console, console
    shot = tmp_path / "shot.png"
    r = subprocess.run(
        [browser, *flags, "--window-size=1400,1800", f"--screenshot={shot}", url],
        capture_output=True,
        text=True,
        timeout=90,
        env=env,
    )
    assert r.returncode == 0 and shot.is_file() and shot.stat().st_size > 10_000, r.stderr[-2000:]


def test_assemble_rejects_unknown_ids_and_fills_missing_ones():
    rows = assemble.assemble([], [])
    assert [r.id for r in rows] == list(claims.CATALOGUE)
    assert all(r.record.verdict == V.NOT_RUN and r.record.command for r in rows)
    bad = claims.Claim("T1", V.PASS)
    object.__setattr__(bad, "id", "T99")
    with pytest.raises(ValueError, match="catalogue id"):
        assemble.assemble([bad], [])


def test_first_record_with_a_result_is_the_row():
    recs = [claims.not_run("S2", "cmd"), claims.Claim("S2", V.PARTLY), claims.Claim("S2", V.REPRODUCED)]
    row = next(r for r in assemble.assemble(recs, []) if r.id == "S2")
    assert row.record.verdict == V.PARTLY and [o.verdict for o in row.others] == [V.REPRODUCED]


# --- the summary, the outcome groups and the shared settings ---------------------------------


def _summary_md(md: str) -> str:
    return md.split("## Summary", 1)[1].split("## Claims", 1)[0]


def test_summary_opens_the_report_and_lists_every_claim_once_by_outcome(ctx):
    paths = write_report(ctx)
    md = paths["md"].read_text()
    assert md.index("## Summary") < md.index("## Claims")
    part = _summary_md(md)
    ids = re.findall(r"^- \*\*([A-Za-z0-9-]+)\*\*", part, re.M)
    assert sorted(ids) == sorted(claims.CATALOGUE)  # every claim exactly once
    heads = re.findall(r"^\*\*([^*]+)\*\* \((\d+)\)$", part, re.M)
    assert [h for h, _ in heads] == ["Reproduces", "Reproduces in part", "Does not reproduce", "Not run"]
    assert sum(int(n) for _, n in heads) == len(claims.CATALOGUE)
    blocks = dict(zip([h for h, _ in heads], re.split(r"^\*\*[^*]+\*\* \(\d+\)$", part, flags=re.M)[1:]))
    assert "**T4** PASS" in blocks["Reproduces"] and "**S1** REPRODUCED" in blocks["Reproduces"]
    assert "**S3** NOT REPRODUCED" in blocks["Does not reproduce"]
    # the deciding numbers: T4's worst sub-check with its tolerance; a NOT RUN claim names its command
    t4 = next(line for line in part.splitlines() if line.startswith("- **T4**"))
    assert "closed form vs NC batch" in t4 and "3.00e-16 tol 1.00e-12" in t4
    r1 = next(line for line in part.splitlines() if line.startswith("- **R1**"))
    assert "python -m realdata train" in r1
    html_page = paths["html"].read_text()
    summary_html = html_page.split('id="summary"', 1)[1].split('id="claims"', 1)[0]
    assert sorted(re.findall(r'<li><a href="#claim-([A-Za-z0-9-]+)"', summary_html)) == sorted(
        claims.CATALOGUE
    )


def test_summarize_puts_each_row_in_one_group_and_shows_unknown_verdicts():
    from types import SimpleNamespace

    from figures.report import summary

    rows = assemble.assemble(_records(), [])
    groups = summary.summarize(rows)
    seen = [r.id for g in groups for r in g.rows]
    assert sorted(seen) == sorted(claims.CATALOGUE) and len(seen) == len(set(seen))
    # a verdict the mapping does not know (e.g. one added to the record later) gets its own group
    new = SimpleNamespace(value="UNHEARD OF")
    odd = [
        SimpleNamespace(id=r.id, record=SimpleNamespace(verdict=v)) for r, v in zip(rows[:2], (new, V.PASS))
    ]
    g = summary.summarize(odd)
    assert [x.title for x in g] == ["Reproduces", "UNHEARD OF"] and g[1].rows[0].id == rows[0].id
    # dropping a known value from the mapping moves its claims to a group named by the value
    without = {k: v for k, v in summary.OUTCOME_GROUPS.items() if k != "PARTLY"}
    titles = {x.title: [r.id for r in x.rows] for x in summary.summarize(rows, without)}
    partly = [r.id for r in rows if r.record.verdict == V.PARTLY]
    assert partly and titles["PARTLY"] == partly
    # the planned UNDECIDED verdict already has its group
    assert summary.OUTCOME_GROUPS["UNDECIDED"] == "Undecided"


def test_unknown_verdict_is_rendered_in_both_files(ctx, monkeypatch):
    from figures.report import summary

    monkeypatch.setattr(
        summary, "OUTCOME_GROUPS", {k: v for k, v in summary.OUTCOME_GROUPS.items() if k != "PARTLY"}
    )
    ctx.records = [*_records(), claims.Claim("S2", V.PARTLY, (claims.Evidence("x", 1.0),))]
    paths = write_report(ctx)
    part = _summary_md(paths["md"].read_text())
    block = part.split("**PARTLY** (2)", 1)[1]  # S2 and W5, in a group named by the value
    assert "- **S2** PARTLY" in block and "- **W5** PARTLY" in block and "PARTLY: 2" in part
    assert ">PARTLY (2)</h3>" in paths["html"].read_text()


def test_a_setting_shared_by_a_group_is_stated_once():
    from figures.report import summary

    common = {"method": "exact enumeration", "scale": "default"}
    recs = [
        claims.Claim.from_subchecks(
            cid,
            [claims.SubCheck.tolerance("c", 0.0, 1e-9)],
            setting={**common, "own": cid},
            command="python -m theory",
        )
        for cid in ("T1", "T2", "T3")
    ]
    rows = assemble.assemble(recs, [])
    groups = summary.setting_groups(rows)
    assert [r.id for g in groups for r in g.rows] == list(claims.CATALOGUE)  # each row once, in order
    g = groups[0]
    assert [r.id for r in g.rows][:3] == ["T1", "T2", "T3"]
    assert g.shared == {}  # T4 ... W-law (no record: NOT RUN, empty setting) share nothing with T1
    groups = summary.setting_groups(rows[:3])
    assert groups[0].shared == common and summary.own_setting(rows[1].record, common) == {"own": "T2"}


def test_shared_setting_appears_once_in_the_report(ctx):
    common = {"method": "exact enumeration, Monte Carlo", "scale": "quick"}
    ctx.records = [
        claims.Claim.from_subchecks(
            cid,
            [claims.SubCheck.tolerance("c", 0.0, 1e-9)],
            setting=common,
            command="python -m theory --quick",
        )
        for cid in claims.CHECK_IDS
    ] + [  # the open problems, judged by the same command
        claims.Claim.from_findings(
            cid,
            [claims.SubCheck("c", claims.Verdict.FOUND)],
            setting=common,
            command="python -m theory --quick",
        )
        for cid in claims.OPEN_IDS
    ]
    paths = write_report(ctx)
    md = paths["md"].read_text()
    claims_part = md.split("## Claims", 1)[1].split("## Figures", 1)[0]
    assert claims_part.count("method=exact enumeration, Monte Carlo") == 1
    assert claims_part.count("python -m theory --quick") == 1
    t1 = next(line for line in claims_part.splitlines() if line.startswith("| T1 |"))
    assert t1.endswith("| as above | as above |")
    page = paths["html"].read_text()
    assert page.split('id="claims-table"', 1)[1].count("method=exact enumeration, Monte Carlo") == 1
