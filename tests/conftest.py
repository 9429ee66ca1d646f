"""Shared fixtures of the test suite: seeded generators and the standard test batches.

Each fixture returns a *factory* (a plain function), so a test asks for the fixture once and
builds as many objects as it needs::

    def test_something(torch_gen, nc_batch, ball_batch):
        g = torch_gen(0)                          # torch.Generator seeded with 0
        z, labels = nc_batch([3, 2, 4])           # exact Neural Collapse batch (simplex ETF rows)
        z, labels = ball_batch(B=12, C=3, seed=1)  # random unit-ball batch, every class present

Seeds are fixed integers, never ``hash()`` of anything (string hashes change with
PYTHONHASHSEED); where a seed must depend on a test's parameters, use ``zlib.crc32`` of their text.
"""

from __future__ import annotations

import signal
from collections.abc import Iterator, Sequence

import numpy as np
import pytest
import torch

from theory.geometry import normalize, simplex_etf


def make_torch_gen(seed: int) -> torch.Generator:
    """A CPU ``torch.Generator`` seeded with ``seed``."""
    g = torch.Generator()
    g.manual_seed(seed)
    return g


def make_np_rng(seed: int) -> np.random.Generator:
    """``numpy.random.default_rng(seed)``."""
    return np.random.default_rng(seed)


def make_nc_batch(
    counts: Sequence[int], *, seed: int | None = None, dtype: torch.dtype = torch.float64
) -> tuple[torch.Tensor, torch.Tensor]:
    """An exact Neural Collapse batch: ``counts[c]`` copies of the simplex-ETF vertex ``v_c``.

    ``C = len(counts)`` classes in ``d = C - 1``; the ETF is rotated by a Haar-random orthogonal
    matrix drawn from ``torch.Generator().manual_seed(seed)`` when ``seed`` is given. Labels are
    sorted (``0`` repeated ``counts[0]`` times, then ``1``, ...). Returns ``(z, labels)``.
    """
    counts = [int(c) for c in counts]
    C = len(counts)
    gen = None if seed is None else make_torch_gen(seed)
    v = simplex_etf(C, C - 1, generator=gen, dtype=dtype)
    labels = torch.arange(C).repeat_interleave(torch.as_tensor(counts, dtype=torch.long))
    return v[labels], labels


def make_ball_batch(
    B: int = 14, d: int = 5, C: int = 4, seed: int = 0, dtype: torch.dtype = torch.float64, scale: float = 1.5
) -> tuple[torch.Tensor, torch.Tensor]:
    """A random batch in the unit ball with every class present.

    ``z = normalize(scale * randn(B, d), "ball")`` and labels uniform in ``[0, C)`` with
    ``labels[:C] = 0..C-1``, both from ``torch.Generator().manual_seed(seed)``. Returns
    ``(z, labels)``.
    """
    g = torch.Generator().manual_seed(seed)
    z = normalize(scale * torch.randn(B, d, generator=g, dtype=dtype), "ball")
    labels = torch.randint(0, C, (B,), generator=g)
    labels[:C] = torch.arange(C)  # every class present (so every anchor has negatives)
    return z, labels


@pytest.fixture
def torch_gen():
    """Factory ``torch_gen(seed) -> torch.Generator`` (see :func:`make_torch_gen`)."""
    return make_torch_gen


@pytest.fixture
def np_rng():
    """Factory ``np_rng(seed) -> numpy.random.Generator`` (see :func:`make_np_rng`)."""
    return make_np_rng


@pytest.fixture
def nc_batch():
    """Factory ``nc_batch(counts, *, seed=None, dtype=float64) -> (z, labels)`` at exact NC."""
    return make_nc_batch


@pytest.fixture
def ball_batch():
    """Factory ``ball_batch(B, d, C, seed, dtype, scale) -> (z, labels)`` in the unit ball."""
    return make_ball_batch


def sigint_as_terminal() -> None:
    """Give SIGINT its default action; the ``preexec_fn`` of a subprocess a Ctrl-C test interrupts.

    A job started with ``&`` by a non-interactive shell (as CI may start the test command) inherits
    SIGINT *ignored*, and so does every process it starts; Python keeps an inherited ``SIG_IGN``,
    so such a child would never see the Ctrl-C the test sends. Resetting it here makes the child
    start as it would from a terminal.
    """
    signal.signal(signal.SIGINT, signal.SIG_DFL)


@pytest.fixture
def sigint_handled() -> Iterator[None]:
    """Python's own SIGINT handler in this process for one test (restored afterwards).

    ``_thread.interrupt_main()`` does nothing while SIGINT is ignored, which it is when the test
    command was started in the background by a non-interactive shell (see :func:`sigint_as_terminal`).
    """
    old = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, old)
