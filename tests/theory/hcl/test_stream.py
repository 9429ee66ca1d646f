"""The sampled estimator's counter-based streams and its compiled CPU path (docs/hcl.md#sampled-estimator).

References: SplitMix64 iterated one state step at a time (tests.reference.splitmix64_uniforms) and
its published first output; the alias draw written as a Python loop (test_sampling._python_draws);
the tensor path other devices run (forced here on the CPU), which materialises the draws and shifts
each pair by its own largest drawn similarity.
"""

import numpy as np
import pytest
import torch

import theory.hcl._estimators as estimators
import theory.hcl._sampled as sampled
import theory.hcl.sampling as sampling
from tests.reference import splitmix64_uniforms
from tests.theory.hcl.conftest import _spy_on_team
from tests.theory.hcl.test_sampling import LAWS, _laws, _python_draws
from theory.hcl import (
    _kernels,
    _team,
    contrastive_loss,
    draw_seed,
    sample_negatives,
    stream_uniforms,
    tilted_log_weights,
)


def test_the_stream_is_splitmix64():
    """Output 0 of seed 0 is SplitMix64's published first output; every uniform equals the
    iterated generator's, for seeds across the int64 range (their 64-bit patterns) and offsets."""
    assert float(stream_uniforms(0, torch.tensor([0]), 1)) == (0xE220A8397B1DCDAF >> 11) / 2.0**53
    seeds = [0, 1, 123456789, 2**62 - 1, 2**63 - 1, -1, -(2**63), -5]
    firsts = [0, 7, 1000, 3, 0, 11, 2, 64]
    got = stream_uniforms(torch.tensor(seeds), torch.tensor(firsts), 33)
    for r, (seed, first) in enumerate(zip(seeds, firsts, strict=True)):
        assert got[r].tolist() == splitmix64_uniforms(seed % 2**64, first, 33)
    assert stream_uniforms(5, torch.tensor([3, 3]), 0).shape == (2, 0)
    with pytest.raises(ValueError, match="first must be"):
        stream_uniforms(torch.tensor([1, 2, 3]), torch.tensor([0, 1]), 4)
    assert ((got >= 0) & (got < 1)).all()


@pytest.mark.parametrize("B", [1, 3, 512, 1000])
def test_compiled_stream_equals_the_tensor_stream(B):
    """The kernels' uniforms, times B, are the tensor stream's times B bit for bit."""
    v = np.empty(300)
    for seed in (0, 2**62 + 17, 2**64 - 3):
        _kernels._stream_buckets(np.uint64(seed), np.int64(41), B, v)
        want = stream_uniforms(torch.tensor(seed - 2**64 if seed >= 2**63 else seed), torch.tensor([41]), 300)
        assert torch.equal(torch.from_numpy(v), want[0] * B)


def test_draw_seed_takes_one_draw_of_the_generator():
    """A seed is torch.randint(0, 2^62) from the generator: one draw, whatever P and K are."""
    g, h = torch.Generator().manual_seed(7), torch.Generator().manual_seed(7)
    for _ in range(3):
        assert int(draw_seed(g)) == int(torch.randint(0, 2**62, (), generator=h))
    assert torch.equal(g.get_state(), h.get_state())


@pytest.mark.parametrize("law", list(LAWS))
def test_stream_draws_equal_a_python_loop_on_every_path(law, monkeypatch):
    """Draws from the streams: the compiled kernel, the tensor passes, and a Python loop on the
    uniforms of the iterated generator give the same indices."""
    g = torch.Generator().manual_seed(11 + len(law))
    N, K = 10, 9
    for B in (1, 5, 64):
        logits, keep = _laws(law, g, N, B)
        table = sampling._alias_from_weights(torch.softmax(logits.masked_fill(~keep, float("-inf")), 1) * B)
        rows = torch.randint(0, N, (17,), generator=g)
        seeds = torch.randint(-(2**63), 2**63 - 1, (17,), generator=g)
        first = torch.randint(0, 10**6, (17,), generator=g)
        u = torch.tensor([splitmix64_uniforms(int(s) % 2**64, int(f), K) for s, f in zip(seeds, first)])
        want = _python_draws(table.key, table.alias, rows, u, B)
        assert torch.equal(sampling._draw_stream(table, rows, seeds, first, K).long(), want)
        monkeypatch.setattr(sampling, "_on_kernel", lambda device, values: False)  # the tensor passes
        assert torch.equal(sampling._draw_stream(table, rows, seeds, first, K).long(), want)
        monkeypatch.undo()


