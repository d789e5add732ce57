"""iris.mem.triton._internals: every private Triton internal iris.mem.triton touches, checked on the
installed release (the test sessions run Triton 3.6 and 3.9), and each error where it is missing."""

import inspect

import pytest
import triton
import triton.language as tl

from iris.mem.common import target as _target
from iris.mem.triton import _internals


# -- the interpreter --------------------------------------------------------------------------------


def test_the_layer_uses_the_one_probe():
    assert _internals.INTERPRETED is _target.INTERPRETED
    import iris.mem.triton as imt

    assert imt.INTERPRETED is _target.INTERPRETED and imt.InterpreterAtomicError is _target.InterpreterAtomicError


def test_atomics_the_interpreter_cannot_do_raise_when_interpreted_only(monkeypatch):
    """The layer asks ``InterpreterAtomicError.ALLOWED["triton"]`` (tabled and tested in iris.mem.common)."""
    monkeypatch.setattr(_internals, "INTERPRETED", True)
    assert _internals.check_atomic(tl.int32, "atomic_xor") and _internals.check_atomic(tl.float64, "atomic_max")
    assert _internals.check_atomic(tl.float32, "atomic_xchg")  # exchanged as the bits of an int32
    for dtype, op in ((tl.float16, "atomic_add"), (tl.bfloat16, "atomic_xchg"), (tl.float32, "atomic_or")):
        with pytest.raises(_target.InterpreterAtomicError, match=f"iris.mem.triton.{op} on {dtype.name}"):
            _internals.check_atomic(dtype, op)
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
