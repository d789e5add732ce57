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
``clock_ns_asm``,     ``iris.mem.common.target``'s ``clock_ns_builtin``     (tabled there)
``sm_id_asm``         and ``sm_id_builtin`` over Gluon's ``language``, on
                      CPU ranks inside a CPU launch (``_cpu``)
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
has (``triton.runtime.driver.active``: public enough, as Triton's tutorials call it), as a
``triton.backends.compiler.GPUTarget``, the type ``triton.compile`` takes its target as (in every
release 3.6 to 3.9; ``layouts.warp_size`` reads its ``warp_size``).
"""

from __future__ import annotations

from triton import constexpr_function
from triton.experimental.gluon import language as gl

from iris.mem.common.target import InterpreterAtomicError, clock_ns_builtin, sm_id_builtin

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

#: The clock of wherever the kernel runs, an int64 scalar (the body of ``clock_ns``); inside a CPU
#: launch: the host's monotonic clock.
clock_ns_asm = clock_ns_builtin(gl, "gluon", lambda: _cpu._state.launches > 0)

#: The multiprocessor this program runs on, an int64 scalar (the body of ``tracing.sm_id``); inside
#: a CPU launch: 0.
sm_id_asm = sm_id_builtin(gl, lambda: _cpu._state.launches > 0)
