"""Triton's interpreter (``TRITON_INTERPRET=1``, the CPU backend): what it cannot do, checked at
trace time, and :class:`interpret`, the scope in which Iris's fixes to it apply (nothing is
patched at import).

The interpreter runs an atomic as a real hardware atomic on the raw address only for 32- and
64-bit elements; 16-bit floats fall back to a per-process mutex (updates from other processes are
lost) or are unsupported, and bitwise/exchange atomics on floats are unsupported. Rather than a
silently wrong count, the atomics raise :class:`InterpreterAtomicError` when traced there.
(Float CAS and exchange act on the bits as 32/64-bit integers, so they are fine there.)
"""

from __future__ import annotations

import triton
from iris.mem import common as _common

__all__ = ["INTERPRETED", "InterpreterAtomicError", "check_atomic", "interpret"]


@triton.jit
def _probe():
    pass


#: Whether ``@triton.jit`` made interpreted functions in this process (fixed at import, like Triton's own choice).
INTERPRETED = type(_probe).__name__ == "InterpretedFunction"

#: Element types whose atomics are real (cross-process) atomics under the interpreter.
_CROSS_PROCESS = ("int32", "uint32", "int64", "uint64", "fp32", "fp64")
_INTEGER_ONLY = ("atomic_and", "atomic_or", "atomic_xor")


class InterpreterAtomicError(TypeError):
    """An atomic that Triton's interpreter cannot perform atomically across rank processes."""


@triton.constexpr_function
def check_atomic(dtype, op):
    """Raise InterpreterAtomicError for ``op`` on ``dtype`` elements when interpreted; nothing when compiled."""
    if not INTERPRETED:
        return True
    name = getattr(dtype, "name", str(dtype))
    allowed = _CROSS_PROCESS
    if op in _INTEGER_ONLY:
        allowed = tuple(d for d in _CROSS_PROCESS if not d.startswith("fp"))
    if name not in allowed:
        # (inline: Triton's dependency scan rejects plain functions called from here)
        raise InterpreterAtomicError(
            f"iris.mem.triton.{op} on {name} elements is not atomic across processes under Triton's "
            f"interpreter (TRITON_INTERPRET=1, CPU ranks); it works compiled on a GPU. On CPU ranks use "
            f"{'/'.join(allowed)} elements for {op}."
        )
    return True


class interpret(_common.Scope):  # noqa: N801 - used like a function: with interpret(), @interpret()
    """Run Triton kernels on CPU ranks (``TRITON_INTERPRET=1``) with the fixes Iris needs there.

    >>> with iris.mem.triton.interpret():
    ...     kernel[grid](x, heap.context, N=1024)

    >>> @iris.mem.triton.interpret()    # every launch of this kernel runs inside the scope
    ... @triton.jit
    ... def kernel(...): ...

    Triton's interpreter runs ``@triton.jit`` kernels on CPU without Iris; inside this scope it
    also takes a scalar (a kernel argument, or a value loaded through one, such as
    ``ctx.world_size``) as a ``range`` bound on triton 3.6 with numpy >= 2.4, which it refuses
    there otherwise (3.9 needs no fix), and a launch patches ``triton.language`` once instead of
    at every device-function call (``iris.mem.common.ONE_PATCH_PER_LAUNCH``, which matters for
    kernels built of many small functions, such as the collectives'). As a decorator of a
    host function, the function runs inside. Without ``TRITON_INTERPRET=1`` it changes nothing.
    Outside the scope the interpreter behaves as if Iris were not imported. Re-entrant; per
    thread; restored on exit, exceptions included.
    """

    patches = (_common.SCALAR_INDEX, _common.ONE_PATCH_PER_LAUNCH)
