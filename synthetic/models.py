"""Encoders of the synthetic study: free features, linear and 2-layer MLP (spec/hcl.md §4).

Every encoder maps its inputs to raw features ``h`` ``(B, d)``; :class:`ContrastiveModel` adds the
normalisation ``"none" | "ball" | "sphere"`` of ``theory.geometry.Normalize`` (the authors'
unit-ball projection lives in the model's forward, spec/hcl.md §5.2). ``d`` defaults to
``C - 1``, the smallest dimension that admits a simplex ETF.

* :class:`FreeFeatures`: unconstrained features, one learnable vector per training sample; the
  input is the sample index ``(B,)`` long. Isolates the loss geometry (spec/hcl.md §4 (a)).
* :class:`LinearEncoder`: ``h = x W + b``.
* :class:`MLPEncoder`: ``h = relu(x W1 + b1) W2 + b2`` (spec/hcl.md §4 (b)).

Stacked versions (:class:`StackedFreeFeatures`, :class:`StackedLinear`, :class:`StackedMLP`,
:class:`StackedModel`) carry a leading run dimension R on every parameter (weights ``(R, in, out)``,
``torch.baddbmm``) so that R independent runs train in one tensor program
(``synthetic.stacked``). :func:`stack_models` builds one from R single models, copying their
parameters, so stacked and sequential runs start from the same initialisation.

Initialisation (explicit ``torch.Generator``, drawn in float64 then cast): linear layers
``U(-1/sqrt(in), 1/sqrt(in))`` for weights and biases (PyTorch's ``nn.Linear`` default law);
free features ``N(0, init_scale^2 / d)`` per coordinate.
"""

from __future__ import annotations

import math

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

    def __init__(self, num_samples: int, d: int, *, init_scale: float = 1.0,
                 generator: torch.Generator | None = None, dtype: torch.dtype = torch.float32) -> None:
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

    def __init__(self, D: int, d: int, *, generator: torch.Generator | None = None,
                 dtype: torch.dtype = torch.float32) -> None:
        super().__init__()
        _check_dim("D", D)
        _check_dim("d", d)
        bound = 1.0 / math.sqrt(D)
        self.weight = _uniform((D, d), bound, generator, dtype)
        self.bias = _uniform((d,), bound, generator, dtype)

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # noqa: D102
        return torch.addmm(self.bias, x, self.weight)


class MLPEncoder(nn.Module):
    """Two-layer MLP ``h = relu(x W1 + b1) W2 + b2``; ``x`` ``(B, D)`` -> ``(B, d)``."""

    def __init__(self, D: int, hidden: int, d: int, *, generator: torch.Generator | None = None,
                 dtype: torch.dtype = torch.float32) -> None:
        super().__init__()
        _check_dim("D", D)
        _check_dim("hidden", hidden)
        _check_dim("d", d)
        b1, b2 = 1.0 / math.sqrt(D), 1.0 / math.sqrt(hidden)
        self.w1 = _uniform((D, hidden), b1, generator, dtype)
        self.b1 = _uniform((hidden,), b1, generator, dtype)
        self.w2 = _uniform((hidden, d), b2, generator, dtype)
        self.b2 = _uniform((d,), b2, generator, dtype)

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # noqa: D102
        return torch.addmm(self.b2, torch.relu(torch.addmm(self.b1, x, self.w1)), self.w2)


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
    """The :class:`ContrastiveModel` of a ``synthetic.config.RunConfig`` (on the CPU)."""
    d, dtype = config.embed_dim, config.torch_dtype
    if config.encoder == "free":
        bb = FreeFeatures(config.num_train, d, init_scale=config.init_scale, generator=generator, dtype=dtype)
    elif config.encoder == "linear":
        bb = LinearEncoder(config.input_dim, d, generator=generator, dtype=dtype)
    elif config.encoder == "mlp":
        bb = MLPEncoder(config.input_dim, config.hidden, d, generator=generator, dtype=dtype)
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
    """R two-layer MLPs with weights ``(R, in, out)`` and biases ``(R, 1, out)``."""

    def __init__(self, w1, b1, w2, b2) -> None:
        super().__init__()
        self.w1, self.b1 = nn.Parameter(w1), nn.Parameter(b1)
        self.w2, self.b2 = nn.Parameter(w2), nn.Parameter(b2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # noqa: D102
        return torch.baddbmm(self.b2, torch.relu(torch.baddbmm(self.b1, x, self.w1)), self.w2)


class StackedModel(nn.Module):
    """R :class:`ContrastiveModel` s with one leading run dimension.

    ``forward(inputs, noise=None)``: ``inputs`` ``(R, B)`` indices (free) or ``(R, B, D)``;
    ``noise`` ``(R, B, d)`` (free) or ``(R, B, D)``; returns ``(R, B, d)`` normalised embeddings.
    """

    def __init__(self, backbone: nn.Module, normalization: str) -> None:
        super().__init__()
        self.normalization = one_of("normalization", normalization, NORMALIZATIONS)
        self.backbone = backbone

    @property
    def is_free(self) -> bool:
        """Whether the backbone is :class:`StackedFreeFeatures`."""
        return isinstance(self.backbone, StackedFreeFeatures)

    def forward(self, inputs: torch.Tensor, noise: torch.Tensor | None = None) -> torch.Tensor:  # noqa: D102
        if noise is None:
            h = self.backbone(inputs)
        elif self.is_free:
            h = self.backbone(inputs) + noise
        else:
            h = self.backbone(inputs + noise)
        return normalize(h, self.normalization)


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
        raise ValueError(f"models must share one encoder type and normalisation, got {kinds} / {normalizations}")
    shapes = {tuple(tuple(p.shape) for p in m.parameters()) for m in models}
    if len(shapes) != 1:
        raise ValueError(f"models must have identical parameter shapes, got {shapes}")
    bbs = [m.backbone for m in models]
    kind = kinds.pop()
    if kind is FreeFeatures:
        bb = StackedFreeFeatures(_stack([b.weight for b in bbs]).data)
    elif kind is LinearEncoder:
        bb = StackedLinear(_stack([b.weight for b in bbs]).data, _stack([b.bias[None] for b in bbs]).data)
    elif kind is MLPEncoder:
        bb = StackedMLP(
            _stack([b.w1 for b in bbs]).data, _stack([b.b1[None] for b in bbs]).data,
            _stack([b.w2 for b in bbs]).data, _stack([b.b2[None] for b in bbs]).data,
        )
    else:
        raise ValueError(f"unsupported encoder type {kind.__name__}")
    return StackedModel(bb, normalizations.pop())
