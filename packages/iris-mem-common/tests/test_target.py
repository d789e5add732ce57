"""iris.mem.common.target: every private Triton internal iris.mem.common touches, checked on the
installed release (the test sessions run Triton 3.6 and 3.9), and each fallback where it is missing."""

import inspect
import pickle
import re

import pytest
import triton
import triton.language as tl

from iris.mem.common import target

# -- the compile target -----------------------------------------------------------------------------


class _Semantic:
    def __init__(self, **options):
        self.builder = type("Builder", (), {"options": type("Options", (), options)()})()


def test_a_target_builtin_gets_the_target_compiled_and_none_on_cpu():
    seen = []

    @target.target_builtin
    def lanes(block, target):
        """doc"""
        seen.append((block, target))
        return block if target is None else block * target.warp_size

    # the code generator passes its semantic only to builtins, and only where the signature names it
    assert lanes.__triton_builtin__ and lanes.__name__ == "lanes" and lanes.__doc__ == "doc"
    assert "_semantic" in inspect.signature(lanes).parameters
    got = lanes(4)
    assert isinstance(got, tl.constexpr) and got.value == 4  # a constexpr on CPU ranks too
    got = lanes(tl.constexpr(2), _semantic=_Semantic(warp_size=64))
    assert isinstance(got, tl.constexpr) and got.value == 128
    assert seen[0] == (4, None) and seen[1][0] == 2 and isinstance(seen[1][1], target.Target)


def test_the_target_reads_each_option_when_asked_and_names_triton_where_one_is_missing():
    t = target.target_of(object())  # asking nothing reads nothing (a builtin that only asks "compiled?")
    assert isinstance(t, target.Target) and target.target_of(None) is None
    t = target.target_of(_Semantic(backend_name="hip", arch="gfx942", warp_size=64, num_warps=8))
    assert (t.backend, t.arch, t.warp_size, t.num_warps) == ("hip", "gfx942", 64, 8)
    with pytest.raises(RuntimeError, match=re.escape(f"triton {triton.__version__}")):
        target.target_of(_Semantic(backend_name="cuda")).warp_size


_SEEN = []  # what _fields saw, in the compiling process


@target.target_builtin
def _fields(target):
    _SEEN.append((target.backend, str(target.arch), target.warp_size, target.num_warps))
    return 1


@triton.jit
def _fields_kernel(out):
    X: tl.constexpr = _fields()
    tl.store(out, X)


def _compiled_targets(rank, world_size):
    """What a target builtin sees when the code generator calls it, compiling for this rank's
    target (the compile-only world: no GPU)."""
    from triton.compiler import ASTSource

    from iris.testing import COMPILE_TARGETS
    from iris.testing.mem.lowering import TARGETS

    _SEEN.clear()
    source = ASTSource(_fields_kernel, {"out": "*i32"}, {})
    saved, triton.knobs.compilation.always_compile = triton.knobs.compilation.always_compile, True  # no cache hit
    try:
        triton.compile(source, target=TARGETS[COMPILE_TARGETS[rank]], options={"num_warps": 2})
    finally:
        triton.knobs.compilation.always_compile = saved
    return target.interpreted(), list(_SEEN)


def test_the_code_generator_names_each_targets_backend_arch_warp_size_and_warps(compiler):
    got = dict(zip(("cuda", "hip"), compiler.run(_compiled_targets)))
    assert got["cuda"] == (False, [("cuda", "sm90", 32, 2)])
    assert got["hip"] == (False, [("hip", "gfx942", 64, 2)])


def test_each_targets_clock_and_multiprocessor_reads():
    def reads(backend, arch):
        return target.sm_id_reads(target.target_of(_Semantic(backend_name=backend, arch=arch)))

    assert set(target.CLOCK_ASM) == {"cuda", "hip"}
    assert reads("cuda", 90) == target.SM_ID_ASM["cuda"]
    assert reads("hip", "gfx942") == reads("hip", "gfx950") == target.SM_ID_ASM["hip-xcc"]
    assert reads("hip", "gfx90a") == target.SM_ID_ASM["hip"]
    assert reads("hip", "gfx1100") == [] and reads("cpu", "x86") == []


