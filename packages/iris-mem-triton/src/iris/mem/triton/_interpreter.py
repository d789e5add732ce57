"""``interpret``: the scope in which Iris's fixes to Triton's interpreter (``TRITON_INTERPRET=1``, the
CPU backend) apply; nothing is patched at import. What the interpreter cannot do is checked at
trace time by ``_internals.check_atomic`` (``InterpreterAtomicError``, from ``iris.mem.common``).
"""

from __future__ import annotations

from iris.mem import common as _common

__all__ = ["interpret"]


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
