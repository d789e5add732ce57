"""What Triton's interpreter (``TRITON_INTERPRET=1``, the CPU backend) cannot do, checked at trace time.

The interpreter runs an atomic as a real hardware atomic on the raw address only for 32- and
64-bit elements; 16-bit floats fall back to a per-process mutex (updates from other processes are
lost) or are unsupported, and bitwise/exchange atomics on floats are unsupported. Rather than a
silently wrong count, the atomics raise :class:`InterpreterAtomicError` when traced there.
"""

from __future__ import annotations

import triton
import triton.language as tl

__all__ = ["INTERPRETED", "InterpreterAtomicError", "check_atomic"]


@triton.jit
def _probe():
    pass


#: Whether ``@triton.jit`` made interpreted functions in this process (fixed at import, like Triton's own choice).
INTERPRETED = type(_probe).__name__ == "InterpretedFunction"

#: Element types whose atomics are real (cross-process) atomics under the interpreter.
_CROSS_PROCESS = ("int32", "uint32", "int64", "uint64", "fp32", "fp64")
_INTEGER_ONLY = ("atomic_xchg", "atomic_and", "atomic_or", "atomic_xor")


class InterpreterAtomicError(TypeError):
    """An atomic that Triton's interpreter cannot perform atomically across rank processes."""


def _message(op: str, dtype: str, allowed) -> str:
    return (
        f"iris.mem.triton.{op} on {dtype} elements is not atomic across processes under Triton's "
        f"interpreter (TRITON_INTERPRET=1, CPU ranks); it works compiled on a GPU. On CPU ranks use "
        f"{'/'.join(allowed)} elements for {op}."
    )


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
        raise InterpreterAtomicError(_message(op, name, allowed))
    return True
