"""Every private Triton internal that iris.mem.triton touches, beyond those it shares with Gluon.

The rest of iris.mem.triton uses public Triton, ``iris.mem.common.target`` (the internals both
mem layers share, tabled in its docstring: ``target_builtin``, ``INTERPRETED``, the interpreter's
atomic table, the clock and SM-id assembly per target, ``aggregate``) and these functions only,
so a release that moves one of them breaks one function here, not a kernel.
``tests/test_triton_internals.py`` checks each on the installed Triton (3.6 and 3.9 in the test
sessions).

===================  =====================================================  ===============================
name                 what it reaches into                                   where it is missing
===================  =====================================================  ===============================
``clock_ns_asm``     a builtin (``__triton_builtin__``): the code            ``NotImplementedError`` naming
                     generator's ``_semantic`` for                          the backend; ``RuntimeError``
                     ``tl.inline_asm_elementwise`` and ``__mul__``, and     naming Triton where the options
                     the target's ``backend_name``                          lack it (``target_of``)
``sm_id_asm``        the same, with ``cast``, ``to``, ``__or__``,            0 where the target has no
                     ``__lshift__`` through ``_semantic``, and the          multiprocessor id; as above
                     target's ``arch`` (AMD: which ``HW_ID`` fields)
``check_atomic``     ``INTERPRETED`` (what ``@triton.jit`` made) and        (data: ``iris.mem.common.target``)
                     ``InterpreterAtomicError.ALLOWED["triton"]``
``aggregate``        the interpreter's ``InterpretedFunction`` (by its      the methods stay where
                     name): ``_aggregate`` neither copies nor binds them,   ``_aggregate`` put them
                     so they are re-attached
``interpret``        the interpreter patches of ``iris.mem.common``         (their fence: ``iris.mem.common``;
(``_interpreter``)   (``SCALAR_INDEX``, ``ONE_PATCH_PER_LAUNCH``)           tabled in ``target``)
===================  =====================================================  ===============================

``polls_per_clock`` and the lanes of a program-wide reduction (``errors._every_thread``) are
``iris.mem.common.target.target_builtin``\\ s: they ask only whether they are compiled.
"""

from __future__ import annotations

import functools
import time

import triton
import triton.language as tl
from iris.mem.common import target as _target
from iris.mem.common.target import CLOCK_ASM, InterpreterAtomicError, sm_id_reads, target_of

__all__ = ["INTERPRETED", "aggregate", "check_atomic", "clock_ns_asm", "sm_id_asm"]

#: Whether ``@triton.jit`` made interpreted functions in this process (``iris.mem.common``'s one
#: probe; fixed once kernels exist, like Triton's own choice).
INTERPRETED = _target.INTERPRETED


# -- what the interpreter cannot do ----------------------------------------------------------------


@triton.constexpr_function
def check_atomic(dtype, op):
    """Raise InterpreterAtomicError for ``op`` on ``dtype`` elements when interpreted; nothing when compiled."""
    if not INTERPRETED:
        return True
    name = getattr(dtype, "name", str(dtype))
    # (a table and a constructor: Triton's dependency scan rejects plain functions called from here)
    if name not in InterpreterAtomicError.ALLOWED["triton"][op]:
        raise InterpreterAtomicError("triton", op, name)
    return True


# -- inline assembly through the code generator ----------------------------------------------------


def clock_ns_asm(_semantic=None):
    """The clock of wherever the kernel runs, as an int64 scalar (the body of ``clock_ns``).

    CPU ranks: the interpreter runs this as Python in the middle of a launch, so it reads the
    host's clock anew at each call (a constexpr function could too, but Triton's dependency scan
    rejects ``time.monotonic_ns`` in one when it compiles). Compiled: the target comes from the
    code generator's options (``backend_name``), which name the target being generated for even
    in a process whose active driver is another or none (compile-only checks).
    """
    if INTERPRETED:
        return tl.cast(time.monotonic_ns(), tl.int64)
    backend = target_of(_semantic).backend
    if backend not in CLOCK_ASM:
        raise NotImplementedError(
            f"iris.mem.triton.clock_ns (which bounded waits read) was compiled for the {backend!r} backend, "
            f"which has no device clock here; it reads one on {', '.join(CLOCK_ASM)} GPUs and on CPU ranks"
        )
    asm, constraint, ns_per_tick = CLOCK_ASM[backend]
    ticks = tl.inline_asm_elementwise(asm, constraint, [], dtype=tl.int64, is_pure=False, pack=1, _semantic=_semantic)
    if ns_per_tick == 1:
        return ticks
    return ticks.__mul__(ns_per_tick, _semantic=_semantic)


clock_ns_asm.__triton_builtin__ = True  # compiled: called with the code generator's _semantic


def sm_id_asm(_semantic=None):
    """The multiprocessor this program runs on, an int64 scalar (the body of ``tracing.sm_id``).

    CPU ranks: 0 (the interpreter runs this as Python). Compiled: the target comes from the code
    generator's options, as for ``clock_ns``. Read at each event, not once: NVIDIA documents that
    ``%smid`` may change during execution (preemption may move a program).
    """
    if INTERPRETED:
        return tl.cast(0, tl.int64)
    out = tl.cast(0, tl.int64, _semantic=_semantic)
    for asm, constraint, shift in sm_id_reads(target_of(_semantic)):
        part = tl.inline_asm_elementwise(
            asm, constraint, [], dtype=tl.int32, is_pure=False, pack=1, _semantic=_semantic
        ).to(tl.int64, _semantic=_semantic)
        out = out.__or__(part.__lshift__(shift, _semantic=_semantic), _semantic=_semantic)
    return out


sm_id_asm.__triton_builtin__ = True  # compiled: called with the code generator's _semantic


# -- aggregates, compiled and interpreted ----------------------------------------------------------


def aggregate(cls):
    """Make ``cls`` (annotated fields, a plain ``__init__``, ``@triton.jit`` methods) a Triton aggregate.

    Two traps: ``__init__`` must be callable by the code generator
    (triton 3.6; ``iris.mem.common.aggregate`` marks it, for both device layers); and under
    ``TRITON_INTERPRET=1`` ``@triton.jit`` methods are ``InterpretedFunction`` objects, which
    Triton's ``_aggregate`` does not copy onto the aggregate class and which do not bind ``self``:
    they are re-attached here (static methods as static methods, the others as bound methods).
    """
    agg = _target.aggregate(cls)
    if INTERPRETED:
        for name, member in cls.__dict__.items():
            if name.startswith("__"):
                continue
            if isinstance(member, staticmethod) and _is_interpreted(member.__func__):
                setattr(agg, name, staticmethod(member.__func__))
            elif _is_interpreted(member):
                setattr(agg, name, _method(member))
    return agg


def _is_interpreted(fn) -> bool:
    return type(fn).__name__ == "InterpretedFunction"


def _method(fn):
    @functools.wraps(fn.fn)
    def method(self, *args, **kwargs):
        return fn(self, *args, **kwargs)

    return method
