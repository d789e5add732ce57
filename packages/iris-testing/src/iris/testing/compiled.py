"""What the torch.compile tests of the collectives and the fused operations check alike: a
compiled result bit for bit against eager, and a function that compiles into one graph holding a
given number of ``torch.ops.iris`` calls."""

from __future__ import annotations

import torch
import torch._dynamo  # explain

__all__ = ["same_bits", "one_graph"]


def same_bits(got: torch.Tensor, want: torch.Tensor, what: str) -> None:
    """``got`` has ``want``'s dtype, shape and bits; ``what`` names it in the failure."""
    assert got.dtype == want.dtype and got.shape == want.shape, (what, got.dtype, got.shape, want.shape)
    assert torch.equal(got, want), f"{what}: compiled and eager differ (max |diff| {(got - want).abs().max().item()})"


def one_graph(fn, *args, calls: int, **kwargs) -> int:
    """``fn(*args, **kwargs)`` traced by dynamo: no graph break, and ``calls`` calls of
    ``torch.ops.iris`` ops in its graphs' code; the break count (0)."""
    explained = torch._dynamo.explain(fn)(*args, **kwargs)
    assert explained.graph_break_count == 0, explained.break_reasons
    code = "".join(g.code for g in explained.graphs)
    assert code.count("torch.ops.iris.") == calls, code
    return explained.graph_break_count
