"""Where an episode's torch generators start (``lerobot.seeding``): where ``torch.manual_seed(s)``
and building the policy leave them, as in ``lerobot-eval --seed=s``, reproduced from the build's
recorded draws without building again, and carried per episode without touching the process's.

Plain torch modules stand in for a policy here (the real ones: ``test_lerobot_batched.py``)."""

from __future__ import annotations

import torch
from torch import nn

from pytest_vlaeval.lerobot.seeding import BuildDraws

SEEDS = (1200, 1201, 7)


def build_policy() -> nn.Module:
    """Draws of the kinds a policy's build makes: uniform fills (Linear, Conv2d), normal fills of 16
    elements and more and of fewer (an Embedding of 3 x 5: torch keeps the second sample of a pair
    for the next one), a randn parameter, and a fill of a non-contiguous view."""
    model = nn.Sequential(nn.Conv2d(3, 8, 3), nn.Linear(8, 4), nn.Embedding(3, 5), nn.Embedding(40, 4))
    model.extra = nn.Parameter(torch.randn(5, 7))
    with torch.no_grad():
        nn.init.normal_(model[1].weight.t())
    return model


def reseeding_build() -> nn.Module:
    """A build that seeds torch itself half-way: its draws alone do not say where it leaves it."""
    model = nn.Linear(4, 4)
    torch.manual_seed(99)
    nn.init.uniform_(model.weight)
    return model


def built_under(seed: int, build) -> tuple[torch.Tensor, torch.Tensor]:
    """What ``lerobot-eval --seed=SEED`` has: the state after seeding and building, and its first draw."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        build()
        return torch.get_rng_state(), torch.randn(8)


def test_replaying_the_builds_draws_leaves_torch_where_building_does() -> None:
    before = torch.get_rng_state()
    model, draws = BuildDraws.record(build_policy)
    assert isinstance(model, nn.Sequential) and draws.replayed
    for seed in SEEDS:
        state, first = built_under(seed, build_policy)
        assert torch.equal(draws.states(seed)[0], state), seed
        with draws.episode(seed).installed():
            assert torch.equal(torch.randn(8), first), seed
    assert torch.equal(torch.get_rng_state(), before), "recording and replaying left the process's generator alone"


def test_a_build_that_seeds_torch_itself_is_built_again_per_episode() -> None:
    _, draws = BuildDraws.record(reseeding_build)
    assert not draws.replayed
    for seed in SEEDS:
        assert torch.equal(draws.states(seed)[0], built_under(seed, reseeding_build)[0]), seed


def test_an_episode_carries_its_own_generator_between_calls() -> None:
    """Its draws go on from where its last call left them, whatever the process drew in between,
    and as a generator object (batched inference) they go on the same."""
    _, draws = BuildDraws.record(build_policy)
    episode, twin = draws.episode(1200), draws.episode(1200)
    with episode.installed():
        first = torch.randn(4)
    torch.rand(100)  # the process, or another episode, draws in between
    before = torch.get_rng_state()
    with episode.installed():
        second = torch.randn(4)
    assert torch.equal(torch.get_rng_state(), before)
    with twin.installed():
        assert torch.equal(torch.randn(4), first)
    generator = twin.generator(torch.device("cpu"))
    assert torch.equal(torch.randn(4, generator=generator), second)
    twin.keep(generator)
    with episode.installed(), torch.random.fork_rng(devices=[]):
        expected = torch.randn(4)
    with twin.installed():
        assert torch.equal(torch.randn(4), expected)
    assert not torch.equal(first, second)
    assert not torch.equal(draws.episode(1201).cpu, draws.episode(1200).cpu)
