"""Tests of synthetic.sweep.grids: TOML grids, scales, overrides, expansion, the shipped claim grids."""

from __future__ import annotations

import itertools

import pytest

from synthetic.sweep import grids
from tests.synthetic.fakes import tiny_spec


def test_grid_expansion_matches_loop_reference():
    grid = grids.load_grid(tiny_spec())
    ref = []
    for method, betas in (("SCL", [0.0]), ("HSCL", [2.0, 5.0])):
        for norm in ("sphere", "ball"):
            for seed in (0, 1, 2):
                for beta in betas:
                    ref.append((method, beta, norm, seed))
    got = [(c.method, c.beta, c.normalization, c.seed) for c in grid.configs]
    assert sorted(got) == sorted(ref)
    assert len(got) == len(set(got)) == 18
    assert all(c.epochs == 2 and c.num_classes == 3 for c in grid.configs)
    assert len({c.key() for c in grid.configs}) == 18


def test_grid_scales_and_overrides():
    paper = grids.load_grid(tiny_spec(), scale="paper")
    assert len(paper) == 3 * 2 * 5 and {c.epochs for c in paper.configs} == {7}
    quick = grids.load_grid(tiny_spec(), scale="quick")
    assert {c.seed for c in quick.configs} == {0} and {c.epochs for c in quick.configs} == {2}
    over = grids.load_grid(tiny_spec(), overrides={"epochs": 4, "lr": [0.1, 0.01]})
    assert len(over) == 36 and {c.epochs for c in over.configs} == {4}
    assert {c.lr for c in over.configs} == {0.1, 0.01}
    # overriding beta keeps (method, beta) valid via the auto-hard rule
    over = grids.load_grid(tiny_spec(), overrides={"beta": [0.0, 3.0]})
    assert {(c.method, c.beta) for c in over.configs} == {("SCL", 0.0), ("HSCL", 3.0)}


def test_auto_hard_rule_and_plain_product():
    spec = {"sweep": {"auto_hard": True, "axes": {"method": ["SCL", "UCL"], "beta": [0, 2], "epochs": 1}}}
    got = {(c.method, c.beta) for c in grids.load_grid(spec).configs}
    assert got == {("SCL", 0.0), ("HSCL", 2.0), ("UCL", 0.0), ("HUCL", 2.0)}
    spec = {"sweep": {"axes": {"lr": [0.1, 0.2, 0.3], "seed": [0, 1]}, "base": {"epochs": 1}}}
    got = [(c.lr, c.seed) for c in grids.load_grid(spec).configs]
    assert got == list(itertools.product([0.1, 0.2, 0.3], [0, 1]))


def test_duplicate_configs_are_run_once():
    spec = {"sweep": {"base": {"epochs": 1}, "group": [{"seed": [0, 1]}, {"seed": [1, 2]}]}}
    assert [c.seed for c in grids.load_grid(spec).configs] == [0, 1, 2]


@pytest.mark.parametrize(
    "spec, match",
    [
        ({"sweep": {"axes": {"bogus": [1]}}}, "bogus"),
        ({"sweep": {"base": {"lr": 0.1}, "axes": {"lr": [0.2]}}}, "lr"),
        ({"sweep": {"axes": {"seed": []}}}, "seed"),
        ({"sweep": {"axes": {"method": ["SCL"], "beta": [2.0]}}}, "beta"),
        ({"sweep": {"epochs": 3}}, "epochs"),
        ({"other": {}}, "other"),
        ({"sweep": {"main_job_scales": "paper"}}, "main_job_scales"),
        ({"sweep": {"main_job_scales": [""]}}, "main_job_scales"),
        ({"sweep": {"main_job_scales": ["papr"]}}, "main_job_scales"),  # a typo, not a silent drop
        ({"sweep": {"group": [{"lr": [0.1]}], "axes": {"lr": [0.2]}}}, "lr"),
    ],
)
def test_invalid_grids_raise(spec, match):
    with pytest.raises(ValueError, match=match):
        grids.load_grid(spec)


