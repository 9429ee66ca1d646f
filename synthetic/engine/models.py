"""Encoders of the synthetic study: free features, linear and MLP encoders (docs/claims.md).

Every encoder maps its inputs to raw features ``h`` ``(B, d)``; :class:`ContrastiveModel` adds the
normalisation ``"none" | "ball" | "sphere"`` of ``theory.geometry.Normalize`` (the authors'
unit-ball projection lives in the model's forward, docs/claims.md). ``d`` defaults to
``C - 1``, the smallest dimension that admits a simplex ETF.

* :class:`FreeFeatures`: unconstrained features, one learnable vector per training sample; the
  input is the sample index ``(B,)`` long. Isolates the loss geometry (docs/claims.md (a)).
* :class:`LinearEncoder`: ``h = x W + b``.
* :class:`MLPEncoder`: ``depth`` hidden layers of width ``hidden`` with ReLU,
  ``h = relu(... relu(x W1 + b1) ...) W_{depth+1} + b_{depth+1}`` (docs/claims.md (b); depth 1 is
  the 2-layer MLP ``relu(x W1 + b1) W2 + b2``).

Stacked versions (:class:`StackedFreeFeatures`, :class:`StackedLinear`, :class:`StackedMLP`,
:class:`StackedModel`) carry a leading run dimension R on every parameter (weights ``(R, in, out)``,
``torch.baddbmm``) so that R independent runs train in one tensor program
(:func:`synthetic.engine.train.train_runs`). :func:`stack_models` builds one from R single models, copying their
parameters, so stacked and sequential runs start from the same initialisation.

Initialisation (explicit ``torch.Generator``, drawn in float64 then cast): linear layers
``U(-1/sqrt(in), 1/sqrt(in))`` for weights and biases (PyTorch's ``nn.Linear`` default law);
free features ``N(0, init_scale^2 / d)`` per coordinate.
"""

from __future__ import annotations

import math
from typing import Any

import torch
from torch import nn

from theory.geometry import Normalize, normalize
from theory.options import NORMALIZATIONS
from theory.validation import one_of

__all__ = [
    "FreeFeatures",
    "LinearEncoder",
    "MLPEncoder",
    "ContrastiveModel",
    "build_model",
    "StackedFreeFeatures",
    "StackedLinear",
    "StackedMLP",
    "StackedModel",
    "stack_models",
]


def _check_dim(name: str, v) -> int:
    if not isinstance(v, int) or isinstance(v, bool) or v < 1:
        raise ValueError(f"{name} must be an integer >= 1, got {v!r}")
    return v


def _uniform(shape, bound: float, generator, dtype) -> nn.Parameter:
    t = (torch.rand(*shape, generator=generator, dtype=torch.float64) * 2.0 - 1.0) * bound
    return nn.Parameter(t.to(dtype))


class FreeFeatures(nn.Module):
    """One learnable feature vector per sample (unconstrained features).

    Args:
        num_samples: N >= 1.
        d: feature dimension >= 1.
        init_scale: initial coordinates are ``N(0, init_scale^2 / d)``.
        generator: ``torch.Generator`` of the initialisation.
        dtype: parameter dtype.

    Shapes: ``idx`` ``(B,)`` long -> ``(B, d)``.
    """

    def __init__(
        self,
        num_samples: int,
        d: int,
        *,
        init_scale: float = 1.0,
        generator: torch.Generator | None = None,
        dtype: torch.dtype = torch.float32,
    ) -> None:
        super().__init__()
        _check_dim("num_samples", num_samples)
        _check_dim("d", d)
        if not float(init_scale) > 0:
            raise ValueError(f"init_scale must be > 0, got {init_scale!r}")
        w = torch.randn(num_samples, d, generator=generator, dtype=torch.float64)
        self.weight = nn.Parameter((w * (init_scale / math.sqrt(d))).to(dtype))

    def forward(self, idx: torch.Tensor) -> torch.Tensor:  # noqa: D102
        return self.weight[idx]


