"""Checking an example's result against torch, and reporting what did not match."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import asdict, dataclass

import torch

from . import tables

__all__ = ["Mismatch", "compare", "print_mismatches"]


@dataclass(frozen=True)
class Mismatch:
    """Where ``got`` differed from torch's ``expected`` on ``rank``: the first bad element and how many were bad."""

    rank: int
    what: str
    index: tuple[int, ...]
    expected: float | int | bool
    got: float | int | bool
    count: int
    numel: int

    def __str__(self) -> str:
        return (
            f"rank {self.rank}: {self.what}: {self.count} of {self.numel} elements differ from torch; "
            f"first at index {list(self.index)}: expected {self.expected}, got {self.got}"
        )


def compare(got: torch.Tensor, expected: torch.Tensor, *, rank: int, what: str, rtol: float = 0.0,
            atol: float = 0.0) -> Mismatch | None:  # fmt: skip
    """None when ``got`` matches ``expected`` (exactly, unless tolerances are given), else the ``Mismatch``.

    Shapes must agree (a shape difference is a mismatch too); NaN matches NaN.
    """
    got_c, exp_c = got.detach().cpu(), expected.detach().cpu()
    if got_c.shape != exp_c.shape:
        return Mismatch(rank, f"{what} (shape)", (), str(tuple(exp_c.shape)), str(tuple(got_c.shape)), 1, 1)
    if rtol == 0.0 and atol == 0.0:
        bad = got_c != exp_c
        if got_c.is_floating_point():
            bad &= ~(got_c.isnan() & exp_c.isnan())
    else:
        bad = ~torch.isclose(got_c.to(torch.float64), exp_c.to(torch.float64), rtol=rtol, atol=atol, equal_nan=True)
    count = int(bad.sum())
    if count == 0:
        return None
    index = tuple(int(i) for i in bad.nonzero()[0])
    return Mismatch(rank, what, index, exp_c[index].item(), got_c[index].item(), count, got_c.numel())


def print_mismatches(mismatches: Iterable[Mismatch]) -> int:
    """Print the mismatches as a table (nothing when there are none); the number printed."""
    rows = [asdict(m) for m in mismatches]
    if rows:
        tables.print_table(
            "MISMATCHES against torch",
            rows,
            [("rank", "rank", "d"), ("what", "what", ""), ("index", "first bad index", lambda i: str(list(i))),
             ("expected", "expected", ""), ("got", "got", ""), ("count", "bad elements", "d"), ("numel", "of", "d")],
        )  # fmt: skip
    return len(rows)
