"""Every private Triton internal that iris.mem.common touches, each behind a feature check: the
compile target as device code reads it, the interpreter probe, the release differences.

The two mem layers reach Triton's internals through this module (and their own ``_internals``,
whose tables name what is theirs alone), so a release that moves one of them breaks one function
here, with a fallback or an error naming the release, not a kernel. ``tests/test_target.py``
checks each on the installed Triton (the test sessions run 3.6 and 3.9). Like the rest of
iris.mem.common it imports triton only inside its functions (``INTERPRETED`` at first use).

============================  ==================================================  ================================
name                          what it reaches into                                where it is missing
============================  ==================================================  ================================
``target_builtin``            ``__triton_builtin__``: the code generator passes   (every release 3.6 to 3.9 has it)
                              ``_semantic`` only to functions marked so
``target_of``, ``Target``     ``_semantic.builder.options``: ``backend_name``,    ``RuntimeError`` naming Triton,
                              ``arch``, ``warp_size``, ``num_warps`` of the       at the field asked for
                              target being generated for
``clock_ns_builtin``,         a builtin's ``_semantic`` for the language's        ``NotImplementedError`` naming
``sm_id_builtin``             ``inline_asm_elementwise``, ``cast``, ``to``,       the backend (clock); 0 where the
                              ``__mul__``, ``__or__``, ``__lshift__``, and the    target has no multiprocessor id;
                              target's ``backend_name`` and ``arch``              as ``target_of`` above
``INTERPRETED``               what ``@triton.jit`` returns: a ``JITFunction``     (public: ``triton.JITFunction``)
                              unless the interpreter (``TRITON_INTERPRET=1``)
                              makes functions of its own
``InterpreterAtomicError``    which atomics the interpreter runs as real          (data: checked on each release
                              atomics on the raw address (``interpreter.py``'s    by the conformance suite's CPU
                              ``_atomic_*``): the dtype table                     ranks)
``aggregate``                 ``triton.language.core._aggregate``; 3.6's code     ``ImportError``
                              generator calls ``__init__`` only when it is
                              marked ``__triton_builtin__``
``gluon_ast_source``          ``GluonASTSource``: ``triton.experimental.gluon``   3.6's ``gluon._runtime``
                              (3.9)
``gluon_has_barrier``         ``gl.barrier`` (3.9) / ``gl.thread_barrier`` (3.6)  False: the 3.6 spelling
``gluon_has_tma_async_load``  ``tma.async_load`` (3.9) / ``tma.async_copy_*``     False: the 3.6 spelling
                              (3.6; 3.9's old names raise)
``is_kernel``                 ``triton.runtime.jit.KernelInterface``, the base    ``ImportError``
                              of every launchable kernel (interpreted too)
``SCALAR_INDEX``              ``triton.runtime.interpreter._patch_lang_tensor``   the fix is left out (probed:
(``iris.mem.common``)         (3.6's ``int(data)`` on numpy >= 2.4 scalars)       only where it fails)
``ONE_PATCH_PER_LAUNCH``      ``triton.runtime.interpreter._patch_lang`` (the     ``AttributeError`` entering
(``iris.mem.common``)         language patched at every device-function call)     ``interpret()``
============================  ==================================================  ================================

The last two are the scoped interpreter patches; ``iris.mem.common`` (its ``__init__``) is their
fence, beside ``Patches`` and ``Scope``, which install them.

**Two questions, not one.** ``INTERPRETED`` says whether this process runs kernels as Python (CPU
ranks): ``@triton.jit`` decides at decoration, from ``TRITON_INTERPRET``, so it is fixed once
kernels exist. Whether a given call is being generated for a GPU is the code generator's to say:
a ``target_builtin`` gets ``target=None`` where no code generator called it (CPU ranks run the
kernel as Python) and the target otherwise -- which matters for Gluon, whose kernels a process
with ``INTERPRETED`` still compiles for GPUs (compile-only checks).
"""

from __future__ import annotations

import functools
import time

__all__ = [
    "CLOCK_ASM",
    "INTERPRETED",
    "InterpreterAtomicError",
    "SM_ID_ASM",
    "Target",
    "aggregate",
    "clock_ns_builtin",
    "gluon_ast_source",
    "gluon_has_barrier",
    "gluon_has_tma_async_load",
    "interpreted",
    "is_kernel",
    "sm_id_builtin",
    "sm_id_reads",
    "target_builtin",
    "target_of",
]


