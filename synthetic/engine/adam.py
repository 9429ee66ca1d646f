"""Adam over run-stacked parameters: torch's Adam, and a run-wise Adam for runs that skip steps.

Every parameter of a :class:`synthetic.engine.models.StackedModel` carries a leading run dimension R.
Adam's update is element-wise, so ``torch.optim.Adam`` on the stacked parameters updates each
run exactly as a separate ``torch.optim.Adam`` would, **as long as every run steps together**
(:func:`make_adam`: torch's fused kernel where it exists, which equals the single-tensor loop to
the last bit in float64 tests and is several times faster on large free-feature tables).
A supervised run whose mini-batch holds a single class skips that step (its loss is undefined,
see :mod:`synthetic.engine.train`); its sequential twin then leaves its parameters, moments and step
count untouched, which one shared step count cannot express. :class:`RunAdam` keeps one step
count per run and updates only the active runs, with the op sequence of torch's single-tensor
Adam, so each run follows its own ``torch.optim.Adam``. The engine switches to it (carrying the
moments over, :meth:`RunAdam.from_torch`) at the first step some but not all runs skip.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

__all__ = ["make_adam", "RunAdam"]


def make_adam(params: Sequence[torch.Tensor], *, lr: float, weight_decay: float) -> torch.optim.Adam:
    """``torch.optim.Adam`` over ``params``, with the fused kernel when this torch offers it."""
    try:
        return torch.optim.Adam(params, lr=lr, weight_decay=weight_decay, fused=True)
    except (RuntimeError, TypeError, ValueError):  # pragma: no cover - older torch / devices
        return torch.optim.Adam(params, lr=lr, weight_decay=weight_decay)


class RunAdam:
    """``torch.optim.Adam`` (L2 weight decay, no amsgrad) over stacked parameters, run by run.

    Args:
        params: the stacked parameters (leading dimension R each).
        R: number of runs.
        lr: learning rate.
        weight_decay: L2 weight decay added to the gradient (torch's Adam convention).
        betas: Adam's moment coefficients.
        eps: Adam's epsilon.
    """

    def __init__(
        self,
        params: Sequence[torch.Tensor],
        R: int,
        *,
        lr: float,
        weight_decay: float,
        betas: tuple[float, float] = (0.9, 0.999),
        eps: float = 1e-8,
    ) -> None:
        self.params, self.R = list(params), R
        self.lr, self.weight_decay, self.betas, self.eps = lr, weight_decay, betas, eps
        self.exp_avg = [torch.zeros_like(p, memory_format=torch.preserve_format) for p in self.params]
        self.exp_avg_sq = [torch.zeros_like(p, memory_format=torch.preserve_format) for p in self.params]
        self.steps = [0] * R

    @classmethod
    def from_torch(cls, opt: torch.optim.Adam, params: Sequence[torch.Tensor], R: int) -> RunAdam:
        """A RunAdam continuing ``opt`` (moments and step count carried over to every run)."""
        group = opt.param_groups[0]
        out = cls(
            params,
            R,
            lr=group["lr"],
            weight_decay=group["weight_decay"],
            betas=group["betas"],
            eps=group["eps"],
        )
        step = 0
        for i, p in enumerate(out.params):
            st = opt.state.get(p)
            if st:
                out.exp_avg[i].copy_(st["exp_avg"])
                out.exp_avg_sq[i].copy_(st["exp_avg_sq"])
                step = int(st["step"])
        out.steps = [step] * R
        return out

    def zero_grad(self, set_to_none: bool = True) -> None:
        """Drop the gradients."""
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
    def step(self, active: Sequence[bool] | None = None) -> None:
        """One Adam step of the runs with ``active[r]`` True (default all; gradients in ``.grad``)."""
        act = [True] * self.R if active is None else list(active)
        groups: dict[int, list[int]] = {}
        for r in range(self.R):
            if act[r]:
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
