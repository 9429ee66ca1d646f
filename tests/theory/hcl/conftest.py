"""Fixtures of the compiled CPU kernels' tests: on torch's OpenMP team or serially."""

import pytest
import torch

from theory.hcl import _team


@pytest.fixture(params=["team", "serial"])
def threads(request, monkeypatch):
    """The compiled kernels on torch's OpenMP team (two threads; small sizes run serially anyway)
    or serially on the calling thread."""
    if request.param == "serial":
        monkeypatch.setattr(_team, "available", lambda: False)
        yield request.param
        return
    before = torch.get_num_threads()
    torch.set_num_threads(max(2, before))
    yield request.param
    torch.set_num_threads(before)


def _spy_on_team(monkeypatch):
    """A list that records what every _team.run call returned (True: it ran on the team)."""
    started, run = [], _team.run

    def spy(*args):
        started.append(run(*args))
        return started[-1]

    monkeypatch.setattr(_team, "run", spy)
    return started
