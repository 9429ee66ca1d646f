"""Rows with equal weights share one alias table in the sampled estimator's CPU path.

References: a Python loop over the rows comparing whole rows bit for bit (the law of a row is the
first candidate row equal to it); the forward kernel without shared laws (one table per row); the
loss and its gradient without shared laws.
"""

import numpy as np
import pytest
import torch

import theory.hcl._laws as laws
from tests.theory.hcl.conftest import _spy_on_team
from theory.hcl import _kernels, contrastive_loss
from theory.hcl._sampled import STREAM_LEAST


def _reference_laws(w, candidate):
    """law[r] = the first candidate row q <= r whose float64 bits equal row r's; r if none."""
    law = list(range(w.shape[0]))
    bits = w.view(np.uint64)
    for r in range(w.shape[0]):
        if not candidate[r]:
            continue
        for q in range(r):
            if candidate[q] and np.array_equal(bits[q], bits[r]):
                law[r] = q
                break
    return law


def _rows_with_repeats(B, rng):
    """40 rows: groups of equal rows, rows equal to another but for the last bit, equal NaN rows."""
    base = rng.random((6, B)) * 2
    w = base[rng.integers(0, 6, 40)]
    w[7] = w[3]
    w[8, -1] = np.nextafter(w[3, -1], 3.0)  # one bit from row 3 in its last column
    w[8, :-1] = w[3, :-1]
    w[20] = w[21] = np.nan
    return np.ascontiguousarray(w)


@pytest.mark.parametrize("B", [1, 7, 64])
def test_rows_share_a_law_exactly_when_their_weights_are_equal_bit_for_bit(B):
    """Whatever the hash covers (0 leading weights: every row collides and is compared in full)."""
    rng = np.random.default_rng(B)
    w = _rows_with_repeats(B, rng)
    candidate = rng.random(40) < 0.8
    candidate[[3, 7, 8, 20, 21]] = True
    want = _reference_laws(w, candidate)
    assert len(set(want)) < 40 and want[7] == want[3] and want[21] == 20
    assert B == 1 or want[8] != want[3]
    for hashed in (0, 1, 3, 64, 2**62):
        assert laws.shared_laws(w, candidate, hashed).tolist() == want
    assert laws.shared_laws(w, np.zeros(40, bool), 64).tolist() == list(range(40))


def _forward(w, law, rows, seeds, first, K, erow):
    P = rows.shape[0]
    shift, total = np.zeros(P), np.empty(P)
    own, drawn = np.empty(P, np.uint8), np.empty((P, K), np.uint16)
    count = _kernels.forward(
        w, seeds, first, rows, K, erow, np.zeros(erow.shape[0]), 1.0, STREAM_LEAST, shift, total, own,
        drawn, law,
    )  # fmt: skip
    return count, total, drawn


def test_the_forward_kernel_draws_from_the_shared_table_what_each_row_draws_from_its_own(
    threads, monkeypatch
):
    """Rows of one law in any order, pairs of every row: the same columns and totals as one table
    per row, bit for bit; a law shared by rows that differ draws otherwise (the table is reused)."""
    started = _spy_on_team(monkeypatch)
    rng = np.random.default_rng(4)
    N, B, K, P = 40, 64, 9, 150
    w = _rows_with_repeats(B, rng)
    w[20] = w[21] = w[0]  # finite rows only: the tables of NaN rows are not laws to draw from
    w = w / w.sum(axis=1, keepdims=True) * B
    rows = np.sort(rng.integers(0, N, P))
    seeds = rng.integers(0, 2**63, P, dtype=np.uint64)
    first = rng.integers(0, 1000, P)
    erow = rng.random(N * B) + 0.5
    law = laws.shared_laws(w, np.ones(N, bool), 64)
    assert len(set(law.tolist())) <= 7
    want = _forward(w, None, rows, seeds, first, K, erow)
    got = _forward(w, law, rows, seeds, first, K, erow)
    assert got[0] == want[0] == 0
    assert np.array_equal(got[1], want[1]) and np.array_equal(got[2], want[2])
    wrong = np.zeros(N, np.int64)  # every row said to share row 0's law
    bad = _forward(w, wrong, rows, seeds, first, K, erow)
    assert not np.array_equal(bad[2], want[2])
    assert any(started) == (threads == "team")


@pytest.mark.parametrize(
    "kw",
    [
        dict(setting="supervised", beta=0.0),
        dict(setting="unsupervised", beta=0.0, psi="sum"),
        dict(setting="supervised", beta=torch.tensor([0.0, 3.0])),
    ],
    ids=["SCL", "UCL", "stacked SCL and HSCL"],
)
def test_the_sampled_loss_at_beta_zero_is_that_of_one_table_per_row(kw, threads, monkeypatch):
    """Values and gradients with shared tables equal those without, bit for bit; the rows at
    beta = 0 do share (fewer laws than rows), the others keep their own."""
    g = torch.Generator().manual_seed(11)
    R = 2 if isinstance(kw["beta"], torch.Tensor) else 1
    z = torch.nn.functional.normalize(torch.randn(R, 48, 5, generator=g, dtype=torch.float64), dim=2)
    labels = torch.randint(0, 4, (R, 48), generator=g)
    found, shared_laws = [], laws.shared_laws

    def spy(w, candidate, hashed):
        found.append((shared_laws(w, candidate, hashed), candidate.copy()))
        return found[-1][0]

    out = []
    for share in (True, False):
        monkeypatch.setattr(laws, "shared_laws", spy if share else lambda w, c, h: None)
        zz = z.clone().requires_grad_(True)
        gens = [torch.Generator().manual_seed(s) for s in range(R)]
        val = contrastive_loss(
            zz if R > 1 else zz[0], labels if R > 1 else labels[0], estimator="sampled",
            num_negatives=30, generator=gens, reduction="none", **kw,
        )  # fmt: skip
        val.sum().backward()
        out.append((val.detach(), zz.grad))
    law, candidate = found[0]
    assert candidate.tolist() == [True] * 48 + [False] * 48 * (R - 1)
    assert len(set(law[:48].tolist())) < 48 and law[48:].tolist() == list(range(48, 48 * R))
    assert torch.equal(out[0][0], out[1][0]) and torch.equal(out[0][1], out[1][1])
