"""The claim records and tables of the real-data claims, from whatever is stored.

:func:`write_records` (``python -m realdata claims records``; also the last step of every claim
command and of the digits scale) judges the stored runs with the declared rules of
:mod:`realdata.claims.judges` and writes, under the main job's results folder ``RESULTS``:

* ``RESULTS/records/<id>.json`` for R1-R5 and W1-W4: a JSON array holding one
  :class:`theory.claims.Claim` (:func:`theory.claims.to_json`). Only paper-scale runs decide a
  verdict; a claim whose paper-scale runs are absent reads NOT RUN with the command that runs them,
  and the smoke-test and digits-scale evidence is attached as sub-checks with their own setting;
* ``RESULTS/tables/realdata.csv`` (every real-data run and epoch, a ``grid`` column, no class
  means), ``realdata_summary.csv`` (final epoch, mean/std/n over seeds), ``realdata_eval.csv``
  (frozen-feature evaluations), ``weince_gate.csv`` (per-anchor gate values ``epoch, lambda,
  lambda_rho, lambda_aic, daic`` and ``source``: paper scale, else digits, else smoke test).

The W1/W2 evidence comes from ``RESULTS/weince/diagnostics.json`` (:mod:`realdata.claims.run`), W4's
from ``RESULTS/bench/gpu_check.json`` or ``RESULTS/bench/realdata_cpu.json``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pandas as pd

from realdata.claims.grids import CLAIM_GROUPS, FOLDERS, digits_runs, group_command
from realdata.claims.judges import (
    final_summary,
    judge_r1,
    judge_r2,
    judge_r3,
    judge_r4,
    judge_r5,
    judge_w1,
    judge_w2,
    judge_w3,
    judge_w4,
)
from realdata.training import store
from synthetic.store.folders import atomic_write_text
from theory.claims import Claim, Verdict, statement, to_json

__all__ = ["REALDATA_IDS", "DIGITS_HCL", "DIGITS_TWO", "write_records", "digits_tables", "probe_values"]

REALDATA_IDS = ("R1", "R2", "R3", "R4", "R5", "W1", "W2", "W3", "W4")
DIGITS_HCL, DIGITS_TWO = "digits_hcl", "digits_weince"

_DIGITS_SETTING = {
    "data": "digits (scikit-learn, 8x8 greyscale, 1437 train / 360 test)",
    "encoder": "smallcnn width 16",
    "batch_size": "128",
    "epochs": "20",
    "seeds": "3",
    "scale": "digits",
}
_PAPER_SETTING = {
    "R1": {
        "data": "CIFAR-100",
        "encoder": "ResNet-50 (CIFAR stem) + HCL head, d=99",
        "normalization": "ball",
        "views": "label (no augmentation)",
        "batch_size": "512",
        "K": "256 sampled",
        "epochs": "400",
    },
    "W": {
        "data": "CIFAR-100",
        "encoder": "ResNet-18 (CIFAR stem) + WeiNCE projector (64)",
        "views": "SimCLR",
        "batch_size": "256",
        "epochs": "100",
        "seeds": "7, 21, 63, 84",
        "recipe": "released",
    },
}


def realdata_folder(results: str | Path) -> Path:
    """``RESULTS/realdata``: the parent of every real-data store."""
    return Path(results) / "realdata"


def load_folder(folder: Path) -> pd.DataFrame:
    """The tidy table of a store folder (empty when there is none)."""
    return store.load(folder) if (folder / "runs").is_dir() else pd.DataFrame()


def read_diagnostics(results: str | Path) -> dict[str, Any]:
    """``RESULTS/weince/diagnostics.json`` (empty when absent)."""
    p = Path(results) / "weince" / "diagnostics.json"
    return json.loads(p.read_text(encoding="utf-8")) if p.is_file() else {}


# --------------------------------------------------------------------------------------------
# records
# --------------------------------------------------------------------------------------------


def _claim(
    cid: str, paper: Any, others: list[Any], command: str, paper_setting: dict[str, str], note: str
) -> Any:
    """One record: the paper-scale sub-check decides; smaller scales are evidence (NOT RUN)."""
    others = [o for o in others if o is not None]
    subs = tuple(s for s in (paper, *others) if s is not None)
    criterion = "declared in realdata.claims.judges (docs/realdata.md, 'Verdict rules'), before the runs"
    if paper is not None and paper.verdict != Verdict.NOT_RUN:
        return Claim(
            cid,
            paper.verdict,
            paper.evidence,
            subs,
            paper_setting,
            command,
            criterion,
            statement=statement(cid),
            notes=f"paper-scale runs of python -m realdata. {note}".strip(),
        )
    if others:
        first = others[0]
        own = "; ".join(f"{o.setting.get('scale', '?')}: {o.verdict.value}" for o in others)
        notes = (
            f"NOT RUN at paper scale: {command}. The evidence is from smaller scales on other data "
            f"(the digits scale of the main job: python -m realdata digits), not a reproduction of the "
            f"paper's claim; their own verdicts under the declared rules: {own}. {note}"
        ).strip()
        setting = {**dict(first.setting), "paper_scale": "NOT RUN"}
        return Claim(cid, Verdict.NOT_RUN, first.evidence, subs, setting, command, criterion, notes=notes)
    return Claim(
        cid,
        Verdict.NOT_RUN,
        setting=paper_setting,
        command=command,
        criterion=criterion,
        notes="no real-data result stored yet",
    )


def probe_values(eval_table: pd.DataFrame, column: str) -> dict[str, list[float]]:
    """Per-method lists of an evaluation column, in percent (one value per encoder seed)."""
    if eval_table is None or len(eval_table) == 0 or column not in eval_table:
        return {}
    return {m: [100.0 * float(v) for v in g[column].dropna()] for m, g in eval_table.groupby("method")}


def _bench(results: Path) -> tuple[dict[str, Any] | None, bool]:
    for name, gpu in (("gpu_check.json", True), ("realdata_cpu.json", False)):
        p = results / "bench" / name
        if p.is_file():
            data = json.loads(p.read_text(encoding="utf-8"))
            if "weince_overhead_pct" in data:
                return data, gpu
    return None, False


def digits_tables(rd: Path, scale: str) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    """The digits runs of ``scale`` (other scales' runs in the same folders are left out)."""
    hcl, two = digits_runs(scale)
    out = []
    for folder, cfgs in ((rd / DIGITS_HCL, hcl), (rd / DIGITS_TWO, two)):
        done = store.done_keys(folder)
        keys = [c.resolved().key() for c in cfgs if c.resolved().key() in done]
        out.append(store.load(folder, keys) if keys else pd.DataFrame())
    ev = load_folder(rd / DIGITS_TWO / "eval")
    if len(ev) and len(out[1]):
        ev = ev[ev["trained_key"].astype(str).isin(set(out[1]["run_key"].astype(str)))]
    return out[0], out[1], ev


def _scale_subchecks(
    t: dict[str, pd.DataFrame],
    setting: dict[str, str],
    *,
    paper: bool,
    C: int,
    top_beta: float,
    diag: dict[str, Any],
    eval_table: pd.DataFrame,
    wsetting: dict[str, str],
) -> dict[str, Any]:
    """Sub-checks of one scale from its tables (None where nothing is stored)."""
    s = final_summary(t.get("hcl", pd.DataFrame()))
    out: dict[str, Any] = {cid: None for cid in REALDATA_IDS}
    if len(s):
        out["R1"] = judge_r1(s, setting, paper=paper)
        out["R2"] = judge_r2(s, setting, C)
        out["R3"] = judge_r3(s, setting, top_beta)
    s4 = final_summary(t.get("r4", pd.DataFrame()))
    if len(s4):
        out["R4"] = judge_r4(s4, {**setting, "init": "near-NC (HSCL beta=10 encoder)"})
    s5 = {
        ds: final_summary(t[f"r5_{ds}"]) for ds in ("cifar100", "tiny-imagenet") if len(t.get(f"r5_{ds}", ()))
    }
    if s5:
        out["R5"] = judge_r5(
            s5, {**setting, "data": ", ".join(s5), "encoder": setting.get("r5_encoder", "ResNet-18")}
        )
    for cid, kind, judge in (("W1", "pot", judge_w1), ("W2", "link", judge_w2)):
        if "InfoNCE" in diag.get(kind, {}):
            out[cid] = judge(
                diag[kind]["InfoNCE"], {**wsetting, "encoder_trained_with": "InfoNCE"}, "InfoNCE encoder"
            )
    if len(eval_table):
        out["W3"] = judge_w3(probe_values(eval_table, "probe_test_top1"), wsetting)
    return out


def write_records(results: str | Path = "results", *, digits_scale: str = "default") -> list[Path]:
    """Judge what is stored under ``results`` and write the records and tables (module docstring).

    Args:
        results: the main job's results folder.
        digits_scale: which digits runs are the digits evidence (``default`` or ``quick``).
    """
    results = Path(results)
    rd = realdata_folder(results)
    diag = read_diagnostics(results)
    dh, dt, d_eval = digits_tables(rd, digits_scale)
    tables: dict[str, pd.DataFrame] = {DIGITS_HCL: dh, DIGITS_TWO: dt}
    per_scale = {}
    for scale in ("paper", "small"):
        sfx = "" if scale == "paper" else "_small"
        t = {
            "hcl": load_folder(rd / (FOLDERS["r1-r3"] + sfx)),
            "r4": load_folder(rd / (FOLDERS["r4"] + sfx)),
            "w": load_folder(rd / (FOLDERS["w1-w3"] + sfx)),
        }
        for ds in ("cifar100", "tiny-imagenet"):
            t[f"r5_{ds}"] = load_folder(rd / f"r5_{ds.replace('-', '')}{sfx}")
        ev = load_folder(rd / (FOLDERS["w1-w3"] + sfx) / "eval")
        tag = (
            {"scale": "paper"}
            if scale == "paper"
            else {
                "scale": "small (smoke test, fake or tiny data)",
                "encoder": "smallcnn width 4",
                "epochs": "1",
            }
        )
        per_scale[scale] = _scale_subchecks(
            t,
            {**_PAPER_SETTING["R1"], **tag},
            paper=scale == "paper",
            C=100,
            top_beta=30.0,
            diag=diag.get(scale, {}),
            eval_table=ev,
            wsetting={**_PAPER_SETTING["W"], **tag},
        )
        tables.update({f"{k}{sfx}": v for k, v in t.items() if len(v)})
        if len(ev):
            tables[f"eval{sfx}"] = ev
    dset = {**_DIGITS_SETTING, "head": "hcl d=9 ball", "views": "label", "estimator": "expectation"}
    dtwo = {
        **_DIGITS_SETTING,
        "views": "SimCLR (crop >= 0.5)",
        "head": "weince 64",
        "recipe": "core",
        "probe": "linear, 100 epochs, Adam 3e-4, stratified 80/20",
    }
    if digits_scale != "default":
        dset["scale"] = dtwo["scale"] = f"digits ({digits_scale})"
    digits = _scale_subchecks(
        {"hcl": dh},
        dset,
        paper=False,
        C=10,
        top_beta=10.0,
        diag=diag.get("digits", {}),
        eval_table=d_eval,
        wsetting=dtwo,
    )
    bench, gpu = _bench(results)
    if bench:
        w4 = judge_w4(
            bench, {"encoder": "ResNet-18", "scale": "GPU" if gpu else "CPU", "source": "benchmarks"}, gpu=gpu
        )
        (per_scale["paper"] if gpu else digits)["W4"] = w4
    cmd = {g: group_command(g, results=str(results)) for g in CLAIM_GROUPS}
    commands = {
        "R1": cmd["r1-r3"],
        "R2": cmd["r1-r3"],
        "R3": cmd["r1-r3"],
        "R4": cmd["r4"],
        "R5": cmd["r5"],
        "W1": cmd["w1-w3"],
        "W2": cmd["w1-w3"],
        "W3": cmd["w1-w3"],
        "W4": f"python -m benchmarks.gpu_check --out {results}/bench/gpu_check.json (on a GPU)",
    }
    notes = {
        "W1": f"scores file: {diag.get('files_source', 'none')}",
        "W4": "CPU: python -m benchmarks.bench_realdata",
    }
    written = []
    for cid in REALDATA_IDS:
        setting = _PAPER_SETTING["W" if cid.startswith("W") else "R1"]
        rec = _claim(
            cid,
            per_scale["paper"][cid],
            [per_scale["small"][cid], digits[cid]],
            commands[cid],
            setting,
            notes.get(cid, ""),
        )
        written.append(atomic_write_text(results / "records" / f"{cid}.json", to_json([rec])))
    evals = {k: tables.pop(k) for k in [k for k in tables if k.startswith("eval")]}
    evals["digits"] = d_eval
    written += _write_tables(results, tables, evals, rd)
    return written


def _write_tables(
    results: Path, tables: dict[str, pd.DataFrame], evals: dict[str, pd.DataFrame], rd: Path
) -> list[Path]:
    out = []
    frames = [
        t.drop(columns=["class_means"], errors="ignore").copy().assign(grid=name)  # copy: one block
        for name, t in tables.items()
        if len(t)
    ]
    if frames:
        allt = pd.concat(frames, ignore_index=True, sort=False)
        allt = allt[["grid", *[c for c in allt.columns if c != "grid"]]]
        out.append(atomic_write_text(results / "tables" / "realdata.csv", allt.to_csv(index=False)))
        summ = pd.concat(
            [final_summary(t).assign(grid=n) for n, t in tables.items() if len(t)], ignore_index=True
        )
        out.append(atomic_write_text(results / "tables" / "realdata_summary.csv", summ.to_csv(index=False)))
    ev = [t.assign(grid=n) for n, t in evals.items() if len(t)]
    if ev:
        out.append(
            atomic_write_text(
                results / "tables" / "realdata_eval.csv",
                pd.concat(ev, ignore_index=True, sort=False).to_csv(index=False),
            )
        )
    gate = _gate_table(rd)
    if gate is not None:
        out.append(atomic_write_text(results / "tables" / "weince_gate.csv", gate.to_csv(index=False)))
    return out


def _gate_table(rd: Path) -> pd.DataFrame | None:
    """Gate values of the paper-scale WeiNCE runs, else the digits ones, else the smoke-test ones."""
    for folder in (rd / FOLDERS["w1-w3"], rd / DIGITS_TWO, rd / (FOLDERS["w1-w3"] + "_small")):
        gdir = folder / "gate"
        parts = (
            [pd.read_csv(p).assign(source=f"{folder.name}/{p.stem}") for p in sorted(gdir.glob("*.csv"))]
            if gdir.is_dir()
            else []
        )
        if parts:
            return pd.concat(parts, ignore_index=True)
    return None
