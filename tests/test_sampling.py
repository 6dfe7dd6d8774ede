"""The sampling rule against independent computations: frequencies, the kept sets, the tempered distribution."""

from __future__ import annotations

import pytest
import torch

from seq2seq.config import UserError
from seq2seq.inference.sampling import SamplingRule

# Chi-square critical values at p = 0.001 (tables; the test fails by chance once in a thousand seeds,
# and the seed is fixed): a sampler off by a few percent on one token exceeds them by far at 40,000 draws.
CHI2_999 = {1: 10.83, 2: 13.82, 3: 16.27, 4: 18.47}
DRAWS = 40_000


def frequencies(rule: SamplingRule, probs: list[float], seed: int = 0) -> torch.Tensor:
    log_probs = torch.tensor([probs]).log().expand(DRAWS, -1)
    generator = torch.Generator().manual_seed(seed)
    tokens = rule.sample(log_probs, generator)
    return torch.bincount(tokens, minlength=len(probs)).double()


def chi_square(observed: torch.Tensor, expected_probs: list[float]) -> float:
    expected = torch.tensor(expected_probs, dtype=torch.double) * observed.sum()
    keep = expected > 0
    assert observed[~keep].sum() == 0, "a token outside the kept set was sampled"
    return float(((observed[keep] - expected[keep]) ** 2 / expected[keep]).sum())


P = [0.5, 0.25, 0.15, 0.07, 0.03]


def test_plain_sampling_matches_the_distribution() -> None:
    assert chi_square(frequencies(SamplingRule(), P), P) < CHI2_999[4]


def test_top_k_samples_the_renormalised_k_best() -> None:
    kept = [0.5 / 0.75, 0.25 / 0.75, 0, 0, 0]
    assert chi_square(frequencies(SamplingRule(top_k=2), P), kept) < CHI2_999[1]


def test_top_p_keeps_the_smallest_set_reaching_p() -> None:
    # By hand: 0.5 < 0.8, 0.5 + 0.25 = 0.75 < 0.8, + 0.15 = 0.9 >= 0.8: the first three tokens.
    total = 0.5 + 0.25 + 0.15
    kept = [0.5 / total, 0.25 / total, 0.15 / total, 0, 0]
    assert chi_square(frequencies(SamplingRule(top_p=0.8), P), kept) < CHI2_999[2]
    # Exactly reaching p stops there: 0.5 + 0.25 = 0.75.
    finite = SamplingRule(top_p=0.75).filter(torch.tensor([P]).log()).isfinite()
    assert finite.tolist() == [[True, True, False, False, False]]
    # A tiny p keeps the most likely token only.
    assert SamplingRule(top_p=1e-6).filter(torch.tensor([P]).log()).isfinite().sum() == 1


def test_temperature_reshapes_the_distribution_as_p_to_the_one_over_t() -> None:
    for temperature in (0.5, 2.0):
        powered = torch.tensor(P, dtype=torch.double) ** (1 / temperature)
        expected = (powered / powered.sum()).tolist()
        got = SamplingRule(temperature=temperature).filter(torch.tensor([P]).log()).softmax(-1)[0]
        assert got.tolist() == pytest.approx(expected, abs=1e-6)
        assert chi_square(frequencies(SamplingRule(temperature=temperature), P, seed=1), expected) < CHI2_999[4]


def test_top_k_one_is_the_argmax_on_every_row() -> None:
    log_probs = torch.randn(64, 100, generator=torch.Generator().manual_seed(0)).log_softmax(-1)
    tokens = SamplingRule(top_k=1).sample(log_probs, torch.Generator().manual_seed(3))
    assert torch.equal(tokens, log_probs.argmax(-1))


def test_a_seed_fixes_the_samples() -> None:
    log_probs = torch.randn(32, 50, generator=torch.Generator().manual_seed(0)).log_softmax(-1)
    rule = SamplingRule(temperature=0.8, top_p=0.9)
    first = rule.sample(log_probs, torch.Generator().manual_seed(7))
    assert torch.equal(first, rule.sample(log_probs, torch.Generator().manual_seed(7)))
    assert not torch.equal(first, rule.sample(log_probs, torch.Generator().manual_seed(8)))


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        (dict(temperature=0.0), r"^config error: temperature=0\.0: must be > 0 and finite$"),
        (dict(temperature=-1.0), r"^config error: temperature=-1\.0: must be > 0 and finite$"),
        (dict(temperature=float("inf")), r"^config error: temperature=inf: must be > 0 and finite$"),  # was NaN samples
        (dict(top_k="5"), r"^config error: top_k='5': must be an integer$"),
        (dict(top_p=0.0), r"^config error: top_p=0\.0: must be in \(0, 1\]$"),
        (dict(top_p=1.5), r"^config error: top_p=1\.5: must be in \(0, 1\]$"),
        (dict(top_k=-2), r"^config error: top_k=-2: must be >= 0"),
    ],
)
def test_bad_settings_are_one_line_naming_the_key(kwargs: dict, message: str) -> None:
    with pytest.raises(UserError, match=message):
        SamplingRule(**kwargs)
