"""iris.mem.gluon._internals: every private Triton and Gluon internal iris.mem.gluon touches, checked
on the installed release (the test sessions run Triton 3.6 and 3.9), and each error where it is
missing. The modules the table names as fences (``_cpu``, ``_cpu_hopper``) are checked for what
they reach into here; what they do with it, by test_gluon_cpu.py and test_gluon_hopper.py."""

import inspect

import pytest
import triton.language as tl
from triton.experimental import gluon
from triton.experimental.gluon import language as gl

from iris.mem.common import target as _target
from iris.mem.gluon import _cpu, _internals, ops


@gluon.jit
def _kernel(out):
    gl.store(out, ops.clock_ns())


# -- CPU execution ------------------------------------------------------------------------------------


def test_a_builtin_is_on_cpu_without_a_code_generator_or_inside_a_cpu_launch(monkeypatch):
    compiled = _target.target_of(object())
    assert _internals.on_cpu(None) and not _internals.on_cpu(compiled)
    monkeypatch.setattr(_cpu._state, "launches", 1)
    assert _internals.on_cpu(compiled)
    # the builtins written on it: one lane of one warp on CPU ranks, the target's otherwise
    assert ops.polls_per_clock(_semantic=object()).value == 1


def test_atomics_cpu_ranks_cannot_do_raise_inside_a_cpu_launch_only(monkeypatch):
    """The layer asks ``InterpreterAtomicError.ALLOWED["gluon"]`` (tabled and tested in iris.mem.common)."""
    assert _internals.check_atomic(tl.float16, "atomic_xor")  # compiling: nothing to refuse
    monkeypatch.setattr(_cpu._state, "launches", 1)
    assert _internals.check_atomic(tl.int32, "atomic_xor") and _internals.check_atomic(tl.float64, "atomic_max")
    # the float is passed on: the interpreter has no float xchg
    for dtype, op in ((tl.float16, "atomic_add"), (tl.float32, "atomic_xchg"), (tl.float32, "atomic_or")):
        with pytest.raises(_target.InterpreterAtomicError, match=f"iris.mem.gluon.{op} on {dtype.name}"):
            _internals.check_atomic(dtype, op)


def test_the_public_error_is_the_one_of_iris_mem_common():
    import iris.mem.gluon as img

    assert img.InterpreterAtomicError is ops.InterpreterAtomicError is _target.InterpreterAtomicError


def test_what_cpu_execution_reaches_into_exists_on_this_triton():
    """The interpreter's and Gluon's internals that ``_cpu`` and ``_cpu_hopper`` (the fences the
    table names) are written against."""
    from triton.experimental.gluon import _runtime
    from triton.runtime import interpreter
    from triton.runtime.errors import InterpreterError  # noqa: F401 - importable is the check

    for name in ("FunctionRewriter", "GridExecutor", "_patch_lang", "TensorHandle", "_get_np_dtype"):
        assert hasattr(interpreter, name), name
    assert "constexprs" in inspect.getsource(interpreter.GridExecutor.__init__)  # what _launch overrides
    assert _cpu._GluonJITFunction is _runtime.GluonJITFunction
    for name in ("run", "__call__"):
        assert callable(getattr(_runtime.GluonJITFunction, name)), name
    assert hasattr(gl, "_core") and _cpu._plan(), "no Gluon builtins found to run on CPU"
    params = _kernel.params
    assert all(hasattr(p, "name") and hasattr(p, "is_constexpr") for p in params)
    assert hasattr(_kernel, "arg_names") and hasattr(_kernel, "pre_run_hooks")
