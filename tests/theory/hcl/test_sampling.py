import math

import numpy as np
import pytest
import torch
from scipy.stats import chisquare

from theory.hcl.sampling import (
    expected_hinge,
    hardening,
    log_expected_exp,
    sample_negatives,
    tilted_log_weights,
)


def _setup(B=9, seed=0, dtype=torch.float64):
    g = torch.Generator().manual_seed(seed)
    z = torch.randn(B, 3, generator=g, dtype=dtype)
    z = z / z.norm(dim=1, keepdim=True).clamp(min=1)
    S = z @ z.T
    allowed = torch.rand(B, B, generator=g) > 0.35
    allowed[:, 0] = True  # no empty row
    return S, allowed


def test_tilted_log_weights_match_loop():
    S, allowed = _setup()
    beta = 2.5
    logq = tilted_log_weights(S, allowed, beta)
    for i in range(S.shape[0]):
        w = [math.exp(beta * float(S[i, n])) if allowed[i, n] else 0.0 for n in range(S.shape[1])]
        tot = sum(w)
        for n in range(S.shape[1]):
            if allowed[i, n]:
                assert math.isclose(math.exp(float(logq[i, n])), w[n] / tot, rel_tol=1e-12)
            else:
                assert float(logq[i, n]) == -math.inf


def test_tilted_log_weights_per_anchor_beta_and_extreme_beta():
    S, allowed = _setup()
    betas = torch.linspace(0, 3, S.shape[0], dtype=torch.float64)
    logq = tilted_log_weights(S, allowed, betas)
    for i in range(S.shape[0]):
        torch.testing.assert_close(logq[i], tilted_log_weights(S, allowed, float(betas[i]))[i])
    logq = tilted_log_weights(S, allowed, 1e6)
    assert torch.isfinite(torch.logsumexp(logq, dim=1)).all()
    empty = allowed.clone()
    empty[2] = False
    out = tilted_log_weights(S, empty, 1.0)
    assert not torch.isnan(out).any() and torch.isinf(out[2]).all()


def test_log_expected_exp_matches_loop():
    S, allowed = _setup(seed=1)
    logq = tilted_log_weights(S, allowed, 1.3)
    m = log_expected_exp(logq, S, 0.4)
    for i in range(S.shape[0]):
        ref = sum(
            math.exp(float(logq[i, n])) * math.exp(float(S[i, n]) / 0.4)
            for n in range(S.shape[1])
            if allowed[i, n]
        )
        assert math.isclose(float(m[i]), math.log(ref), rel_tol=1e-12)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_expected_hinge_matches_loop(dtype):
    S, allowed = _setup(B=11, seed=2, dtype=dtype)
    q = torch.exp(tilted_log_weights(S, allowed, 0.7))
    c = torch.randn(11, 5, generator=torch.Generator().manual_seed(3), dtype=dtype) * 0.5
    c[0, 0] = S[0, 1]  # exact tie with an entry
    got = expected_hinge(q, S, c)
    for i in range(11):
        for j in range(5):
            ref = sum(float(q[i, n]) * max(0.0, float(S[i, n]) - float(c[i, j])) for n in range(11))
            assert abs(float(got[i, j]) - ref) < (1e-12 if dtype == torch.float64 else 1e-6)


def test_expected_hinge_gradient_matches_autograd_of_dense_form():
    S, allowed = _setup(B=7, seed=4)
    q = torch.exp(tilted_log_weights(S, allowed, 1.0))
    a1 = S.clone().requires_grad_(True)
    a2 = S.clone().requires_grad_(True)
    c = torch.full((7, 3), 0.1, dtype=torch.float64)
    expected_hinge(q, a1, c).sum().backward()
    (q[:, :, None] * torch.relu(a2[:, :, None] - c[:, None, :])).sum().backward()
    torch.testing.assert_close(a1.grad, a2.grad)


def test_sample_negatives_follow_the_tilted_law():
    """Chi-square goodness of fit of 200 000 draws per row against q."""
    S, allowed = _setup(B=8, seed=5)
    logq = tilted_log_weights(S, allowed, 3.0)
    rows = torch.arange(8)
    idx = sample_negatives(logq, rows, 200_000, torch.Generator().manual_seed(0))
    q = torch.exp(logq)
    for i in range(8):
        counts = np.bincount(idx[i].numpy(), minlength=8)
        assert counts[~allowed[i].numpy()].sum() == 0  # never a disallowed index
        support = allowed[i].numpy()
        expected = q[i].numpy()[support] * counts.sum()
        assert chisquare(counts[support], expected).pvalue > 1e-4


