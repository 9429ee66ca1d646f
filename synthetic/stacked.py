"""Train R independent runs of one shape in one tensor program (a leading run dimension).

Runs that differ only in ``seed``, ``beta`` and the method *within* one setting (SCL/HSCL, or
UCL/HUCL) share every tensor shape, so their parameters can be stacked along a leading run
dimension R (``synthetic.models.StackedModel``: weights ``(R, in, out)``, ``torch.baddbmm``), their
mini-batch orders stacked as ``(R, B)`` index tensors, and their losses computed as one batched
program with a per-run ``beta`` ``(R,)``. The R losses are summed before ``backward``: run r's
parameters receive exactly run r's gradient (no cross terms), and a run-wise Adam (``_RunAdam``:
torch's Adam op sequence with one step count per run) updates each run as a separate
``torch.optim.Adam`` would. A run whose mini-batch is skipped (single class under SCL/HSCL, see
``synthetic.train``) gets no loss, no draw and no update in that step, while the other runs of
the stack proceed, exactly as in their sequential runs. Every random draw of run r
comes from run r's own generators, in the same order as :func:`synthetic.train.train_run`, so
:func:`train_stacked` returns the tables ``train_run`` would, up to floating-point rounding of the
batched matrix products (tested to ~1e-10 in float64).

Loss paths:

* fast path (one batched program): SCL/HSCL/UCL/HUCL with ``estimator="expectation"`` and
  ``psi`` ``"mean"`` or ``"sum"``, label or noise positives. Same maths as
  ``theory.hcl.contrastive_loss``: ``m_i = LSE_{n allowed}((beta S'_in + S_in / tau)) -
  LSE_{n allowed}(beta S'_in)`` (``S'`` detached: the tilt weights carry no gradient), per pair
  ``softplus(m_i + shift - S_ij / tau)``, averaged over the P_r pairs of run r.
* fallback (batched encoder, per-run loss): the sampled estimator, the triplet psi, InfoNCE and
  WeiNCE call the single-run loss of ``synthetic.train`` on each run's slice of the embeddings.

Metrics are computed per run with ``synthetic.train.collapse_metrics`` (the very function of
``train_run``); ``full_loss`` uses the batched expectation loss on the fast path.
"""

from __future__ import annotations

import math
from dataclasses import fields

import pandas as pd
import torch
import torch.nn.functional as F

from synthetic import train as _train
from synthetic.config import RunConfig
from synthetic.data import make_data, noise_like, run_generators, stream_seed
from synthetic.models import (
    ContrastiveModel,
    StackedFreeFeatures,
    StackedLinear,
    StackedMLP,
    build_model,
    stack_models,
)
from theory.geometry import normalize
from theory.options import HCL_METHODS, SETTINGS
from theory.validation import one_of

__all__ = [
    "VARYING_FIELDS",
    "stack_key",
    "stackable",
    "stack_groups",
    "train_stacked",
    "stacked_contrastive_loss",
]

#: Similarity entries per batched loss call (runs are processed in chunks of this size).
CHUNK_ELEMENTS = 1 << 20

#: Fields that may differ between the runs of one stack (``method`` only within one setting).
VARYING_FIELDS = ("seed", "beta", "method")


def stack_key(config: RunConfig) -> tuple:
    """Hashable key: configs with equal keys can be trained in one stack.

    Every resolved field except :data:`VARYING_FIELDS`, plus the method's family (its setting for
    SCL/HSCL/UCL/HUCL, the method itself for InfoNCE/WeiNCE).
    """
    if not isinstance(config, RunConfig):
        raise ValueError(f"config must be a RunConfig, got {type(config).__name__}")
    d = config.to_dict()
    family = config.setting or config.method
    return (family,) + tuple((k, d[k]) for k in sorted(d) if k not in VARYING_FIELDS)


def stackable(configs) -> bool:
    """True if ``configs`` (a non-empty list of RunConfig) can be trained by :func:`train_stacked`."""
    if not isinstance(configs, (list, tuple)) or not configs:
        return False
    if not all(isinstance(c, RunConfig) for c in configs):
        return False
    k = stack_key(configs[0])
    return all(stack_key(c) == k for c in configs[1:])


