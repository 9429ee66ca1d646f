"""The figure registry: what each figure shows, which tidy tables it needs, and how it renders.

Every figure module ``figures/fig_*.py`` declares a tuple ``FIGURES`` of :class:`FigureSpec`
(one per figure id; a module may declare the SCL/HSCL and the UCL/HUCL variant of one figure)
and a pure ``render(tables, **options) -> Figure``: no training, no file I/O, only pandas,
numpy, matplotlib and :mod:`figures.plots.style`. :data:`MODULES` lists the modules in gallery order;
:func:`all_figures` collects their specs (the spec types and :func:`availability` are in
:mod:`figures.plots.spec`).

A figure is *available* when each table it needs is present, non-empty and has the required
columns, and its own ``check`` (if any) finds the data it draws (:func:`availability`). A figure
that is not available is reported as such, with the reason and the command that produces its
data (``FigureSpec.produce``) -- never silently skipped.

Table names used by the figures (producers in :mod:`figures.pipeline.produce_theory`):

``synthetic``         per (run, epoch) synthetic results: config columns, ``run_key``, ``epoch``,
                      metric columns (``python -m synthetic`` tables, with a ``grid`` column)
``spectrum``          per (run, epoch, index): the sorted normalised class-mean spectrum
                      ``log_ratio = log(sigma_i / sigma_max)`` and the run's config columns
``harris_gap``        Harris Monte Carlo: ``setting, beta, estimate, ci_low, ci_high, confidence``
``hucl_nc``           ``num_classes, beta, hucl_at_nc, q, ucl_optimum, scl_optimum``
``gram``              ``num_classes, program, row, col, value`` (optimal and ETF Gram matrices)
``open_landscape``    per search of the open problems O1 / O1c: ``loss, normalization, num_classes,
                      beta, best, nc, bound, beats_nc`` (+ the minimiser's geometry)
``open_hessian``      the Hessian at NC (O1b): ``kind, loss, num_classes, beta, min_eigenvalue,
                      beta_saddle, beta_ball``
``noise_floor``       ``n, mse_softmax, mse_weibit, se_mse_softmax, se_mse_weibit,
                      theory_weibit, bias2_floor, c``
``pot_exceedances``   ``y`` (exceedances over the threshold)
``pot_fit``           one row: ``q, threshold, n_exceed, xi, sigma, exp_sigma, endpoint``
``pot_density``       ``y, gpd, exponential`` (fitted densities on a grid of exceedances)
``pot_qq``            ``p, empirical, gpd, exponential``
``pot_stability``     ``q, threshold, n_exceed, xi``
``lambda_profile``    ``lam, loglik`` (profile log-likelihood of lambda)
``lambda_fit``        one row: ``lam_hat, loglik, loglik0, lr_stat, p_boundary, n_rows``
``weince_gate``       per (step or epoch, anchor): ``epoch, lambda, lambda_rho, lambda_aic, daic``
"""

from __future__ import annotations

from collections.abc import Sequence

from figures.plots import (
    fig_batch_size,
    fig_conditions,
    fig_convergence,
    fig_gram,
    fig_harris,
    fig_hucl_nc,
    fig_lambda_profile,
    fig_lambda_training,
    fig_loss_optimum,
    fig_ncm,
    fig_near_nc,
    fig_noise_floor,
    fig_normalization,
    fig_open_beta_c,
    fig_open_bracket,
    fig_open_hessian,
    fig_positives,
    fig_pot,
    fig_spectrum,
    fig_vs_beta,
    fig_within_class,
)
from figures.plots.spec import FigureSpec

__all__ = ["MODULES", "all_figures", "get", "select"]

#: Figure modules in gallery order.
MODULES = (
    fig_spectrum,
    fig_conditions,
    fig_within_class,
    fig_convergence,
    fig_ncm,
    fig_normalization,
    fig_vs_beta,
    fig_positives,
    fig_batch_size,
    fig_near_nc,
    fig_loss_optimum,
    fig_harris,
    fig_hucl_nc,
    fig_gram,
    fig_open_bracket,
    fig_open_beta_c,
    fig_open_hessian,
    fig_noise_floor,
    fig_pot,
    fig_lambda_profile,
    fig_lambda_training,
)


def all_figures() -> list[FigureSpec]:
    """Every registered figure, in gallery order.

    Raises:
        ValueError: two figures share an id.
    """
    out: list[FigureSpec] = []
    seen: set[str] = set()
    for mod in MODULES:
        for spec in mod.FIGURES:
            if spec.id in seen:
                raise ValueError(f"figure id {spec.id!r} is declared twice (module {mod.__name__})")
            seen.add(spec.id)
            out.append(spec)
    return out


def get(figure_id: str) -> FigureSpec:
    """The spec of ``figure_id``.

    Raises:
        ValueError: unknown id (the message lists the known ones).
    """
    specs = {s.id: s for s in all_figures()}
    if figure_id not in specs:
        raise ValueError(f"figure_id must be one of {sorted(specs)}, got {figure_id!r}")
    return specs[figure_id]


def select(ids: Sequence[str] | None, specs: Sequence[FigureSpec] | None = None) -> list[FigureSpec]:
    """The figures named by ``ids``: figure ids, or claim ids (every figure illustrating it).

    Args:
        ids: figure or claim ids; None or empty selects every figure.
        specs: the candidate figures (default :func:`all_figures`).

    Raises:
        ValueError: an id that names neither a figure nor a claim any figure illustrates.
    """
    specs = list(all_figures() if specs is None else specs)
    if not ids:
        return specs
    by_id = {s.id: s for s in specs}
    chosen: dict[str, FigureSpec] = {}
    for i in ids:
        if i in by_id:
            chosen[i] = by_id[i]
            continue
        matched = [s for s in specs if i in s.claims]
        if not matched:
            raise ValueError(
                f"--only: {i!r} is neither a figure id nor a claim id shown by a figure; "
                f"figure ids: {', '.join(by_id)}"
            )
        for s in matched:
            chosen[s.id] = s
    return [s for s in specs if s.id in chosen]
