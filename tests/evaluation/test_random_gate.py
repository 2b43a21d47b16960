"""The random gate re-decodes exactly round(share x problems) problems: a seeded choice of that
many, the same problems whatever order they are shown in."""

from __future__ import annotations

import pytest
import torch

from decoding_adapters.evaluation.draft import RandomGate
from decoding_adapters.policies.draft import KEEP_DRAFT


def _uniform(problems: int, seed: int) -> torch.Tensor:
    return torch.rand(problems, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)


@pytest.mark.parametrize("share,problems,expected", [(0.345, 200, 69), (0.35, 200, 70), (0.37, 600, 222),
                                                     (0.0, 50, 0), (1.0, 50, 50), (0.5, 7, 4)])
def test_exactly_the_share(share, problems, expected):
    for seed in range(5):  # a Bernoulli gate would miss the count on most seeds
        choice, probs = RandomGate(share).choose(None, None, deterministic=False, uniform=_uniform(problems, seed))
        assert int((choice != KEEP_DRAFT).sum()) == expected
        assert probs.shape == (problems, 2)


def test_the_choice_is_the_smallest_uniforms_and_follows_the_problems_not_their_order():
    u = _uniform(100, 1)
    choice, _ = RandomGate(0.3).choose(None, None, uniform=u)
    chosen = set(torch.nonzero(choice != KEEP_DRAFT).flatten().tolist())
    assert chosen == set(torch.topk(u, 30, largest=False).indices.tolist())
    perm = torch.randperm(100, generator=torch.Generator().manual_seed(2))
    shuffled, _ = RandomGate(0.3).choose(None, None, uniform=u[perm])
    assert {int(perm[i]) for i in torch.nonzero(shuffled != KEEP_DRAFT).flatten().tolist()} == chosen
    other, _ = RandomGate(0.3).choose(None, None, uniform=_uniform(100, 3))
    assert not torch.equal(other, choice)  # another seed's uniforms choose other problems


def test_needs_uniforms():
    with pytest.raises(ValueError):
        RandomGate(0.3).choose(None, None)
