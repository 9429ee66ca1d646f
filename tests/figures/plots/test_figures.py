"""Every registered figure renders from tiny hand-made tables; missing inputs read "not available"."""

from __future__ import annotations

import ast
import pkgutil
from pathlib import Path

import matplotlib
import pandas as pd
import pytest
from matplotlib.figure import Figure

import figures
from figures.pipeline.render import render_figure, save_figure
from figures.plots import registry, style
from figures.plots.spec import availability
from theory import claims

SPECS = registry.all_figures()
IDS = [s.id for s in SPECS]
PKG = Path(figures.__file__).resolve().parent / "plots"


def test_registry_lists_every_figure_module_once():
    mods = sorted(m.name for m in pkgutil.iter_modules([str(PKG)]) if m.name.startswith("fig_"))
    assert sorted(m.__name__.rsplit(".", 1)[1] for m in registry.MODULES) == mods
    assert len(IDS) == len(set(IDS))
    for s in SPECS:
        assert s.claims and set(s.claims) <= set(claims.CATALOGUE), s.id
        assert s.title and s.produce and s.description, s.id


def test_figure_modules_import_no_computing_package():
    """The figure modules compute nothing: of theory, synthetic and realdata they import only the
    option literals (theory.options); the pipeline's producers ask the computing packages."""
    for path in PKG.glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            names = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module]
            for n in names:
                assert n == "theory.options" or n.split(".")[0] not in ("theory", "synthetic", "realdata"), (
                    path.name,
                    n,
                )


def test_style_notes_are_stated_in_the_module_docstring():
    import importlib

    for s in SPECS:
        if s.style_note:
            mod = importlib.import_module(s.render.__module__)
            assert "reproduced in the style of the authors' notebooks" in mod.__doc__.lower(), s.id


@pytest.mark.parametrize("figure_id", IDS)
def test_each_figure_renders_from_a_tiny_table(figure_id, all_tables, tmp_path):
    spec = registry.get(figure_id)
    avail = availability(spec, all_tables)
    assert avail.ok, avail.reason
    fig = spec.build(all_tables)
    assert isinstance(fig, Figure)
    text = style.figure_text(fig)
    assert text["suptitle"] == [spec.title]
    visible = [a for a in fig.axes if a.get_visible() and a.axison and a.get_label() != "<colorbar>"]
    assert visible
    for ax in visible:
        if ax.get_xlabel() or ax.get_ylabel() or ax.lines or ax.collections or ax.images:
            # a panel with data has axis labels, or shares the axis with a labelled panel (twinx)
            assert any(a.get_xlabel() for a in ax.get_shared_x_axes().get_siblings(ax)), (figure_id, ax)
            assert any(a.get_ylabel() for a in ax.get_shared_y_axes().get_siblings(ax)), (figure_id, ax)
    assert any(a.get_legend() is not None for a in fig.axes) or spec.id == "gram_etf"
    paths = save_figure(fig, tmp_path, spec.id)
    for fmt, magic in (("png", b"\x89PNG"), ("pdf", b"%PDF")):
        p = paths[fmt]
        assert p == tmp_path / f"{spec.id}.{fmt}" and p.stat().st_size > 1000
        assert p.read_bytes()[:4] == magic
    assert not list(tmp_path.glob(".*.tmp"))


@pytest.mark.parametrize("figure_id", IDS)
def test_missing_inputs_read_not_available_with_the_command(figure_id, tmp_path):
    spec = registry.get(figure_id)
    for tables in ({}, {n: pd.DataFrame() for n in spec.table_names}):
        avail = availability(spec, tables)
        assert not avail.ok and ("absent" in avail.reason or "empty" in avail.reason)
        assert avail.produce == spec.produce and avail.produce
        r = render_figure(spec, tables, tmp_path)
        assert r.status == "not available" and r.reason == avail.reason and not r.files
    assert not list(tmp_path.iterdir())