def _triton_version() -> str:
    import triton

    return f"triton {getattr(triton, '__version__', '(unknown version)')}"


# -- the compile target ----------------------------------------------------------------------------


class Target:
    """The target a builtin is being generated for, as the code generator's options name it.

    Each field is read when asked (a builtin that only asks whether it is compiled reads none):
    ``backend`` (``"cuda"``, ``"hip"``), ``arch`` (``"sm90"``, ``"gfx942"``, ...), ``warp_size``,
    ``num_warps`` (the launch's).
    """

    _FIELDS = {"backend": "backend_name", "arch": "arch", "warp_size": "warp_size", "num_warps": "num_warps"}

    def __init__(self, semantic):
        self._semantic = semantic

    def _option(self, name: str):
        options = getattr(getattr(self._semantic, "builder", None), "options", None)
        value = getattr(options, self._FIELDS[name], None)
        if value is None:
            raise RuntimeError(
                f"iris.mem's device code reads the compile target's {name} from the code generator "
                f"(its builder's options.{self._FIELDS[name]}, as in triton 3.6 to 3.9), which "
                f"{_triton_version()} lacks; install a triton that iris.mem supports (3.6 to 3.9)"
            )
        return value

    backend = property(lambda self: self._option("backend"))
    arch = property(lambda self: self._option("arch"))
    warp_size = property(lambda self: int(self._option("warp_size")))
    num_warps = property(lambda self: int(self._option("num_warps")))

    def __repr__(self) -> str:
        return f"Target(semantic={self._semantic!r})"


#: Inline assembly that reads a nanosecond clock, per code generator backend: (asm, constraint,
#: nanoseconds per tick). NVIDIA's global timer counts nanoseconds; AMD's s_memrealtime is a
#: 100 MHz counter, a scalar memory read that must be waited for before its register is used.
CLOCK_ASM = {
    "cuda": ("mov.u64 $0, %globaltimer;", "=l", 1),
    "hip": ("s_memrealtime $0\ns_waitcnt lgkmcnt(0)", "=s", 10),
}

#: Inline assembly that reads the multiprocessor id, per code generator backend: a list of
#: (asm, constraint, shift) whose results combine as ``sum(r_i << shift_i)``. NVIDIA: the SM. AMD:
#: the compute unit, shader array and shader engine (HW_ID bits 15:8), and on gfx94x/gfx95x the
#: accelerator complex die (XCC_ID bits 3:0) above them; s_getreg is a scalar instruction.
SM_ID_ASM = {
    "cuda": [("mov.u32 $0, %smid;", "=r", 0)],
    "hip": [("s_getreg_b32 $0, hwreg(HW_REG_HW_ID, 8, 8)", "=s", 0)],
    "hip-xcc": [("s_getreg_b32 $0, hwreg(HW_REG_HW_ID, 8, 8)", "=s", 0), ("s_getreg_b32 $0, hwreg(HW_REG_XCC_ID, 0, 4)", "=s", 8)],
}  # fmt: skip


def sm_id_reads(target: Target) -> list:
    """The ``SM_ID_ASM`` reads of ``target`` (none where it has no multiprocessor id: 0 is recorded)."""
    if target.backend == "hip":
        arch = str(target.arch)
        if arch.startswith(("gfx94", "gfx95")):
            return SM_ID_ASM["hip-xcc"]
        return SM_ID_ASM["hip"] if arch.startswith("gfx9") else []
    return SM_ID_ASM.get(target.backend, [])


