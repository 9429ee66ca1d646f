"""Tests of synthetic/engine/config.py and synthetic/engine/train.py.

References are independent of the code under test: Python loops over class means, explicit
binomial sums (math.comb), the spec's tabulated optimal values, theory.hcl at an exact simplex
ETF, and Harris/Jensen lower bounds that every loss value must respect.
"""

from __future__ import annotations

import dataclasses
import json
import math
import re

import numpy as np
import pandas as pd
import pytest
import torch

from synthetic.engine.config import RunConfig
from synthetic.engine.data import epoch_batches, make_data, run_generators
from synthetic.engine.evaluation import TRAINING_COLUMNS
from synthetic.engine.evaluation import optimum as closed_form_optimum
from synthetic.engine.models import build_model
from synthetic.engine.train import train_run
from synthetic.store.schema import decode_class_means, recorded_epochs
from theory.collapse import ROW_COLUMNS
from theory.hcl import contrastive_loss
from theory.options import METHODS

#: The numeric metric columns of a run's table (the training quantities and the metric row).
METRIC_COLUMNS = (*[c for c in TRAINING_COLUMNS if c != "init_key"], *ROW_COLUMNS)

TINY = dict(num_classes=4, n_per_class=8, n_test_per_class=4, input_dim=6, hidden=8, epochs=3)


# ----------------------------------------------------------------------------- config


@pytest.mark.parametrize(
    "kwargs, field",
    [
        (dict(method="SimCLR"), "method"),
        (dict(method="HSCL", beta=0.0), "beta"),
        (dict(method="SCL", beta=1.0), "beta"),
        (dict(method="HUCL", beta=-1.0), "beta"),
        (dict(method="InfoNCE", beta=2.0), "beta"),
        (dict(tau=0.0), "tau"),
        (dict(tau=float("nan")), "tau"),
        (dict(psi="max"), "psi"),
        (dict(estimator="exact"), "estimator"),
        (dict(num_negatives=0), "num_negatives"),
        (dict(batch_size=1), "batch_size"),
        (dict(batch_size=-4), "batch_size"),
        (dict(batch_size=2.5), "batch_size"),
        (dict(lr=0.0), "lr"),
        (dict(weight_decay=-1e-6), "weight_decay"),
        (dict(epochs=-1), "epochs"),
        (dict(eval_every=0), "eval_every"),
        (dict(normalization="unit"), "normalization"),
        (dict(positives="augment"), "positives"),
        (dict(positives="noise", noise_std=0.0), "noise_std"),
        (dict(encoder="resnet"), "encoder"),
        (dict(d=0), "d"),
        (dict(num_classes=1), "num_classes"),
        (dict(n_per_class=0), "n_per_class"),
        (dict(centres="orthogonal", input_dim=3, num_classes=5), "input_dim"),
        (dict(centres="grid"), "centres"),
        (dict(seed=-1), "seed"),
        (dict(seed=True), "seed"),
        (dict(record_means=1), "record_means"),
        (dict(dtype="float16"), "dtype"),
        (dict(method="InfoNCE", n_per_class=1), "n_per_class"),
    ],
)
def test_config_validation_names_the_field(kwargs, field):
    with pytest.raises(ValueError, match=field):
        RunConfig(**kwargs)


def test_config_key_resolution_and_round_trip():
    c = RunConfig(num_classes=5)
    assert re.fullmatch(r"[0-9a-f]{16}", c.key())
    assert c.key() == RunConfig(num_classes=5, d=4).key() == RunConfig(num_classes=5, batch_size=None).key()
    assert c.key() == RunConfig(num_classes=5, beta=0).key()  # int and float beta resolve alike
    assert c.to_dict()["d"] == 4 and c.embed_dim == 4 and c.d is None
    json.dumps(c.to_dict())
    assert RunConfig.from_dict(c.to_dict()).key() == c.key()
    # d=None follows C under replace (the resolved dimension is not frozen in)
    assert c.replace(num_classes=7).embed_dim == 6
    keys = {c.key()}
    for change in [dict(seed=1), dict(lr=2e-3), dict(method="HSCL", beta=1.0), dict(d=7), dict(epochs=3)]:
        keys.add(c.replace(**change).key())
    assert len(keys) == 6