class LinearEncoder(nn.Module):
    """``h = x W + b``; ``x`` ``(B, D)`` -> ``(B, d)``."""

    def __init__(
        self, D: int, d: int, *, generator: torch.Generator | None = None, dtype: torch.dtype = torch.float32
    ) -> None:
        super().__init__()
        _check_dim("D", D)
        _check_dim("d", d)
        bound = 1.0 / math.sqrt(D)
        self.weight = _uniform((D, d), bound, generator, dtype)
        self.bias = _uniform((d,), bound, generator, dtype)

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # noqa: D102
        return torch.addmm(self.bias, x, self.weight)


class MLPEncoder(nn.Module):
    """MLP with ``depth`` ReLU hidden layers of width ``hidden``; ``x`` ``(B, D)`` -> ``(B, d)``.

    Layer ``l`` computes ``x W_l + b_l`` (weights ``(in, out)``); parameters are drawn layer by
    layer, weight then bias, each ``U(-1/sqrt(in), 1/sqrt(in))``.
    """

    def __init__(
        self,
        D: int,
        hidden: int,
        d: int,
        *,
        depth: int = 1,
        generator: torch.Generator | None = None,
        dtype: torch.dtype = torch.float32,
    ) -> None:
        super().__init__()
        _check_dim("D", D)
        _check_dim("hidden", hidden)
        _check_dim("d", d)
        _check_dim("depth", depth)
        sizes = [D] + [hidden] * depth + [d]
        self.weights = nn.ParameterList()
        self.biases = nn.ParameterList()
        for fan_in, fan_out in zip(sizes[:-1], sizes[1:], strict=True):
            bound = 1.0 / math.sqrt(fan_in)
            self.weights.append(_uniform((fan_in, fan_out), bound, generator, dtype))
            self.biases.append(_uniform((fan_out,), bound, generator, dtype))

    @property
    def depth(self) -> int:
        """Number of hidden layers."""
        return len(self.weights) - 1

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # noqa: D102
        h = x
        last = len(self.weights) - 1
        for i, (w, b) in enumerate(zip(self.weights, self.biases, strict=True)):
            h = torch.addmm(b, h, w)
            if i < last:
                h = torch.relu(h)
        return h


class ContrastiveModel(nn.Module):
    """Encoder followed by the normalisation of ``theory.geometry.Normalize``.

    ``forward(inputs, noise=None)``: ``inputs`` are indices ``(B,)`` for free features or inputs
    ``(B, D)`` otherwise. ``noise`` (optional) is added to the encoder *input* for linear/MLP
    encoders (``x + noise``, shape ``(B, D)``) and to the raw *feature* for free features
    (``h + noise``, shape ``(B, d)``); this is the ``"noise"`` positive construction.
    Returns normalised embeddings ``(B, d)``.
    """

    def __init__(self, backbone: nn.Module, normalization: str = "ball") -> None:
        super().__init__()
        one_of("normalization", normalization, NORMALIZATIONS)
        self.backbone = backbone
        self.norm = Normalize(normalization)

    @property
    def is_free(self) -> bool:
        """Whether the backbone is :class:`FreeFeatures` (inputs are indices)."""
        return isinstance(self.backbone, FreeFeatures)

    def forward(self, inputs: torch.Tensor, noise: torch.Tensor | None = None) -> torch.Tensor:  # noqa: D102
        if noise is None:
            return self.norm(self.backbone(inputs))
        if self.is_free:
            return self.norm(self.backbone(inputs) + noise)
        return self.norm(self.backbone(inputs + noise))


def build_model(config, generator: torch.Generator | None = None) -> ContrastiveModel:
    """The :class:`ContrastiveModel` of a ``synthetic.engine.config.RunConfig`` (on the CPU)."""
    d, dtype = config.embed_dim, config.torch_dtype
    bb: nn.Module
    if config.encoder == "free":
        bb = FreeFeatures(config.num_train, d, init_scale=config.init_scale, generator=generator, dtype=dtype)
    elif config.encoder == "linear":
        bb = LinearEncoder(config.input_dim, d, generator=generator, dtype=dtype)
    elif config.encoder == "mlp":
        bb = MLPEncoder(
            config.input_dim, config.hidden, d, depth=config.depth, generator=generator, dtype=dtype
        )
    else:  # pragma: no cover - RunConfig validates
        raise ValueError(f"encoder must be 'free', 'linear' or 'mlp', got {config.encoder!r}")
    return ContrastiveModel(bb, config.normalization)