def test_family_without_runs_is_not_available(all_tables):
    only_scl = {
        **all_tables,
        "synthetic": all_tables["synthetic"][all_tables["synthetic"]["method"].isin(["SCL", "HSCL"])],
    }
    a = availability(registry.get("conditions_ucl"), only_scl)
    assert not a.ok and "UCL / HUCL" in a.reason
    assert availability(registry.get("conditions_scl"), only_scl).ok


def test_ncm_without_heldout_accuracy_is_not_available(all_tables):
    t = all_tables["synthetic"].assign(ncm_acc=float("nan"))
    a = availability(registry.get("ncm_scl"), {"synthetic": t})
    assert not a.ok and "ncm_acc" in a.reason


def test_normalization_renders_the_panels_present(all_tables):
    spec = registry.get("normalization_scl")
    t = all_tables["synthetic"]
    no_ball = {"synthetic": t[t["normalization"] != "ball"], "spectrum": all_tables["spectrum"]}
    fig = spec.build(no_ball)
    titles = " ".join(style.figure_text(fig)["titles"])
    assert "none" in titles and "sphere" in titles and "ball" not in titles
    assert len(fig.axes) == 4  # 2 rows (spectrum, ETF) x 2 normalisations
    assert availability(spec, {"synthetic": t}).ok  # the spectrum table is optional
    fig = spec.build({"synthetic": t})  # no spectrum table: the ETF row only
    assert len(fig.axes) == 3


def test_spectrum_draws_an_early_and_the_final_epoch(all_tables):
    fig = registry.get("spectrum_scl").build(all_tables)
    titles = style.figure_text(fig)["titles"]
    assert titles == ["epoch 2", "epoch 10 (final)"]
    ax = fig.axes[0]
    assert ax.get_ylim()[1] == pytest.approx(2.0)
    dashed = [ln for ln in ax.lines if ln.get_linestyle() == "--"]
    assert dashed and all(y == 0 for y in dashed[0].get_ydata())


def test_near_nc_figure_needs_init_nc(all_tables):
    spec = registry.get("near_nc_init")
    t = all_tables["synthetic"]
    a = availability(spec, {"synthetic": t.drop(columns=["init"])})
    assert not a.ok and "init" in a.reason
    a = availability(spec, {"synthetic": t[t["init"] != "nc"]})
    assert not a.ok and "init = 'nc'" in a.reason
    fig = spec.build(all_tables)
    assert [a.get_title() for a in fig.axes if a.get_title()] == ["SCL", "HSCL", "UCL", "HUCL"]


def test_renderers_leave_global_matplotlib_state_alone(all_tables):
    before = dict(matplotlib.rcParams)
    registry.get("harris_gap").build(all_tables)
    assert dict(matplotlib.rcParams) == before


def test_select_by_figure_or_claim_id():
    assert [s.id for s in registry.select(["harris_gap"])] == ["harris_gap"]
    ids = [s.id for s in registry.select(["S2"])]
    assert "ucl_positives" in ids and all("S2" in registry.get(i).claims for i in ids)
    assert len(registry.select(None)) == len(SPECS)
    with pytest.raises(ValueError, match="neither a figure id"):
        registry.select(["nope"])


@pytest.mark.parametrize("figure_id", IDS)
def test_a_table_without_a_needed_column_is_named_by_every_renderer(figure_id, all_tables):
    """Every renderer checks its input tables: dropping one needed column of one table is a
    ValueError naming that table and listing the columns, before anything is drawn."""
    spec = registry.get(figure_id)
    need = next((n for n in spec.needs if n.columns and n.name in all_tables), None)
    assert need is not None, f"{figure_id} declares no table with required columns"
    tables = dict(all_tables)
    tables[need.name] = all_tables[need.name].drop(columns=[need.columns[0]])
    with pytest.raises(ValueError, match=rf"tables\['{need.name}'\] must have .*{need.columns[0]}"):
        spec.build(tables)
