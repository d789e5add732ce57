"""Importing an Iris layer changes nothing for code that does not use it: the checks every layer
runs on its own import (iris-mem-triton, iris-mem-gluon, iris-ccl, iris-examples).

Each check runs in a fresh interpreter (``python -m iris.testing.side_effects CHECK [MODULE]``),
with TRITON_INTERPRET set as the check needs before triton is imported, so that what the process
had imported and patched before is known. :func:`run` starts one and returns its JSON answer.

This module imports no Iris layer: its kernels are decorated (when it is imported) before any
layer is, as a user's own kernels may be. It imports triton and Gluon, which every layer that runs
it has; iris-heap's tests never import it.
"""

from __future__ import annotations

import functools
import inspect
import json
import os
import subprocess
import sys
import types

import triton
import triton.language as tl
from triton.experimental import gluon
from triton.experimental.gluon import language as gl

__all__ = [
    "changes",
    "cpu_launch",
    "expect_restored",
    "expect_restored_after_an_exception",
    "import_test",
    "in_a_fresh_interpreter",
    "run",
    "snapshot",
    "axpy_kernel",
    "range_kernel",
]


def run(check, *args, interpret="1", script=None):
    """``check_<check>(*args)`` in a fresh interpreter; its last line of output (JSON).

    The check is this module's, or ``script``'s (a test file that ends with :func:`main`; its
    folder goes first on the child's path, for the helper modules beside it).
    """
    env = {**os.environ, "TRITON_INTERPRET": interpret}
    command = [sys.executable, "-m", __name__] if script is None else [sys.executable, str(script)]
    if script is not None:
        folder = os.path.dirname(os.path.abspath(script))
        env["PYTHONPATH"] = os.pathsep.join([folder, *filter(None, [env.get("PYTHONPATH")])])
    done = subprocess.run([*command, check, *args], env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, f"{check}{args} failed:\n{done.stdout[-2000:]}\n{done.stderr[-4000:]}"
    return json.loads(done.stdout.strip().splitlines()[-1])


# -- kernels that know nothing of Iris (defined, hence decorated, before any layer is imported) ---


@gluon.jit
def axpy_kernel(x_ptr, y_ptr, a, n, BLOCK: gl.constexpr, L: gl.constexpr):
    offs = gl.program_id(0) * BLOCK + gl.arange(0, BLOCK, layout=L)
    mask = offs < n
    x = gl.load(x_ptr + offs, mask=mask)
    y = gl.load(y_ptr + offs, mask=mask)
    gl.store(y_ptr + offs, a * x + y, mask=mask)


@triton.jit
def range_kernel(out_ptr, n_ptr):
    n = tl.load(n_ptr)
    for i in range(n):  # a loaded scalar as a range bound (triton 3.6's interpreter refuses it)
        tl.store(out_ptr + i, i * 3)


@triton.jit
def _times_three(x):
    return x * 3


@triton.jit
def nested_kernel(out_ptr):
    """out[4 p + i] = 9 i: two calls of a device function per program (each asks the interpreter
    to patch the language again, unless a scope has it patched once for the launch)."""
    i = tl.arange(0, 4)
    tl.store(out_ptr + tl.program_id(0) * 4 + i, _times_three(_times_three(i)))


def _outcome(launch):
    try:
        return {"result": launch()}
    except Exception as e:  # noqa: BLE001 - the error is the outcome compared
        return {"error": type(e).__name__, "message": str(e)}


def cpu_launch(interpret=None):
    """Launch the plain Gluon kernel on CPU tensors (inside ``interpret`` when given); True if it
    ran on CPU, False if Triton refused (outside a scope: what Gluon does without Iris)."""
    import torch

    x, y = torch.arange(100.0), torch.ones(100)
    layout = gl.BlockedLayout(size_per_thread=[1], threads_per_warp=[32], warps_per_cta=[4], order=[0])
    try:
        if interpret is None:
            axpy_kernel[(2,)](x, y, 2.0, 100, BLOCK=64, L=layout)
        else:
            with interpret():
                axpy_kernel[(2,)](x, y, 2.0, 100, BLOCK=64, L=layout)
    except Exception:  # noqa: BLE001 - Triton's own answer (without a GPU: "0 active drivers")
        return False
    assert torch.equal(y, 2 * torch.arange(100.0) + 1), y
    return True


# -- snapshots of everything Iris (or Triton's interpreter) could patch ---------------------------


def _patchable():
    from triton.experimental.gluon import _runtime
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


def snapshot():
    """(object label, attribute) -> what looking the attribute up finds, inherited ones included
    (Triton's interpreter restores an inherited attribute as the object's own, the same value);
    submodules are left out (importing one adds it to its package)."""
    taken = {}
    for label, obj in _patchable().items():
        for name in dir(obj):
            value = inspect.getattr_static(obj, name, None)  # the stored object, not a fresh binding
            if not isinstance(value, types.ModuleType):
                taken[(label, name)] = value
    return taken


#: Python makes a class's ``__annotations__`` dict on its first read (Triton's interpreter reads
#: every member of ``tl.tensor`` at a launch): a new attribute, but no patch.
_LAZY = {("tl.tensor", "__annotations__")}


def changes(before, after):
    """The attributes (``label.name``) whose object differs between two snapshots."""
    keys = (before.keys() | after.keys()) - _LAZY
    return sorted(
        f"{label}.{name}" for label, name in keys if before.get((label, name)) is not after.get((label, name))
    )


def expect_restored(before, what):
    changed = changes(before, snapshot())
    assert not changed, f"{what} left these attributes changed: {changed}"


def expect_restored_after_an_exception(scope, before):
    """An exception raised inside ``scope()`` (a layer's ``interpret``) leaves every attribute as
    ``before`` (a :func:`snapshot`) recorded it."""
    try:
        with scope():
            raise ZeroDivisionError("inside the scope")
    except ZeroDivisionError:
        pass
    expect_restored(before, f"an exception raised inside {scope.__qualname__}()")


# -- the checks -----------------------------------------------------------------------------------


def check_plain_kernels(*modules):
    """The outcome (result or error) of a plain Gluon and a plain Triton kernel, after importing
    ``modules``: compared by the caller with the outcome without them."""
    import importlib

    import torch

    for module in modules:  # after the kernels were decorated, as a user's code may do
        importlib.import_module(module)

    device = "cuda" if torch.cuda.is_available() and not triton.knobs.runtime.interpret else "cpu"

    def gluon_axpy():
        x = torch.arange(100.0, device=device)
        y = torch.ones(100, device=device)
        layout = gl.BlockedLayout(size_per_thread=[1], threads_per_warp=[32], warps_per_cta=[4], order=[0])
        axpy_kernel[(2,)](x, y, 2.0, 100, BLOCK=64, L=layout)
        return y.cpu().tolist()

    def triton_range():
        out = torch.zeros(4, dtype=torch.int32, device=device)
        range_kernel[(1,)](out, torch.tensor([4], dtype=torch.int32, device=device))
        return out.cpu().tolist()

    return {"gluon": _outcome(gluon_axpy), "triton": _outcome(triton_range)}


def check_import_patches_nothing(module):
    import importlib

    before = snapshot()
    importlib.import_module(module)
    expect_restored(before, f"import {module}")
    assert not cpu_launch(), f"after import {module} a plain Gluon kernel ran on CPU outside interpret()"
    return "ok"


def expect_import_changes_nothing(module):
    """The whole test for one layer: plain kernels behave the same with and without importing
    ``module`` (interpreted, and compiled: on the GPU where there is one, else the same launch
    error), and the import patches no attribute of Triton or Gluon."""
    for interpret in ("1", "0"):
        without = run("plain_kernels", interpret=interpret)
        with_iris = run("plain_kernels", module, interpret=interpret)
        assert with_iris == without, f"TRITON_INTERPRET={interpret}: {with_iris} != {without}"
    run("import_patches_nothing", module)


def import_test(module):
    """The test of ``module``'s import that every layer runs (:func:`expect_import_changes_nothing`):
    ``test_importing_the_layer_changes_nothing_for_plain_kernels = import_test("iris.mem.triton")``."""

    def test():
        expect_import_changes_nothing(module)

    test.__doc__ = (
        f"The same result, or the same error, for a Gluon and a Triton kernel that know nothing of Iris "
        f"with and without importing {module}, interpreted and compiled; no attribute of Triton or Gluon "
        "patched by the import."
    )
    return test


def in_a_fresh_interpreter(interpret="1"):
    """Decorate a test of a check script (a test file that ends with :func:`main`) so that its body
    runs in a fresh interpreter: the file run as a script, with ``TRITON_INTERPRET=interpret`` set
    before triton is imported. The test passes when the body returns there.

    >>> @side_effects.in_a_fresh_interpreter()
    ... def test_the_scope_restores_what_it_patched(): ...
    """

    def decorate(body):
        script = sys.modules[body.__module__].__file__

        @functools.wraps(body)
        def test():
            run(body.__name__, interpret=interpret, script=script)

        return test

    return decorate


def main(checks):
    """A check script's entry: run ``argv[1]`` of ``checks`` (its globals: a ``check_<argv[1]>``, or
    the body of a test decorated with :func:`in_a_fresh_interpreter`) on ``argv[2:]``, and print its
    result as the last line (JSON)."""
    name = sys.argv[1]
    check = checks[name].__wrapped__ if name in checks else checks[f"check_{name}"]
    print(json.dumps(check(*sys.argv[2:])))


if __name__ == "__main__":
    main(globals())