# (base config, irrelevant change, relevant change): the first must keep the key, the second not.
KEY_CASES = [
    (dict(psi="mean"), dict(num_negatives=7), dict(psi="sum")),
    (dict(psi="triplet"), dict(num_negatives=7), dict(margin=2.0)),
    (dict(psi="sum"), dict(margin=3.0), dict(num_negatives=7)),
    (dict(psi="mean", estimator="sampled"), dict(margin=3.0), dict(num_negatives=7)),
    (dict(psi="triplet", estimator="sampled"), dict(noise_std=0.3), dict(num_negatives=7)),
    (
        dict(method="InfoNCE"),
        dict(psi="sum", estimator="sampled", num_negatives=3, margin=0.5),
        dict(tau=0.3),
    ),
    (dict(method="WeiNCE"), dict(psi="triplet", num_negatives=3), dict(normalization="ball")),
    (dict(encoder="linear"), dict(hidden=3, init_scale=2.0), dict(input_dim=9)),
    (dict(encoder="mlp"), dict(init_scale=2.0), dict(hidden=3)),
    (
        dict(encoder="free"),
        dict(hidden=3, n_test_per_class=0, input_dim=5, separation=9.0, sigma=0.1, centres="orthogonal"),
        dict(init_scale=2.0),
    ),
    (dict(encoder="linear"), dict(init_scale=0.5), dict(n_test_per_class=1)),
    (dict(positives="label"), dict(noise_std=0.5), dict(positives="noise")),
    (dict(positives="noise"), dict(hidden=5), dict(noise_std=0.5)),
    (dict(batch_size=40), dict(batch_size=0), dict(batch_size=8)),
    (dict(epochs=4, eval_every=4), dict(eval_every=9), dict(eval_every=2)),
    (dict(epochs=0), dict(lr=0.5, weight_decay=0.1, batch_size=8, eval_every=3), dict(seed=2)),
]


@pytest.mark.parametrize("base, same, other", KEY_CASES)
def test_config_key_ignores_unused_fields_only(base, same, other):
    c = RunConfig(num_classes=4, n_per_class=10, **base)
    assert c.replace(**same).key() == c.key()
    assert c.replace(**other).key() != c.key()
    # canonicalisation is confined to the key: the config and its dict keep the given values
    changed = c.replace(**same)
    assert RunConfig.from_dict(changed.to_dict()) == changed.replace(d=changed.embed_dim)  # d resolved
    assert all(changed.to_dict()[k] == getattr(changed, k) for k in same)


@pytest.mark.parametrize("base, same, other", KEY_CASES)
def test_unused_fields_do_not_change_the_run(base, same, other):
    # The claim behind the shared key, checked on the trained tables themselves.
    kw = {
        **dict(
            num_classes=4,
            n_per_class=10,
            n_test_per_class=3,
            input_dim=6,
            hidden=8,
            epochs=2,
            lr=0.05,
            dtype="float64",
        ),
        **base,
    }
    c = RunConfig(**kw)
    a, b = train_run(c), train_run(c.replace(**same))
    pd.testing.assert_frame_equal(a[list(METRIC_COLUMNS)], b[list(METRIC_COLUMNS)], check_exact=True)


def test_config_key_sampled_triplet_margin_and_expectation_sum_count():
    # margin is used by the triplet psi under both estimators; K by the sum psi's log K
    t = RunConfig(psi="triplet", estimator="sampled")
    assert t.replace(margin=0.2).key() != t.key()
    s = RunConfig(psi="sum")
    assert s.replace(num_negatives=2).key() != s.key()


