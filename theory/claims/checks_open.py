"""Judges of the open problems O1, O1b, O1c (docs/open_problems.md): HUCL's optimal geometry.

Jiang et al., arXiv 2311.05139, open problem "a tight lower bound for HUCL, and its minimiser".
The computations and the declared criteria are in :mod:`theory.claims.open_search`; each judge
appends ``(claim id, SubCheck)`` pairs like every theory check:

* **O1** (:func:`check_landscape`): per (normalisation, psi, C, n) a FOUND / NOT FOUND finding,
  ``beta_c`` = the smallest grid beta at which a free-embedding configuration beats NC by the
  declared margin, with the minimiser's geometry; PASS / FAIL controls: the closed-form NC value
  equals the loss at the NC batch, and the search never beats NC for SCL, HSCL and UCL (where NC
  is proven optimal) and reaches NC there.
* **O1c** (same function): per setting, the bracket ``[certified lower bound, best found]`` at the
  bracket betas; FOUND if it closes (width within the margin) at every beta, NOT FOUND otherwise;
  PASS / FAIL: no configuration is below the certified bound.
* **O1b** (:func:`check_hessian`): per C, FOUND / NOT FOUND: the beta at which NC becomes a saddle
  on the sphere (smallest eigenvalue of the Riemannian Hessian, rotations removed), and the beta at
  which NC stops being a KKT point of the ball; PASS / FAIL: SCL, UCL and HSCL have no negative
  curvature at NC, NC is a critical point, rotations are exact zero modes, and sympy agrees with
  autograd (split curvature, the Hessian's quadratic form, the ball's threshold).
"""

from __future__ import annotations

import math
from collections import defaultdict
from typing import Any

from theory.claims._support import _add
from theory.claims.open_search import (
    AGREE_TOL,
    BETA_MAX,
    CONTROL_TOL,
    FOUND_MARGIN,
    REACH_TOL,
    SADDLE_MARGIN,
    hessian_rows,
    landscape_rows,
    scale_of,
)
from theory.claims.record import Evidence, SubCheck, Verdict

__all__ = ["CRITERIA", "check_landscape", "check_hessian"]

#: The verdict rule of each open problem, declared before any run (theory.claims.open_search).
CRITERIA: dict[str, str] = {
    "O1": (
        f"FOUND in a setting if some grid beta <= {BETA_MAX:g} has a configuration with "
        f"(L_NC - L_best) / L_NC > {FOUND_MARGIN:g}; beta_c is the smallest such beta. FAIL if a "
        f"control (SCL, HSCL, UCL) goes below NC by more than {CONTROL_TOL:g} (relative) or does "
        f"not reach it within {REACH_TOL:g}, or if the closed-form NC value differs from the loss "
        "at the NC batch by more than 1e-12"
    ),
    "O1b": (
        f"FOUND for a C if the smallest eigenvalue of the Riemannian Hessian at NC (sphere, "
        f"rotations removed) is below -{SADDLE_MARGIN:g} at some grid beta <= {BETA_MAX:g} "
        f"(threshold refined by bisection). FAIL if SCL, UCL or HSCL show such a negative "
        f"eigenvalue, or sympy and autograd differ by more than {AGREE_TOL:g}"
    ),
    "O1c": (
        f"FOUND in a setting if best - bound <= {FOUND_MARGIN:g} * bound at every bracket beta "
        f"(the certified bound is tight); NOT FOUND otherwise. FAIL if a configuration is below "
        f"the certified bound by more than {CONTROL_TOL:g} (relative)"
    ),
}


def _key(r: dict[str, Any]) -> tuple[str, str, int, int]:
    return (r["normalization"], r["psi"], r["num_classes"], r["n"])


def _setting(k: tuple[str, str, int, int]) -> dict[str, str]:
    return {"normalization": k[0], "psi": k[1], "C": str(k[2]), "n": str(k[3]), "d": str(k[2] - 1)}


def _finding(claim: str, what: str, found: bool, evidence: list[Evidence], **kw: Any) -> tuple[str, SubCheck]:
    v = Verdict.FOUND if found else Verdict.NOT_FOUND
    return claim, SubCheck(what, v, tuple(evidence), **kw)


