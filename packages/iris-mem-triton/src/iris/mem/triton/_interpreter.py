"""What Triton's interpreter (``TRITON_INTERPRET=1``, the CPU backend) cannot do, checked at trace time.

The interpreter runs an atomic as a real hardware atomic on the raw address only for 32- and
64-bit elements; 16-bit floats fall back to a per-process mutex (updates from other processes are
lost) or are unsupported, and bitwise/exchange atomics on floats are unsupported. Rather than a
silently wrong count, the atomics raise :class:`InterpreterAtomicError` when traced there.
(Float CAS and exchange act on the bits as 32/64-bit integers, so they are fine there.)
"""

from __future__ import annotations

import triton

__all__ = ["INTERPRETED", "InterpreterAtomicError", "check_atomic"]


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


def _fix_scalar_index() -> bool:
    """Triton 3.6's interpreter turns a scalar into a Python int with ``int(data)``, which numpy 2
    refuses for its shape-(1,) scalars: ``for r in range(ctx.world_size)`` fails. 3.9 squeezes
    first; do the same on 3.6 (only when interpreted, and only if the installed interpreter lacks it)."""
    import inspect

    from triton.runtime import interpreter

    original = getattr(interpreter, "_patch_lang_tensor", None)
    if original is None or getattr(original, "_iris_fixed", False):
        return False
    try:
        if "squeeze" in inspect.getsource(original):
            return False
    except (OSError, TypeError):
        return False

    def _patch_lang_tensor(tensor, scope):
        original(tensor, scope)
        scope.set_attr(tensor, "__index__", lambda self: int(self.handle.data.squeeze()))

    _patch_lang_tensor._iris_fixed = True
    interpreter._patch_lang_tensor = _patch_lang_tensor
    return True


if INTERPRETED:
    _fix_scalar_index()