def test_sampled_runs_carry_the_randomness_contract_in_their_key():
    """A sampled run drawn under the streams never matches a run stored before them (another key);
    runs of the expectation estimator keep their keys."""
    from synthetic.engine.config import _DEFAULTS
    from synthetic.store.keys import run_key
    from theory.options import SAMPLED_DRAWS

    for psi in ("mean", "triplet"):
        c = RunConfig(method="HSCL", beta=2.0, estimator="sampled", psi=psi)
        ident = c.identity_dict()
        assert ident["draws"] == SAMPLED_DRAWS
        before = {k: v for k, v in ident.items() if k != "draws"}
        assert c.key() == run_key(ident, _DEFAULTS) != run_key(before, _DEFAULTS)
    assert "draws" not in RunConfig(method="HSCL", beta=2.0).identity_dict()
    assert "draws" not in RunConfig(method="InfoNCE", estimator="sampled").identity_dict()


def test_config_unknown_fields_raise():
    with pytest.raises(ValueError, match="unknown"):
        RunConfig.from_dict({"methd": "SCL"})
    with pytest.raises(ValueError, match="unknown"):
        RunConfig().replace(bta=1.0)
    with pytest.raises(ValueError, match="data"):
        RunConfig.from_dict([("method", "SCL")])


def test_from_dict_accepts_numpy_scalars():
    c = RunConfig.from_dict({"beta": np.float64(2.0), "method": "HSCL", "seed": np.int64(3)})
    assert c.beta == 2.0 and c.seed == 3 and isinstance(c.seed, int)


@pytest.mark.parametrize(
    "numpy_kw, python_kw",
    [
        (dict(seed=np.int64(1)), dict(seed=1)),
        (dict(method="HSCL", beta=np.float32(2)), dict(method="HSCL", beta=2.0)),
        (dict(method="HSCL", beta=np.int64(3)), dict(method="HSCL", beta=3)),
        (dict(tau=np.float64(0.5), lr=np.float16(0.25)), dict(tau=0.5, lr=0.25)),
        (
            dict(d=np.int32(3), num_classes=np.int16(5), batch_size=np.uint8(8)),
            dict(d=3, num_classes=5, batch_size=8),
        ),
        (dict(record_means=np.bool_(True), method=np.str_("UCL")), dict(record_means=True, method="UCL")),
    ],
    ids=["seed_int64", "beta_float32", "beta_int64", "tau_lr", "sizes", "bool_str"],
)
def test_config_accepts_numpy_scalars_as_the_python_number(numpy_kw, python_kw):
    c, ref = RunConfig(**numpy_kw), RunConfig(**python_kw)
    assert c == ref and c.key() == ref.key()
    assert all(type(getattr(c, k)) is type(getattr(ref, k)) for k in python_kw)
    json.dumps(c.to_dict())


@pytest.mark.parametrize(
    "kwargs, message",
    [
        (dict(seed=np.int64(-1)), "seed must be an integer >= 0, got -1"),
        (dict(seed=np.float64(1.0)), "seed must be an integer >= 0, got 1.0"),
        (dict(method="HSCL", beta=np.float32(-2)), "beta must be a finite number >= 0.0, got -2.0"),
        (dict(record_means=np.int64(1)), "record_means must be a bool, got 1"),
    ],
)
def test_config_rejects_bad_numpy_scalars_naming_the_value(kwargs, message):
    with pytest.raises(ValueError, match=re.escape(message) + "$"):
        RunConfig(**kwargs)


# ----------------------------------------------------------------------------- closed forms


def _ucl_binomial_loop(C, K, psi, tau, margin=1.0):
    a = -C / ((C - 1) * tau)
    total = 0.0
    for m in range(K + 1):
        p = math.comb(K, m) * (1 / C) ** m * (1 - 1 / C) ** (K - m)
        if psi == "mean":
            v = math.log(1 + (m + (K - m) * math.exp(a)) / K)
        elif psi == "sum":
            v = math.log(1 + m + (K - m) * math.exp(a))
        else:
            v = (m * margin + (K - m) * max(0.0, a + margin)) / K
        total += p * v
    return total