def test_unknown_scale_and_bad_toml(tmp_path):
    with pytest.raises(ValueError, match="huge"):
        grids.load_grid(tiny_spec(), scale="huge")
    bad = tmp_path / "bad.toml"
    bad.write_text("[sweep\n")
    with pytest.raises(ValueError, match="bad.toml"):
        grids.load_grid(bad)
    with pytest.raises(ValueError, match="nope"):
        grids.load_grid("nope_not_a_grid")


@pytest.mark.parametrize(
    "name",
    [
        "s1_scl_hscl_nc",
        "s2_ucl_positives",
        "s3_hucl_beta",
        "s4_no_normalisation",
        "r4_near_nc",
        "r5_batch_size",
    ],
)
def test_shipped_claim_grids(name):
    files = grids.grid_files()
    assert name in files
    default = grids.load_grid(name)
    assert default.claim and len(default) > 0
    assert default.spec["criteria"]["id"] == default.claim  # criteria declared in the grid file
    assert len({c.seed for c in default.configs}) >= 3
    assert all(c.embed_dim == c.num_classes - 1 for c in default.configs)  # d = C - 1
    assert min(c.n_per_class for c in default.configs) >= 50
    classes = {c.num_classes for c in default.configs}
    # every default run carries the declared convergence rule (a verdict reads settled runs only)
    assert all(c.settle_window > 0 for c in default.configs)
    paper = grids.load_grid(files[name], scale="paper")
    if name == "s1_scl_hscl_nc":
        # the default scale decides within the main job's budget: C = 10, free features, ball and
        # sphere; the paper scale keeps C up to 100, the encoder variants and the authors'
        # configuration
        assert classes == {10}
        assert {"free"} == {c.encoder for c in default.configs}
        assert {"ball", "sphere"} == {c.normalization for c in default.configs}
        assert {c.num_classes for c in paper.configs} == {10, 20, 50, 100}
        assert {"free", "linear", "mlp"} == {c.encoder for c in paper.configs}
        assert {1, 2, 4} <= {c.depth for c in paper.configs if c.encoder == "mlp"}
        authors = [
            c for c in paper.configs if (c.num_classes, c.encoder, c.hidden, c.depth) == (100, "mlp", 512, 1)
        ]
        assert authors and all(
            (c.psi, c.tau, c.num_negatives, c.normalization, c.lr, c.batch_size, c.estimator)
            == ("mean", 1.0, 256, "ball", 1e-3, 512, "sampled")
            for c in authors
        )
    elif name == "r5_batch_size":  # many classes; only the batch size varies, at equal steps
        assert classes == {100}
        assert {c.num_classes for c in paper.configs} == {100, 200}
        assert {32, 64, 512} <= {c.batch_size for c in default.configs}
        assert len({c.num_steps for c in default.configs}) == 1
    elif name == "r4_near_nc":
        assert {c.init for c in default.configs} == {"nc"}
        assert {c.beta for c in default.configs} == {0.0, 2.0, 5.0, 10.0, 30.0}
        assert {c.method for c in default.configs} == {"SCL", "HSCL", "UCL", "HUCL"}
    elif name == "s4_no_normalisation":
        assert {c.normalization for c in default.configs} == {"none"}
        assert {c.normalization for c in paper.configs} == {"none", "ball", "sphere"}
    assert len({c.seed for c in paper.configs}) >= 3
    # paper scale: at least as much data per run, and the authors' K = 256 sampled negatives
    assert max(c.num_train for c in paper.configs) >= max(c.num_train for c in default.configs)
    assert {(c.estimator, c.num_negatives) for c in paper.configs} == {("sampled", 256)}
    quick = grids.load_grid(name, scale="quick")
    assert len(quick) <= len(default)
