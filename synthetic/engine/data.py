"""Seeded latent-class data and positive-pair constructions (docs/hcl.md#data-model).

Data model (the project's own synthetic design, docs/claims.md): C balanced latent classes,
``n_per_class`` training and ``n_test_per_class`` held-out samples each, inputs

    x = m_c + sigma * eps,   eps ~ N(0, I_D),   ||m_c|| = separation,

with centres ``m_c`` either i.i.d. uniform directions (``"random"``) or an orthonormal frame
(``"orthogonal"``, needs D >= C), each scaled to norm ``separation``. In the unconstrained-features
mode (``encoder="free"``) the inputs are not used: the "data" of sample n is its index and the
model holds one learnable vector per sample (``synthetic.engine.models.FreeFeatures``).

Positive pairs (how each loss consumes them is documented in ``synthetic.engine.train``):

* ``"label"``: the positive is another sample of the same class
  (:func:`same_class_partners`; the SCL family uses the authors' in-batch label positives).
  Given the class, anchor and positive are (nearly) conditionally independent: the theory's UCL
  assumption (docs/hcl.md#data-model).
* ``"noise"``: the positive is the anchor plus Gaussian noise (:func:`noise_like`); anchor and
  positive are strongly dependent given the class (claim S2, §3.5 counter-example).

Randomness: every function takes an explicit ``torch.Generator``; :func:`run_generators` derives
independent, seeded streams (data, init, order, step, eval) from one integer seed.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

__all__ = [
    "STREAMS",
    "SyntheticData",
    "stream_seed",
    "run_generators",
    "epoch_batches",
    "class_centres",
    "gaussian_mixture",
    "make_data",
    "same_class_partners",
    "noise_like",
]

#: Named random streams of a run, each an independent torch.Generator: the synthetic engine's
#: (``data``, ``init``, ``order``, ``step``, ``eval``) and the real-data runs' (``init``, ``order``,
#: ``views``, ``negatives``). A stream's index in this tuple enters its seed: new streams are
#: appended, never inserted.
STREAMS = ("data", "init", "order", "step", "eval", "views", "negatives")


def stream_seed(seed: int, stream: str, rank: int = 0) -> int:
    """63-bit seed of a named stream: the one seed rule of both experiment stacks.

    ``numpy.random.SeedSequence([seed, index of stream, rank])``; ``rank`` tells apart the
    processes of a DDP job that draw a stream each (0 for a single process, whose entropy
    ``[seed, index, 0]`` is that of ``[seed, index]``: SeedSequence pads with zeros).
    """
    if not isinstance(seed, (int, np.integer)) or isinstance(seed, bool) or seed < 0:
        raise ValueError(f"seed must be an integer >= 0, got {seed!r}")
    if not isinstance(rank, (int, np.integer)) or isinstance(rank, bool) or rank < 0:
        raise ValueError(f"rank must be an integer >= 0, got {rank!r}")
    if stream not in STREAMS:
        raise ValueError(f"stream must be one of {STREAMS}, got {stream!r}")
    entropy = [int(seed), STREAMS.index(stream)] + ([int(rank)] if rank else [])
    state = np.random.SeedSequence(entropy).generate_state(2, np.uint32)
    return int((int(state[0]) << 31) ^ int(state[1]))


def epoch_batches(N: int, batch_size: int, generator: torch.Generator) -> torch.Tensor:
    """Index batches ``(steps, b)`` of one epoch: the one batch rule of both experiment stacks.

    A full batch (``batch_size`` 0 or ``>= N``) is ``arange(N)[None]`` and draws nothing;
    otherwise a fresh permutation of ``range(N)`` (drawn from ``generator``, on its device) cut
    into ``N // batch_size`` batches (``drop_last``, as the authors' loaders).
    """
    if batch_size == 0 or batch_size >= N:
        return torch.arange(N)[None]
    perm = torch.randperm(N, generator=generator, device=generator.device)
    steps = N // batch_size
    return perm[: steps * batch_size].view(steps, batch_size)


def run_generators(seed: int) -> dict[str, torch.Generator]:
    """One seeded CPU ``torch.Generator`` per stream of :data:`STREAMS`.

    Random numbers are always drawn on the CPU (then moved), so a run's draws do not depend on
    the device it trains on.
    """
    out = {}
    for s in STREAMS:
        g = torch.Generator()
        g.manual_seed(stream_seed(seed, s))
        out[s] = g
    return out


@dataclass(frozen=True)
class SyntheticData:
    """A latent-class data set (tensors on one device, inputs in the run's dtype).

    Attributes:
        x_train: ``(N, D)`` inputs, ``N = C * n_per_class``, class-blocked order.
        y_train: ``(N,)`` long labels in ``[0, C)``.
        x_test: ``(N_test, D)`` held-out inputs.
        y_test: ``(N_test,)`` long labels.
        centres: ``(C, D)`` class centres ``m_c``.
        num_classes: C.
    """

    x_train: torch.Tensor
    y_train: torch.Tensor
    x_test: torch.Tensor
    y_test: torch.Tensor
    centres: torch.Tensor
    num_classes: int

    @property
    def num_train(self) -> int:
        """N."""
        return int(self.y_train.shape[0])

    def to(self, device=None, dtype=None) -> SyntheticData:
        """Move inputs to ``device`` / cast inputs and centres to ``dtype`` (labels stay long)."""

        def f(t):
            return t.to(device=device, dtype=dtype)

        return SyntheticData(
            f(self.x_train),
            self.y_train.to(device),
            f(self.x_test),
            self.y_test.to(device),
            f(self.centres),
            self.num_classes,
        )


def class_centres(
    C: int, D: int, separation: float, kind: str = "random", *, generator: torch.Generator
) -> torch.Tensor:
    """Class centres ``(C, D)`` in float64, each of norm ``separation``.

    ``"random"``: normalised i.i.d. Gaussian directions; ``"orthogonal"``: the rows of a random
    orthonormal C-frame (QR of a Gaussian ``(D, C)`` matrix), pairwise distance
    ``separation * sqrt(2)``.

    Raises:
        ValueError: ``C < 2``, ``D < 1``, ``separation < 0``, unknown ``kind``, or orthogonal with
            ``D < C``.
    """
    if not isinstance(C, int) or C < 2:
        raise ValueError(f"C must be an integer >= 2, got {C!r}")
    if not isinstance(D, int) or D < 1:
        raise ValueError(f"D must be an integer >= 1, got {D!r}")
    if not float(separation) >= 0:
        raise ValueError(f"separation must be >= 0, got {separation!r}")
    if kind == "random":
        g = torch.randn(C, D, generator=generator, dtype=torch.float64)
        return separation * g / torch.linalg.vector_norm(g, dim=1, keepdim=True).clamp_min(1e-300)
    if kind == "orthogonal":
        if D < C:
            raise ValueError(f"D must be >= C = {C} for orthogonal centres, got {D}")
        g = torch.randn(D, C, generator=generator, dtype=torch.float64)
        q, r = torch.linalg.qr(g)
        q = q * torch.sign(torch.diagonal(r))
        return separation * q.T.contiguous()
    raise ValueError(f"kind must be 'random' or 'orthogonal', got {kind!r}")


def gaussian_mixture(
    centres: torch.Tensor, n_per_class: int, sigma: float, *, generator: torch.Generator
) -> tuple[torch.Tensor, torch.Tensor]:
    """Balanced samples ``x = m_c + sigma * eps`` (float64), class-blocked.

    Shapes: ``centres`` ``(C, D)`` -> ``x`` ``(C * n_per_class, D)``, ``y`` ``(C * n_per_class,)``.
    """
    if not isinstance(n_per_class, int) or n_per_class < 0:
        raise ValueError(f"n_per_class must be an integer >= 0, got {n_per_class!r}")
    if not float(sigma) >= 0:
        raise ValueError(f"sigma must be >= 0, got {sigma!r}")
    C, D = centres.shape
    y = torch.arange(C).repeat_interleave(n_per_class)
    eps = torch.randn(C * n_per_class, D, generator=generator, dtype=torch.float64)
    return centres.to(torch.float64)[y] + sigma * eps, y


def make_data(config, device: str | torch.device = "cpu") -> SyntheticData:
    """The data set of a ``RunConfig`` (seeded by ``config.seed``'s ``"data"`` stream).

    Generated in float64 on the CPU from the config's data fields only (so runs that differ only
    in method, beta, optimiser, ... share the data), then cast to ``config.dtype``. The draw order
    is: centres, training noise, test noise. For ``encoder="free"`` the inputs are generated
    anyway (cheap) but unused.
    """
    g = torch.Generator()
    g.manual_seed(stream_seed(config.seed, "data"))
    m = class_centres(config.num_classes, config.input_dim, config.separation, config.centres, generator=g)
    x, y = gaussian_mixture(m, config.n_per_class, config.sigma, generator=g)
    xt, yt = gaussian_mixture(m, config.n_test_per_class, config.sigma, generator=g)
    return SyntheticData(x, y, xt, yt, m, config.num_classes).to(device, config.torch_dtype)


def same_class_partners(
    labels: torch.Tensor, anchors: torch.Tensor | None = None, *, generator: torch.Generator
) -> torch.Tensor:
    """For each anchor, a uniformly random *other* index with the same label.

    ``labels`` ``(N,)`` over the whole pool; ``anchors`` ``(B,)`` indices into it (default: all).
    Returns ``(B,)`` long partner indices ``j != i`` with ``labels[j] == labels[i]``. Vectorised:
    a rank ``r ~ U{0..n_c-2}`` among the class members, skipping the anchor's own rank.
    One ``torch.rand(B)`` draw from ``generator``.

    Raises:
        ValueError: an anchor's class has a single member (no partner exists).
    """
    labels = torch.as_tensor(labels)
    if labels.dim() != 1 or labels.is_floating_point():
        raise ValueError("labels must be a 1-D integer tensor")
    N = labels.shape[0]
    if anchors is None:
        anchors = torch.arange(N, device=labels.device)
    order = torch.argsort(labels, stable=True)  # members of each class, contiguous
    sorted_labels = labels[order]
    C = int(labels.max()) + 1 if N else 0
    counts = torch.bincount(labels, minlength=C)
    starts = torch.cumsum(counts, 0) - counts
    rank = torch.empty_like(order)
    rank[order] = torch.arange(N, device=labels.device) - starts[sorted_labels]
    c = labels[anchors]
    n_c = counts[c]
    if bool((n_c < 2).any()):
        bad = int(c[n_c < 2][0])
        raise ValueError(f"class {bad} has a single member: no same-class partner exists")
    u = torch.rand(anchors.shape[0], generator=generator, dtype=torch.float64).to(labels.device)
    r = torch.minimum((u * (n_c - 1)).long(), n_c - 2)
    r = r + (r >= rank[anchors]).long()
    return order[starts[c] + r]


def noise_like(shape, std: float, *, generator: torch.Generator, dtype=torch.float64, device="cpu"):
    """Gaussian noise ``std * eps`` of ``shape`` (drawn in float64, cast to ``dtype``)."""
    if not float(std) >= 0:
        raise ValueError(f"std must be >= 0, got {std!r}")
    eps = torch.randn(*shape, generator=generator, dtype=torch.float64)
    return (std * eps).to(device=device, dtype=dtype)
