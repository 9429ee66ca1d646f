"""The metric step of the engine: NC/DC metrics of R runs at a recorded state (docs/metrics.md).

Every metric is computed without gradient, in float64, on the normalised embeddings ``z`` of the
whole training set (the held-out set for ``ncm_acc``), through ``theory.collapse``; the columns
are defined in docs/metrics.md#metric-columns:

* the paper conditions ``unit_norm``, ``zero_sum``, ``etf_mean``, ``etf_max``,
  ``within_class_variation``; the standard ``nc1``, ``nc2_equinorm``, ``nc2_equiangularity``,
  ``etf_error``; ``effective_rank`` (of the class-mean matrix), ``rankme`` (of Z),
  ``spectrum_min``, ``mean_norm``, ``ncm_acc`` / ``train_ncm_acc``;
* Dimensional Collapse by the paper's definition (the smallest class-mean singular values orders
  of magnitude below the largest): the numerical ranks :data:`RANK_COLUMNS` of the centred
  class-mean matrix at the relative thresholds :data:`RANK_THRESHOLDS`, and the whole sorted
  spectrum ``spectrum_0 ... spectrum_{r-1}`` (the authors' curve, :func:`spectrum_columns`);
* class collision (UCL / HUCL): ``collision``, the same-class mass of the tilted negative law of
  the training set, and ``collision_nc``, its value ``q(beta)`` at Neural Collapse
  (:func:`collision_fraction`).

A metric that is undefined at a state (e.g. NC1 when all class means coincide) is NaN.
"""

from __future__ import annotations

import json
import math
from typing import Any

import numpy as np
import torch

from synthetic.engine.config import RunConfig
from synthetic.engine.data import stream_seed
from synthetic.engine.errors import non_finite
from synthetic.engine.objective import step_losses
from synthetic.store.schema import EPOCH
from theory.geometry import normalize
from theory.options import ESTIMATORS, HCL_METHODS
from theory.validation import one_of

__all__ = [
    "RANK_THRESHOLDS",
    "RANK_COLUMNS",
    "closed_form_optimum",
    "numerical_ranks",
    "spectrum_columns",
    "collision_fraction",
    "collapse_metrics",
    "FULL_LOSS_MAX",
    "Evaluator",
]

#: Relative thresholds t of the numerical rank ``#{i : s_i / s_1 > t}`` of the centred class means.
RANK_THRESHOLDS = (1e-2, 1e-4)
#: Their columns.
RANK_COLUMNS = ("rank_1e-2", "rank_1e-4")
#: Anchor rows per chunk of the collision computation (bounds the ``(rows, N)`` block).
_COLLISION_ENTRIES = 1 << 22


def closed_form_optimum(config: RunConfig, estimator: str | None = None) -> float:
    """Closed-form NC value of the loss of ``config`` (docs/hcl.md#theory).

    With ``a = -C / ((C - 1) tau)`` (the scaled cross-class ``t`` at NC) and ``K`` negatives:

    * SCL/HSCL: ``psi(a, ..., a)``: mean ``log(1 + e^a)``, sum ``log(1 + K e^a)``,
      triplet ``max(0, a + margin)`` (L*_SCL; attained at NC for every beta).
    * UCL/HUCL (same-class negatives have ``t = 0``): sampled estimator ->
      ``sum_m Binom(m; K, 1/C) psi(0^m, a^(K-m))``; expectation estimator -> the same with the
      average inside psi (L*_UCL; a lower bound for HUCL).
    * NaN for InfoNCE/WeiNCE, for ``normalization="none"`` (the loss tends to 0, its infimum)
      and for ``d < C - 1`` (no simplex ETF exists).

    Args:
        config: the run.
        estimator: override ``config.estimator`` (``"expectation"`` or ``"sampled"``).

    Returns:
        The value (float; NaN where it is no optimum).
    """
    est = config.estimator if estimator is None else estimator
    one_of("estimator", est, ESTIMATORS)
    if (
        config.method not in HCL_METHODS
        or config.normalization == "none"
        or config.embed_dim < config.num_classes - 1
    ):
        return float("nan")
    from theory.hcl import plugin_value, scl_optimum, ucl_optimum

    kw: dict[str, Any] = dict(
        psi=config.psi, tau=config.tau, num_negatives=config.num_negatives, margin=config.margin
    )
    C = config.num_classes
    if config.setting == "supervised":
        return float(scl_optimum(C, **kw))
    if est == "sampled":
        return float(ucl_optimum(C, **kw))
    return float(plugin_value(1.0 / C, C, **kw))


