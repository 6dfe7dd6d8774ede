"""Numeric assertions that say how far off a result was, and tolerances derived from the arithmetic.

Every failure message carries torch's report (the greatest absolute and relative difference and
where), prefixed with what was compared: "src_embed.weight: Tensor-likes are not close! ...".

Tolerances for results that sum the same terms in another order (two ranks against one process, a
compiled kernel against an eager one, another CPU's vector width) come from the standard bound on
reordered floating-point sums: reordering a sum of n terms moves it by at most about n * u times the
sum of the terms' magnitudes, where u is the unit roundoff (2**-24 in fp32). Exact results (a resume,
a checkpoint round trip) are compared exactly, and still report the largest difference.
"""

from __future__ import annotations

import torch

FP32_UNIT_ROUNDOFF = 2.0**-24


def reordered_sum_tolerance(terms: int, scale: float) -> float:
    """The worst-case change of a float32 sum of `terms` terms whose magnitudes add up to about
    `scale` when the terms are added in another order."""
    return terms * FP32_UNIT_ROUNDOFF * scale


def assert_close(actual: torch.Tensor, expected: torch.Tensor, name: str, *, atol: float, rtol: float = 0.0) -> None:
    torch.testing.assert_close(actual, expected, atol=atol, rtol=rtol, msg=lambda report: f"{name}: {report}")


def assert_equal(actual: torch.Tensor, expected: torch.Tensor, name: str) -> None:
    """Bitwise the same values and dtype; a failure reports the largest difference."""
    assert actual.dtype == expected.dtype, f"{name}: dtype {actual.dtype} != {expected.dtype}"
    torch.testing.assert_close(actual, expected, atol=0.0, rtol=0.0, equal_nan=True, msg=lambda r: f"{name}: {r}")