def clock_ns_builtin(lang, layer: str, on_cpu):
    """The builtin a layer's ``clock_ns`` is written on: the clock of wherever the kernel runs, as
    an int64 scalar of ``lang`` (``triton.language`` or Gluon's ``language``, looked up at each call:
    CPU execution patches it).

    ``on_cpu()`` says whether a call runs as Python in the middle of a CPU launch: it then reads the
    host's clock anew at each call (a constexpr function could too, but Triton's dependency scan
    rejects ``time.monotonic_ns`` in one when it compiles). Compiled, the target comes from the code
    generator's options (``backend_name``), which name the target being generated for even in a
    process whose active driver is another or none (compile-only checks); a backend without a
    ``CLOCK_ASM`` entry is a ``NotImplementedError`` naming ``iris.mem.<layer>.clock_ns``.
    """

    def clock_ns_asm(_semantic=None):
        if on_cpu():
            return lang.cast(time.monotonic_ns(), lang.int64)
        backend = target_of(_semantic).backend
        if backend not in CLOCK_ASM:
            raise NotImplementedError(
                f"iris.mem.{layer}.clock_ns (which bounded waits read) was compiled for the {backend!r} backend, "
                f"which has no device clock here; it reads one on {', '.join(CLOCK_ASM)} GPUs and on CPU ranks"
            )
        asm, constraint, ns_per_tick = CLOCK_ASM[backend]
        ticks = lang.inline_asm_elementwise(
            asm, constraint, [], dtype=lang.int64, is_pure=False, pack=1, _semantic=_semantic
        )
        if ns_per_tick == 1:
            return ticks
        return ticks.__mul__(ns_per_tick, _semantic=_semantic)

    clock_ns_asm.__triton_builtin__ = True  # compiled: called with the code generator's _semantic
    return clock_ns_asm


def sm_id_builtin(lang, on_cpu):
    """The builtin a layer's ``tracing.sm_id`` is written on: the multiprocessor the program runs
    on, an int64 scalar of ``lang`` (as for :func:`clock_ns_builtin`).

    0 where ``on_cpu()`` (inline assembly cannot run there) and where the target has no
    multiprocessor id (``sm_id_reads``). Read at every event, not once: NVIDIA documents that
    ``%smid`` may change during execution (preemption may move a program).
    """

    def sm_id_asm(_semantic=None):
        if on_cpu():
            return lang.cast(0, lang.int64)
        out = lang.cast(0, lang.int64, _semantic=_semantic)
        for asm, constraint, shift in sm_id_reads(target_of(_semantic)):
            part = lang.inline_asm_elementwise(
                asm, constraint, [], dtype=lang.int32, is_pure=False, pack=1, _semantic=_semantic
            )
            part = part.to(lang.int64, _semantic=_semantic)
            out = out.__or__(part.__lshift__(shift, _semantic=_semantic), _semantic=_semantic)
        return out

    sm_id_asm.__triton_builtin__ = True  # compiled: called with the code generator's _semantic
    return sm_id_asm


def target_of(semantic) -> Target | None:
    """The target of a builtin called with ``_semantic=semantic``: None where no code generator
    called it (CPU ranks, where kernels run as Python)."""
    return None if semantic is None else Target(semantic)


def target_builtin(fn):
    """``fn(*args, target=...)`` made callable from ``@triton.jit`` / ``@gluon.jit`` code as a builtin.

    Compiled, the code generator calls it with its semantic, and ``target`` is a :class:`Target`
    (so a kernel compiled for AMD on any host reads AMD's); on CPU ranks, where kernels run as
    Python, ``target`` is None. Constexpr arguments arrive as their values; the result is returned
    as a constexpr in both cases.
    """

    def builtin(*args, _semantic=None):
        import triton.language as tl

        values = [a.value if isinstance(a, tl.constexpr) else a for a in args]
        return tl.constexpr(fn(*values, target=target_of(_semantic)))

    functools.update_wrapper(builtin, fn)
    del builtin.__wrapped__  # the signature the code generator inspects is the builtin's own (_semantic)
    builtin.__triton_builtin__ = True  # the code generator passes _semantic only to builtins
    return builtin


# -- the interpreter -------------------------------------------------------------------------------


def _probe():
    pass


@functools.cache
def interpreted() -> bool:
    """Whether ``@triton.jit`` makes interpreted functions in this process (``TRITON_INTERPRET=1``:
    CPU ranks). Probed once, at the first call, by decorating a function and looking at what came
    back; ``INTERPRETED`` is its value."""
    import triton

    return not isinstance(triton.jit(_probe), triton.JITFunction)


def __getattr__(name: str):
    if name == "INTERPRETED":  # at first use, not at import: importing this module imports no triton
        return interpreted()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def is_kernel(obj) -> bool:
    """Whether ``obj`` is a launchable ``@triton.jit`` / ``@gluon.jit`` kernel (interpreted or not)."""
    from triton.runtime.jit import KernelInterface

    return isinstance(obj, KernelInterface)


