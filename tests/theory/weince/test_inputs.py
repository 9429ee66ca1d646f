"""Sound inputs: the losses' fused finiteness check and one array rule across the EVT tools.

The EVT rule (docs/weince.md#inputs): numpy arrays and torch tensors are accepted and converted to
float64 numpy; a NaN / inf value raises ValueError naming the argument; a meta tensor raises
ValueError naming the argument.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pandas as pd
import pytest
import torch

from tests.theory.weince.reference import make_views
from theory.weince import (
    WeiNCELoss,
    candidates_from_similarity,
    embedding_scores,
    fit_gpd,
    gev_fit,
    gpd_loglik,
    gpd_quantile,
    link_select,
    lower_triangle_scores,
    noise_floor_theory,
    pot_fit,
    profile_sigma,
    scipy_gpd_fit,
    softmax_link_mle,
    tail_aic_fit,
    tail_aic_fits,
    tail_fits,
    threshold_stability,
    tlambda_loglik,
    two_view_link_candidates,
    weince_label_loss,
    weince_loss,
)

# ---------------------------------------------------------------------------------------------
# the losses: one fused finiteness check naming the argument
# ---------------------------------------------------------------------------------------------

Z1, Z2 = make_views(6, 4, seed=0, dtype=torch.float32)
LABELS = torch.tensor([0, 0, 1, 1, 2, 2] * 2)


def _poison(z, row, value):
    z = z.clone()
    z[row, 1] = value
    return z


def _huge(z):
    return z * 1e19  # finite entries, but the row norms overflow float32


LOSS_CASES = [
    # (id, call, message)
    ("z1 nan", lambda: weince_loss(_poison(Z1, 2, math.nan), Z2), r"^z1 must be finite: row 2"),
    ("z1 inf", lambda: weince_loss(_poison(Z1, 0, math.inf), Z2), r"^z1 must be finite: row 0"),
    ("z2 -inf", lambda: weince_loss(Z1, _poison(Z2, 5, -math.inf)), r"^z2 must be finite: row 5"),
    (
        "z2 nan f64",
        lambda: weince_loss(Z1.double(), _poison(Z2.double(), 1, math.nan)),
        r"^z2 must be finite",
    ),
    (
        "z1 half inf",
        lambda: weince_loss(_poison(Z1.half(), 3, math.inf), Z2.half()),
        r"^z1 must be finite: row 3",
    ),
    ("z1 meta", lambda: weince_loss(Z1.to("meta"), Z2), r"^z1 is a meta tensor"),
    ("module z2 nan", lambda: WeiNCELoss()(Z1, _poison(Z2, 4, math.nan)), r"^z2 must be finite: row 4"),
    (
        "released z1 inf",
        lambda: WeiNCELoss(recipe="released")(_poison(Z1, 0, math.inf), Z2),
        r"^z1 must be finite",
    ),
    (
        "label z nan",
        lambda: weince_label_loss(_poison(torch.cat([Z1, Z2]), 7, math.nan), LABELS),
        r"^z must be finite: row 7",
    ),
    (
        "label z inf",
        lambda: weince_label_loss(_poison(torch.cat([Z1, Z2]), 0, math.inf), LABELS),
        r"^z must be finite",
    ),
    (
        "label z overflow",
        lambda: weince_label_loss(_huge(torch.cat([Z1, Z2])), LABELS),
        r"^z has a row whose norm",
    ),
    (
        "label z meta",
        lambda: weince_label_loss(torch.cat([Z1, Z2]).to("meta"), LABELS),
        r"^z is a meta tensor",
    ),
]


@pytest.mark.parametrize("call,match", [c[1:] for c in LOSS_CASES], ids=[c[0] for c in LOSS_CASES])
def test_non_finite_inputs_raise_naming_the_argument(call, match):
    with pytest.raises(ValueError, match=match):
        call()


def test_check_inputs_false_skips_the_check():
    out = weince_loss(_poison(Z1, 2, math.nan), Z2, check_inputs=False)
    assert torch.isnan(out)  # documented: no check, no synchronisation
    assert torch.isnan(WeiNCELoss(check_inputs=False)(_poison(Z1, 2, math.nan), Z2))


def test_two_view_rows_whose_norm_overflows_are_normalised_exactly():
    # the two-view candidates project such rows overflow-safely (theory.geometry.normalize): the
    # loss is the loss of the rescaled views, never the loss of a silent zero row
    out = weince_loss(_huge(Z1), Z2)
    assert torch.isfinite(out)
    assert torch.allclose(out, weince_loss(Z1, Z2), atol=1e-5)


def test_finite_large_but_representable_inputs_pass():
    out = weince_loss(Z1 * 1e17, Z2)  # norms ~1e17, below the float32 overflow
    assert torch.isfinite(out)
    assert torch.allclose(out, weince_loss(Z1, Z2), atol=1e-5)


# ---------------------------------------------------------------------------------------------
# the EVT tools: one array rule
# ---------------------------------------------------------------------------------------------

rng = np.random.default_rng(7)
Y = rng.exponential(0.1, 200)
SCORES = np.tanh(rng.normal(0.0, 0.4, 600))
SQ = np.corrcoef(rng.normal(size=(8, 5)))
EMB = rng.normal(size=(8, 5))
CAND = np.tanh(rng.normal(0.2, 0.4, (30, 6)))
TAILS = np.sort(np.tanh(rng.normal(0.2, 0.4, (4, 40))), axis=1)[:, ::-1].copy()
NEG = np.tanh(rng.normal(0.1, 0.4, 60))
MAXIMA = rng.gumbel(0.5, 0.1, 40)
FIT = dict(n_grid=40, n_refine=40)

# (function name, builder taking the tested array, the valid array, the argument name)
EVT_CASES = [
    ("gpd_loglik", lambda a: gpd_loglik(a, 0.1, 0.5), Y, "y"),
    ("gpd_quantile", lambda a: gpd_quantile(a, 0.1, 0.5), np.linspace(0, 0.9, 7), "p"),
    ("profile_sigma y", lambda a: profile_sigma(a, [-0.2, 0.1]), Y, "y"),
    ("profile_sigma xi", lambda a: profile_sigma(Y, a), np.array([-0.2, 0.1]), "xi"),
    ("fit_gpd", lambda a: fit_gpd(a, **FIT), Y, "y"),
    ("pot_fit", lambda a: pot_fit(a, 0.9, **FIT), SCORES, "scores"),
    ("threshold_stability", lambda a: threshold_stability(a, (0.9,), min_exceed=10, **FIT), SCORES, "scores"),
    ("lower_triangle_scores", lower_triangle_scores, SQ, "S"),
    ("embedding_scores", embedding_scores, EMB, "z"),
    ("scipy_gpd_fit", scipy_gpd_fit, Y, "y"),
    ("gev_fit", gev_fit, MAXIMA, "maxima"),
    ("tail_fits", tail_fits, TAILS, "tails"),
    ("tail_aic_fit", tail_aic_fit, NEG, "neg"),
    ("tail_aic_fits", tail_aic_fits, np.stack([NEG, NEG[::-1]]), "neg_rows"),
    ("tlambda_loglik", lambda a: tlambda_loglik(a, 0.3), CAND, "cand"),
    ("link_select", lambda a: link_select(a, n_grid=5), CAND, "cand"),
    ("candidates_from_similarity", lambda a: candidates_from_similarity(a, (np.arange(8) + 4) % 8), SQ, "S"),
    ("two_view_link_candidates z1", lambda a: two_view_link_candidates(a, EMB[4:]), EMB[:4], "z1"),
    ("two_view_link_candidates z2", lambda a: two_view_link_candidates(EMB[:4], a), EMB[4:], "z2"),
    ("softmax_link_mle v", lambda a: softmax_link_mle([0.5, 0.6], a), np.array([0.15, 0.45, 0.7, 0.9]), "v"),
    (
        "softmax_link_mle target_mean",
        lambda a: softmax_link_mle(a, [0.15, 0.45, 0.7, 0.9]),
        np.array([0.5, 0.6]),
        "target_mean",
    ),
    ("noise_floor_theory", noise_floor_theory, np.array([0.15, 0.45, 0.7, 0.9]), "scores"),
]
IDS = [c[0] for c in EVT_CASES]


def _same(a, b):
    if dataclasses.is_dataclass(a):
        return all(_same(getattr(a, f.name), getattr(b, f.name)) for f in dataclasses.fields(a))
    if isinstance(a, pd.DataFrame):
        return a.equals(b)
    if isinstance(a, tuple):
        return all(_same(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, np.ndarray):
        return np.array_equal(a, b, equal_nan=True)
    return a == b or (isinstance(a, float) and math.isnan(a) and math.isnan(b))


def _with(valid, value):
    bad = valid.astype(np.float64).copy()
    bad.reshape(-1)[bad.size // 2] = value
    return bad


@pytest.mark.parametrize("value", [math.nan, math.inf, -math.inf])
@pytest.mark.parametrize("fn,valid,name", [c[1:] for c in EVT_CASES], ids=IDS)
def test_evt_non_finite_raise_naming_the_argument(fn, valid, name, value):
    bad = _with(valid, value)
    for arg in (bad, torch.from_numpy(bad)):
        with pytest.raises(ValueError, match=rf"^{name} must be finite"):
            fn(arg)


@pytest.mark.parametrize("fn,valid,name", [c[1:] for c in EVT_CASES], ids=IDS)
def test_evt_meta_tensors_raise_naming_the_argument(fn, valid, name):
    with pytest.raises(ValueError, match=rf"^{name} is a meta tensor"):
        fn(torch.from_numpy(np.ascontiguousarray(valid)).to("meta"))


@pytest.mark.parametrize("fn,valid,name", [c[1:] for c in EVT_CASES], ids=IDS)
def test_evt_tensors_equal_float64_numpy(fn, valid, name):
    want = fn(np.ascontiguousarray(valid))
    assert _same(fn(torch.from_numpy(np.ascontiguousarray(valid))), want)  # float64 tensor
    as32 = torch.from_numpy(np.ascontiguousarray(valid)).float()
    assert _same(fn(as32), fn(as32.double().numpy()))  # float32 tensor -> its float64 values
    if name != "cand":  # for cand a list means a list of candidate arrays
        assert _same(fn(valid.tolist()), want)  # nested sequences too


def test_cand_lists_name_the_item():
    with pytest.raises(ValueError, match=r"^cand\[1\] must be finite"):
        link_select([CAND, _with(CAND, math.nan)], n_grid=5)
    with pytest.raises(ValueError, match=r"^cand\[0\] is a meta tensor"):
        tlambda_loglik([torch.from_numpy(CAND).to("meta")], 0.2)


def test_candidates_from_similarity_index_and_mask_rules():
    pos = (np.arange(8) + 4) % 8
    with pytest.raises(ValueError, match="^positives is a meta tensor"):
        candidates_from_similarity(SQ, torch.from_numpy(pos).to("meta"))
    with pytest.raises(ValueError, match="^positives must hold integers"):
        candidates_from_similarity(SQ, pos.astype(float))
    assert np.array_equal(
        candidates_from_similarity(SQ, torch.from_numpy(pos)), candidates_from_similarity(SQ, pos)
    )
    mask = np.ones((8, 8), dtype=bool)
    mask[np.arange(8), pos] = False
    mask[np.arange(8), np.arange(8)] = False
    with pytest.raises(ValueError, match="^negatives is a meta tensor"):
        candidates_from_similarity(SQ, pos, torch.from_numpy(mask).to("meta"))
    assert np.array_equal(
        candidates_from_similarity(SQ, pos, torch.from_numpy(mask)), candidates_from_similarity(SQ, pos)
    )


def test_complex_and_non_numeric_inputs_are_rejected():
    with pytest.raises(ValueError, match="^y must be real"):
        fit_gpd(Y.astype(complex))
    with pytest.raises(ValueError, match="^y must be real"):
        fit_gpd(torch.from_numpy(Y.astype(complex)))
    with pytest.raises(ValueError, match="^scores must be a numeric array"):
        pot_fit(["a", "b"])


def test_zero_rows_are_accepted_as_before():
    # a zero embedding has cosine 0 with everything: allowed (it is finite), and not mistaken for
    # an overflowing row by the fast check on the Gram diagonal
    z1 = Z1.clone()
    z1[2] = 0.0
    want = weince_loss(z1, Z2, check_inputs=False)
    assert torch.isfinite(want) and torch.equal(weince_loss(z1, Z2), want)
    z = torch.cat([z1, Z2])
    assert torch.equal(weince_label_loss(z, LABELS), weince_label_loss(z, LABELS, check_inputs=False))
    assert torch.isfinite(weince_label_loss(z, LABELS, normalize=False))


def test_unnormalised_label_loss_checks_the_squared_norm():
    z = torch.cat([Z1, Z2])
    with pytest.raises(ValueError, match="^z has a row whose norm overflows"):
        weince_label_loss(z * 1e19, LABELS, normalize=False)  # |z|^2 overflows float32