def numerical_ranks(mu: torch.Tensor, thresholds: tuple[float, ...] = RANK_THRESHOLDS) -> list[int]:
    """Numerical ranks of the centred class means at relative thresholds.

    ``r_t = #{i <= min(C-1, d) : s_i / s_1 > t}`` with ``s_1 >= s_2 >= ...`` the singular values
    of the class-mean matrix centred by its average (the centring of the authors' spectrum):
    **singular values**, not the covariance eigenvalues ``s_i^2 / (C - 1)`` of the spectrum
    columns, so ``t = 1e-2`` is ``log(sigma_i / sigma_max) > 2 log(1e-2) = -9.21`` on the authors'
    curve. ``C - 1`` at a simplex ETF with ``d >= C - 1``; 0 when every mean coincides.

    Shape:
        ``mu`` ``(C, d)`` -> a list of ``len(thresholds)`` ints.
    """
    m = mu.to(torch.float64)
    m = m - m.mean(dim=0, keepdim=True)
    s = torch.linalg.svdvals(m)[: min(m.shape[0] - 1, m.shape[1])]
    if s.numel() == 0 or not float(s[0]) > 0:
        return [0 for _ in thresholds]
    ratio = s / s[0]
    return [int((ratio > t).sum()) for t in thresholds]


def spectrum_columns(mu: torch.Tensor) -> dict[str, float]:
    """The authors' sorted class-mean spectrum as columns ``spectrum_i``, ``i < min(C-1, d)``.

    ``spectrum_i = log max(sigma_i / sigma_1, 1e-30)`` with ``sigma`` the eigenvalues of the
    covariance of the C class means (``theory.collapse.class_mean_spectrum``; docs/metrics.md).
    """
    from theory import collapse as col

    C, d = mu.shape
    spec = col.class_mean_spectrum(mu)[: min(C - 1, d)]
    return {f"spectrum_{i}": float(v) for i, v in enumerate(spec)}