def check_landscape(out: list[tuple[str, SubCheck]], quick: bool, seed: int, *, large: bool = False) -> None:
    """O1 and O1c: the free-embedding search against NC and the certified bound (module docstring)."""
    sc = scale_of(quick, large)
    name = "large" if large else ("quick" if quick else "full")
    rows = landscape_rows(name, seed)
    err = max(abs(r["nc_loss"] - r["nc"]) for r in rows)
    _add(
        out,
        "O1",
        "closed-form NC value (hucl_at_nc_batch / scl_optimum) = loss at the NC batch",
        len(rows),
        "error",
        err,
        1e-12,
    )
    controls = [r for r in rows if r["loss"] in ("SCL", "HSCL", "UCL")]
    low = min((r["best"] - r["nc"]) / r["nc"] for r in controls)
    worst = min(controls, key=lambda r: (r["best"] - r["nc"]) / r["nc"])
    _add(
        out,
        "O1",
        "controls SCL, HSCL, UCL: the search never beats NC (relative best - NC)",
        len(controls),
        "gap",
        low,
        CONTROL_TOL,
        f"closest: {worst['loss']} C={worst['num_classes']} beta={worst['beta']:g} {worst['normalization']}",
    )
    reach = max((r["best"] - r["nc"]) / r["nc"] for r in controls)
    _add(
        out,
        "O1",
        "controls SCL, HSCL, UCL: the search reaches the known optimum NC (relative best - NC)",
        len(controls),
        "error",
        reach,
        REACH_TOL,
    )
    hucl: dict[tuple[str, str, int, int], list[dict[str, Any]]] = defaultdict(list)
    for r in rows:
        if r["loss"] == "HUCL":
            hucl[_key(r)].append(r)
    for k, rs in hucl.items():
        hits = [r for r in rs if r["beats_nc"]]
        setting = _setting(k)
        if hits:
            h = hits[0]
            ev = [
                Evidence("beta_c", h["beta"]),
                Evidence("relative gain over NC", h["gain"]),
                Evidence("best", h["best"]),
                Evidence("NC", h["nc"]),
                Evidence("within_class_variation", h["within_class_variation"]),
                Evidence("etf_mean of the class means", h["etf_mean"]),
                Evidence("rank_1e-4 of the class means", h["rank_1e-4"]),
                Evidence("mean norm", h["mean_norm"]),
            ]
            prev = [r["beta"] for r in rs if r["beta"] < h["beta"]]
            note = f"not beaten at beta <= {max(prev):g}" if prev else "beaten at the first grid beta"
        else:
            ev = [Evidence("largest relative gain", max(r["gain"] for r in rs))]
            note = f"none up to beta = {max(r['beta'] for r in rs):g}"
        out.append(
            _finding(
                "O1",
                f"HUCL beats NC ({k[0]}, psi={k[1]}, C={k[2]}, n={k[3]}, {sc.restarts} restarts)",
                bool(hits),
                ev,
                instances=len(rs) * sc.restarts,
                setting=setting,
                note=note,
            )
        )
        br = [r for r in rs if r["beta"] in sc.bracket_betas]
        widths = [(r["beta"], r["best"] - r["bound"], r["nc"] - r["bound"]) for r in br]
        closes = all(w <= FOUND_MARGIN * r["bound"] for (_, w, _), r in zip(widths, br, strict=True))
        ev = [Evidence(f"width beta={b:g}", w) for b, w, _ in widths]
        ev += [Evidence(f"NC - bound beta={b:g}", w) for b, w, _ in widths]
        out.append(
            _finding(
                "O1c",
                f"bracket [bound, best] closes ({k[0]}, psi={k[1]}, C={k[2]}, n={k[3]})",
                closes,
                ev,
                instances=len(br),
                setting=setting,
                note=f"bound {br[0]['bound']:.6f} (the UCL optimum, plug-in form); widest {max(w for _, w, _ in widths):.4f}",
            )
        )
    below = min((r["best"] - r["bound"]) / r["bound"] for r in rows)
    _add(
        out,
        "O1c",
        "no configuration below the certified lower bound (relative best - bound)",
        len(rows),
        "gap",
        below,
        CONTROL_TOL,
    )


