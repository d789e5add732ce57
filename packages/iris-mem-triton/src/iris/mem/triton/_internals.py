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
``clock_ns_asm``,    ``iris.mem.common.target``'s ``clock_ns_builtin``      (tabled there)
``sm_id_asm``        and ``sm_id_builtin`` over ``triton.language``, on
                     CPU ranks where ``INTERPRETED``
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

import triton
import triton.language as tl
from iris.mem.common import target as _target
from iris.mem.common.target import InterpreterAtomicError, clock_ns_builtin, sm_id_builtin

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

#: The clock of wherever the kernel runs, an int64 scalar (the body of ``clock_ns``); CPU ranks: the
#: host's monotonic clock (``INTERPRETED``, read at each call).
clock_ns_asm = clock_ns_builtin(tl, "triton", lambda: INTERPRETED)

#: The multiprocessor this program runs on, an int64 scalar (the body of ``tracing.sm_id``); CPU
#: ranks: 0.
sm_id_asm = sm_id_builtin(tl, lambda: INTERPRETED)


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