def test_closed_form_matches_spec_table():
    # docs/hcl.md#theory table, C = 10 and C = 100
    assert closed_form_optimum(RunConfig(num_classes=10)) == pytest.approx(0.284572, abs=1e-6)
    assert closed_form_optimum(RunConfig(num_classes=100)) == pytest.approx(0.310555, abs=1e-6)
    assert closed_form_optimum(RunConfig(num_classes=10, psi="sum")) == pytest.approx(4.445863, abs=1e-6)
    assert closed_form_optimum(RunConfig(num_classes=10, psi="sum", tau=0.5)) == pytest.approx(
        3.358367, abs=1e-6
    )
    assert math.isnan(closed_form_optimum(RunConfig(method="InfoNCE")))


@pytest.mark.parametrize("psi", ["mean", "sum", "triplet"])
def test_closed_form_ucl_sampled_is_the_binomial_sum(psi):
    cfg = RunConfig(method="UCL", num_classes=6, num_negatives=12, psi=psi, tau=0.7, estimator="sampled")
    assert closed_form_optimum(cfg) == pytest.approx(_ucl_binomial_loop(6, 12, psi, 0.7), rel=1e-10)
    assert closed_form_optimum(cfg.replace(method="HUCL", beta=3.0)) == closed_form_optimum(cfg)


@pytest.mark.parametrize("method, beta", [("SCL", 0.0), ("HSCL", 4.0), ("UCL", 0.0), ("HUCL", 0.0)])
@pytest.mark.parametrize("psi", ["mean", "sum", "triplet"])
def test_closed_form_expectation_equals_loss_at_exact_nc(method, beta, psi, nc_batch):
    """Full balanced batch collapsed on a simplex ETF: the batched loss equals the closed form."""
    if method == "HUCL":
        method, beta = "UCL", 0.0  # HUCL's value is only a lower bound; checked below
    C, n = 5, 3
    cfg = RunConfig(method=method, beta=beta, num_classes=C, psi=psi, tau=0.8, num_negatives=9)
    z, y = nc_batch([n] * C)
    setting = "supervised" if method in ("SCL", "HSCL") else "unsupervised"
    loss = contrastive_loss(z, y, setting=setting, beta=beta, tau=0.8, psi=psi, num_negatives=9)
    assert float(loss) == pytest.approx(closed_form_optimum(cfg, "expectation"), rel=1e-10, abs=1e-12)


# ----------------------------------------------------------------------------- schedule


def test_recorded_epochs_and_batches():
    assert recorded_epochs(10, 3) == [0, 3, 6, 9, 10]
    assert recorded_epochs(0, 5) == [0]
    assert recorded_epochs(4, 1) == [0, 1, 2, 3, 4]
    g = torch.Generator()
    g.manual_seed(0)
    b = epoch_batches(10, 3, g)
    assert b.shape == (3, 3) and len(set(b.flatten().tolist())) == 9
    assert torch.equal(epoch_batches(10, 0, g), torch.arange(10)[None])
    assert torch.equal(epoch_batches(10, 10, g), torch.arange(10)[None])


# ----------------------------------------------------------------------------- train_run


def test_train_run_table_layout_and_determinism():
    cfg = RunConfig(method="HSCL", beta=2.0, **{**TINY, "epochs": 5}, eval_every=2)
    a, b = train_run(cfg), train_run(cfg)
    pd.testing.assert_frame_equal(a, b, check_exact=True)
    assert list(a["epoch"]) == [0, 2, 4, 5]
    for k, v in cfg.to_dict().items():
        assert (a[k] == v).all(), k
    assert (a["run_key"] == cfg.key()).all()
    assert set(METRIC_COLUMNS) <= set(a.columns) and "class_means" not in a.columns
    assert math.isnan(a["loss"].iloc[0]) and a["loss"].iloc[1:].notna().all()
    assert np.allclose(a["gap_to_optimum"].iloc[1:], a["loss"].iloc[1:] - a["optimum"].iloc[1:])
    c = train_run(cfg.replace(seed=1))
    assert not np.allclose(c["loss"].iloc[1:], a["loss"].iloc[1:])


def test_train_run_rejects_non_config():
    with pytest.raises(ValueError, match="RunConfig"):
        train_run({"method": "SCL"})