def test_the_assembly_readers_are_builtins_that_name_a_target_without_a_clock():
    compiled = lambda: False  # noqa: E731 - as the code generator calls them: not inside a CPU launch
    for builtin in (target.clock_ns_builtin(tl, "triton", compiled), target.sm_id_builtin(tl, compiled)):
        assert builtin.__triton_builtin__ and "_semantic" in inspect.signature(builtin).parameters
    clock_ns = target.clock_ns_builtin(tl, "gluon", compiled)
    with pytest.raises(NotImplementedError, match=re.escape("iris.mem.gluon.clock_ns") + ".*'cpu' backend"):
        clock_ns(_semantic=_Semantic(backend_name="cpu"))
    with pytest.raises(RuntimeError, match=re.escape(f"triton {triton.__version__}")):
        clock_ns(_semantic=_Semantic())


# -- the interpreter --------------------------------------------------------------------------------


def test_interpreted_is_what_triton_jit_makes_in_this_process():
    kind = type(triton.jit(target._probe)).__name__
    assert target.INTERPRETED is target.interpreted()
    assert target.INTERPRETED == (kind == "InterpretedFunction") == bool(triton.knobs.runtime.interpret)
    if target.INTERPRETED:  # the interpreter's own class, where the layers' adaptations look for it
        from triton.runtime.interpreter import InterpretedFunction

        assert isinstance(triton.jit(target._probe), InterpretedFunction)
    assert target.is_kernel(triton.jit(target._probe)) and not target.is_kernel(target._probe)


def test_the_interpreter_atomic_table_per_layer():
    allowed = target.InterpreterAtomicError.ALLOWED
    ints = ("int32", "uint32", "int64", "uint64")
    assert set(allowed) == {"triton", "gluon"}
    for layer in allowed:
        assert allowed[layer]["atomic_add"] == allowed[layer]["atomic_cas"] == ints + ("fp32", "fp64")
        for op in ("atomic_and", "atomic_or", "atomic_xor"):
            assert allowed[layer][op] == ints
        assert all("fp16" not in dtypes and "bf16" not in dtypes for dtypes in allowed[layer].values())
    # iris.mem.triton exchanges a float's bits as an integer; iris.mem.gluon passes the float on
    assert allowed["triton"]["atomic_xchg"] == ints + ("fp32", "fp64") and allowed["gluon"]["atomic_xchg"] == ints


def test_the_interpreter_atomic_error_says_what_to_use_and_survives_pickling():
    e = target.InterpreterAtomicError("gluon", "atomic_xor", "fp32")
    assert isinstance(e, TypeError) and e.allowed == ("int32", "uint32", "int64", "uint64")
    text = str(e)
    assert "iris.mem.gluon.atomic_xor on fp32" in text and "not atomic across processes" in text
    assert "works compiled on a GPU" in text and "int32/uint32/int64/uint64" in text
    back = pickle.loads(pickle.dumps(e))
    assert type(back) is type(e) and str(back) == text and back.op == "atomic_xor"


# -- release differences ----------------------------------------------------------------------------


def test_the_release_differences_name_what_this_triton_has():
    from triton.experimental.gluon import language as gl
    from triton.experimental.gluon.language.nvidia.hopper import tma

    assert target.gluon_has_barrier() == hasattr(gl, "barrier")
    assert target.gluon_has_tma_async_load() == hasattr(tma, "async_load")
    assert target.gluon_ast_source().__name__ == "GluonASTSource"


def test_aggregate_marks_init_for_the_code_generator():
    class Pair:
        a: tl.constexpr

        def __init__(self, a):
            self.a = tl.constexpr(a)

    agg = target.aggregate(Pair)
    assert Pair.__init__.__triton_builtin__ and getattr(agg, "__triton_aggregate__", False)


def test_the_old_names_are_the_targets():
    import iris.mem.common as common

    for name in ("aggregate", "gluon_ast_source", "gluon_has_barrier", "gluon_has_tma_async_load"):
        assert getattr(common, name) is getattr(target, name), name