def test_sample_negatives_reproducible_and_validated():
    S, allowed = _setup(B=6, seed=6)
    logq = tilted_log_weights(S, allowed, 1.0)
    rows = torch.tensor([0, 0, 3, 5])
    a = sample_negatives(logq, rows, 50, torch.Generator().manual_seed(1))
    b = sample_negatives(logq, rows, 50, torch.Generator().manual_seed(1))
    assert torch.equal(a, b) and a.shape == (4, 50)
    with pytest.raises(ValueError, match="num_negatives"):
        sample_negatives(logq, rows, 0)


def test_sample_negatives_single_allowed_column():
    logq = torch.full((3, 5), -math.inf, dtype=torch.float64)
    logq[:, 4] = 0.0
    logq[1, :] = -math.inf
    logq[1, 0] = 0.0
    idx = sample_negatives(logq, torch.tensor([0, 1, 2]), 100, torch.Generator().manual_seed(0))
    assert (idx[0] == 4).all() and (idx[1] == 0).all() and (idx[2] == 4).all()


@pytest.mark.parametrize(
    "kind,params",
    [
        ("exponential", {"beta": 2.0}),
        ("step", {"threshold": 0.2, "low": 0.1}),
        ("polynomial", {"power": 3.0, "shift": 1.0}),
        ("polynomial", {"power": 0.0, "shift": 0.5}),
    ],
)
def test_hardening_functions_are_nonnegative_and_nondecreasing(kind, params):
    eta = hardening(kind, **params)
    t = torch.linspace(-1, 1, 201, dtype=torch.float64)
    v = eta(t)
    assert (v >= 0).all() and (v[1:] >= v[:-1]).all()


def test_hardening_validation():
    with pytest.raises(ValueError, match="beta"):
        hardening("exponential", beta=-1)
    with pytest.raises(ValueError, match="low"):
        hardening("step", low=2)
    with pytest.raises(ValueError, match="power"):
        hardening("polynomial", power=-1)
    with pytest.raises(ValueError, match="eta"):
        hardening("sigmoid")
    with pytest.raises(ValueError, match="shape"):
        tilted_log_weights(torch.zeros(3, 3), torch.ones(2, 2, dtype=torch.bool), 1.0)


def test_hardening_rejects_unknown_and_non_finite_parameters():
    with pytest.raises(ValueError, match="unknown parameter"):
        hardening("exponential", bta=5.0)
    with pytest.raises(ValueError, match="unknown parameter"):
        hardening("step", beta=5.0)
    with pytest.raises(ValueError, match="finite"):
        hardening("exponential", beta=float("inf"))
    with pytest.raises(ValueError, match="low"):
        hardening("step", low=float("nan"))
    eta = hardening("polynomial", power=0.0, shift=0.5)
    assert float(eta(torch.tensor(-0.9))) == 0.0 and float(eta(torch.tensor(0.0))) == 1.0


def test_sampler_and_weights_validate():
    S, allowed = _setup(B=5, seed=7)
    with pytest.raises(ValueError, match="beta"):
        tilted_log_weights(S, allowed, -1.0)
    with pytest.raises(ValueError, match="beta"):
        tilted_log_weights(S, allowed, float("nan"))
    empty = allowed.clone()
    empty[1] = False
    logq = tilted_log_weights(S, empty, 1.0)
    with pytest.raises(ValueError, match="no allowed column"):
        sample_negatives(logq, torch.tensor([0, 1]), 3)
    assert sample_negatives(logq, torch.tensor([0, 2]), 3).shape == (2, 3)  # other rows are fine


# ---------------------------------------------------------------------------------------------
# the alias tables reproduce q exactly (up to float64 rounding), whatever its shape
def _implied_law(q):
    """The law an alias table draws: bucket b (prob 1/B) keeps itself w.p. prob_b, else its alias."""
    from theory.hcl import alias_table

    N, B = q.shape
    t = alias_table(q)
    prob = t.key.view(N, B) - torch.arange(B, dtype=torch.float64)
    alias = t.alias.view(N, B).long() - torch.arange(N)[:, None] * B
    p = prob.clone().scatter_add_(1, alias, 1 - prob)
    return p / B, prob, alias


LAWS = {
    "flat": lambda g, B: torch.zeros(5, B, dtype=torch.float64),
    "mild": lambda g, B: torch.randn(5, B, generator=g, dtype=torch.float64),
    "peaked": lambda g, B: 30 * torch.randn(5, B, generator=g, dtype=torch.float64),
    "one-hot": lambda g, B: 1e4 * torch.randn(5, B, generator=g, dtype=torch.float64),
}


