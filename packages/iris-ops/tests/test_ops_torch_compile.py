"""torch.compile support: every fused operation is a ``torch.ops.iris`` op with a fake implementation.

Code calling ``iris.ops`` compiles with ``fullgraph=True`` (no graph break) and gives the eager
call's bits (``aot_eager`` on CPU ranks); eager calls never go through the ops.
"""

import importlib.util

import _ops_torch_compile
import pytest
import torch


@pytest.mark.parametrize(("world_size", "dtype"), [(2, torch.float32), (3, torch.bfloat16)], ids=["2-fp32", "3-bf16"])
def test_compiled_operations_have_no_graph_break_and_match_eager_bitwise(world, backend, world_size, dtype):
    if backend == "gluon" and importlib.util.find_spec("iris.ops._gluon_kernels") is None:
        pytest.skip("iris.ops has no gluon backend yet (iris/ops/_gluon_kernels.py is being written)")
    got = world.run(_ops_torch_compile.compiled_operations_match_eager, world_size, backend, dtype)
    assert got == [0] * world_size
