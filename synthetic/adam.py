"""Adam over run-stacked parameters with one step count per run (for runs that skip steps).

Every parameter of a :class:`synthetic.models.StackedModel` carries a leading run dimension R.
Adam's update is element-wise, so ``torch.optim.Adam`` on the stacked parameters updates each
run exactly as a separate ``torch.optim.Adam`` would, **as long as every run steps together**.
A supervised run whose mini-batch holds a single class skips that step (its loss is undefined,
see :mod:`synthetic.engine`); its sequential twin then leaves its parameters, moments and step
count untouched, which one shared step count cannot express. :class:`RunAdam` keeps one step
count per run and updates only the active runs, with the op sequence of torch's single-tensor
Adam (the CPU default), so each run follows its own ``torch.optim.Adam`` element for element.
The engine uses it only where a skip is possible (:func:`needs_run_adam`).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from synthetic.config import RunConfig

__all__ = ["RunAdam", "needs_run_adam"]


def needs_run_adam(config: RunConfig) -> bool:
    """Whether a run of this shape can skip a step: supervised, mini-batches, ``b <= n_per_class``.

    A mini-batch of ``b`` distinct samples holds a single class only if ``b <= n_per_class``.
    """
    return config.setting == "supervised" and not config.full_batch and config.batch_size <= config.n_per_class


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