@pytest.mark.parametrize("law", list(LAWS))
@pytest.mark.parametrize("B", [1, 2, 7, 64, 512])
@pytest.mark.parametrize("masked", [False, True])
def test_alias_table_reproduces_q(law, B, masked):
    g = torch.Generator().manual_seed(B)
    logits = LAWS[law](g, B)
    if masked:
        keep = torch.rand(5, B, generator=g) < 0.6
        keep[:, 0] = True
        logits = logits.masked_fill(~keep, float("-inf"))
    q = torch.softmax(logits, dim=1)
    implied, prob, alias = _implied_law(q)
    assert (implied - q).abs().max() < 1e-14
    assert ((prob >= 0) & (prob <= 1 + 1e-12)).all()
    rows = torch.arange(5)[:, None].expand(5, B)
    assert ((q[rows, alias] > 0) | (prob >= 1)).all()  # an alias is never a column with q = 0
    assert ((prob == 0) | (q > 0)).all()  # a column with q = 0 is never kept


def test_alias_table_with_unit_weights_next_to_an_overshooting_heavy():
    """w = B q = (0, 2, 1, 1) and (0.4, 2, 1, 0.6): buckets with w = 1 exactly keep themselves."""
    for row in ([0.0, 0.5, 0.25, 0.25], [0.1, 0.5, 0.25, 0.15]):
        q = torch.tensor([row], dtype=torch.float64)
        implied, prob, _ = _implied_law(q)
        torch.testing.assert_close(implied, q, atol=1e-15, rtol=0)
        assert prob[0, 2] == 1.0


def _laws(law, g, N, B):
    logits = torch.cat([LAWS[law](g, B) for _ in range(N // 5)])
    keep = torch.rand(N, B, generator=g) < 0.6
    keep[:, 0] = True
    return logits, keep


@pytest.mark.parametrize("law", list(LAWS))
def test_compiled_cpu_alias_table_equals_the_torch_table(law):
    """The CPU kernel (theory.hcl._kernels.alias_rows: one pass per row, a walking pointer instead
    of searchsorted) gives bit for bit the torch construction that other devices run."""
    import theory.hcl.sampling as sampling

    g = torch.Generator().manual_seed(len(law))
    for B in (1, 2, 3, 64, 512):
        logits, keep = _laws(law, g, 70, B)
        for masked in (False, True):
            q = torch.softmax(logits.masked_fill(~keep, float("-inf")) if masked else logits, dim=1)
            for w in (q * B, (q * B).to(torch.float32).to(torch.float64)):  # also weights exactly 1
                t = sampling._alias_from_weights(w)
                key, alias = sampling._alias_block(w)
                assert torch.equal(t.key, key.view(-1))
                assert t.alias.dtype == torch.int32
                assert torch.equal(t.alias.long(), alias.view(-1))


def _python_draws(key, alias, rows, u, B):
    """The alias draw, one Python step per draw (the definition in docs/hcl.md#sampled-estimator)."""
    P, K = u.shape
    idx = [[0] * K for _ in range(P)]
    for p in range(P):
        for k in range(K):
            v = float(u[p, k]) * B
            f = int(rows[p]) * B + math.floor(v)
            idx[p][k] = f if v < float(key[f]) else int(alias[f])
    return torch.tensor(idx, dtype=torch.long)


@pytest.mark.parametrize("law", list(LAWS))
def test_compiled_and_torch_draws_equal_a_python_loop(law, monkeypatch):
    """The CPU draw kernel (chunks of pairs, one reused uniform buffer) and the tensor passes of
    other devices (run here on the CPU) give the indices of a plain loop."""
    import theory.hcl.sampling as sampling

    g = torch.Generator().manual_seed(3 + len(law))
    N, K = 10, 13
    for B in (1, 5, 64):
        logits, keep = _laws(law, g, N, B)
        q = torch.softmax(logits.masked_fill(~keep, float("-inf")), dim=1)
        table = sampling._alias_from_weights(q * B)
        rows = torch.randint(0, N, (23,), generator=g)
        u = torch.rand(23, K, generator=g, dtype=torch.float64)
        if B == 64:  # uniforms on the bucket boundaries: u B == key exactly (B a power of 2) -> the alias
            flat = rows[:, None] * B + torch.randint(0, B, (23, K), generator=g)
            edge = table.key.index_select(0, flat.view(-1)).view(23, K) / B
            u = torch.where((edge < 1) & (torch.rand(23, K, generator=g) < 0.5), edge, u)
        want_idx = _python_draws(table.key, table.alias, rows, u, B)
        for step in (1, 4, 512):  # chunks of pairs: the fill is called per chunk
            monkeypatch.setattr(sampling, "DRAW_CHUNK_PAIRS", step)
            idx = sampling._draw_pairs(table, rows, K, sampling._given_uniforms(u))
            assert torch.equal(idx.long(), want_idx)
        monkeypatch.setattr(sampling, "_on_kernel", lambda device, values: False)  # the tensor passes
        assert torch.equal(sampling._draw_pairs(table, rows, K, sampling._given_uniforms(u)).long(), want_idx)
        monkeypatch.undo()
