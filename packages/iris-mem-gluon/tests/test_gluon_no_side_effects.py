"""Importing iris.mem.gluon changes nothing for code that does not use it; CPU execution of Gluon
kernels happens inside ``iris.mem.gluon.interpret()`` only, and leaving it restores everything.

Each check runs in a fresh interpreter (this file run as a script), with TRITON_INTERPRET set as
the check needs before triton is imported, so that what the process had imported and patched
before is known.
"""

import torch
import triton
from triton.experimental import gluon
from triton.experimental.gluon import language as gl

from iris.testing import side_effects
from iris.testing.side_effects import changes, cpu_launch, expect_restored, snapshot

test_importing_the_layer_changes_nothing_for_plain_kernels = side_effects.import_test("iris.mem.gluon")


# -- each test's body runs in a fresh interpreter (this file run as a script) -----------------------


@gluon.jit
def increment_kernel(x_ptr, N: gl.constexpr):
    offs = gl.arange(0, N, layout=gl.BlockedLayout([1], [32], [4], [0]))
    gl.store(x_ptr + offs, gl.load(x_ptr + offs) + 1)


@gluon.jit
def _worker(x_ptr):
    pass


@gluon.jit
def warp_specialize_kernel(x_ptr, N: gl.constexpr):
    gl.warp_specialize([(_worker, (x_ptr,)), (_worker, (x_ptr,))], [4])  # unsupported on CPU: raises


@gluon.jit
def failing_kernel(x_ptr, N: gl.constexpr):
    offs = gl.arange(0, N, layout=gl.BlockedLayout([1], [32], [4], [0]))
    gl.store(x_ptr + offs, gl.load(x_ptr + offs) + 1)
    gl.static_assert(N < 0, "fails in the middle of the launch")


@side_effects.in_a_fresh_interpreter()
def test_the_scope_runs_gluon_on_cpu_and_restores_every_patched_attribute():
    from triton.experimental.gluon import _runtime
    from triton.experimental.gluon import language as gl

    import iris.mem.gluon as img

    before = snapshot()
    with img.interpret():
        inside = snapshot()
        assert "run" in vars(_runtime.GluonJITFunction), "kernel[grid] does not reach CPU execution"
        assert changes(before, inside), "interpret() patched nothing: the checks below would be vacuous"
        assert img.interpret.entered() and not img.interpret.active()
        assert cpu_launch(), "the plain kernel did not run on CPU inside interpret()"
        left = changes(inside, snapshot())
        assert not left, f"a CPU launch left the language patched inside the scope: {left}"
        assert getattr(gl.arange, "__triton_builtin__", False)
    assert not img.interpret.entered()
    expect_restored(before, "leaving interpret()")
    assert not cpu_launch(), "a plain Gluon kernel ran on CPU after interpret() was left"


@side_effects.in_a_fresh_interpreter()
def test_the_scope_is_restored_after_an_exception_inside_it():
    import iris.mem.gluon as img

    before = snapshot()
    side_effects.expect_restored_after_an_exception(img.interpret, before)

    @img.interpret()
    def host_code():
        raise KeyError("inside a decorated host function")

    try:
        host_code()
    except KeyError:
        pass
    expect_restored(before, "an exception raised by a function decorated with interpret()")

    x = torch.zeros(64)
    for kernel in (warp_specialize_kernel, failing_kernel):
        try:
            with img.interpret():
                kernel[(1,)](x, N=64)
        except Exception:  # noqa: BLE001 - any failure inside the launch
            pass
        else:
            raise AssertionError(f"{kernel.__name__} ran on CPU without an error")
        expect_restored(before, f"a failing CPU launch ({kernel.__name__})")
    assert not img.interpret.entered() and not img.interpret.active()
    assert not cpu_launch()


@side_effects.in_a_fresh_interpreter()
def test_the_scope_is_reentrant_and_restored_by_the_outermost_exit():
    import iris.mem.gluon as img

    before = snapshot()
    with img.interpret():
        inside = snapshot()
        with img.interpret():
            again = changes(inside, snapshot())
            assert not again, f"a nested interpret() patched again: {again}"
            assert cpu_launch()
        early = changes(inside, snapshot())
        assert not early, f"leaving a nested interpret() restored too early: {early}"
        assert cpu_launch(img.interpret), "a launch inside a nested scope of the same scope failed"
    expect_restored(before, "leaving nested interpret() scopes")


@side_effects.in_a_fresh_interpreter()
def test_a_marked_kernel_enters_the_scope_for_each_launch_only():

    import iris.mem.gluon as img

    before = snapshot()

    marked_kernel = img.interpret()(increment_kernel)
    assert marked_kernel is increment_kernel, "the decorator must return the kernel itself"
    expect_restored(before, "decorating a kernel with interpret()")
    x = torch.zeros(64)
    marked_kernel[(1,)](x, N=64)
    marked_kernel[(1,)](x, N=64)
    assert torch.equal(x, torch.full((64,), 2.0)), x
    expect_restored(before, "launches of a kernel marked with interpret()")
    assert not cpu_launch(), "marking one kernel made another run on CPU"


@side_effects.in_a_fresh_interpreter()
def test_the_scope_acts_for_the_threads_inside_it_only():
    import threading

    import iris.mem.gluon as img

    before = snapshot()
    entered, release, seen = threading.Event(), threading.Event(), {}

    def holder():
        with img.interpret():
            entered.set()
            release.wait(60)

    thread = threading.Thread(target=holder)
    thread.start()
    try:
        assert entered.wait(60)
        seen["entered"] = img.interpret.entered()
        seen["ran on CPU"] = cpu_launch()  # this thread is outside: Gluon as without Iris
    finally:
        release.set()
        thread.join(60)
    assert seen == {"entered": False, "ran on CPU": False}, seen
    expect_restored(before, "a scope held and left by another thread")


@side_effects.in_a_fresh_interpreter(interpret="0")
def test_without_the_interpreter_the_scope_changes_nothing():

    import iris.mem.gluon as img

    assert not triton.knobs.runtime.interpret
    before = snapshot()
    with img.interpret():
        expect_restored(before, "entering interpret() without TRITON_INTERPRET=1")

    kernel = increment_kernel
    assert img.interpret()(kernel) is kernel and "run" not in vars(kernel), "marking changed a compiled kernel"
    expect_restored(before, "interpret() without TRITON_INTERPRET=1")


@side_effects.in_a_fresh_interpreter()
def test_the_release_differences_come_from_iris_mem_common():
    import iris.heap
    import iris.mem.common as compat
    import iris.mem.gluon as img

    assert img.aggregate is compat.aggregate
    assert img.GluonASTSource is compat.gluon_ast_source()
    assert compat.SCALAR_INDEX in img.interpret.patches
    assert iris.heap.CONTEXT_ABI_VERSION == img.CONTEXT_ABI_VERSION


if __name__ == "__main__":
    side_effects.main(globals())
