"""Every private Triton and Gluon internal that iris.mem.gluon touches, beyond those it shares with
the Triton layer.

The rest of iris.mem.gluon uses public Gluon, ``iris.mem.common.target`` (the internals both mem
layers share, tabled in its docstring: ``target_builtin``, ``INTERPRETED``, the interpreter's
atomic table, the clock and SM-id assembly per target, ``aggregate``, ``GluonASTSource``, the
3.6/3.9 spellings of the barrier and of Hopper's TMA copies) and the names below only, so a
release that moves one of them breaks one function or one named module, not a kernel.
``tests/test_gluon_internals.py`` checks each on the installed Triton (3.6 and 3.9 in the test
sessions).

====================  ====================================================  ================================
name                  what it reaches into                                  where it is missing
====================  ====================================================  ================================
``clock_ns_asm``      a builtin (``__triton_builtin__``): the code          ``NotImplementedError`` naming
                      generator's ``_semantic`` for                         the backend; ``RuntimeError``
                      ``gl.inline_asm_elementwise`` and ``__mul__``, and    naming Triton where the options
                      the target's ``backend_name``                         lack it (``target_of``)
``sm_id_asm``         the same, with ``cast``, ``to``, ``__or__``,           0 where the target has no
                      ``__lshift__`` through ``_semantic``, and the         multiprocessor id; as above
                      target's ``arch`` (AMD: which ``HW_ID`` fields)
``on_cpu``            nothing of Triton's: a ``target_builtin``'s           (Iris's own state)
                      ``target`` and ``_cpu``'s launch depth
``check_atomic``      ``InterpreterAtomicError.ALLOWED["gluon"]``, on CPU   (data: ``iris.mem.common.target``)
                      launches only
module ``_cpu``       the interpreter: ``FunctionRewriter``,                ``ImportError`` / ``Attribute
                      ``GridExecutor`` (and its ``constexprs``),            Error`` at the first CPU launch
                      ``_patch_lang``, ``InterpreterError``;                or import; the fence for running
                      ``gluon._runtime.GluonJITFunction`` (``run``,         Gluon on CPU ranks (hundreds of
                      ``__call__``, ``__get__`` hooked), ``JITFunction``    lines that are all adaptation,
                      ``.params``/``arg_names``/``pre_run_hooks``, and      so they stay in one module)
                      every Gluon builtin by module (``__triton_builtin__``
                      and the ``_core``/``_standard``/``_math`` modules)
module ``_cpu_``      the interpreter's ``TensorHandle`` and                as ``_cpu``: the fence for
``hopper``            ``_get_np_dtype`` (interpreted tensors built from     Hopper's primitives on CPU ranks
                      numpy), Hopper's builtins by qualified name
====================  ====================================================  ================================

**Detecting CPU execution.** ``iris.mem.common.target.INTERPRETED`` says whether the process runs
kernels as Python (``TRITON_INTERPRET=1``); a Gluon kernel in such a process still compiles for
a GPU where it is asked to (compile-only checks, ``GluonASTSource``). So Gluon code asks, at each
call, whether it runs inside a CPU launch now: builtins through their ``target`` (``on_cpu``),
constexpr functions through ``_cpu._state.launches`` (an attribute: Triton's dependency scan
rejects calls from them). ``layouts.current_target`` asks a third question, which GPU the driver
has (``triton.runtime.driver.active``: public enough, as Triton's tutorials call it).
"""

from __future__ import annotations

import time

from triton import constexpr_function
from triton.experimental.gluon import language as gl

from iris.mem.common.target import CLOCK_ASM, InterpreterAtomicError, sm_id_reads, target_of

from . import _cpu

__all__ = ["check_atomic", "clock_ns_asm", "on_cpu", "sm_id_asm"]


def on_cpu(target) -> bool:
    """Whether a ``target_builtin`` runs inside a CPU launch (``target`` None: no code generator
    called it), not in a compilation."""
    return target is None or bool(_cpu._state.launches)


@constexpr_function
def check_atomic(dtype, op):
    """Raise InterpreterAtomicError for ``op`` on ``dtype`` on CPU ranks; nothing when compiled."""
    if not _cpu._state.launches:
        return True
    name = getattr(dtype, "name", str(dtype))
    # (a table and a constructor: Triton's dependency scan rejects plain functions called from here)
    if name not in InterpreterAtomicError.ALLOWED["gluon"][op]:
        raise InterpreterAtomicError("gluon", op, name)
    return True


# -- inline assembly through the code generator ----------------------------------------------------


def clock_ns_asm(_semantic=None):
    """The clock of wherever the kernel runs, as an int64 scalar (the body of ``clock_ns``).

    CPU ranks: CPU execution runs this as Python in the middle of a launch, so it reads the host's
    clock anew at each call (a constexpr function could too, but Triton's dependency scan rejects
    ``time.monotonic_ns`` in one when it compiles). Compiled: the target comes from the code
    generator's options (``backend_name``), which name the target being generated for even in a
    process whose active driver is another or none (compile-only checks).
    """
    if _cpu._state.launches:
        return gl.cast(time.monotonic_ns(), gl.int64)
    backend = target_of(_semantic).backend
    if backend not in CLOCK_ASM:
        raise NotImplementedError(
            f"iris.mem.gluon.clock_ns (which bounded waits read) was compiled for the {backend!r} backend, "
            f"which has no device clock here; it reads one on {', '.join(CLOCK_ASM)} GPUs and on CPU ranks"
        )
    asm, constraint, ns_per_tick = CLOCK_ASM[backend]
    ticks = gl.inline_asm_elementwise(asm, constraint, [], dtype=gl.int64, is_pure=False, pack=1, _semantic=_semantic)
    if ns_per_tick == 1:
        return ticks
    return ticks.__mul__(ns_per_tick, _semantic=_semantic)


clock_ns_asm.__triton_builtin__ = True  # compiled: called with the code generator's _semantic


def sm_id_asm(_semantic=None):
    """The multiprocessor this program runs on, an int64 scalar (the body of ``tracing.sm_id``).

    CPU ranks: 0 (CPU execution runs this as Python during a launch, where inline assembly cannot
    run). Compiled: per the code generator's options, as ``clock_ns`` picks its clock. Read at
    every event: a program may be moved between multiprocessors (NVIDIA documents ``%smid`` may
    change).
    """
    if _cpu._state.launches:
        return gl.cast(0, gl.int64)
    out = gl.cast(0, gl.int64, _semantic=_semantic)
    for asm, constraint, shift in sm_id_reads(target_of(_semantic)):
        part = gl.inline_asm_elementwise(
            asm, constraint, [], dtype=gl.int32, is_pure=False, pack=1, _semantic=_semantic
        )
        part = part.to(gl.int64, _semantic=_semantic)
        out = out.__or__(part.__lshift__(shift, _semantic=_semantic), _semantic=_semantic)
    return out


sm_id_asm.__triton_builtin__ = True  # compiled: called with the code generator's _semantic