_ATOMICS = ("atomic_add", "atomic_sub", "atomic_xchg", "atomic_cas", "atomic_and", "atomic_or", "atomic_xor",
            "atomic_min", "atomic_max")  # fmt: skip


class InterpreterAtomicError(TypeError):
    """An atomic that CPU ranks (Triton's interpreter) cannot perform atomically across rank processes.

    The interpreter runs an atomic as a real hardware atomic on the raw address only for 32- and
    64-bit elements; 16-bit floats fall back to a per-process mutex (updates from other processes
    are lost) or are unsupported, and bitwise atomics on floats are unsupported. Rather than a
    silently wrong count, each mem layer raises this when such an atomic is traced on CPU ranks;
    compiled on a GPU every one of them works. ``layer``, ``op`` and ``dtype`` say what was asked,
    ``allowed`` what CPU ranks accept for it.
    """

    #: Element types (Triton's names) whose atomics the interpreter runs as real atomics.
    CROSS_PROCESS = ("int32", "uint32", "int64", "uint64", "fp32", "fp64")
    #: Per layer, the atomics CPU ranks run on integers only. iris.mem.triton exchanges floats as
    #: same-width integers (so its ``atomic_xchg`` takes fp32/fp64); iris.mem.gluon passes the float on.
    INTEGER_ONLY = {
        "triton": ("atomic_and", "atomic_or", "atomic_xor"),
        "gluon": ("atomic_xchg", "atomic_and", "atomic_or", "atomic_xor"),
    }
    #: ``ALLOWED[layer][op]``: the element types CPU ranks accept for ``op`` of ``iris.mem.<layer>``
    #: (the two tables above, combined; data, so that a layer's constexpr function can read it).
    ALLOWED: dict = {}

    def __init__(self, layer: str, op: str, dtype: str):
        self.layer, self.op, self.dtype = layer, op, dtype
        self.allowed = self.ALLOWED[layer][op]
        super().__init__(
            f"iris.mem.{layer}.{op} on {dtype} elements is not atomic across processes on CPU ranks "
            f"(Triton's interpreter, TRITON_INTERPRET=1); it works compiled on a GPU. On CPU ranks use "
            f"{'/'.join(self.allowed)} elements for {op}."
        )

    def __reduce__(self):  # rebuilt from what was asked, wherever it is unpickled (another rank)
        return type(self), (self.layer, self.op, self.dtype)


_INTEGERS = tuple(d for d in InterpreterAtomicError.CROSS_PROCESS if not d.startswith("fp"))
InterpreterAtomicError.ALLOWED.update(
    {
        layer: {op: _INTEGERS if op in integer_only else InterpreterAtomicError.CROSS_PROCESS for op in _ATOMICS}
        for layer, integer_only in InterpreterAtomicError.INTEGER_ONLY.items()
    }
)


# -- release differences (triton 3.6 -> 3.9) -------------------------------------------------------


def aggregate(cls):
    """Make ``cls`` (annotated fields, a plain ``__init__``, ``@jit`` methods) a Triton or Gluon aggregate."""
    from triton.language.core import _aggregate

    init = cls.__dict__.get("__init__")
    if init is not None and not hasattr(init, "__triton_builtin__"):
        init.__triton_builtin__ = True  # 3.6: the code generator calls only builtins
    return _aggregate(cls)


def gluon_ast_source():
    """The ``GluonASTSource`` class (the source of compile-only Gluon builds)."""
    try:
        from triton.experimental.gluon import GluonASTSource
    except ImportError:  # triton 3.6
        from triton.experimental.gluon._runtime import GluonASTSource
    return GluonASTSource


def gluon_has_barrier() -> bool:
    """Whether Gluon spells the CTA barrier ``gl.barrier`` (3.9) rather than ``gl.thread_barrier`` (3.6)."""
    from triton.experimental.gluon import language as gl

    return hasattr(gl, "barrier")


def gluon_has_tma_async_load() -> bool:
    """Whether Hopper's TMA copies are spelled ``tma.async_load`` / ``tma.async_store`` (3.9) rather
    than ``tma.async_copy_global_to_shared`` / ``async_copy_shared_to_global`` (3.6)."""
    from triton.experimental.gluon.language.nvidia.hopper import tma

    return hasattr(tma, "async_load")
