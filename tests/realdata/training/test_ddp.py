"""DDP with 2 gloo processes equals one process on the concatenated batch (loss and gradients).

Each case: a tiny linear encoder (no batch norm, so the per-rank statistics question does not
arise) maps a fixed global batch to embeddings; one process computes the loss of the whole
batch with the objective of :mod:`realdata.training.objective` (which calls ``theory`` directly); two spawned
gloo processes each take half the batch, wrap the encoder in DDP and compute the objective over the
gathered global batch. Their reported loss and DDP-averaged gradients must equal the single
process's. Also, in one process (fast, no spawn): the rule the local mode relies on, that the
theory losses' parts over this rank's ``anchors`` add up over the ranks to the loss of the batch.
"""

from __future__ import annotations

import os
import socket
import tempfile

import pytest
import torch
import torch.multiprocessing as mp

from realdata.training.distributed import World
from realdata.training.objective import LossSpec, build_loss

CASES = {
    "hscl_expectation": LossSpec("HSCL", beta=5.0, tau=1.0, estimator="expectation"),
    "hscl_sampled": LossSpec("HSCL", beta=5.0, tau=1.0, estimator="sampled", num_negatives=16),
    "hucl_expectation": LossSpec("HUCL", beta=2.0, tau=1.0, estimator="expectation"),
    "hucl_sampled": LossSpec("HUCL", beta=2.0, tau=1.0, estimator="sampled", num_negatives=16),
    "scl_simclr": LossSpec("SCL", views="simclr", estimator="expectation"),
    "hucl_simclr_sampled": LossSpec("HUCL", beta=5.0, views="simclr", estimator="sampled", num_negatives=8),
    "infonce": LossSpec("InfoNCE", tau=0.5, views="simclr"),
    "weince": LossSpec("WeiNCE", tau=0.5, views="simclr"),
    "weince_released": LossSpec("WeiNCE", tau=0.5, views="simclr", recipe="released"),
}
B, D_IN, D = 24, 6, 5  # global batch (pairs for two views), input dim, embedding dim


def _data(dtype=torch.float64):
    g = torch.Generator().manual_seed(7)
    x1 = torch.randn(B, D_IN, generator=g, dtype=dtype)
    x2 = x1 + 0.3 * torch.randn(B, D_IN, generator=g, dtype=dtype)
    y = torch.randint(0, 4, (B,), generator=g)
    return x1, x2, y


def _encoder(dtype=torch.float64) -> torch.nn.Module:
    torch.manual_seed(3)
    return torch.nn.Linear(D_IN, D, bias=False).to(dtype)


def _embed(enc, x):
    z = enc(x)
    return z / torch.linalg.vector_norm(z, dim=1, keepdim=True).clamp_min(1.0)  # unit ball


def _run(spec: LossSpec, world: World, x1, x2, y, steps: int = 2):
    """``steps`` optimisation-free evaluations; returns the losses and the gradients of each."""
    enc = _encoder()
    model = enc
    if world.distributed:
        from torch.nn.parallel import DistributedDataParallel

        model = DistributedDataParallel(enc)
    obj = build_loss(spec, world)
    gen = torch.Generator().manual_seed(11)  # shared: same seed on every rank
    out = []
    n = B // world.size
    sl = slice(world.rank * n, (world.rank + 1) * n)
    for _ in range(steps):
        enc.zero_grad()
        z1 = _embed(model, x1[sl])
        z2 = _embed(model, x2[sl]) if spec.views == "simclr" else None
        res = obj(z1, z2, y[sl], gen)
        res.loss.backward()
        out.append((float(res.value), enc.weight.grad.detach().clone()))
    return out


def _worker(rank: int, world_size: int, port: int, path: str) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.set_num_threads(1)
    torch.distributed.init_process_group("gloo", rank=rank, world_size=world_size)
    try:
        world = World(rank, world_size)
        x1, x2, y = _data()
        results = {name: _run(spec, world, x1, x2, y) for name, spec in CASES.items()}
        if rank == 0:
            torch.save(results, path)
    finally:
        torch.distributed.destroy_process_group()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


