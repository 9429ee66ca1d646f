"""The engine against the sequential reference trainer, run by run (tests/synthetic/reference_trainer.py).

Float64: every metric of every run equals the reference's to 1e-10 (relative to max(1, |value|)),
except NC1, whose pseudo-inverse of a near-singular between-class covariance (condition numbers
up to ~1e6 on these tiny problems) amplifies the rounding of batched products: 1e-7. Float32: the
same within 1e-4 on the losses and 1e-3 on the metrics after four epochs.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from synthetic.engine.config import RunConfig
from synthetic.engine.evaluation import TRAINING_COLUMNS
from synthetic.engine.train import metric_columns, train_run, train_runs
from tests.synthetic.reference_trainer import REFERENCE_METRICS, reference_train_run

SMALL = dict(
    num_classes=4,
    n_per_class=6,
    n_test_per_class=3,
    input_dim=5,
    hidden=8,
    epochs=4,
    eval_every=2,
    lr=0.02,
    dtype="float64",
)


def _family(base: RunConfig, family: str) -> list[RunConfig]:
    if family == "hcl":
        pairs = [("SCL", 0.0), ("HSCL", 2.0), ("UCL", 0.0), ("HUCL", 5.0)]
        return [base.replace(method=m, beta=b, seed=s) for s, (m, b) in enumerate(pairs)]
    return [base.replace(method=family, seed=s) for s in range(3)]


def assert_matches_reference(
    got: list[pd.DataFrame], configs: list[RunConfig], float32: bool = False
) -> None:
    for c, g in zip(configs, got):
        ref = reference_train_run(c)
        cfg_cols = list(c.to_dict())
        assert list(g.columns[: len(cfg_cols) + 2]) == cfg_cols + ["run_key", "epoch"]
        assert g["run_key"].iloc[0] == c.key() and list(g["epoch"]) == list(ref["epoch"])
        for m in REFERENCE_METRICS:
            a, b = g[m].to_numpy(float), ref[m].to_numpy(float)
            np.testing.assert_array_equal(np.isnan(a), np.isnan(b), err_msg=m)
            if float32:
                tol = 1e-4 if m in ("loss", "full_loss", "gap_to_optimum", "full_gap") else 1e-3
                if m in ("nc1", "spectrum_min", "effective_rank", "rankme"):
                    tol = 5e-2
            else:
                tol = 1e-7 if m == "nc1" else 1e-10
            scale = np.maximum(1.0, np.abs(np.nan_to_num(b)))
            err = np.nanmax(np.abs(a - b) / scale) if np.isfinite(b).any() else 0.0
            assert err <= tol, (c.method, m, err, a, b)


@pytest.mark.parametrize("encoder", ["free", "linear", "mlp"])
@pytest.mark.parametrize("estimator", ["expectation", "sampled"])
@pytest.mark.parametrize("positives", ["label", "noise"])
def test_engine_equals_reference_hcl_family(encoder, estimator, positives):
    base = RunConfig(
        encoder=encoder,
        estimator=estimator,
        positives=positives,
        batch_size=8,
        depth=2,
        num_negatives=5,
        **SMALL,
    )
    cfgs = _family(base, "hcl")  # SCL, HSCL, UCL and HUCL in one stack
    assert_matches_reference(train_runs(cfgs), cfgs)


@pytest.mark.parametrize("psi, tau", [("sum", 0.5), ("triplet", 1.0)])
def test_engine_equals_reference_other_psi(psi, tau):
    cfgs = _family(RunConfig(psi=psi, tau=tau, encoder="mlp", normalization="sphere", **SMALL), "hcl")
    assert_matches_reference(train_runs(cfgs), cfgs)


@pytest.mark.parametrize("method", ["InfoNCE", "WeiNCE"])
@pytest.mark.parametrize("positives", ["label", "noise"])
def test_engine_equals_reference_two_view(method, positives):
    cfgs = _family(RunConfig(encoder="mlp", batch_size=8, positives=positives, **SMALL), method)
    assert_matches_reference(train_runs(cfgs), cfgs)


def test_engine_single_run_is_train_run_and_sequential_mode():
    cfgs = _family(RunConfig(encoder="free", batch_size=12, **SMALL), "hcl")
    stacked = train_runs(cfgs)
    seq = train_runs(cfgs, mode="sequential")
    for a, b, c in zip(stacked, seq, cfgs):
        pd.testing.assert_frame_equal(b, train_run(c), check_exact=True)
        np.testing.assert_allclose(a["etf_mean"], b["etf_mean"], rtol=1e-12)
    with pytest.raises(ValueError, match="mode"):
        train_runs(cfgs, mode="parallel")


def test_engine_float32_within_tolerance():
    cfgs = _family(RunConfig(encoder="mlp", batch_size=8, **{**SMALL, "dtype": "float32"}), "hcl")
    assert_matches_reference(train_runs(cfgs), cfgs, float32=True)


# ----------------------------------------------------------------------------- skipped steps

SKIP = dict(
    num_classes=2,
    d=4,
    n_per_class=3,
    n_test_per_class=2,
    input_dim=4,
    hidden=6,
    batch_size=2,
    epochs=6,
    lr=0.05,
    dtype="float64",
)


@pytest.mark.parametrize(
    "kwargs",
    [
        dict(encoder="free"),
        dict(encoder="linear", positives="noise"),
        dict(encoder="mlp", estimator="sampled", num_negatives=3),
    ],
)
def test_engine_skips_steps_like_the_reference(kwargs):
    base = RunConfig(method="SCL", **SKIP, **kwargs)
    cfgs = [
        base,
        base.replace(seed=1),
        base.replace(method="HSCL", beta=2.0, seed=2),
        base.replace(method="HSCL", beta=5.0, seed=3),
    ]
    got = train_runs(cfgs)
    skipped = [tuple(t["skipped_steps"]) for t in got]
    assert sum(map(sum, skipped)) > 0 and len(set(skipped)) > 1  # runs skip at different steps
    assert_matches_reference(got, cfgs)


def test_engine_raises_on_an_all_skipped_epoch():
    base = RunConfig(method="SCL", encoder="free", **{**SKIP, "n_per_class": 2, "epochs": 12})
    with pytest.raises(ValueError, match="single class"):
        train_runs([base.replace(seed=5), base])


# ----------------------------------------------------------------------------- step budget, near-NC init


def test_max_steps_budget_matches_reference_and_counts_steps():
    base = RunConfig(
        method="HSCL", beta=2.0, batch_size=8, max_steps=7, **{**SMALL, "epochs": 99, "eval_every": 1}
    )
    cfgs = [base, base.replace(seed=1)]
    got = train_runs(cfgs)
    assert_matches_reference(got, cfgs)
    t = got[0]
    assert t["epochs"].iloc[0] == 3 and list(t["epoch"]) == [0, 1, 2, 3]  # 24 // 8 = 3 steps per epoch
    assert list(t["steps"]) == [0, 3, 6, 7]  # the last epoch cut short
    # a whole number of epochs is the same run as the epochs it spans
    assert base.replace(max_steps=6).key() == base.replace(max_steps=0, epochs=2).key()


def test_near_nc_init_continues_from_the_source_with_a_fresh_adam(tmp_path):
    base = RunConfig(init="nc", init_epochs=5, batch_size=0, **SMALL)
    cfgs = [
        base.replace(method=m, beta=b, seed=s)
        for s, (m, b) in enumerate([("SCL", 0.0), ("HUCL", 5.0), ("UCL", 0.0)])
    ]
    got = train_runs(cfgs, state_dir=tmp_path)
    assert_matches_reference(got, cfgs)
    src = cfgs[0].source_config()
    assert src.method == "HSCL" and src.beta == 10.0 and src.epochs == 5 and src.init == "random"
    assert got[0]["init_key"].iloc[0] == src.key()
    # epoch 0 of the continuation is the source's final state
    src_table = train_run(src)
    np.testing.assert_allclose(got[0]["etf_mean"].iloc[0], src_table["etf_mean"].iloc[-1], rtol=1e-12)
    # the source state was saved once per source and is reused (not retrained)
    saved = sorted(p.name for p in tmp_path.iterdir())
    assert saved == sorted(f"{c.source_config().key()}.pt" for c in cfgs)
    import synthetic.engine.train as eng

    calls = []
    real = eng._train

    def spy(configs, *a, **k):
        calls.append(len(configs))
        return real(configs, *a, **k)

    eng._train = spy
    try:
        again = train_runs(cfgs, state_dir=tmp_path)
    finally:
        eng._train = real
    assert calls == [3]  # only the continuation, the sources came from the folder
    pd.testing.assert_frame_equal(again[1], got[1], check_exact=True)


# ----------------------------------------------------------------------------- failures


@pytest.mark.parametrize("normalization", ["sphere", "ball", "none"])
def test_diverging_run_raises_and_is_never_recorded(normalization):
    cfg = RunConfig(
        method="HSCL",
        beta=2.0,
        encoder="mlp",
        normalization=normalization,
        **{**SMALL, "lr": 1e30, "dtype": "float32"},
    )
    from synthetic.engine.errors import NonFiniteRun

    with pytest.raises(NonFiniteRun, match="non-finite") as info:
        train_runs([cfg, cfg.replace(seed=1)])
    assert info.value.key in (cfg.key(), cfg.replace(seed=1).key()) and info.value.epoch >= 0


def test_overflowing_feature_norms_are_a_divergence():
    """Observed: lr 1e30 on the sphere gave features ~1e30 whose norms overflow float32; the sphere
    then mapped every row to zero (mean norm 0, within-class variation 0: 'perfect collapse')."""
    from synthetic.engine.errors import NonFiniteRun

    cfg = RunConfig(lr=1e30, normalization="sphere", epochs=3, num_classes=3, n_per_class=4)
    with pytest.raises(NonFiniteRun, match="norms"):
        train_run(cfg)


def test_non_finite_embeddings_at_evaluation_raise(monkeypatch):
    import synthetic.engine.models as models

    real = models.StackedModel.features

    def poisoned(self, inputs, noise=None):
        h = real(self, inputs, noise)
        return h * float("nan") if inputs.shape[1] > 8 else h  # only the full-set evaluation

    monkeypatch.setattr(models.StackedModel, "features", poisoned)
    with pytest.raises(FloatingPointError, match="embeddings"):
        train_runs([RunConfig(method="SCL", encoder="free", batch_size=8, **SMALL)])


# ----------------------------------------------------------------------------- columns


def test_engine_columns_spectrum_ranks_collision():
    cfgs = _family(RunConfig(encoder="free", record_means=True, **SMALL), "hcl")
    got = train_runs(cfgs)
    for c, t in zip(cfgs, got):
        assert list(t.columns[-len(metric_columns(c)) :]) == metric_columns(c)
        assert set(TRAINING_COLUMNS) <= set(t.columns)
        assert [f"spectrum_{i}" for i in range(3)] == [
            x for x in t.columns if x.startswith("spectrum_") and x[9:].isdigit()
        ]
        np.testing.assert_allclose(t["spectrum_2"], t["spectrum_min"])
        assert (t["spectrum_0"] == 0).all() and t["rank_1e-2"].between(0, 3).all()
        if c.setting == "unsupervised":
            assert t["collision"].between(0, 1).all() and t["collision_nc"].notna().all()
        else:
            assert t["collision"].isna().all()
        assert t["init_key"].eq("").all() and t["steps"].tolist() == [0, 2, 4]
