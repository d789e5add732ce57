"""torch.compile support: every fused operation is a ``torch.ops.iris`` op with a fake implementation.

Code calling ``iris.ops`` compiles with ``fullgraph=True`` (no graph break) and gives the eager
call's bits (``aot_eager``); on a GPU the MLP block is also compiled by inductor. Eager calls
never go through the ops.
"""

import _ops_torch_compile
import pytest
import torch


@pytest.mark.parametrize(("world_size", "dtype"), [(2, torch.float32), (3, torch.bfloat16)], ids=["2-fp32", "3-bf16"])
def test_compiled_operations_have_no_graph_break_and_match_eager_bitwise(world, backend, world_size, dtype):
    got = world.run(_ops_torch_compile.compiled_operations_match_eager, world_size, backend, dtype)
    assert got == [0] * world_size


@pytest.mark.parametrize(("world_size", "dtype"), [(2, torch.bfloat16)], ids=["2-bf16"])
def test_the_compiled_mlp_block_has_no_graph_break_and_matches_eager(world, backend, world_size, dtype):
    """aot_eager on CPU ranks (bitwise); aot_eager and inductor on a GPU."""
    counts = world.run(_ops_torch_compile.compiled_mlp_block_matches_eager, world_size, backend, dtype)
    assert len(set(counts)) == 1 and counts[0] >= 1, counts
