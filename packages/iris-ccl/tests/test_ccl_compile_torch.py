"""torch.compile support: every collective is a ``torch.ops.iris`` op with a fake implementation.

Code calling ``iris.ccl`` compiles with ``fullgraph=True`` (no graph break) and gives the eager
call's bits (``aot_eager`` on CPU ranks); eager calls never go through the ops; importing the layer
registers them and imports nothing of torch's compiler.
"""

import json
import subprocess
import sys

import _ccl_torch_compile
import pytest

OPS = ("all_reduce", "all_gather", "reduce_scatter", "all_to_all", "broadcast", "barrier")


@pytest.mark.parametrize("world_size", [2, 3])
def test_compiled_collectives_have_no_graph_break_and_match_eager_bitwise(world, backend, world_size):
    assert world.run(_ccl_torch_compile.compiled_collectives_match_eager, world_size, backend) == [0] * world_size


def test_importing_the_layer_registers_its_ops_and_imports_no_compiler():
    """``import iris.ccl`` registers ``torch.ops.iris.<collective>`` for every collective and
    leaves ``torch._dynamo`` unimported (``iris.ccl.heap_handles`` is imported only while tracing)."""
    code = (
        "import json, sys, torch, iris.ccl\n"
        "dynamo = 'torch._dynamo' in sys.modules\n"
        f"ops = {{name: str(getattr(torch.ops.iris, name).default._schema) for name in {OPS!r}}}\n"
        "print(json.dumps({'dynamo': dynamo, 'ops': ops}))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    seen = json.loads(done.stdout.strip().splitlines()[-1])
    assert not seen["dynamo"], "import iris.ccl imported torch._dynamo"
    assert set(seen["ops"]) == set(OPS)
    assert seen["ops"]["all_reduce"].startswith("iris::all_reduce(Tensor(a!) tensor, str op, int heap, str variant")
