"""iris.mem.triton._internals: every private Triton internal iris.mem.triton touches, checked on the
installed release (the test sessions run Triton 3.6 and 3.9), and each error where it is missing."""

import inspect
import re

import pytest
import triton
import triton.language as tl

from iris.mem.common import target as _target
from iris.mem.triton import _internals, ops, tracing


class _Semantic:
    def __init__(self, **options):
        self.builder = type("Builder", (), {"options": type("Options", (), options)()})()


# -- inline assembly through the code generator ----------------------------------------------------


@pytest.mark.parametrize("builtin", [_internals.clock_ns_asm, _internals.sm_id_asm])
def test_the_assembly_readers_are_builtins_the_code_generator_passes_its_semantic(builtin):
    assert builtin.__triton_builtin__ and "_semantic" in inspect.signature(builtin).parameters


def test_a_target_without_a_clock_is_named_and_so_is_a_triton_without_the_option(monkeypatch):
    monkeypatch.setattr(_internals, "INTERPRETED", False)  # as the code generator calls it
    with pytest.raises(NotImplementedError, match="'cpu' backend"):
        _internals.clock_ns_asm(_semantic=_Semantic(backend_name="cpu"))
    with pytest.raises(RuntimeError, match=re.escape(f"triton {triton.__version__}")):
        _internals.clock_ns_asm(_semantic=_Semantic())


@triton.jit
def _reads_kernel(out):
    tl.store(out, tracing.sm_id())
    tl.store(out + 1, ops.clock_ns())


def _compiled_reads(rank, world_size):
    """This rank's target's assembly for the clock and multiprocessor reads (compile-only world)."""
    from triton.compiler import ASTSource

    from iris.testing import COMPILE_TARGETS
    from iris.testing.mem.lowering import TARGETS

    name = COMPILE_TARGETS[rank]
    compiled = triton.compile(ASTSource(_reads_kernel, {"out": "*i64"}, {}), target=TARGETS[name])
    return name, compiled.asm["ptx" if name == "cuda" else "amdgcn"]


def test_the_clock_and_the_multiprocessor_are_read_with_each_targets_assembly(compiler):
    for name, text in compiler.run(_compiled_reads):
        if name == "cuda":
            assert "%globaltimer" in text and "%smid" in text
        else:  # gfx942: the die (XCC_ID) above the compute unit's HW_ID bits
            assert "s_memrealtime" in text and text.count("s_getreg_b32") >= 2


# -- the interpreter --------------------------------------------------------------------------------


def test_the_layer_uses_the_one_probe():
    assert _internals.INTERPRETED is _target.INTERPRETED
    import iris.mem.triton as imt

    assert imt.INTERPRETED is _target.INTERPRETED and imt.InterpreterAtomicError is _target.InterpreterAtomicError


def test_atomics_the_interpreter_cannot_do_raise_when_interpreted_only(monkeypatch):
    monkeypatch.setattr(_internals, "INTERPRETED", True)
    for op, allowed in _target.InterpreterAtomicError.ALLOWED["triton"].items():
        for dtype in (tl.int32, tl.uint64, tl.float16, tl.bfloat16, tl.float32, tl.float64):
            if dtype.name in allowed:
                assert _internals.check_atomic(dtype, op)
            else:
                with pytest.raises(_target.InterpreterAtomicError, match=f"iris.mem.triton.{op} on {dtype.name}"):
                    _internals.check_atomic(dtype, op)
    assert _internals.check_atomic(tl.float32, "atomic_xchg")  # exchanged as the bits of an int32
    monkeypatch.setattr(_internals, "INTERPRETED", False)
    assert _internals.check_atomic(tl.float16, "atomic_xor")


def test_aggregates_get_their_interpreted_methods_back():
    @_internals.aggregate
    class Counter:
        n: tl.tensor

        def __init__(self, n):
            self.n = n

        @triton.jit
        def doubled(self):
            return self.n * 2

        @staticmethod
        @triton.jit
        def make(n):
            return Counter(n)

    assert getattr(Counter, "__triton_aggregate__", False)
    interpreted = type(triton.jit(_target._probe)).__name__ == "InterpretedFunction"
    assert _internals._is_interpreted(triton.jit(_target._probe)) == interpreted == _internals.INTERPRETED
    if interpreted:  # a plain function (bound as a method), a static method, as compiled code sees them
        doubled = inspect.getattr_static(Counter, "doubled")
        assert inspect.isfunction(doubled) and doubled.__wrapped__.__name__ == "doubled"
        assert _internals._is_interpreted(inspect.getattr_static(Counter, "make").__func__)
