"""Importing iris.mem.triton changes nothing for code that does not use it; its interpreter fixes
apply inside ``iris.mem.triton.interpret()`` only, and leaving it restores everything.

Each check runs in a fresh interpreter (this file run as a script, or iris.testing.side_effects),
with TRITON_INTERPRET set before triton is imported.
"""

import sys

import torch

from iris.testing import side_effects
from iris.testing.side_effects import expect_restored, range_kernel, snapshot

test_importing_the_layer_changes_nothing_for_plain_kernels = side_effects.import_test("iris.mem.triton")


# -- each test's body runs in a fresh interpreter (this file run as a script) -----------------------


@side_effects.in_a_fresh_interpreter()
def test_the_scope_fixes_the_interpreter_and_restores_it():
    from triton.runtime import interpreter

    import iris.mem.triton as imt

    before = snapshot()
    out = torch.zeros(4, dtype=torch.int32)
    for _ in range(2):  # the second time with the fix cached
        with imt.interpret():
            range_kernel[(1,)](out, torch.tensor([4], dtype=torch.int32))
        assert out.tolist() == [0, 3, 6, 9], out
        expect_restored(before, "leaving iris.mem.triton.interpret()")
    side_effects.expect_restored_after_an_exception(imt.interpret, before)
    assert interpreter._patch_lang_tensor is before[("triton.runtime.interpreter", "_patch_lang_tensor")]


@side_effects.in_a_fresh_interpreter()
def test_the_release_differences_come_from_iris_mem_common():
    import iris.heap
    import iris.mem.triton as imt

    compat = sys.modules["iris.mem.common"]  # imported by the layer, not by this check
    assert compat.SCALAR_INDEX in imt.interpret.patches
    assert iris.heap.CONTEXT_ABI_VERSION == imt.CONTEXT_ABI_VERSION


if __name__ == "__main__":
    side_effects.main(globals())
