"""The metric step of the engine: the metric row of R runs at a recorded state (docs/metrics.md).

:class:`Evaluator` computes, for every run of a stack, without gradient:

* the metric row of ``theory.collapse`` (:func:`theory.collapse.metric_row`; the NC / DC metrics,
  the numerical ranks, the class-mean spectrum, NCM accuracy on the held-out set) on the
  normalised embeddings ``z`` of the whole training set;
* the training columns of the synthetic study: the epoch's mean training ``loss``, the skipped
  steps, the exact-expectation loss of the whole training set ``full_loss`` (when it is small
  enough, :data:`FULL_LOSS_MAX`), the closed-form NC value ``optimum``
  (:func:`theory.hcl.nc_optimum`) and the gaps to it, the steps drawn, and for UCL / HUCL the
  class collision (``collision``, the same-class mass of the tilted negative law of the training
  set, and ``collision_nc``, its value ``q(beta)`` at Neural Collapse, :func:`collision_fraction`);
* for a run whose convergence rule watches the evaluation loss (``settle_loss = "eval"``),
  :data:`EVAL_COLUMNS`: ``eval_loss``, the mean loss of the training set over a fixed partition
  into the run's batch size (the same partition at every recorded epoch, drawn once per run from
  its ``eval`` stream; ``drop_last`` as training; supervised batches of a single class left out as
  in training) with the exact expectation estimator, and ``eval_gap`` = ``eval_loss`` minus the
  expectation estimator's closed-form NC value: deterministic given the parameters, unlike the
  epoch's mean mini-batch loss.

A metric that is undefined at a state (e.g. NC1 when all class means coincide) is NaN.
"""

from __future__ import annotations

import math
from typing import Any

import torch

from synthetic.engine.config import RunConfig
from synthetic.engine.data import epoch_batches, stream_seed
from synthetic.engine.errors import non_finite
from synthetic.engine.objective import skipped_steps, step_losses
from synthetic.store.schema import EPOCH, encode_class_means
from theory.collapse import metric_row
from theory.geometry import normalize
from theory.hcl import collision_probability, nc_optimum
from theory.options import HCL_METHODS

__all__ = [
    "TRAINING_COLUMNS",
    "EVAL_COLUMNS",
    "FULL_LOSS_MAX",
    "optimum",
    "collision_fraction",
    "collision_columns",
    "Evaluator",
]

#: The columns of a synthetic run's table besides the metric row (``theory.collapse.ROW_COLUMNS``
#: and the spectrum): the training quantities of the synthetic study (docs/metrics.md).
TRAINING_COLUMNS = (
    "loss",
    "skipped_steps",
    "full_loss",
    "optimum",
    "gap_to_optimum",
    "full_gap",
    "steps",
    "collision",
    "collision_nc",
    "init_key",
)

#: The columns of a run whose rule watches the evaluation loss (``settle_loss = "eval"``).
EVAL_COLUMNS = ("eval_loss", "eval_gap")

#: Anchor rows per chunk of the collision computation (bounds the ``(rows, N)`` block).
_COLLISION_ENTRIES = 1 << 22


def optimum(config: RunConfig, estimator: str | None = None) -> float:
    """The closed-form NC value of the loss of ``config`` (:func:`theory.hcl.nc_optimum`).

    ``estimator`` overrides ``config.estimator`` (the ``full_loss`` is the expectation estimator's).
    """
    return nc_optimum(
        config.setting,
        config.num_classes,
        d=config.embed_dim,
        normalization=config.normalization,
        psi=config.psi,
        tau=config.tau,
        num_negatives=config.num_negatives,
        margin=config.margin,
        estimator=config.estimator if estimator is None else estimator,
    )


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