def stack_groups(configs, max_stack: int = 16) -> list[list[RunConfig]]:
    """Partition ``configs`` into stackable groups of at most ``max_stack`` runs.

    Groups follow the first appearance of each :func:`stack_key`; within a group the input order
    is kept. Duplicate configs (equal ``key()``) are kept (the caller decides).

    Raises:
        ValueError: ``max_stack < 1`` or a non-RunConfig element.
    """
    if not isinstance(max_stack, int) or max_stack < 1:
        raise ValueError(f"max_stack must be an integer >= 1, got {max_stack!r}")
    buckets: dict[tuple, list[RunConfig]] = {}
    for c in configs:
        buckets.setdefault(stack_key(c), []).append(c)
    out = []
    for group in buckets.values():
        for i in range(0, len(group), max_stack):
            out.append(group[i : i + max_stack])
    return out


# ----------------------------------------------------------------------------- batched loss


def stacked_contrastive_loss(
    z: torch.Tensor,
    labels: torch.Tensor,
    *,
    setting: str,
    beta: torch.Tensor,
    tau: float = 1.0,
    psi: str = "mean",
    num_negatives: int = 256,
    self_positive: bool = True,
    positive_groups: torch.Tensor | None = None,
) -> torch.Tensor:
    """Per-run SCL/HSCL/UCL/HUCL batch losses, exact (expectation) estimator, mean/sum psi.

    The batched twin of ``theory.hcl.contrastive_loss(..., estimator="expectation")``
    (spec/hcl.md §2.5) with unsupervised ``self_negative=True``:
    ``L_r = (1/P_r) sum_{(i,j) pos} softplus(m_ri + shift - S_rij / tau)``,
    ``m_ri = log sum_n q_ri(n) exp(S_rin / tau)``, ``q_ri(n) ∝ exp(beta_r S_rin)`` (detached) over the
    allowed negatives; ``shift = log K`` for ``psi="sum"``, 0 for ``"mean"``.

    Shapes: ``z`` ``(R, B, d)``, ``labels`` ``(R, B)``, ``beta`` ``(R,)``, ``positive_groups``
    ``(R, B)`` or None -> ``(R,)``.

    Raises:
        ValueError: bad option/shape, a run without any pair, or an anchor with a pair and no
            negative.
    """
    one_of("setting", setting, SETTINGS)
    if psi not in ("mean", "sum"):
        raise ValueError(f"psi must be 'mean' or 'sum' on the stacked fast path, got {psi!r}")
    if not float(tau) > 0:
        raise ValueError(f"tau must be > 0, got {tau!r}")
    if z.dim() != 3 or labels.shape != z.shape[:2]:
        raise ValueError(
            f"z must be (R, B, d) and labels (R, B), got {tuple(z.shape)} / {tuple(labels.shape)}"
        )
    R, B, _ = z.shape
    beta = torch.as_tensor(beta, dtype=z.dtype, device=z.device)
    if beta.shape != (R,) or bool((beta < 0).any()):
        raise ValueError(f"beta must be a non-negative (R,) = ({R},) tensor, got {tuple(beta.shape)}")
    same = labels[:, :, None] == labels[:, None, :]
    eye = torch.eye(B, dtype=torch.bool, device=z.device)
    pos_same = same if positive_groups is None else positive_groups[:, :, None] == positive_groups[:, None, :]
    pos_mask = pos_same if self_positive else pos_same & ~eye
    num_pairs = pos_mask.sum(dim=(1, 2))
    if bool((num_pairs == 0).any()):
        raise ValueError("a run has no (anchor, positive) pair in its batch; the loss is undefined")
    if setting == "supervised":
        allowed = ~same
        # Every anchor has an other-label member iff the run's batch holds >= 2 labels.
        single = labels.amax(dim=1) == labels.amin(dim=1)
        if bool(single.any()):
            r = int(torch.nonzero(single)[0])
            raise ValueError(
                f"run {r}: a single-class batch leaves every anchor without negatives; the "
                "supervised loss is undefined"
            )
    else:
        allowed = None
    shift = math.log(num_negatives) if psi == "sum" else 0.0
    return _FusedContrastive.apply(z, pos_mask, allowed, beta, float(tau), shift, num_pairs.to(z.dtype))


