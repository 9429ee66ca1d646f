"""Figures say what they show: the labels that name a mathematical quantity, pinned to docs/.

Observed: the WeiNCE gate figure called lambda_rho the "rank-correlation part"; rho is the cap
proximity, the shortfall of the anchor's hardest negative (docs/weince.md#the-gate), and dAIC
compares the Weibull line with the Gumbel-fast proxy, not with an exponential tail.

Each expected label below is written from the definition in docs/ named beside it (not from the
figure modules): a figure that renames its quantity, or shows another one, fails here.
"""

from __future__ import annotations

import re

import matplotlib.pyplot as plt
import pytest

from figures.plots import registry

#: docs/metrics.md#etf_mean-and-etf_max: mean over c != c' of |cos(mu_c, mu_c') + 1/(C-1)|.
ETF = "mean | cos(μ_c, μ_c′) + 1/(C−1) |"
#: docs/metrics.md#within_class_variation: mean Euclidean distance to the class mean.
WCV = "mean ‖z − μ_c‖"
#: docs/metrics.md#class-mean-spectrum-and-spectrum_min: log(sigma_i / sigma_1), sigma_1 the largest.
SPECTRUM = "log(σ_i / σ_max)"

#: figure id -> labels (titles, axis labels, colour-bar labels, legend entries) that must appear.
#: A trailing "…" matches a prefix (the label goes on with a number).
PINNED: dict[str, tuple[str, ...]] = {
    # docs/metrics.md#unit_norm, #zero_sum, #etf_mean-and-etf_max
    "conditions_scl": ("mean | ‖μ_c‖ − 1 |", "‖ mean_c μ_c ‖", ETF),
    "conditions_ucl": ("mean | ‖μ_c‖ − 1 |", "‖ mean_c μ_c ‖", ETF),
    # docs/metrics.md: spectrum_min = log(sigma_r / sigma_1), r = min(C - 1, d)
    "near_nc_init": (ETF, "log(σ_min / σ_max)"),
    "batch_size": (ETF, WCV),
    # docs/metrics.md#numerical-ranks-rank_1e-2-and-rank_1e-4 over the min(C - 1, d) ETF dimensions;
    # docs/claims.md#synthetic-claims: NC threshold etf_mean < 0.05, DC fraction 0.8
    "convergence": (ETF, "rank_1e-2 / min(C − 1, d)", "NC threshold 0.05", "DC guide 0.8"),
    # docs/hcl.md#convex-gram-programs: G is the Gram matrix of the unit class representations
    "gram_etf": ("G[c, c′] = u_c · u_c′", "class c", "class c′"),
    # docs/hcl.md: the Harris gap E[psi(hard)] - E[psi(base)] >= 0 under the exponential tilt
    "harris_gap": ("β (exponential tilt)", "E[ψ(hard)] − E[ψ(base)]", "Harris bound: gap ≥ 0"),
    # docs/hcl.md#hucl-at-neural-collapse-t7: q(beta) the same-class probability; limit psi(0, ..., 0)
    "hucl_at_nc": ("q(β): probability a negative is same-class", "β → ∞: ψ(0,…,0) = …", "L*_UCL = …"),
    # docs/weince.md#link-selection: T_lambda from softmax (0) to Weibit (1); cut -chi2_1(0.95)/2
    "lambda_profile": ("λ (0 = softmax link, 1 = Weibit link)", "95 % cut: −χ²₁(0.95)/2", "λ̂ = …"),
    # docs/weince.md#the-gate: lambda = lambda_rho * lambda_AIC; rho the cap proximity;
    # dAIC = AIC_G - AIC_W (Gumbel-fast proxy minus Weibull line)
    "weince_gate": (
        "λ = λ_ρ · λ_AIC (blend weight)",
        "λ_ρ (cap-proximity part)",
        "λ_AIC (tail-fit part)",
        "ΔAIC = AIC_G − AIC_W (tail fits)",
        "λ_ρ",
        "ΔAIC",
    ),
    # docs/metrics.md: gap_to_optimum = loss - optimum (L*_SCL / L*_UCL)
    "loss_optimum_scl": ("| loss − L*_SCL | (log scale)", "L*_SCL = …"),
    "loss_optimum_ucl": ("| loss − L*_UCL | (log scale)", "L*_UCL = …"),
    # docs/metrics.md#ncm-accuracy (a fraction, drawn in percent)
    "ncm_scl": ("NCM test accuracy (%)",),
    "ncm_ucl": ("NCM test accuracy (%)",),
    # docs/weince.md#the-noise-floor: MSE of the log-odds; Weibit c/n; softmax bias floor
    "noise_floor": (
        "MSE of the log-odds estimate",
        "Weibit theory c/n, c = …",
        "softmax bias² floor = …",
        "softmax theory: floor + Godambe variance / n",
    ),
    "normalization_scl": (SPECTRUM, ETF),
    "normalization_ucl": (SPECTRUM, ETF),
    "ucl_positives": (ETF, WCV),
    # docs/weince.md#extreme-value-diagnostics: exceedances y = s - u, GPD shape xi, support end -sigma/xi
    "pot_exceedances": (
        "exceedance y = s − u",
        "ξ̂ (GPD shape)",
        "support end −σ̂/ξ̂ = …",
        "ξ = 0 (exponential tail)",
    ),
    "spectrum_scl": (SPECTRUM,),
    "spectrum_ucl": (SPECTRUM,),
    # docs/metrics.md#effective-rank: effective rank of the class-mean matrix M (C - 1 at an ETF)
    "vs_beta_scl": (ETF, WCV, "effective rank of M", "ETF: C − 1 = …"),
    "vs_beta_ucl": (ETF, WCV, "effective rank of M", "ETF: C − 1 = …"),
    # docs/open_problems.md#o1c-a-bracket-on-the-tight-bound: the certified bound, log 2 the large-beta value
    "open_bracket": ("batch HUCL loss (dotted: certified lower bound)", "log 2", "C = …"),
    # docs/open_problems.md#o1b-the-hessian-at-nc: the saddle on the sphere, the KKT point of the ball
    "open_beta_c": (
        "sphere: NC becomes a saddle",
        "ball: NC no longer a KKT point",
        "sphere: search beats NC (β_c on the grid)",
    ),
    "open_hessian": ("smallest eigenvalue of the Hessian at NC (symlog)", "HUCL, C = …"),
    "within_class_scl": (WCV + " (within-class variation)",),
    "within_class_ucl": (WCV + " (within-class variation)",),
}