def _loop_paper_metrics(z, y, C):
    mu = [z[y == c].mean(axis=0) for c in range(C)]
    unit_norm = sum(abs(np.linalg.norm(m) - 1) for m in mu) / C
    zero_sum = np.linalg.norm(sum(mu) / C)
    devs = []
    for i in range(C):
        for j in range(C):
            if i != j:
                cos = mu[i] @ mu[j] / (np.linalg.norm(mu[i]) * np.linalg.norm(mu[j]))
                devs.append(abs(cos + 1 / (C - 1)))
    wcv = sum(np.mean([np.linalg.norm(z[k] - mu[c]) for k in np.where(y == c)[0]]) for c in range(C)) / C
    return dict(
        unit_norm=unit_norm,
        zero_sum=zero_sum,
        etf_mean=np.mean(devs),
        etf_max=max(devs),
        within_class_variation=wcv,
    ), np.array(mu)


@pytest.mark.parametrize("encoder", ["free", "mlp"])
def test_epoch0_metrics_and_full_loss_match_references(encoder):
    cfg = RunConfig(method="HSCL", beta=3.0, encoder=encoder, dtype="float64", record_means=True, **TINY)
    df = train_run(cfg.replace(epochs=0))
    assert len(df) == 1
    # Rebuild the initial state the documented way (seeded streams) and recompute independently.
    gens = run_generators(cfg.seed)
    data = make_data(cfg)
    model = build_model(cfg, generator=gens["init"])
    with torch.no_grad():
        z = model(torch.arange(cfg.num_train) if encoder == "free" else data.x_train)
    ref, mu = _loop_paper_metrics(z.numpy(), data.y_train.numpy(), cfg.num_classes)
    row = df.iloc[0]
    for k, v in ref.items():
        assert row[k] == pytest.approx(v, rel=1e-10, abs=1e-12), k
    np.testing.assert_allclose(decode_class_means(row["class_means"]), mu, rtol=1e-12, atol=1e-14)
    full = contrastive_loss(z, data.y_train, setting="supervised", beta=3.0)
    assert row["full_loss"] == pytest.approx(float(full), rel=1e-12)
    assert row["full_gap"] == pytest.approx(float(full) - closed_form_optimum(cfg), rel=1e-12)
    if encoder == "free":
        assert math.isnan(row["ncm_acc"])
    else:
        mu_t = mu
        zt = model(data.x_test).detach().numpy()
        pred = np.argmax(zt @ mu_t.T, axis=1)
        assert row["ncm_acc"] == pytest.approx(np.mean(pred == data.y_test.numpy()))


@pytest.mark.parametrize(
    "kwargs",
    [
        dict(method="SCL"),
        dict(method="HSCL", beta=5.0, positives="noise", normalization="ball"),
        dict(method="UCL", positives="noise", encoder="linear"),
        dict(method="HUCL", beta=2.0, estimator="sampled", num_negatives=16, batch_size=8),
        dict(method="HSCL", beta=1.0, psi="triplet", encoder="mlp", normalization="none"),
        dict(method="SCL", psi="sum", tau=0.5, batch_size=16, weight_decay=1e-4),
        dict(method="InfoNCE", tau=0.5, encoder="mlp"),
        dict(method="InfoNCE", positives="noise", batch_size=8),
        dict(method="WeiNCE", tau=0.5, encoder="mlp"),
    ],
)
def test_every_method_trains_finite(kwargs):
    df = train_run(RunConfig(**{**TINY, **kwargs}))
    assert len(df) == TINY["epochs"] + 1
    num = df[
        [
            c
            for c in METRIC_COLUMNS
            if c not in ("ncm_acc", "ncm_top5", "optimum", "gap_to_optimum", "full_gap", "loss")
            and not c.startswith("collision")
        ]
    ]
    assert np.isfinite(num.to_numpy(float)).all()
    assert np.isfinite(df["loss"].iloc[1:]).all()