def test_sample_negatives_draws_pair_p_from_counters_p_K_onwards():
    """sample_negatives(generator=g) uses one seed from g and the uniforms p K .. p K + K - 1 for pair p."""
    g = torch.Generator().manual_seed(4)
    S = torch.randn(6, 6, generator=g, dtype=torch.float64)
    logq = tilted_log_weights(S, torch.rand(6, 6, generator=g) > 0.3, 2.0)
    logq[:, 0] = logq[:, 0].clamp(min=-5.0)  # no empty row
    logq = torch.log_softmax(logq, dim=1)
    rows = torch.tensor([0, 0, 2, 3, 5, 5, 5])
    K = 8
    seed = int(torch.randint(0, 2**62, (), generator=torch.Generator().manual_seed(9)))
    u = torch.tensor(splitmix64_uniforms(seed, 0, 7 * K)).view(7, K)
    got = sample_negatives(logq, rows, K, torch.Generator().manual_seed(9))
    assert torch.equal(got, sample_negatives(logq, rows, K, uniforms=u))


def test_the_kernels_on_torch_team_equal_the_serial_kernels_bit_for_bit(monkeypatch):
    """The forward (each row's table and its pairs' draws) and the backward on torch's OpenMP team:
    every row and pair is computed as on one thread (chunks of rows claimed from a counter), so
    values and gradients are equal bit for bit."""
    before = torch.get_num_threads()
    torch.set_num_threads(max(2, before))
    try:
        if not _team.available():
            pytest.skip("torch has no OpenMP team in this process (not Linux, or another parallel backend)")
        g = torch.Generator().manual_seed(8)
        z = torch.nn.functional.normalize(torch.randn(2, 90, 6, generator=g), dim=2) * 0.95
        labels = torch.randint(0, 5, (2, 90), generator=g)
        kw = dict(setting="supervised", beta=torch.tensor([1.0, 4.0]), estimator="sampled", num_negatives=70)
        out = []
        for team in (True, False):
            started = _spy_on_team(monkeypatch)
            if not team:
                monkeypatch.setattr(_team, "available", lambda: False)
            zz = z.clone().requires_grad_(True)
            gens = [torch.Generator().manual_seed(s) for s in (1, 2)]
            val = contrastive_loss(zz, labels, reduction="none", generator=gens, **kw)
            val.sum().backward()
            out.append((val.detach(), zz.grad))
            assert started == (
                [True, True] if team else [False, False]
            )  # forward (with the tables), backward
            monkeypatch.undo()
        assert torch.equal(out[0][0], out[1][0]) and torch.equal(out[0][1], out[1][1])
    finally:
        torch.set_num_threads(before)


@pytest.mark.parametrize("law", list(LAWS))
def test_the_forward_kernel_draws_the_columns_of_a_python_loop(law, threads, monkeypatch):
    """stream_forward builds each row's table in its own buffer and draws there (its select
    indexes a two-entry choice by the comparison): its columns are the Python loop's on the torch
    table and the iterated generator's uniforms, and each pair's total is the loop's sum of erow
    over them in draw order, bit for bit; on the team and serially."""
    started = _spy_on_team(monkeypatch)
    g = torch.Generator().manual_seed(23 + len(law))
    N, K = 20, 11
    for B in (1, 5, 64, 300):
        logits, keep = _laws(law, g, N, B)
        w = torch.softmax(logits.masked_fill(~keep, float("-inf")), 1) * B
        table = sampling._alias_from_weights(w)
        rows = torch.sort(torch.randint(0, N, (45,), generator=g)).values
        seeds = torch.randint(-(2**63), 2**63 - 1, (45,), generator=g)
        first = torch.randint(0, 500, (45,), generator=g)  # the reference iterates the generator up to it
        u = torch.tensor([splitmix64_uniforms(int(s) % 2**64, int(f), K) for s, f in zip(seeds, first)])
        want = _python_draws(table.key, table.alias, rows, u, B) - rows[:, None] * B
        erow = torch.rand(N, B, generator=g, dtype=torch.float64) + 0.5
        values = torch.zeros(N * B, dtype=torch.float64)
        shift, total = torch.zeros(45, dtype=torch.float64), torch.empty(45, dtype=torch.float64)
        own, drawn = torch.empty(45, dtype=torch.uint8), torch.empty(45, K, dtype=torch.uint16)
        count = _kernels.forward(
            w.numpy(), seeds.numpy().view("uint64"), first.numpy(), rows.numpy(), K, erow.view(-1).numpy(),
            values.numpy(), 1.0, sampled.STREAM_LEAST, shift.numpy(), total.numpy(), own.numpy(), drawn.numpy(),
        )  # fmt: skip
        assert count == 0 and not own.any()
        assert torch.equal(drawn.long(), want)
        for p in range(45):
            acc = 0.0
            for c in want[p].tolist():
                acc += float(erow[rows[p], c])
            assert float(total[p]) == acc
    assert any(started) == (threads == "team")