class _FusedContrastive(torch.autograd.Function):
    """Forward and hand-written backward of :func:`stacked_contrastive_loss` (fewer passes).

    The run-batched twin of ``theory.hcl._expectation._ExpectedPsi`` (the single-run fused expectation
    loss): the same maths on ``(R, B, B)`` blocks with a per-run ``beta`` and per-run pair counts,
    differentiated w.r.t. ``z`` instead of ``S``. Kept separate because ``theory.hcl`` offers
    no run-batched entry point (one ``contrastive_loss`` call per run would cost R Python-level
    loss programs per step, which is what stacking removes); it is tested against
    ``contrastive_loss`` run by run, values and gradients (tests/synthetic/test_stacked.py).

    With ``u = beta S' + S / tau`` (allowed entries), ``w = softmax_n(u)``, ``x = m + shift - S / tau``
    and ``sigma = sigmoid(x) * pos``: ``dL_r/dS_in = (g_i w_in - sigma_in / P_r) / tau`` with
    ``g_i = sum_j sigma_ij / P_r``, and ``dL_r/dz = (G + G^T) z``.
    """

    @staticmethod
    def forward(ctx, z, pos_mask, allowed, beta, tau, shift, num_pairs):
        S = torch.bmm(z, z.transpose(1, 2))
        a = S if tau == 1.0 else S / tau
        tilt = beta[:, None, None] * S
        if allowed is not None:
            tilt = tilt.masked_fill_(~allowed, float("-inf"))
        u = tilt + a
        lse_u = torch.logsumexp(u, dim=2, keepdim=True)
        m = lse_u - torch.logsumexp(tilt, dim=2, keepdim=True)
        x = (m + shift) - a
        posf = pos_mask.to(z.dtype)
        loss = (F.softplus(x) * posf).sum(dim=(1, 2)) / num_pairs
        ctx.save_for_backward(z, u, lse_u, x, posf, num_pairs)
        ctx.tau = tau
        return loss

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, grad_out):
        z, u, lse_u, x, posf, num_pairs = ctx.saved_tensors
        scale = (grad_out / num_pairs)[:, None, None]
        sig = torch.sigmoid(x).mul_(posf)
        g = sig.sum(dim=2, keepdim=True)
        G = torch.exp(u - lse_u).mul_(g).sub_(sig).mul_(scale / ctx.tau)
        dz = torch.bmm(G + G.transpose(1, 2), z)
        return dz, None, None, None, None, None, None


# ----------------------------------------------------------------------------- one run's view


class _RunView:
    """Callable with the single-model interface that evaluates run ``r`` of a StackedModel.

    Uses the same op sequence as :class:`synthetic.models.ContrastiveModel` on run r's parameter
    slices (so per-run losses/metrics match ``train_run``).
    """

    def __init__(self, smodel, r: int) -> None:
        self.m, self.r = smodel, r

    def _features(self, inputs):
        bb, r = self.m.backbone, self.r
        if isinstance(bb, StackedFreeFeatures):
            return bb.weight[r][inputs]
        if isinstance(bb, StackedLinear):
            return torch.addmm(bb.bias[r, 0], inputs, bb.weight[r])
        if isinstance(bb, StackedMLP):
            h = torch.relu(torch.addmm(bb.b1[r, 0], inputs, bb.w1[r]))
            return torch.addmm(bb.b2[r, 0], h, bb.w2[r])
        raise ValueError(f"unsupported backbone {type(bb).__name__}")  # pragma: no cover

    def __call__(self, inputs, noise=None):
        if noise is None:
            h = self._features(inputs)
        elif self.m.is_free:
            h = self._features(inputs) + noise
        else:
            h = self._features(inputs + noise)
        return normalize(h, self.m.normalization)