# ---------------------------------------------------------------------------------- stacked


def _stack(params) -> nn.Parameter:
    return nn.Parameter(torch.stack([p.detach().clone() for p in params]))


class StackedFreeFeatures(nn.Module):
    """R runs of free features: ``weight`` ``(R, N, d)``; ``idx`` ``(R, B)`` -> ``(R, B, d)``."""

    def __init__(self, weight: torch.Tensor) -> None:
        super().__init__()
        if weight.dim() != 3:
            raise ValueError(f"weight must have shape (R, N, d), got {tuple(weight.shape)}")
        self.weight = nn.Parameter(weight)

    def forward(self, idx: torch.Tensor) -> torch.Tensor:  # noqa: D102
        R, B = idx.shape
        return torch.gather(self.weight, 1, idx[:, :, None].expand(R, B, self.weight.shape[2]))


class StackedLinear(nn.Module):
    """R linear encoders: ``weight`` ``(R, D, d)``, ``bias`` ``(R, 1, d)``; ``(R, B, D) -> (R, B, d)``."""

    def __init__(self, weight: torch.Tensor, bias: torch.Tensor) -> None:
        super().__init__()
        self.weight = nn.Parameter(weight)
        self.bias = nn.Parameter(bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # noqa: D102
        return torch.baddbmm(self.bias, x, self.weight)


class StackedMLP(nn.Module):
    """R MLPs: per layer, weights ``(R, in, out)`` and biases ``(R, 1, out)``; ``(R, B, D) -> (R, B, d)``."""

    def __init__(self, weights: list[torch.Tensor], biases: list[torch.Tensor]) -> None:
        super().__init__()
        if not weights or len(weights) != len(biases):
            raise ValueError("weights and biases must be non-empty lists of equal length")
        self.weights = nn.ParameterList([nn.Parameter(w) for w in weights])
        self.biases = nn.ParameterList([nn.Parameter(b) for b in biases])

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # noqa: D102
        h = x
        last = len(self.weights) - 1
        for i, (w, b) in enumerate(zip(self.weights, self.biases, strict=True)):
            h = torch.baddbmm(b, h, w)
            if i < last:
                h = torch.relu(h)
        return h


class StackedModel(nn.Module):
    """R :class:`ContrastiveModel` s with one leading run dimension.

    ``forward(inputs, noise=None)``: ``inputs`` ``(R, B)`` indices (free) or ``(R, B, D)``;
    ``noise`` ``(R, B, d)`` (free) or ``(R, B, D)``; returns ``(R, B, d)`` normalised embeddings.
    :meth:`features` gives the raw (pre-normalisation) features, :meth:`run` one run's embeddings
    with the single-model op sequence (``addmm`` on run r's parameter slices).
    """

    def __init__(self, backbone: nn.Module, normalization: str) -> None:
        super().__init__()
        self.normalization = one_of("normalization", normalization, NORMALIZATIONS)
        self.backbone = backbone

    @property
    def is_free(self) -> bool:
        """Whether the backbone is :class:`StackedFreeFeatures`."""
        return isinstance(self.backbone, StackedFreeFeatures)

    @property
    def num_runs(self) -> int:
        """R."""
        return int(next(self.parameters()).shape[0])

    def features(self, inputs: torch.Tensor, noise: torch.Tensor | None = None) -> torch.Tensor:
        """Raw features ``(R, B, d)`` before the normalisation."""
        if noise is None:
            return self.backbone(inputs)
        if self.is_free:
            return self.backbone(inputs) + noise
        return self.backbone(inputs + noise)

    def forward(self, inputs: torch.Tensor, noise: torch.Tensor | None = None) -> torch.Tensor:  # noqa: D102
        return normalize(self.features(inputs, noise), self.normalization)

    def run_features(self, r: int, inputs: torch.Tensor, noise: torch.Tensor | None = None) -> torch.Tensor:
        """Raw features ``(B, d)`` of run ``r`` for its inputs ``(B,)`` / ``(B, D)``."""
        bb = self.backbone
        if isinstance(bb, StackedFreeFeatures):
            h = bb.weight[r][inputs]
            return h if noise is None else h + noise
        x = inputs if noise is None else inputs + noise
        if isinstance(bb, StackedLinear):
            return torch.addmm(bb.bias[r, 0], x, bb.weight[r])
        if isinstance(bb, StackedMLP):
            last = len(bb.weights) - 1
            for i, (w, b) in enumerate(zip(bb.weights, bb.biases, strict=True)):
                x = torch.addmm(b[r, 0], x, w[r])
                if i < last:
                    x = torch.relu(x)
            return x
        raise ValueError(f"unsupported backbone {type(bb).__name__}")  # pragma: no cover

    def run(self, r: int, inputs: torch.Tensor, noise: torch.Tensor | None = None) -> torch.Tensor:
        """Normalised embeddings ``(B, d)`` of run ``r`` (see :meth:`run_features`)."""
        return normalize(self.run_features(r, inputs, noise), self.normalization)

    def run_state(self, r: int) -> dict[str, torch.Tensor]:
        """Run ``r``'s parameters as a ``state_dict`` of the single :class:`ContrastiveModel`."""
        bb = self.backbone
        if isinstance(bb, StackedFreeFeatures):
            return {"backbone.weight": bb.weight[r].detach().clone()}
        if isinstance(bb, StackedLinear):
            return {
                "backbone.weight": bb.weight[r].detach().clone(),
                "backbone.bias": bb.bias[r, 0].detach().clone(),
            }
        if isinstance(bb, StackedMLP):
            out = {}
            for i, (w, b) in enumerate(zip(bb.weights, bb.biases, strict=True)):
                out[f"backbone.weights.{i}"] = w[r].detach().clone()
                out[f"backbone.biases.{i}"] = b[r, 0].detach().clone()
            return out
        raise ValueError(f"unsupported backbone {type(bb).__name__}")  # pragma: no cover


def stack_models(models: list[ContrastiveModel]) -> StackedModel:
    """Stack R single models of one architecture and normalisation (parameters are copied).

    Raises:
        ValueError: empty list, mixed architectures/normalisations or parameter shapes.
    """
    if not models:
        raise ValueError("models must be a non-empty list")
    kinds = {type(m.backbone) for m in models}
    normalizations = {m.norm.normalization for m in models}
    if len(kinds) != 1 or len(normalizations) != 1:
        raise ValueError(
            f"models must share one encoder type and normalisation, got {kinds} / {normalizations}"
        )
    shapes = {tuple(tuple(p.shape) for p in m.parameters()) for m in models}
    if len(shapes) != 1:
        raise ValueError(f"models must have identical parameter shapes, got {shapes}")
    bbs: list[Any] = [m.backbone for m in models]
    kind = kinds.pop()
    bb: nn.Module
    if kind is FreeFeatures:
        bb = StackedFreeFeatures(_stack([b.weight for b in bbs]).data)
    elif kind is LinearEncoder:
        bb = StackedLinear(_stack([b.weight for b in bbs]).data, _stack([b.bias[None] for b in bbs]).data)
    elif kind is MLPEncoder:
        layers = range(len(bbs[0].weights))
        bb = StackedMLP(
            [_stack([b.weights[i] for b in bbs]).data for i in layers],
            [_stack([b.biases[i][None] for b in bbs]).data for i in layers],
        )
    else:
        raise ValueError(f"unsupported encoder type {kind.__name__}")
    return StackedModel(bb, normalizations.pop())