def check_hessian(out: list[tuple[str, SubCheck]], quick: bool, seed: int, *, large: bool = False) -> None:
    """O1b: the Hessian at NC on the sphere, the ball's KKT threshold, sympy against autograd."""
    from theory.hcl import nc_hessian  # lazy: sympy and the Hessian only for this group

    sc = scale_of(quick, large)
    name = "large" if large else ("quick" if quick else "full")
    rows = hessian_rows(name)
    eig = [r for r in rows if r["kind"] == "eigen"]
    controls = [r for r in eig if r["loss"] != "HUCL"]
    low = min(controls, key=lambda r: r["min_eigenvalue"])
    _add(
        out,
        "O1b",
        "SCL, UCL (beta 0) and HSCL (grid): no negative curvature at NC (smallest eigenvalue)",
        len(controls),
        "gap",
        low["min_eigenvalue"],
        SADDLE_MARGIN,
        f"smallest: {low['loss']} C={low['num_classes']} beta={low['beta']:g}",
    )
    _add(
        out,
        "O1b",
        "NC is a critical point on the sphere (largest tangential gradient)",
        len(eig),
        "error",
        max(r["grad_tangent"] for r in eig),
        1e-12,
    )
    _add(
        out,
        "O1b",
        "rotations are exact zero modes (largest |Hess xi| over unit rotation directions)",
        len(eig),
        "error",
        max(r["rotation_residual"] for r in eig),
        1e-10,
    )
    for r in rows:
        C = r["num_classes"]
        if r["kind"] == "saddle":
            b = r["beta_saddle"]
            mins = [
                (e["beta"], e["min_eigenvalue"]) for e in eig if e["loss"] == "HUCL" and e["num_classes"] == C
            ]
            ev = [Evidence("beta_saddle", b)] if not math.isnan(b) else []
            ev += [Evidence(f"min eigenvalue beta={x:g}", v) for x, v in mins]
            out.append(
                _finding(
                    "O1b",
                    f"HUCL: NC becomes a saddle on the sphere (C={C}, n=2, d={C - 1})",
                    not math.isnan(b),
                    ev,
                    instances=len(mins),
                    setting={"normalization": "sphere", "C": str(C), "n": "2"},
                    note=f"beta_saddle = {b:.6f}" if not math.isnan(b) else f"none up to beta = {BETA_MAX:g}",
                )
            )
        elif r["kind"] == "ball":
            b = r["beta_ball"]
            out.append(
                _finding(
                    "O1b",
                    f"HUCL: NC stops being a KKT point of the ball, d/dr L(r NC) > 0 (C={C})",
                    not math.isnan(b),
                    [Evidence("beta_ball", b), Evidence("beta_ball (sympy)", r["beta_ball_sympy"])],
                    instances=1,
                    setting={"normalization": "ball", "C": str(C), "n": "2"},
                    note="the scaled ETF r NC (r < 1) beats NC beyond it",
                )
            )
    balls = [r for r in rows if r["kind"] == "ball" and not math.isnan(r["beta_ball"])]
    if balls:
        e = max(abs(r["beta_ball"] - r["beta_ball_sympy"]) for r in balls)
        _add(
            out,
            "O1b",
            "ball threshold: sympy root of the closed-form slope = bisection on autograd",
            len(balls),
            "error",
            e,
            AGREE_TOL,
        )
    _sympy_split(out, sc.sympy_classes, nc_hessian)


def _sympy_split(out: list[tuple[str, SubCheck]], classes: tuple[int, ...], nc_hessian: Any) -> None:
    """The sympy split curvature = autograd geodesic curvature = Hessian quadratic form, and >= lambda_min."""
    import sympy as sp  # lazy: sympy only for this check

    betas = (0.0, 0.5, 1.0, 2.0, 5.0)
    e_sym, e_form, rayleigh, n = 0.0, 0.0, math.inf, 0
    roots: list[Evidence] = []
    for C in classes:
        expr = nc_hessian.split_curvature_expr("unsupervised", C)
        beta = sorted(expr.free_symbols, key=str)[0]
        for b in betas:
            exact = float(expr.subs(beta, sp.nsimplify(b)).evalf(30))
            num = nc_hessian.split_curvature("unsupervised", C, 2, b)
            form = nc_hessian.quadratic_form("unsupervised", C, 2, b, nc_hessian.split_direction(C, 2))
            lam = nc_hessian.hessian_at_nc("unsupervised", C, 2, b).min_eigenvalue
            e_sym = max(e_sym, abs(exact - num))
            e_form = max(e_form, abs(form - num))
            rayleigh = min(rayleigh, num - lam)
            n += 1
        guess = next((b for b in betas if nc_hessian.split_curvature("unsupervised", C, 2, b) < 0), 1.0)
        roots.append(Evidence(f"split root C={C} (sympy)", float(sp.nsolve(expr, beta, guess, prec=30))))
    _add(
        out,
        "O1b",
        "split curvature: sympy exact = autograd along the geodesic (HUCL, n=2)",
        n,
        "error",
        e_sym,
        AGREE_TOL,
    )
    _add(
        out,
        "O1b",
        "split curvature: geodesic second derivative = Riemannian Hessian form",
        n,
        "error",
        e_form,
        AGREE_TOL,
    )
    out.append(
        (
            "O1b",
            SubCheck.tolerance(
                "Rayleigh bound: smallest eigenvalue <= split curvature",
                rayleigh,
                AGREE_TOL,
                kind="gap",
                instances=n,
                evidence=roots,
            ),
        )
    )