#: Names that misname a quantity of docs/ (rho is no rank correlation; dAIC has no exponential fit).
WRONG = ("rank-correlation", "rank correlation", "Weibull vs exponential")


def _texts(fig) -> list[str]:
    out = []
    sup = getattr(fig, "_suptitle", None)
    if sup is not None:
        out.append(sup.get_text())
    for ax in fig.axes:
        out += [ax.get_title(), ax.get_xlabel(), ax.get_ylabel()]
        legend = ax.get_legend()
        if legend is not None:
            out += [t.get_text() for t in legend.get_texts()]
    for legend in fig.legends:
        out += [t.get_text() for t in legend.get_texts()]
    return [t for t in out if t]


def _found(want: str, texts: list[str]) -> bool:
    if want.endswith("…"):
        return any(t.startswith(want[:-1]) for t in texts)
    return want in texts


def test_every_figure_has_its_labels_pinned():
    assert sorted(PINNED) == sorted(s.id for s in registry.all_figures())


@pytest.mark.parametrize("figure_id", sorted(PINNED))
def test_figure_labels_name_the_quantities_of_the_docs(figure_id, all_tables):
    fig = registry.get(figure_id).build(all_tables)
    try:
        texts = _texts(fig)
        missing = [w for w in PINNED[figure_id] if not _found(w, texts)]
        assert not missing, f"{figure_id}: {missing} not among {texts}"
        wrong = [t for t in texts for w in WRONG if re.search(re.escape(w), t, re.IGNORECASE)]
        assert not wrong, f"{figure_id}: {wrong}"
    finally:
        plt.close(fig)
