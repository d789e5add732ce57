"""iris.mem.gluon._internals: every private Triton and Gluon internal iris.mem.gluon touches, checked
on the installed release (the test sessions run Triton 3.6 and 3.9), and each error where it is
missing. The modules the table names as fences (``_cpu``, ``_cpu_hopper``) are checked for what
they reach into here; what they do with it, by test_gluon_cpu.py and test_gluon_hopper.py."""

import inspect
import re

import pytest
import triton
import triton.language as tl
from triton.experimental import gluon
from triton.experimental.gluon import language as gl

from iris.mem.common import target as _target
from iris.mem.gluon import _cpu, _internals, ops, tracing


class _Semantic:
    def __init__(self, **options):
        self.builder = type("Builder", (), {"options": type("Options", (), options)()})()


# -- inline assembly through the code generator ----------------------------------------------------


@pytest.mark.parametrize("builtin", [_internals.clock_ns_asm, _internals.sm_id_asm])
def test_the_assembly_readers_are_builtins_the_code_generator_passes_its_semantic(builtin):
    assert builtin.__triton_builtin__ and "_semantic" in inspect.signature(builtin).parameters


def test_a_target_without_a_clock_is_named_and_so_is_a_triton_without_the_option():
    assert not _cpu._state.launches  # outside a CPU launch: as the code generator calls it
    with pytest.raises(NotImplementedError, match="'cpu' backend"):
        _internals.clock_ns_asm(_semantic=_Semantic(backend_name="cpu"))
    with pytest.raises(RuntimeError, match=re.escape(f"triton {triton.__version__}")):
        _internals.clock_ns_asm(_semantic=_Semantic())


@gluon.jit
def _reads_kernel(out):
    gl.store(out, tracing.sm_id())
    gl.store(out + 1, ops.clock_ns())


def _compiled_reads(rank, world_size):
    """This rank's target's assembly for the clock and multiprocessor reads (compile-only world)."""
    from iris.mem.common import gluon_ast_source
    from iris.testing import COMPILE_TARGETS
    from iris.testing.mem.lowering import TARGETS

    name = COMPILE_TARGETS[rank]
    source = gluon_ast_source()(_reads_kernel, {"out": "*i64"}, {})
    compiled = triton.compile(source, target=TARGETS[name], options={"num_warps": 4})
    return name, compiled.asm["ptx" if name == "cuda" else "amdgcn"]


def test_the_clock_and_the_multiprocessor_are_read_with_each_targets_assembly(compiler):
    for name, text in compiler.run(_compiled_reads):
        if name == "cuda":
            assert "%globaltimer" in text and "%smid" in text
        else:  # gfx942: the die (XCC_ID) above the compute unit's HW_ID bits
            assert "s_memrealtime" in text and text.count("s_getreg_b32") >= 2


# -- CPU execution ------------------------------------------------------------------------------------


def test_a_builtin_is_on_cpu_without_a_code_generator_or_inside_a_cpu_launch(monkeypatch):
    compiled = _target.target_of(object())
    assert _internals.on_cpu(None) and not _internals.on_cpu(compiled)
    monkeypatch.setattr(_cpu._state, "launches", 1)
    assert _internals.on_cpu(compiled)
    # the builtins written on it: one lane of one warp on CPU ranks, the target's otherwise
    assert ops.polls_per_clock(_semantic=object()).value == 1


def test_atomics_cpu_ranks_cannot_do_raise_inside_a_cpu_launch_only(monkeypatch):
    assert _internals.check_atomic(tl.float16, "atomic_xor")  # compiling: nothing to refuse
    monkeypatch.setattr(_cpu._state, "launches", 1)
    for op, allowed in _target.InterpreterAtomicError.ALLOWED["gluon"].items():
        for dtype in (tl.int32, tl.uint64, tl.float16, tl.bfloat16, tl.float32, tl.float64):
            if dtype.name in allowed:
                assert _internals.check_atomic(dtype, op)
            else:
                with pytest.raises(_target.InterpreterAtomicError, match=f"iris.mem.gluon.{op} on {dtype.name}"):
                    _internals.check_atomic(dtype, op)
    with pytest.raises(_target.InterpreterAtomicError):  # the float is passed on: the interpreter has no float xchg
        _internals.check_atomic(tl.float32, "atomic_xchg")


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
    params = _reads_kernel.params
    assert all(hasattr(p, "name") and hasattr(p, "is_constexpr") for p in params)
    assert hasattr(_reads_kernel, "arg_names") and hasattr(_reads_kernel, "pre_run_hooks")