def _fast_path(config: RunConfig, estimator: str) -> bool:
    return config.method in HCL_METHODS and estimator == "expectation" and config.psi in ("mean", "sum")


def _stacked_batch_loss(
    configs, smodel, X, Y, datas, idx, gens, betas, estimator=None, active=None
) -> torch.Tensor:
    """Losses of the batches ``idx`` ``(R, B)``; draws as ``train._batch_loss``.

    ``active``: list of R bools (default all): runs whose step is skipped neither draw nor get a
    loss. Returns the ``(A,)`` losses of the A active runs, in run order.
    """
    cfg = configs[0]
    est = cfg.estimator if estimator is None else estimator
    R, B = idx.shape
    runs = list(range(R)) if active is None else [r for r in range(R) if active[r]]
    if not _fast_path(cfg, est):
        return torch.stack(
            [
                _train._batch_loss(
                    configs[r], _RunView(smodel, r), datas[r], idx[r], gens[r], estimator=estimator
                )
                for r in runs
            ]
        )
    free = cfg.encoder == "free"
    y = torch.gather(Y, 1, idx)
    if free:
        inputs = idx
    else:
        inputs = torch.gather(X, 1, idx[:, :, None].expand(R, B, X.shape[2]))
    kw = dict(setting=cfg.setting, tau=cfg.tau, psi=cfg.psi, num_negatives=cfg.num_negatives)
    if cfg.positives == "label":
        z, ids = smodel(inputs), None
    else:
        noise_dim = cfg.embed_dim if free else cfg.input_dim
        noise = torch.stack(
            [
                noise_like(
                    (B, noise_dim), cfg.noise_std, generator=gens[r], dtype=cfg.torch_dtype, device=idx.device
                )
                if r in runs
                else torch.zeros(B, noise_dim, dtype=cfg.torch_dtype, device=idx.device)
                for r in range(R)
            ]
        )
        z = torch.cat([smodel(inputs), smodel(inputs, noise)], dim=1)
        y = torch.cat([y, y], dim=1)
        ids = torch.arange(B, device=idx.device).repeat(R, 2)
        kw["self_positive"] = False
    if len(runs) < R:  # skipped runs: embedded (cheap, no draw) but given no loss
        sel = torch.tensor(runs, device=idx.device)
        z, y, betas = z[sel], y[sel], betas[sel]
        ids = None if ids is None else ids[sel]
    # Runs in chunks of about CHUNK_ELEMENTS similarity entries: keeps each (r, B, B) block
    # cache-sized for large batches and bounds the memory of the full-batch evaluation.
    Bz = z.shape[1]
    chunk = max(1, CHUNK_ELEMENTS // (Bz * Bz))
    out = []
    for s in range(0, z.shape[0], chunk):
        g = None if ids is None else ids[s : s + chunk]
        out.append(
            stacked_contrastive_loss(
                z[s : s + chunk], y[s : s + chunk], beta=betas[s : s + chunk], positive_groups=g, **kw
            )
        )
    return torch.cat(out)


def _stacked_metrics(configs, smodel, X, Y, datas, optima, optima_full):
    cfg = configs[0]
    R = len(configs)
    N = cfg.num_train
    device = Y.device
    with torch.no_grad():
        two = not (cfg.method in HCL_METHODS and cfg.positives == "label")
        if N * (2 if two else 1) <= _train.FULL_LOSS_MAX:
            gens = []
            for c in configs:
                g = torch.Generator()
                g.manual_seed(stream_seed(c.seed, "eval"))
                gens.append(g)
            idx = torch.arange(N, device=device).repeat(R, 1)
            betas = torch.tensor([c.beta for c in configs], dtype=cfg.torch_dtype, device=device)
            full = _stacked_batch_loss(
                configs, smodel, X, Y, datas, idx, gens, betas, estimator="expectation"
            )
            full = [float(v) for v in full]
        else:
            full = [float("nan")] * R
        out = []
        for r, c in enumerate(configs):
            view = _RunView(smodel, r)
            z, zt = _train._embed(c, view, datas[r])
            metrics, mu = _train.collapse_metrics(z, datas[r].y_train, c.num_classes, zt, datas[r].y_test)
            metrics["full_loss"] = full[r]
            metrics["optimum"] = optima[r]
            metrics["full_gap"] = full[r] - optima_full[r]
            out.append((metrics, mu))
    return out


class _RunAdam:
    """``torch.optim.Adam`` (L2 weight decay, no amsgrad) over stacked parameters, run by run.

    Every parameter has the leading run dimension R. Each run keeps its own step count, so a run
    whose step is skipped (see ``synthetic.train``) is left untouched (parameters, moments and
    bias correction) exactly as its sequential ``train_run`` leaves it, while the other runs
    update. The update is the op sequence of torch's single-tensor Adam (the CPU default), so
    each run follows a separate ``torch.optim.Adam`` element for element. Runs sharing a step
    count are updated in one tensor op (all R in the usual case without skips).
    """

    def __init__(
        self,
        params: list[torch.Tensor],
        R: int,
        *,
        lr: float,
        weight_decay: float,
        betas: tuple[float, float] = (0.9, 0.999),
        eps: float = 1e-8,
    ) -> None:
        self.params, self.R = params, R
        self.lr, self.weight_decay, self.betas, self.eps = lr, weight_decay, betas, eps
        self.exp_avg = [torch.zeros_like(p, memory_format=torch.preserve_format) for p in params]
        self.exp_avg_sq = [torch.zeros_like(p, memory_format=torch.preserve_format) for p in params]
        self.steps = [0] * R

    def zero_grad(self) -> None:
        for p in self.params:
            p.grad = None

    def _update(self, param, grad, exp_avg, exp_avg_sq, step: int) -> None:
        beta1, beta2 = self.betas
        if self.weight_decay != 0:
            grad = grad.add(param, alpha=self.weight_decay)
        exp_avg.lerp_(grad, 1 - beta1)
        exp_avg_sq.mul_(beta2).addcmul_(grad, grad, value=1 - beta2)
        bias_correction1 = 1 - beta1 ** float(step)
        bias_correction2 = 1 - beta2 ** float(step)
        step_size = self.lr / bias_correction1
        denom = (exp_avg_sq.sqrt() / bias_correction2**0.5).add_(self.eps)
        param.addcdiv_(exp_avg, denom, value=-step_size)

    @torch.no_grad()
    def step(self, active: list[bool]) -> None:
        """One Adam step of the runs with ``active[r]`` True (their gradients are in ``.grad``)."""
        groups: dict[int, list[int]] = {}
        for r in range(self.R):
            if active[r]:
                self.steps[r] += 1
                groups.setdefault(self.steps[r], []).append(r)
        for step, runs in groups.items():
            for p, m, v in zip(self.params, self.exp_avg, self.exp_avg_sq, strict=True):
                if p.grad is None:
                    continue
                w = p.detach()
                if len(runs) == self.R:
                    self._update(w, p.grad, m, v, step)
                else:
                    for r in runs:
                        self._update(w[r], p.grad[r], m[r], v[r], step)


def train_stacked(
    configs: list[RunConfig], *, progress: bool = False, device: str | torch.device = "cpu"
) -> list[pd.DataFrame]:
    """Train R stackable runs in one tensor program; returns ``[train_run(c) for c in configs]``.

    Args:
        configs: non-empty list of RunConfig with equal :func:`stack_key` (same shapes; seeds,
            betas and the method within one setting may differ).
        progress: tqdm bar over epochs (only on a terminal).
        device: torch device.

    Returns:
        One table per config, in order, equal (up to float rounding) to ``train_run(config)``.

    Raises:
        ValueError: empty list, a non-RunConfig, or configs that are not stackable (the message
            names the first differing field).
    """
    if not isinstance(configs, (list, tuple)) or not configs:
        raise ValueError("configs must be a non-empty list of RunConfig")
    if not stackable(list(configs)):
        for c in configs:
            if not isinstance(c, RunConfig):
                raise ValueError(f"configs must hold RunConfig objects, got {type(c).__name__}")
        a = configs[0].to_dict()
        for c in configs[1:]:
            b = c.to_dict()
            diff = [
                f.name for f in fields(RunConfig) if a[f.name] != b[f.name] and f.name not in VARYING_FIELDS
            ]
            if (
                diff
                or configs[0].setting != c.setting
                or (configs[0].setting is None and configs[0].method != c.method)
            ):
                raise ValueError(
                    f"configs are not stackable: field(s) {diff or ['method']} differ "
                    f"({configs[0].key()} vs {c.key()})"
                )
    configs = list(configs)
    cfg = configs[0]
    R = len(configs)
    gens = [run_generators(c.seed) for c in configs]
    datas = [make_data(c, device=device) for c in configs]
    models: list[ContrastiveModel] = [
        build_model(c, generator=g["init"]) for c, g in zip(configs, gens, strict=True)
    ]
    smodel = stack_models(models).to(device)
    X = torch.stack([d.x_train for d in datas])
    Y = torch.stack([d.y_train for d in datas])
    betas = torch.tensor([c.beta for c in configs], dtype=cfg.torch_dtype, device=device)
    opt = _RunAdam(list(smodel.parameters()), R, lr=cfg.lr, weight_decay=cfg.weight_decay)
    optima = [_train.closed_form_optimum(c) for c in configs]
    optima_full = [_train.closed_form_optimum(c, "expectation") for c in configs]
    record_at = set(_train.recorded_epochs(cfg.epochs, cfg.eval_every))
    step_gens = [g["step"] for g in gens]

    records: list[list[dict]] = [[] for _ in range(R)]
    for r, (metrics, mu) in enumerate(_stacked_metrics(configs, smodel, X, Y, datas, optima, optima_full)):
        records[r].append(_train._record(configs[r], 0, float("nan"), 0, metrics, mu))
    run_ids = torch.arange(R, device=device)[None, :, None]
    for epoch in _train._progress(range(1, cfg.epochs + 1), progress, f"stack of {R}", cfg.epochs):
        batches = torch.stack(
            [_train.epoch_batches(cfg.num_train, cfg.batch_size, g["order"]) for g in gens], dim=1
        ).to(device)  # (steps, R, b)
        skip = _train._skipped_batches(cfg, Y[run_ids, batches]).cpu()  # (steps, R)
        dead = skip.all(dim=0)
        if bool(dead.any()):
            r = int(torch.nonzero(dead)[0])
            raise ValueError(
                f"run {configs[r].key()}: every mini-batch of epoch {epoch} holds a single class; the "
                f"{configs[r].method} loss is undefined (batch_size={cfg.batch_size} is too small for "
                f"num_classes={cfg.num_classes})"
            )
        total = torch.zeros(R, dtype=torch.float64)
        for idx, skipped in zip(batches, skip, strict=True):
            active = (~skipped).tolist()
            if not any(active):
                continue
            losses = _stacked_batch_loss(configs, smodel, X, Y, datas, idx, step_gens, betas, active=active)
            opt.zero_grad()
            losses.sum().backward()
            opt.step(active)
            total[~skipped] += losses.detach().to(torch.float64).cpu()
        bad = ~torch.isfinite(total)
        if bool(bad.any()):
            r = int(torch.nonzero(bad)[0])
            raise FloatingPointError(f"run {configs[r].key()}: non-finite training loss in epoch {epoch}")
        if epoch in record_at:
            n_skipped = skip.sum(dim=0)
            mean_loss = (total / (skip.shape[0] - n_skipped)).tolist()
            for r, (metrics, mu) in enumerate(
                _stacked_metrics(configs, smodel, X, Y, datas, optima, optima_full)
            ):
                records[r].append(
                    _train._record(configs[r], epoch, mean_loss[r], int(n_skipped[r]), metrics, mu)
                )
    return [_train._assemble(c, rec) for c, rec in zip(configs, records, strict=True)]
