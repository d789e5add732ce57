"""Importing iris.mem.triton changes nothing for code that does not use it; its interpreter fixes
apply inside ``iris.mem.triton.interpret()`` only, and leaving it restores everything.

Each check runs in a fresh interpreter (this file run as a script, or iris.testing.side_effects),
with TRITON_INTERPRET set before triton is imported.
"""

import sys

import torch

from iris.testing import side_effects
from iris.testing.side_effects import expect_restored, nested_kernel, range_kernel, snapshot

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
def test_a_launch_in_the_scope_patches_the_language_once():
    """Triton's interpreter patches triton.language anew at every device-function call; inside
    the scope a launch patches it once (and restores it at its end), with the same results."""
    from triton.runtime import interpreter

    import iris.mem.triton as imt

    original, calls = interpreter._patch_lang, []

    def counted(fn):
        calls.append(fn)
        return original(fn)

    interpreter._patch_lang = counted  # Triton's own, counted: the scope wraps what it finds
    try:
        before = snapshot()
        plain, scoped = torch.zeros(8, dtype=torch.int32), torch.zeros(8, dtype=torch.int32)
        nested_kernel[(2,)](plain)
        assert len(calls) > 2, f"the interpreter no longer patches at each device-function call ({len(calls)})"
        calls.clear()
        with imt.interpret():
            nested_kernel[(2,)](scoped)
            assert len(calls) == 1, f"a launch inside the scope patched the language {len(calls)} times"
            nested_kernel[(2,)](scoped)  # the next launch patches again: the first one restored
            assert len(calls) == 2, calls
        assert plain.tolist() == scoped.tolist() == [0, 9, 18, 27] * 2, (plain, scoped)
        expect_restored(before, "a launch inside iris.mem.triton.interpret()")
        assert interpreter._patch_lang is counted
    finally:
        interpreter._patch_lang = original


@side_effects.in_a_fresh_interpreter()
def test_the_release_differences_come_from_iris_mem_common():
    import iris.heap
    import iris.mem.triton as imt

    compat = sys.modules["iris.mem.common"]  # imported by the layer, not by this check
    assert compat.SCALAR_INDEX in imt.interpret.patches
    assert compat.ONE_PATCH_PER_LAUNCH in imt.interpret.patches
    assert iris.heap.CONTEXT_ABI_VERSION == imt.CONTEXT_ABI_VERSION


if __name__ == "__main__":
    side_effects.main(globals())