@pytest.mark.parametrize(
    "kwargs",
    [
        dict(method="SCL"),
        dict(method="HSCL", beta=5.0),
        dict(method="HSCL", beta=2.0, positives="noise", encoder="linear"),
    ],
)
def test_full_batch_scl_loss_never_below_closed_form(kwargs):
    """Theorem T4/T5 (Harris + Jensen): the full-batch (H)SCL loss is >= L*_SCL at every state."""
    cfg = RunConfig(**{**TINY, **kwargs, "epochs": 30}, lr=0.05, normalization="ball", dtype="float64")
    df = train_run(cfg)
    assert (df["full_gap"] >= -1e-12).all()


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_float32_and_float64_runs_agree_early(dtype):
    cfg = RunConfig(method="HSCL", beta=2.0, **TINY)
    a = train_run(cfg.replace(dtype="float64"))
    b = train_run(cfg.replace(dtype=dtype))
    np.testing.assert_allclose(b["etf_mean"], a["etf_mean"], rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(b["loss"].iloc[1:], a["loss"].iloc[1:], rtol=1e-4)


@pytest.mark.parametrize(
    "C, n, epochs",
    [(4, 10, 150), pytest.param(10, 20, 400, marks=pytest.mark.slow)],
)
def test_hscl_sphere_moves_toward_neural_collapse(C, n, epochs):
    """Claim S1 in miniature: HSCL on the sphere drives etf_mean and the within-class spread to 0."""
    cfg = RunConfig(
        method="HSCL",
        beta=2.0,
        num_classes=C,
        n_per_class=n,
        normalization="sphere",
        lr=0.05,
        epochs=epochs,
        eval_every=epochs // 3,
    )
    df = train_run(cfg)
    first, last = df.iloc[0], df.iloc[-1]
    assert last["etf_mean"] < 0.25 * first["etf_mean"]
    assert last["within_class_variation"] < 0.25 * first["within_class_variation"]
    assert last["etf_mean"] < 0.05 and last["within_class_variation"] < 0.1
    assert -1e-6 <= last["gap_to_optimum"] < 0.05  # float32 rounding may dip below L* by ~1e-8


def test_record_means_decodes_to_recorded_geometry():
    cfg = RunConfig(method="SCL", record_means=True, **TINY)
    df = train_run(cfg)
    for _, row in df.iterrows():
        mu = decode_class_means(row["class_means"])
        assert mu.shape == (cfg.num_classes, cfg.embed_dim)
        assert np.mean(np.abs(np.linalg.norm(mu, axis=1) - 1)) == pytest.approx(
            row["unit_norm"], rel=1e-6, abs=1e-9
        )
    with pytest.raises(ValueError):
        decode_class_means(3.0)


def test_methods_constant_is_complete():
    assert set(METHODS) == {"SCL", "HSCL", "UCL", "HUCL", "InfoNCE", "WeiNCE"}


def test_progress_flag_does_not_change_the_table():
    cfg = RunConfig(method="SCL", **TINY)
    pd.testing.assert_frame_equal(
        train_run(cfg, progress=True), train_run(cfg, device="cpu"), check_exact=True
    )


def test_config_columns_and_no_test_set():
    from synthetic.store.schema import config_columns

    cfg = RunConfig(method="SCL", encoder="linear", **{**TINY, "n_test_per_class": 0})
    df = train_run(cfg)
    assert config_columns(df) == list(cfg.to_dict()) == [f.name for f in dataclasses.fields(RunConfig)]
    assert df["ncm_acc"].isna().all() and df["train_ncm_acc"].notna().all()


def test_non_finite_loss_raises(monkeypatch):
    import synthetic.engine.train as engine_mod

    real = engine_mod.step_losses

    def poisoned(*args, **kwargs):
        return real(*args, **kwargs) * float("nan")

    monkeypatch.setattr(engine_mod, "step_losses", poisoned)
    with pytest.raises(FloatingPointError, match="non-finite"):
        train_run(RunConfig(method="SCL", **TINY))


# ----------------------------------------------------------------------------- closed form: no optimum


@pytest.mark.parametrize("method, beta", [("SCL", 0.0), ("HSCL", 2.0), ("UCL", 0.0), ("HUCL", 1.0)])
def test_closed_form_is_nan_where_nc_is_not_optimal(method, beta):
    cfg = RunConfig(method=method, beta=beta, num_classes=6, normalization="sphere")
    assert math.isfinite(closed_form_optimum(cfg))
    assert math.isfinite(closed_form_optimum(cfg.replace(normalization="ball")))
    assert math.isfinite(closed_form_optimum(cfg.replace(d=8)))  # d > C - 1 still holds an ETF
    # unnormalised embeddings: the loss tends to 0 (its infimum), NC is no optimum
    assert math.isnan(closed_form_optimum(cfg.replace(normalization="none")))
    # d < C - 1: no simplex ETF exists
    assert math.isnan(closed_form_optimum(cfg.replace(d=4)))
    assert math.isnan(closed_form_optimum(cfg.replace(d=4), "sampled"))


def test_no_optimum_columns_are_nan_in_the_table():
    df = train_run(RunConfig(method="SCL", **{**TINY, "d": 2}))
    assert df[["optimum", "gap_to_optimum", "full_gap"]].isna().all().all()
    assert df["loss"].iloc[1:].notna().all() and df["full_loss"].notna().all()


# ----------------------------------------------------------------------------- skipped single-class steps

SKIP = dict(num_classes=2, d=4, n_per_class=3, batch_size=2, epochs=8, lr=0.05, dtype="float64")


def _reference_skips(cfg: RunConfig) -> list[int]:
    """Single-class batches per epoch, from the run's own permutations (Python loop)."""
    g = run_generators(cfg.seed)["order"]
    y = [i // cfg.n_per_class for i in range(cfg.num_train)]
    out = []
    for _ in range(cfg.epochs):
        perm = torch.randperm(cfg.num_train, generator=g).tolist()
        steps = cfg.num_train // cfg.batch_size
        batches = [perm[s * cfg.batch_size : (s + 1) * cfg.batch_size] for s in range(steps)]
        out.append(sum(len({y[i] for i in b}) == 1 for b in batches))
    return out


@pytest.mark.parametrize(
    "method, beta, dtype", [("SCL", 0.0, "float64"), ("HSCL", 3.0, "float64"), ("HSCL", 3.0, "float32")]
)
def test_single_class_batches_are_skipped_and_counted(method, beta, dtype):
    cfg = RunConfig(method=method, beta=beta, encoder="free", **{**SKIP, "dtype": dtype})
    skips = _reference_skips(cfg)
    assert sum(skips) > 0  # the configuration does produce single-class batches
    df = train_run(cfg)
    assert df["skipped_steps"].tolist() == [0] + skips
    # Reference: the same run by hand, skipping single-class batches (no update, no Adam step).
    gens = run_generators(cfg.seed)
    model = build_model(cfg, generator=gens["init"])
    opt = torch.optim.Adam(model.parameters(), lr=cfg.lr)
    y = torch.arange(2).repeat_interleave(3)
    ref = []
    for _ in range(cfg.epochs):
        perm = torch.randperm(6, generator=gens["order"]).view(3, 2)
        vals = []
        for b in perm:
            if int(y[b][0]) == int(y[b][1]):
                continue
            loss = contrastive_loss(
                model(b), y[b], setting="supervised", beta=beta, tau=cfg.tau, num_classes=2
            )
            opt.zero_grad()
            loss.backward()
            opt.step()
            vals.append(float(loss.detach()))
        ref.append(sum(vals) / len(vals))
    np.testing.assert_allclose(df["loss"].iloc[1:], ref, rtol=1e-12 if dtype == "float64" else 1e-5)


def test_unsupervised_runs_never_skip():
    df = train_run(RunConfig(method="UCL", encoder="free", **SKIP))
    assert (df["skipped_steps"] == 0).all()
    assert (train_run(RunConfig(method="SCL", **TINY))["skipped_steps"] == 0).all()


def test_an_epoch_of_only_single_class_batches_raises():
    cfg = RunConfig(method="SCL", encoder="free", **{**SKIP, "n_per_class": 2, "epochs": 12})
    skips = _reference_skips(cfg)
    assert 2 in skips  # both steps of some epoch are single-class (checked by the reference)
    with pytest.raises(
        ValueError, match=f"every mini-batch of epoch {skips.index(2) + 1} holds a single class"
    ):
        train_run(cfg)
