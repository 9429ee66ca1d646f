"""The profile likelihood of lambda in the T_lambda link family, with lambda-hat and the LRT.

Erol et al. (arXiv 2606.00262, link selection): the logits ``(1 - lambda) s / tau + lambda
(-log(1 - s))`` interpolate between the softmax (lambda = 0) and the Weibit (lambda = 1) link.
Treating each anchor's positive as the observed winner among its candidates, the profile
log-likelihood of lambda (tau fitted or fixed) is maximised at lambda-hat; the likelihood-ratio
statistic ``2 (l(lambda-hat) - l(0))`` tests lambda = 0, with a p-value from the boundary mixture
``0.5 chi2_0 + 0.5 chi2_1``. Shown: the profile relative to its maximum, lambda-hat (vertical
line), the 95 % profile-likelihood cut ``-chi2_1(0.95)/2 = -1.92`` (dashed) and the test in the
legend. The p-value is nominal: in-batch candidate rows share items and are not independent.

Tables: ``lambda_profile`` (``lam, loglik``), ``lambda_fit`` (one row: ``lam_hat, loglik,
loglik0, lr_stat, p_boundary, n_rows``).
"""

from __future__ import annotations

import pandas as pd
from matplotlib.figure import Figure

from figures.plots import frames, style
from figures.plots.spec import FigureSpec, TableNeed

PROFILE = ("lam", "loglik")
FIT = ("lam_hat", "loglik", "loglik0", "lr_stat", "p_boundary", "n_rows")
#: Half the 0.95 quantile of chi2 with one degree of freedom (3.841459 / 2).
CUT95 = 1.9207294


@style.themed
def render(tables: dict[str, pd.DataFrame]) -> Figure:
    """Profile log-likelihood of lambda relative to its maximum, with lambda-hat and the LRT.

    Args:
        tables: ``{"lambda_profile": frame, "lambda_fit": frame}``.

    Returns:
        The figure.

    Raises:
        ValueError: missing tables or columns.
    """
    prof, fit = frames.table(tables, "lambda_profile", PROFILE), tables.get("lambda_fit")
    if fit is None or len(fit) == 0 or any(c not in fit.columns for c in FIT):
        raise ValueError(f"tables['lambda_fit'] must have one row with the columns {list(FIT)}")
    f = fit.iloc[0]
    prof = prof.sort_values("lam")
    top = float(f["loglik"])
    fig, axes = style.new_figure(1, 1, width=8.0, height=5.0)
    ax = axes[0, 0]
    ax.plot(
        prof["lam"],
        prof["loglik"].astype(float) - top,
        "o-",
        markersize=3,
        color=style.method_color("WeiNCE"),
        label="profile log-likelihood − max",
    )
    ax.axhline(-CUT95, color="black", linestyle="--", linewidth=1.3, label="95 % cut: −χ²₁(0.95)/2")
    ax.axvline(
        float(f["lam_hat"]),
        color=style.method_color("HSCL"),
        linestyle="-",
        linewidth=1.4,
        label=f"λ̂ = {float(f['lam_hat']):.3f}",
    )
    ax.plot(
        [0.0],
        [float(f["loglik0"]) - top],
        "s",
        color=style.method_color("InfoNCE"),
        markersize=7,
        label=f"λ = 0 (softmax): LR = {float(f['lr_stat']):.2f}, p = {float(f['p_boundary']):.2g}",
    )
    lo = max(float((prof["loglik"].astype(float) - top).min()), -10 * CUT95)
    ax.set_ylim(min(lo, -1.5 * CUT95) * 1.05, 0.1 * CUT95 + 0.2)
    ax.set_xlim(-0.02, 1.02)
    style.finish_axes(
        ax,
        xlabel="λ (0 = softmax link, 1 = Weibit link)",
        ylabel="log-likelihood relative to its maximum",
        loc="lower right",
    )
    fig.suptitle("Link selection: profile likelihood of λ")
    tau = f", τ̂ = {float(f['tau_hat']):.3g}" if "tau_hat" in f.index else ""
    src = f"{f['source']}; " if "source" in f.index and isinstance(f["source"], str) else ""
    style.note(fig, f"{src}{int(f['n_rows'])} candidate rows{tau}; p-value nominal (rows share items)")
    return fig


FIGURES = (
    FigureSpec(
        id="lambda_profile",
        title="Link selection: profile likelihood of λ",
        claims=("W2",),
        needs=(
            TableNeed("lambda_profile", PROFILE, ("tau",)),
            TableNeed("lambda_fit", FIT, ("tau_hat", "p_chi2", "source")),
        ),
        render=render,
        produce="candidate similarities of a trained encoder: {results}/weince/link_candidates.npz "
        "(arrays (M, C), positive in column 0), written by the real-data W2 run "
        "(python -m realdata, not available yet)",
        description="Profile likelihood of lambda with lambda-hat and the likelihood-ratio test of lambda = 0.",
    ),
)
