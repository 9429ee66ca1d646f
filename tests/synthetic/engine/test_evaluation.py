"""Tests of synthetic/engine/evaluation.py: the collision fraction and the optimum of a run."""

from __future__ import annotations

import math

import pytest
import torch

from synthetic.engine.evaluation import collision_fraction, optimum
from theory.geometry import simplex_etf
from theory.hcl import collision_probability


@pytest.mark.parametrize("beta", [0.0, 2.0, 10.0, 30.0])
def test_collision_fraction_at_an_etf_is_q_beta(beta):
    C, n = 8, 5
    y = torch.arange(C).repeat_interleave(n)
    z = simplex_etf(C, C - 1).double()[y]
    assert collision_fraction(z, y, beta) == pytest.approx(collision_probability(C, beta), rel=1e-12)


def test_collision_fraction_matches_a_loop(torch_gen):
    z = torch.nn.functional.normalize(torch.randn(23, 4, generator=torch_gen(2), dtype=torch.float64), dim=1)
    y = torch.randint(0, 3, (23,), generator=torch_gen(3))
    beta = 3.0
    ref = 0.0
    for i in range(23):
        w = [math.exp(beta * float(z[i] @ z[n])) for n in range(23)]
        ref += sum(w[n] for n in range(23) if y[n] == y[i]) / sum(w)
    assert collision_fraction(z, y, beta) == pytest.approx(ref / 23, rel=1e-12)


def test_optimum_of_a_run_is_the_closed_form():
    from synthetic.engine.config import RunConfig
    from theory.hcl import scl_optimum, ucl_optimum

    assert optimum(RunConfig(num_classes=7, tau=0.5)) == scl_optimum(7, tau=0.5)
    u = RunConfig(method="HUCL", beta=2.0, num_classes=7, estimator="sampled", num_negatives=9)
    assert optimum(u) == ucl_optimum(7, num_negatives=9)
    assert optimum(u, "expectation") == pytest.approx(
        math.log(1 + 1 / 7 + 6 / 7 * math.exp(-7 / 6)), rel=1e-14
    )
    assert math.isnan(optimum(RunConfig(method="WeiNCE", num_classes=7)))


# ------------------------------------------------------------------ the evaluation loss of the rule


def _eval_loss_reference(config, model, r, data):
    """Slow reference: the run's fixed partition (its ``eval`` stream), one theory loss per batch."""
    from synthetic.engine.data import stream_seed
    from theory.hcl import contrastive_loss

    g = torch.Generator().manual_seed(stream_seed(config.seed, "eval"))
    N, b = config.num_train, config.batch
    perm = torch.randperm(N, generator=g) if 0 < b < N else torch.arange(N)
    steps = N // b if 0 < b < N else 1
    size = b if 0 < b < N else N
    vals = []
    for s in range(steps):
        idx = perm[s * size : (s + 1) * size]
        y = data.y_train[idx]
        if config.setting == "supervised" and int(y.max()) == int(y.min()):
            continue
        x = idx if config.encoder == "free" else data.x_train[idx]
        z = model.run(r, x)
        with torch.no_grad():
            vals.append(
                float(contrastive_loss(z, y, setting=config.setting, beta=config.beta, tau=config.tau))
            )
    return sum(vals) / len(vals)


@pytest.mark.parametrize("encoder", ["free", "mlp"])
def test_the_evaluation_loss_is_the_mean_over_a_fixed_partition(encoder):
    from synthetic.engine.config import RunConfig
    from synthetic.engine.convergence import SettleRule
    from synthetic.engine.train import metric_columns, train_runs

    cfg = RunConfig(
        method="HSCL", beta=2.0, encoder=encoder, hidden=16, num_classes=4, n_per_class=12, batch_size=10,
        lr=0.05 if encoder == "free" else 1e-3, epochs=3, eval_every=1, normalization="ball",
        settle_window=2, settle_loss="eval", dtype="float64",
    )  # fmt: skip
    assert cfg.watches_eval_loss and "eval_gap" in metric_columns(cfg)
    assert SettleRule.of(cfg).gap_column == "eval_gap"
    assert SettleRule.of(cfg.replace(settle_loss="epoch")).gap_column == "gap_to_optimum"
    assert "eval_gap" not in metric_columns(cfg.replace(settle_loss="epoch"))
    assert not cfg.replace(normalization="none").watches_eval_loss
    # the key: unchanged for the default, new for "eval", irrelevant without a rule
    assert cfg.replace(settle_loss="epoch").key() != cfg.key()
    assert cfg.replace(settle_window=0).key() == cfg.replace(settle_window=0, settle_loss="epoch").key()
    with pytest.raises(ValueError, match="settle_loss"):
        cfg.replace(settle_loss="noisy")

    from synthetic.engine import train as tr

    configs = [cfg, cfg.replace(seed=1, beta=5.0)]
    tables = train_runs(configs)
    # rebuild the runs' final models by training them again, then evaluate the reference
    _, model, _ = tr._train(configs, {}, progress=False, device="cpu")
    datas = [tr.make_data(c) for c in configs]
    for r, (c, t) in enumerate(zip(configs, tables, strict=True)):
        ref = _eval_loss_reference(c, model, r, datas[r])
        last = t.iloc[-1]
        assert float(last["eval_loss"]) == pytest.approx(ref, rel=1e-10)
        assert float(last["eval_gap"]) == pytest.approx(ref - float(optimum(c, "expectation")), rel=1e-10)
        assert t["eval_loss"].notna().all()
