"""Importing iris.mem.gluon changes nothing for code that does not use it; CPU execution of Gluon
kernels happens inside ``iris.mem.gluon.interpret()`` only, and leaving it restores everything.

Each check runs in a fresh interpreter (this file run as a script), with TRITON_INTERPRET set as
the check needs before triton is imported, so that what the process had imported and patched
before is known.
"""

import inspect
import json
import os
import subprocess
import sys
import types
from pathlib import Path

import pytest
import torch
import triton
import triton.language as tl
from triton.experimental import gluon
from triton.experimental.gluon import language as gl

TESTS = Path(__file__).parent
IMPORTS = ["iris.mem.gluon", "iris.mem.triton", "iris.ccl"]


def _run(check, *args, interpret="1"):
    """``check(*args)`` of this file in a fresh interpreter; its last line of output (JSON)."""
    env = {**os.environ, "TRITON_INTERPRET": interpret}
    env["PYTHONPATH"] = os.pathsep.join([str(TESTS), *filter(None, [env.get("PYTHONPATH")])])
    done = subprocess.run(
        [sys.executable, __file__, check, *args], env=env, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, f"{check}{args} failed:\n{done.stdout[-2000:]}\n{done.stderr[-4000:]}"
    return json.loads(done.stdout.strip().splitlines()[-1])


# -- the tests ------------------------------------------------------------------------------------


@pytest.mark.parametrize("interpret", ["1", "0"], ids=["interpreted", "compiled"])
@pytest.mark.parametrize("module", IMPORTS)
def test_a_plain_kernel_behaves_the_same_with_and_without_the_import(module, interpret):
    """The same result, or the same error, for a Gluon kernel and a Triton kernel that know
    nothing of Iris. Compiled: run on the GPU where there is one, else the same launch error."""
    without = _run("plain_kernels", interpret=interpret)
    with_iris = _run("plain_kernels", module, interpret=interpret)
    assert with_iris == without


@pytest.mark.parametrize("module", IMPORTS)
def test_importing_patches_no_attribute_of_triton_or_gluon(module):
    _run("import_patches_nothing", module)


def test_the_scope_runs_gluon_on_cpu_and_restores_every_patched_attribute():
    _run("scope_restores")


def test_the_scope_is_restored_after_an_exception_inside_it():
    _run("scope_restores_after_exceptions")


def test_the_scope_is_reentrant_and_restored_by_the_outermost_exit():
    _run("scope_reentrant")


def test_a_marked_kernel_enters_the_scope_for_each_launch_only():
    _run("marked_kernel")


def test_the_scope_acts_for_the_threads_inside_it_only():
    _run("scope_per_thread")


def test_the_triton_layers_scope_restores_the_interpreter():
    _run("triton_scope_restores")


def test_without_the_interpreter_the_scope_changes_nothing():
    _run("no_interpreter", interpret="0")


def test_the_release_differences_live_in_one_module_that_imports_no_triton():
    _run("compat_in_one_place")
    code = "import sys, iris.heap, iris.heap._triton_compat; assert 'triton' not in sys.modules, sorted(sys.modules)"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, (
        f"importing iris.heap's Triton compatibility module imported triton:\n{done.stderr[-3000:]}"
    )


# -- the checks (run in the subprocess) -----------------------------------------------------------


@triton.jit
def range_kernel(out_ptr, n_ptr):
    n = tl.load(n_ptr)
    for i in range(n):  # a loaded scalar as a range bound (triton 3.6's interpreter refuses it)
        tl.store(out_ptr + i, i * 3)


@gluon.jit
def increment_kernel(x_ptr, N: gl.constexpr):
    offs = gl.arange(0, N, layout=gl.BlockedLayout([1], [32], [4], [0]))
    gl.store(x_ptr + offs, gl.load(x_ptr + offs) + 1)


@gluon.jit
def shared_memory_kernel(x_ptr, N: gl.constexpr):
    gl.allocate_shared_memory(gl.float32, [N], gl.SwizzledSharedLayout(1, 1, 1, [0]))


@gluon.jit
def failing_kernel(x_ptr, N: gl.constexpr):
    offs = gl.arange(0, N, layout=gl.BlockedLayout([1], [32], [4], [0]))
    gl.store(x_ptr + offs, gl.load(x_ptr + offs) + 1)
    gl.static_assert(N < 0, "fails in the middle of the launch")


def _outcome(launch):
    try:
        return {"result": launch()}
    except Exception as e:  # noqa: BLE001 - the error is the outcome compared
        return {"error": type(e).__name__, "message": str(e)}


def check_plain_kernels(*modules):
    import importlib

    import _gluon_plain_kernel as plain
    import triton
    from triton.experimental.gluon import language as gl

    for module in modules:  # after the kernels were decorated, as a user's code may do
        importlib.import_module(module)

    device = "cuda" if torch.cuda.is_available() and not triton.knobs.runtime.interpret else "cpu"

    def gluon_axpy():
        x = torch.arange(100.0, device=device)
        y = torch.ones(100, device=device)
        layout = gl.BlockedLayout(size_per_thread=[1], threads_per_warp=[32], warps_per_cta=[4], order=[0])
        plain.axpy_kernel[(2,)](x, y, 2.0, 100, BLOCK=64, L=layout)
        return y.cpu().tolist()

    def triton_range():
        out = torch.zeros(4, dtype=torch.int32, device=device)
        range_kernel[(1,)](out, torch.tensor([4], dtype=torch.int32, device=device))
        return out.cpu().tolist()

    return {"gluon": _outcome(gluon_axpy), "triton": _outcome(triton_range)}


def _patchable():
    """Every object whose attributes Iris (or Triton's interpreter) could replace."""
    import triton.language as tl
    from triton.experimental.gluon import _runtime
    from triton.experimental.gluon import language as gl
    from triton.runtime import interpreter, jit

    objects = {
        "GluonJITFunction": _runtime.GluonJITFunction,
        "JITFunction": jit.JITFunction,
        "KernelInterface": jit.KernelInterface,
        "InterpretedFunction": interpreter.InterpretedFunction,
        "triton.runtime.interpreter": interpreter,
        "triton.runtime.jit": jit,
        "tl": tl,
        "tl.core": tl.core,
        "tl.math": tl.math,
        "tl.tensor": tl.tensor,
    }
    stack = [gl]
    while stack:  # gl and every module below it (gl.nvidia.hopper.tma, gl.amd.cdna3, ...)
        module = stack.pop()
        if module.__name__ in objects:
            continue
        objects[module.__name__] = module
        stack.extend(
            v for v in vars(module).values() if isinstance(v, types.ModuleType) and v.__name__.startswith(gl.__name__)
        )
    return objects


def _snapshot():
    """(object, attribute) -> what looking the attribute up finds, inherited ones included (Triton's
    interpreter restores an inherited attribute as the object's own, the same value); submodules
    are left out (importing one adds it to its package)."""
    snapshot = {}
    for label, obj in _patchable().items():
        for name in dir(obj):
            value = inspect.getattr_static(obj, name, None)  # the stored object, not a fresh binding
            if not isinstance(value, types.ModuleType):
                snapshot[(label, name)] = value
    return snapshot


def _changes(before, after):
    keys = (before.keys() | after.keys()) - _LAZY
    return sorted(
        f"{label}.{name}" for label, name in keys if before.get((label, name)) is not after.get((label, name))
    )


#: Python makes a class's ``__annotations__`` dict on its first read (Triton's interpreter reads
#: every member of ``tl.tensor`` at a launch): a new attribute, but no patch.
_LAZY = {("tl.tensor", "__annotations__")}


def _expect_restored(before, what):
    changed = _changes(before, _snapshot())
    assert not changed, f"{what} left these attributes changed: {changed}"


def _cpu_launch(interpret=None):
    """Launch the plain Gluon kernel (inside ``interpret`` when given); True if it ran on CPU."""
    import _gluon_plain_kernel as plain
    from triton.experimental.gluon import language as gl

    x, y = torch.arange(100.0), torch.ones(100)
    layout = gl.BlockedLayout(size_per_thread=[1], threads_per_warp=[32], warps_per_cta=[4], order=[0])
    try:
        if interpret is None:
            plain.axpy_kernel[(2,)](x, y, 2.0, 100, BLOCK=64, L=layout)
        else:
            with interpret():
                plain.axpy_kernel[(2,)](x, y, 2.0, 100, BLOCK=64, L=layout)
    except Exception:  # noqa: BLE001 - Triton's own answer (without a GPU: "0 active drivers")
        return False
    assert torch.equal(y, 2 * torch.arange(100.0) + 1), y
    return True


def check_import_patches_nothing(module):
    import importlib

    before = _snapshot()
    importlib.import_module(module)
    _expect_restored(before, f"import {module}")
    assert not _cpu_launch(), f"after import {module} a plain Gluon kernel ran on CPU outside interpret()"
    return "ok"


def check_scope_restores():
    from triton.experimental.gluon import _runtime
    from triton.experimental.gluon import language as gl

    import iris.mem.gluon as img

    before = _snapshot()
    with img.interpret():
        inside = _snapshot()
        assert "run" in vars(_runtime.GluonJITFunction), "kernel[grid] does not reach CPU execution"
        assert _changes(before, inside), "interpret() patched nothing: the checks below would be vacuous"
        assert img.interpret.entered() and not img.interpret.active()
        assert _cpu_launch(), "the plain kernel did not run on CPU inside interpret()"
        left = _changes(inside, _snapshot())
        assert not left, f"a CPU launch left the language patched inside the scope: {left}"
        assert getattr(gl.arange, "__triton_builtin__", False)
    assert not img.interpret.entered()
    _expect_restored(before, "leaving interpret()")
    assert not _cpu_launch(), "a plain Gluon kernel ran on CPU after interpret() was left"
    return "ok"


def check_scope_restores_after_exceptions():
    import _gluon_plain_kernel as plain

    import iris.mem.gluon as img

    before = _snapshot()
    try:
        with img.interpret():
            raise ZeroDivisionError("inside the scope")
    except ZeroDivisionError:
        pass
    _expect_restored(before, "an exception raised inside interpret()")

    @img.interpret()
    def host_code():
        raise KeyError("inside a decorated host function")

    try:
        host_code()
    except KeyError:
        pass
    _expect_restored(before, "an exception raised by a function decorated with interpret()")

    x = torch.zeros(64)
    for kernel in (shared_memory_kernel, failing_kernel):
        try:
            with img.interpret():
                kernel[(1,)](x, N=64)
        except Exception:  # noqa: BLE001 - any failure inside the launch
            pass
        else:
            raise AssertionError(f"{kernel.__name__} ran on CPU without an error")
        _expect_restored(before, f"a failing CPU launch ({kernel.__name__})")
    assert not img.interpret.entered() and not img.interpret.active()
    assert plain.axpy_kernel is not None and not _cpu_launch()
    return "ok"


def check_scope_reentrant():
    import iris.mem.gluon as img

    before = _snapshot()
    with img.interpret():
        inside = _snapshot()
        with img.interpret():
            again = _changes(inside, _snapshot())
            assert not again, f"a nested interpret() patched again: {again}"
            assert _cpu_launch()
        early = _changes(inside, _snapshot())
        assert not early, f"leaving a nested interpret() restored too early: {early}"
        assert _cpu_launch(img.interpret), "a launch inside a nested scope of the same scope failed"
    _expect_restored(before, "leaving nested interpret() scopes")
    return "ok"


def check_marked_kernel():

    import iris.mem.gluon as img

    before = _snapshot()

    marked_kernel = img.interpret()(increment_kernel)
    assert marked_kernel is increment_kernel, "the decorator must return the kernel itself"
    _expect_restored(before, "decorating a kernel with interpret()")
    x = torch.zeros(64)
    marked_kernel[(1,)](x, N=64)
    marked_kernel[(1,)](x, N=64)
    assert torch.equal(x, torch.full((64,), 2.0)), x
    _expect_restored(before, "launches of a kernel marked with interpret()")
    assert not _cpu_launch(), "marking one kernel made another run on CPU"
    return "ok"


def check_scope_per_thread():
    import threading

    import iris.mem.gluon as img

    before = _snapshot()
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
        seen["ran on CPU"] = _cpu_launch()  # this thread is outside: Gluon as without Iris
    finally:
        release.set()
        thread.join(60)
    assert seen == {"entered": False, "ran on CPU": False}, seen
    _expect_restored(before, "a scope held and left by another thread")
    return "ok"


def check_triton_scope_restores():
    from triton.runtime import interpreter

    import iris.mem.triton as imt

    before = _snapshot()
    out = torch.zeros(4, dtype=torch.int32)
    for _ in range(2):  # the second time with the fix cached
        with imt.interpret():
            range_kernel[(1,)](out, torch.tensor([4], dtype=torch.int32))
        assert out.tolist() == [0, 3, 6, 9], out
        _expect_restored(before, "leaving iris.mem.triton.interpret()")
    try:
        with imt.interpret():
            raise ValueError("inside the scope")
    except ValueError:
        pass
    _expect_restored(before, "an exception inside iris.mem.triton.interpret()")
    assert interpreter._patch_lang_tensor is before[("triton.runtime.interpreter", "_patch_lang_tensor")]
    return "ok"


def check_no_interpreter():
    import triton

    import iris.mem.gluon as img
    import iris.mem.triton as imt

    assert not triton.knobs.runtime.interpret
    before = _snapshot()
    with img.interpret(), imt.interpret():
        _expect_restored(before, "entering interpret() without TRITON_INTERPRET=1")

    kernel = increment_kernel
    assert img.interpret()(kernel) is kernel and "run" not in vars(kernel), "marking changed a compiled kernel"
    _expect_restored(before, "interpret() without TRITON_INTERPRET=1")
    return "ok"


def check_compat_in_one_place():
    import iris.heap
    import iris.heap._triton_compat as compat
    import iris.mem.gluon as img
    import iris.mem.triton as imt

    assert img.aggregate is compat.aggregate
    assert img.GluonASTSource is compat.gluon_ast_source()
    assert compat.SCALAR_INDEX in img.interpret.patches and compat.SCALAR_INDEX in imt.interpret.patches
    assert iris.heap.CONTEXT_ABI_VERSION == img.CONTEXT_ABI_VERSION == imt.CONTEXT_ABI_VERSION
    return "ok"


if __name__ == "__main__":
    result = globals()[f"check_{sys.argv[1]}"](*sys.argv[2:])
    print(json.dumps(result))