def _both_paths(monkeypatch, z, labels, **kw):
    """(values, gradient) of the compiled CPU path and of the tensor path, from the same generator seeds."""
    out = []
    for tensor_path in (False, True):
        if tensor_path:
            monkeypatch.setattr(estimators, "_on_kernel", lambda device, values: False)
        zz = z.clone().requires_grad_(True)
        seeds = kw.pop("seeds", None) if tensor_path else kw.get("seeds")
        gen = (
            [torch.Generator().manual_seed(s) for s in seeds]
            if seeds is not None
            else torch.Generator().manual_seed(3)
        )
        args = {k: v for k, v in kw.items() if k != "seeds"}
        val = contrastive_loss(zz, labels, estimator="sampled", generator=gen, **args)
        val.sum().backward()
        out.append((val.detach(), zz.grad))
    monkeypatch.setattr(estimators, "_on_kernel", sampling._on_kernel)
    return out


CASES = {
    "supervised mean": dict(setting="supervised", beta=3.0, num_negatives=40),
    "unsupervised sum, no self negative": dict(
        setting="unsupervised", beta=0.0, psi="sum", self_negative=False, num_negatives=25
    ),
    "per pair": dict(setting="supervised", beta=1.5, reduction="none", num_negatives=64),
    "anchor_mean, tau 0.2": dict(setting="unsupervised", beta=6.0, tau=0.2, reduction="anchor_mean"),
    "reference batch": dict(
        setting="supervised", beta=2.0, anchors=torch.tensor([1, 4, 5, 17]), num_negatives=31
    ),
}


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("case", list(CASES))
def test_compiled_sampled_estimator_equals_the_tensor_path(case, dtype, threads, monkeypatch):
    """The same draws (indices equal bit for bit); values and gradients to rounding."""
    g = torch.Generator().manual_seed(len(case))
    z = torch.nn.functional.normalize(torch.randn(24, 5, generator=g, dtype=dtype), dim=1) * 0.9
    labels = torch.randint(0, 4, (24,), generator=g)
    (v1, g1), (v2, g2) = _both_paths(monkeypatch, z, labels, **CASES[case])
    tol = 1e-12 if dtype == torch.float64 else 2e-5  # float32: the tensor path rounds in float32
    torch.testing.assert_close(v1, v2, rtol=tol, atol=tol)
    torch.testing.assert_close(g1, g2, rtol=tol, atol=tol)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_compiled_stacked_runs_equal_the_tensor_path(dtype, threads, monkeypatch):
    """R = 3 runs with a generator each and a hardness per run."""
    g = torch.Generator().manual_seed(5)
    z = torch.nn.functional.normalize(torch.randn(3, 20, 4, generator=g, dtype=dtype), dim=2)
    labels = torch.randint(0, 3, (3, 20), generator=g)
    beta = torch.tensor([0.0, 2.0, 8.0], dtype=dtype)
    (v1, g1), (v2, g2) = _both_paths(
        monkeypatch, z, labels, setting="supervised", beta=beta, seeds=[7, 8, 9], num_negatives=50
    )
    tol = 1e-12 if dtype == torch.float64 else 2e-5  # float32: the tensor path rounds in float32
    torch.testing.assert_close(v1, v2, rtol=tol, atol=tol)
    torch.testing.assert_close(g1, g2, rtol=tol, atol=tol)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_pairs_whose_draws_underflow_against_the_row_maximum(dtype, threads, monkeypatch):
    """Large norms and a small temperature: most pairs' exp((S - M_row) / tau) underflow and are
    summed again with their own maximum. With the fallback the values and gradients equal the
    tensor path's; without it (threshold 0) they do not."""
    g = torch.Generator().manual_seed(2)
    z = torch.randn(30, 3, generator=g, dtype=dtype) * 4
    labels = torch.randint(0, 3, (30,), generator=g)
    kw = dict(setting="unsupervised", beta=0.0, tau=0.05, num_negatives=6)
    counts = []
    forward = _kernels.forward

    def spy(*args):
        counts.append(forward(*args))
        return counts[-1]

    monkeypatch.setattr(_kernels, "forward", spy)
    (v1, g1), (v2, g2) = _both_paths(monkeypatch, z, labels, **kw)
    assert 0 < counts[0] < 30 * 30  # some pairs, not all, summed with their own maximum
    tol = 1e-12 if dtype == torch.float64 else 2e-5  # float32: the tensor path rounds in float32
    torch.testing.assert_close(v1, v2, rtol=tol, atol=tol)
    torch.testing.assert_close(g1, g2, rtol=tol, atol=tol)
    monkeypatch.setattr(sampled, "STREAM_LEAST", 0.0)  # no fallback: log 0 = -inf in the value
    zz = z.clone().requires_grad_(True)
    bad = contrastive_loss(zz, labels, estimator="sampled", generator=torch.Generator().manual_seed(3), **kw)
    assert not torch.isclose(bad, v1, rtol=1e-3).all()