def collision_fraction(z: torch.Tensor, labels: torch.Tensor, beta: float) -> float:
    """Same-class mass of the tilted unsupervised negative law, averaged over anchors.

    ``mean_i sum_{n : y_n = y_i} q_i(n)``, ``q_i(n) = exp(beta z_i.z_n) / sum_m exp(beta z_i.z_m)``
    over every member of ``z`` (the anchor included, as the authors' UCL code): the expected
    fraction of an anchor's negatives that share its class (claim S3). With balanced classes and
    label positives every anchor has the same number of pairs, so this is also the pair-weighted
    fraction of the loss's negatives. At an exact simplex ETF of balanced classes it is
    ``q(beta) = e^beta / (e^beta + (C-1) e^{-beta/(C-1)})`` (``theory.hcl.collision_probability``).
    ``exp(LSE_{same}(beta S_i.) - LSE_{all}(beta S_i.))`` per anchor, in the dtype of ``z`` (at
    least float32), the all-member log-sum-exp in chunks of anchors, the same-class one per class
    block; the mean in float64.

    Shape:
        ``z`` ``(N, d)``, ``labels`` ``(N,)`` -> float.
    """
    z = z.detach()
    if z.dtype not in (torch.float32, torch.float64):
        z = z.to(torch.float32)
    order = torch.argsort(labels, stable=True)
    zs, ys = z[order], labels[order]
    N = zs.shape[0]
    counts = torch.bincount(ys).tolist()
    lse_all = torch.empty(N, dtype=zs.dtype, device=zs.device)
    rows = max(1, _COLLISION_ENTRIES // max(N, 1))
    for s in range(0, N, rows):
        lse_all[s : s + rows] = torch.logsumexp(beta * (zs[s : s + rows] @ zs.T), dim=1)
    lse_same = torch.empty_like(lse_all)
    start = 0
    for n in counts:
        if n:
            block = zs[start : start + n]
            lse_same[start : start + n] = torch.logsumexp(beta * (block @ block.T), dim=1)
        start += n
    return float(torch.exp((lse_same - lse_all).to(torch.float64)).mean())


def _safe(fn: Any, *args: Any, **kwargs: Any) -> float:
    try:
        return float(fn(*args, **kwargs))
    except ValueError:
        return float("nan")


def collapse_metrics(
    z: torch.Tensor,
    labels: torch.Tensor,
    num_classes: int,
    test_z: torch.Tensor | None = None,
    test_labels: torch.Tensor | None = None,
) -> tuple[dict[str, float], np.ndarray]:
    """NC/DC metrics of embeddings ``z`` ``(N, d)`` (the module docstring), via theory.collapse.

    Returns:
        ``(metrics, mu)``: a dict of floats (the metric columns other than the losses and the
        collision) and the ``(C, d)`` float64 class means as a numpy array.
    """
    from theory import collapse as col

    with torch.no_grad():
        z = z.detach().to(torch.float64)
        mu_t = torch.as_tensor(col.class_means(z, labels, num_classes))
        cond = col.paper_conditions(mu_t)
        C, d = mu_t.shape
        r = min(C - 1, d)
        spec = spectrum_columns(mu_t)
        out = {
            "unit_norm": cond["unit_norm"],
            "zero_sum": cond["zero_sum"],
            "etf_mean": cond["etf_mean"],
            "etf_max": cond["etf_max"],
            "within_class_variation": col.within_class_variation(z, labels, num_classes),
            "nc1": _safe(col.nc1, z, labels, num_classes),
            "nc2_equinorm": _safe(col.nc2_equinorm, mu_t),
            "nc2_equiangularity": _safe(col.nc2_equiangularity, mu_t),
            "etf_error": _safe(col.etf_error, mu_t),
            "effective_rank": _safe(col.effective_rank, mu_t),
            "rankme": _safe(col.rankme, z),
            "spectrum_min": spec[f"spectrum_{r - 1}"] if r >= 1 else float("nan"),
            "mean_norm": float(torch.linalg.vector_norm(z, dim=1).mean()),
            "train_ncm_acc": _safe(col.ncm_accuracy, z, labels, z, labels, num_classes=num_classes),
        }
        if test_z is not None and test_labels is not None and test_z.shape[0] > 0:
            out["ncm_acc"] = _safe(
                col.ncm_accuracy,
                z,
                labels,
                test_z.detach().to(torch.float64),
                test_labels,
                num_classes=num_classes,
            )
        else:
            out["ncm_acc"] = float("nan")
        out.update(zip(RANK_COLUMNS, (float(v) for v in numerical_ranks(mu_t)), strict=True))
        out.update(spec)
    return out, mu_t.cpu().numpy()


def collision_columns(config: RunConfig, z: torch.Tensor, labels: torch.Tensor) -> dict[str, float]:
    """``collision`` and ``collision_nc`` of an unsupervised (UCL / HUCL) run; NaN otherwise."""
    if config.setting != "unsupervised":
        return {"collision": math.nan, "collision_nc": math.nan}
    from theory.hcl import collision_probability

    return {
        "collision": collision_fraction(z, labels, config.beta),
        "collision_nc": collision_probability(config.num_classes, config.beta),
    }


#: ``full_loss`` is computed only when the evaluation batch (N, or 2N for two views) is at most this
#: (an ``(N, N)`` program at every recorded epoch: it would cost as much as training for C = 50).
FULL_LOSS_MAX = 1024


class Evaluator:
    """The metric step of R runs (one row per run at a recorded state), used by the engine."""

    def __init__(self, configs, smodel, datas, X, Y, betas) -> None:
        self.configs, self.model, self.datas, self.X, self.Y, self.betas = configs, smodel, datas, X, Y, betas
        cfg = configs[0]
        self.free = cfg.encoder == "free"
        self.N = cfg.num_train
        self.optima = [closed_form_optimum(c) for c in configs]
        self.optima_full = [closed_form_optimum(c, "expectation") for c in configs]
        two = not (cfg.method in HCL_METHODS and cfg.positives == "label")
        self.full = self.N * (2 if two else 1) <= FULL_LOSS_MAX
        self.init_keys = []
        for c in configs:
            s = c.source_config()
            self.init_keys.append("" if s is None else s.key())
        has_test = not self.free and datas[0].x_test.shape[0] > 0
        self.Xt = torch.stack([d.x_test for d in datas]) if has_test else None

    def rows(self, epoch: int, steps: int, loss: list[float], skipped: list[int]) -> list[dict]:
        """One metric row per run at ``epoch`` (``steps`` drawn so far; the epoch's mean ``loss``)."""
        cfgs, m, R = self.configs, self.model, len(self.configs)
        device = self.Y.device
        with torch.no_grad():
            idx = torch.arange(self.N, device=device).repeat(R, 1)
            h = m.features(idx if self.free else self.X)
            ht = None if self.Xt is None else m.features(self.Xt)
            for r in range(R):
                # a finite feature whose norm overflows (|h| ~ 1e30 in float32) is normalised to
                # zero, which would look like perfect collapse: the norms must be finite too
                for feats in (h[r], None if ht is None else ht[r]):
                    if feats is not None and not bool(
                        torch.isfinite(torch.linalg.vector_norm(feats, dim=-1)).all()
                    ):
                        raise non_finite(cfgs[r], "embeddings (or their norms)", epoch)
            z = normalize(h, m.normalization)
            zt = None if ht is None else normalize(ht, m.normalization)
            if self.full:
                gens = []
                for c in cfgs:
                    g = torch.Generator()
                    g.manual_seed(stream_seed(c.seed, "eval"))
                    gens.append(g)
                full = step_losses(
                    cfgs,
                    m,
                    idx if self.free else self.X,
                    self.Y,
                    idx,
                    gens,
                    self.betas,
                    y_pool=self.Y,
                    pool_inputs=self.X,
                    estimator="expectation",
                ).tolist()
            else:
                full = [math.nan] * R
        out = []
        for r, c in enumerate(cfgs):
            d = self.datas[r]
            metrics, mu = collapse_metrics(
                z[r], d.y_train, c.num_classes, None if zt is None else zt[r], d.y_test
            )
            row: dict[str, Any] = {
                EPOCH: epoch,
                "loss": loss[r],
                "skipped_steps": skipped[r],
                "full_loss": full[r],
                "optimum": self.optima[r],
                "gap_to_optimum": loss[r] - self.optima[r],
                "full_gap": full[r] - self.optima_full[r],
                **metrics,
                "steps": steps,
                **collision_columns(c, z[r], d.y_train),
                "init_key": self.init_keys[r],
            }
            if c.record_means:
                row["class_means"] = json.dumps(mu.tolist())
            out.append(row)
        return out