_NETWORK = ("address already in use", "eaddrinuse", "connection", "timed out", "timeout")


def _spawn(fn, *args) -> None:
    """``mp.spawn`` on 2 processes with a fresh port; retried (3 attempts) when the rendezvous itself
    fails (another process took the port between its choice and the bind, as when other suites run
    on the same machine: not a failure of the code)."""
    attempts = 3
    for attempt in range(attempts):
        try:
            mp.spawn(fn, args=(2, _free_port(), *args), nprocs=2, join=True)
            return
        except mp.ProcessRaisedException as exc:
            if attempt == attempts - 1 or not any(w in str(exc).lower() for w in _NETWORK):
                raise


@pytest.fixture(scope="module")
def ddp_results():
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "out.pt")
        _spawn(_worker, path)
        return torch.load(path, weights_only=False)


@pytest.mark.parametrize("name", list(CASES))
def test_ddp_equals_single_process(ddp_results, name):
    x1, x2, y = _data()
    single = _run(CASES[name], World(), x1, x2, y)
    for (l1, g1), (l2, g2) in zip(single, ddp_results[name]):
        assert l2 == pytest.approx(l1, rel=1e-10, abs=1e-12)
        torch.testing.assert_close(g2, g1, rtol=1e-8, atol=1e-10)


def test_sampled_draws_differ_between_steps(ddp_results):
    (l1, _), (l2, _) = ddp_results["hscl_sampled"]
    assert l1 != l2  # the shared generator advances: two steps draw different negatives


def _rank_anchors(rank: int, world_size: int, two_views: bool) -> torch.Tensor:
    """The anchors of ``rank`` in the gathered batch, as the objective's local mode chooses them."""
    n = B // world_size
    mine = torch.arange(rank * n, (rank + 1) * n)
    return torch.cat([mine, mine + B]) if two_views else mine


@pytest.mark.parametrize("world_size", [2, 3])
@pytest.mark.parametrize("two_views", [False, True])
@pytest.mark.parametrize("setting", ["supervised", "unsupervised"])
@pytest.mark.parametrize("estimator", ["expectation", "sampled"])
def test_hcl_rank_parts_add_up_to_theory(world_size, two_views, setting, estimator):
    """contrastive_loss with each rank's anchors, summed over the ranks, is the loss of the batch."""
    from theory.hcl import contrastive_loss

    x1, x2, y = _data()
    enc = _encoder()
    z = _embed(enc, x1).detach()
    labels, groups = y, None
    if two_views:
        z = torch.cat([z, _embed(enc, x2).detach()])
        labels = torch.cat([y, y])
        groups = torch.arange(B).repeat(2) if setting == "unsupervised" else None
    kw = dict(setting=setting, beta=3.0, estimator=estimator, num_negatives=12, positive_groups=groups)
    z_full = z.clone().requires_grad_(True)
    full = contrastive_loss(z_full, labels, generator=torch.Generator().manual_seed(5), **kw)
    full.backward()
    z_parts = z.clone().requires_grad_(True)
    parts = [
        contrastive_loss(
            z_parts,
            labels,
            anchors=_rank_anchors(r, world_size, two_views),
            generator=torch.Generator().manual_seed(5),  # the shared generator: same state on every rank
            **kw,
        )
        for r in range(world_size)
    ]
    total = sum(parts)
    total.backward()
    assert float(total.detach()) == pytest.approx(float(full.detach()), rel=1e-12)
    torch.testing.assert_close(z_parts.grad, z_full.grad, rtol=1e-10, atol=1e-13)