def collision_columns(config: RunConfig, z: torch.Tensor, labels: torch.Tensor) -> dict[str, float]:
    """``collision`` and ``collision_nc`` of an unsupervised (UCL / HUCL) run; NaN otherwise."""
    if config.setting != "unsupervised":
        return {"collision": math.nan, "collision_nc": math.nan}
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
        self.optima = [optimum(c) for c in configs]
        self.optima_full = [optimum(c, "expectation") for c in configs]
        two = not (cfg.method in HCL_METHODS and cfg.positives == "label")
        self.full = self.N * (2 if two else 1) <= FULL_LOSS_MAX
        self.init_keys = []
        for c in configs:
            s = c.source_config()
            self.init_keys.append("" if s is None else s.key())
        has_test = not self.free and datas[0].x_test.shape[0] > 0
        self.Xt = torch.stack([d.x_test for d in datas]) if has_test else None
        self.eval_loss = cfg.watches_eval_loss  # equal within a stack (in its stack key)

    def _eval_generators(self) -> list[torch.Generator]:
        """Each run's ``eval`` stream, seeded afresh (the same draws at every recorded epoch)."""
        gens = []
        for c in self.configs:
            g = torch.Generator()
            g.manual_seed(stream_seed(c.seed, "eval"))
            gens.append(g)
        return gens

    def eval_losses(self) -> list[float]:
        """``eval_loss`` of every run (see the module docstring); NaN for a run with no batch left."""
        cfgs, m, R = self.configs, self.model, len(self.configs)
        device = self.Y.device
        gens = self._eval_generators()
        batches = torch.stack([epoch_batches(self.N, cfgs[0].batch, g) for g in gens], dim=1).to(device)
        run_ids = torch.arange(R, device=device)[None, :, None]
        labels = self.Y[run_ids, batches]  # (S, R, b)
        inputs = batches if self.X is None else self.X[run_ids, batches]
        skip = skipped_steps(cfgs, labels).cpu()
        total = torch.zeros(R, dtype=torch.float64)
        count = torch.zeros(R, dtype=torch.float64)
        with torch.no_grad():
            for s in range(batches.shape[0]):
                act = ~skip[s]
                if not bool(act.any()):
                    continue
                losses = step_losses(
                    cfgs,
                    m,
                    inputs[s],
                    labels[s],
                    batches[s],
                    gens,
                    self.betas,
                    y_pool=self.Y,
                    pool_inputs=self.X,
                    active=act.tolist(),
                    estimator="expectation",
                )
                total[act] += losses.detach().to(torch.float64).cpu()
                count[act] += 1
        return [
            float(t / n) if n > 0 else math.nan for t, n in zip(total.tolist(), count.tolist(), strict=True)
        ]

    def rows(
        self, epoch: int, steps: int, loss: list[float], skipped: list[int], active: list[bool] | None = None
    ) -> list[dict | None]:
        """One metric row per run at ``epoch`` (``steps`` drawn so far; the epoch's mean ``loss``).

        ``active``: the runs that need a row (default all); the others (runs stopped by their
        convergence rule) get None and cost no metric row.
        """
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
                gens = self._eval_generators()
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
        ev_loss = self.eval_losses() if self.eval_loss else None
        out: list[dict | None] = []
        for r, c in enumerate(cfgs):
            if active is not None and not active[r]:
                out.append(None)
                continue
            d = self.datas[r]
            metrics = metric_row(z[r], d.y_train, c.num_classes, None if zt is None else zt[r], d.y_test)
            row: dict[str, Any] = {
                EPOCH: epoch,
                "loss": loss[r],
                "skipped_steps": skipped[r],
                "full_loss": full[r],
                "optimum": self.optima[r],
                "gap_to_optimum": loss[r] - self.optima[r],
                "full_gap": full[r] - self.optima_full[r],
                "steps": steps,
                **collision_columns(c, z[r], d.y_train),
                "init_key": self.init_keys[r],
                **metrics.values,
            }
            if ev_loss is not None:
                row["eval_loss"] = ev_loss[r]
                row["eval_gap"] = ev_loss[r] - self.optima_full[r]
            if c.record_means:
                row["class_means"] = encode_class_means(metrics.class_means)
            out.append(row)
        return out