@pytest.mark.parametrize("world_size", [2, 3])
def test_two_view_rank_parts_add_up_to_theory(world_size):
    """info_nce / weince_loss with each rank's anchors (and WeiNCE's gathered rho) sum to the loss."""
    from theory.infonce import info_nce
    from theory.weince import weince_loss

    x1, x2, _ = _data()
    enc = _encoder()
    z1, z2 = enc(x1).detach(), enc(x2).detach()
    ranks = [_rank_anchors(r, world_size, True) for r in range(world_size)]
    # what World.gather_nograd returns: every rank's rho of its anchors, concatenated in rank order
    rho = [weince_loss(z1, z2, tau=0.5, anchors=a, return_diagnostics=True)[1].rho.double() for a in ranks]

    def gather(r: int):
        def fn(mine: torch.Tensor) -> torch.Tensor:
            torch.testing.assert_close(mine, rho[r])
            return torch.cat(rho)

        return fn

    for name, full, part in (
        ("InfoNCE", info_nce(z1, z2, tau=0.5), lambda r: info_nce(z1, z2, tau=0.5, anchors=ranks[r])),
        (
            "WeiNCE",
            weince_loss(z1, z2, tau=0.5),
            lambda r: weince_loss(z1, z2, tau=0.5, anchors=ranks[r], gather=gather(r)),
        ),
    ):
        total = sum(part(r) for r in range(world_size))
        assert float(total) == pytest.approx(float(full), rel=1e-12), name


def test_supervised_single_class_part_raises():
    """A rank whose anchors are fine still raises when the gathered batch has a single class (as
    every rank then does: no rank is left waiting in a collective)."""
    from theory.hcl import contrastive_loss

    z = torch.randn(6, 3, dtype=torch.float64)
    with pytest.raises(ValueError, match="empty negative set"):
        contrastive_loss(
            z, torch.zeros(6, dtype=torch.long), setting="supervised", beta=1.0, anchors=torch.arange(3)
        )


# ------------------------------------------------------------------ the training loop under DDP


def _train_worker(rank: int, world_size: int, port: int, folder: str) -> None:
    import dataclasses

    from realdata.datasets import ImageSplit, load_digits_dataset
    from realdata.training.config import TrainConfig
    from realdata.training.distributed import close_world, init_world
    from realdata.training.loop import RunOptions, train_run

    os.environ.update(
        MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank), WORLD_SIZE=str(world_size)
    )
    torch.set_num_threads(1)
    world, _ = init_world("cpu")
    try:
        d = load_digits_dataset()
        d = dataclasses.replace(d, train=ImageSplit(d.train.images[:256], d.train.labels[:256]),
                                test=ImageSplit(d.test.images[:64], d.test.labels[:64]))  # fmt: skip
        for cfg in (
            TrainConfig(
                method="HSCL", beta=5.0, num_negatives=8, arch="smallcnn", width=4, batch_size=64, epochs=3
            ),
            TrainConfig(
                method="WeiNCE", arch="smallcnn", width=4, batch_size=32, epochs=3, crop_min_scale=0.5
            ),
        ):
            kw = dict(checkpoint_every=1, progress=False)
            train_run(cfg, RunOptions(results=f"{folder}/a", **kw), world=world, dataset=d)
            train_run(cfg, RunOptions(results=f"{folder}/b", stop_after=1, **kw), world=world, dataset=d)
            train_run(cfg, RunOptions(results=f"{folder}/b", resume=True, **kw), world=world, dataset=d)
    finally:
        close_world(world)


def test_training_loop_under_ddp_resumes_exactly(tmp_path):
    import pandas as pd

    from realdata.training import store

    _spawn(_train_worker, str(tmp_path))
    a, b = store.load(tmp_path / "a"), store.load(tmp_path / "b")
    assert a["run_key"].nunique() == 2 and len(a) == 8  # epochs 0-3 of two runs
    timing = ["epoch_seconds", "views_per_second"]
    pd.testing.assert_frame_equal(a.drop(columns=timing), b.drop(columns=timing), check_exact=True)
    assert bool(a["loss"].isna().eq(a["epoch"] == 0).all()) and bool(a["ncm_acc"].notna().all())
