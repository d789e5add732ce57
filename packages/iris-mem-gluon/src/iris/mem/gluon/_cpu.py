"""CPU execution of Gluon kernels: ``@gluon.jit`` code on CPU ranks, under ``TRITON_INTERPRET=1``,
inside an explicit scope (:class:`interpret`).

Gluon kernels do not run under Triton's interpreter (it has no Gluon front end). Inside
:class:`interpret` they run anyway, by forwarding the Gluon language onto the interpreted Triton
language:

* layouts are dropped (``gl.arange(0, N, layout=L)`` is ``tl.arange(0, N)``, ``gl.full``,
  ``gl.zeros``, ``gl.full_like``, ``gl.zeros_like`` likewise) and ``gl.convert_layout`` /
  ``gl.set_auto_layout`` are the identity;
* loads, stores, atomics, ``where``, math, reductions, scans, ``static_range`` ... are Triton's
  own, interpreted (a Gluon tensor *is* a ``triton.language.tensor``);
* ``gl.barrier`` / ``gl.thread_barrier`` are no-ops (a program is one thread on CPU);
  ``gl.num_warps()`` is the launch's ``num_warps`` (default 4), ``gl.num_ctas()`` is 1;
* ``gl.dot_fma`` and ``gl.nvidia.ampere.mma_v2`` (whose operands are registers) are ``tl.dot``
  in IEEE fp32 (``mma_v2`` widens bf16 operands to fp32 first);
* Hopper's primitives have CPU meanings (``_cpu_hopper``): shared memory is a buffer of the
  program, a TMA copy moves its tile at once, ``warpgroup_mma`` is ``tl.dot``, fences do nothing
  (a copy is complete when its call returns), and mbarriers keep their phases and byte counts as
  on the GPU: a Hopper kernel's data movement, arithmetic and single-program synchronization run
  on CPU ranks (a wait that would hang raises, as does a copy into a slot an MMA still reads).

What the CPU cannot model raises :class:`UnsupportedOnCPUError` naming the construct: warp
specialization, Ampere's async copies, the other MMA instructions (tcgen05, MFMA, WMMA, whose
operands live in tensor memory or in target layouts), Blackwell's and AMD's TMA and tensor
movers, inline assembly, tensor memory, and every other target intrinsic under ``gl.nvidia`` /
``gl.amd``.

What is patched, and for how long. Importing ``iris.mem.gluon`` patches nothing. While a thread
is inside :class:`interpret` (and ``TRITON_INTERPRET=1``), Triton's ``GluonJITFunction`` class
launches through the interpreter (``kernel[grid]``), calls ``@gluon.jit`` device functions as
Python while such a launch runs, and binds ``@gluon.jit`` methods of aggregates to their
instance; each hook acts for the threads inside the scope only, and the class gets back its own
attributes when the last thread leaves. The Gluon language itself (``gl.*``) is swapped only
while a CPU launch runs, so compile-only work (``triton.compile(GluonASTSource(...), ...)``),
even inside the scope, is unaffected. Kernel source is unchanged: ``@gluon.jit`` stays
``@gluon.jit``, whenever the kernel was decorated. Code must reach Gluon through its modules
(``gl.arange``, ``tma.async_load``), as Gluon code does; a builtin imported by name
(``from ...gluon.language import arange``) is the original and cannot run on CPU.
"""

from __future__ import annotations

import functools
import inspect
import threading
import types
import weakref

import triton.language as tl
from triton.experimental.gluon import language as gl
from triton.language import core as _tl_core
from triton.runtime import interpreter as _interp
from triton.runtime.errors import InterpreterError
from triton.runtime.jit import JITFunction

from iris.mem import common as _compat

from . import _cpu_hopper

__all__ = ["UnsupportedOnCPUError", "interpret"]

_GLUON_LANGUAGE = gl.__name__  # "triton.experimental.gluon.language"


class UnsupportedOnCPUError(NotImplementedError):
    """A Gluon construct that CPU execution cannot model (shared memory, TMA, MMA, ...)."""


def _jit_function_class():
    # GluonJITFunction lives in triton.experimental.gluon._runtime on every supported release.
    from triton.experimental.gluon import _runtime

    return _runtime.GluonJITFunction


_GluonJITFunction = _jit_function_class()


class _LaunchState(threading.local):
    launches = 0  # depth of CPU launches in progress on this thread (0: none)
    num_warps = 4  # the innermost launch's num_warps (gl.num_warps())


#: Per thread; ``ops`` reads ``launches`` (an attribute, which Triton's dependency scan accepts).
_state = _LaunchState()

#: ``GluonJITFunction``'s own attributes before the hooks (None: inherited or absent); the hooks
#: fall back to what a lookup finds without them for threads outside the scope.
_originals: dict = {}


def _install_hooks(set_attr) -> None:
    for name in ("run", "__call__", "__get__"):
        _originals[name] = getattr(_GluonJITFunction, name, None)
    set_attr(_GluonJITFunction, "run", _run)
    set_attr(_GluonJITFunction, "__call__", _call)
    set_attr(_GluonJITFunction, "__get__", _get)


_HOOKS = _compat.Patches("iris.mem.gluon: GluonJITFunction on CPU", _install_hooks)


class interpret(_compat.Scope):  # noqa: N801 - used like a function: with interpret(), @interpret()
    """Run Gluon kernels on CPU ranks (Triton's interpreter, ``TRITON_INTERPRET=1``) inside this scope.

    >>> with iris.mem.gluon.interpret():
    ...     kernel[grid](x, heap.context, BLOCK=1024, L=layout)

    >>> @iris.mem.gluon.interpret()     # every launch of this kernel runs inside the scope
    ... @gluon.jit
    ... def kernel(...): ...

    As a decorator of a host function, the function runs inside. Without ``TRITON_INTERPRET=1``
    it changes nothing (kernels compile for the GPU), so the same code serves GPUs and CPU ranks;
    the variable must be set before the process imports triton, as for Triton's interpreter.
    Outside the scope Gluon behaves as if Iris were not imported. Re-entrant; per thread (other
    threads' launches are untouched, but Triton's interpreter swaps ``triton.language`` for the
    whole process while a launch runs, so run CPU ranks as processes). Everything patched is
    restored on exit, exceptions included.
    """

    patches = (_compat.SCALAR_INDEX, _HOOKS)

    @staticmethod
    def active() -> bool:
        """Whether a Gluon kernel is being run on CPU on this thread right now (inside a launch)."""
        return _state.launches > 0


# -- the GluonJITFunction hooks ------------------------------------------------------------------


def _run(self, *args, grid, warmup, **kwargs):
    """``kernel[grid](*args, **kwargs)``: every program of the grid, one after another, on CPU."""
    if not _HOOKS.inside():
        return _originals["run"](self, *args, grid=grid, warmup=warmup, **kwargs)
    if warmup:
        return None
    return _launch(self, grid, args, kwargs)


def _call(self, *args, **kwargs):
    """A device-function call: inside a CPU launch, run the function's (rewritten) Python."""
    if not _state.launches:
        return _originals["__call__"](self, *args, **kwargs)
    kwargs.pop("_semantic", None)
    kwargs.pop("_generator", None)
    return _python(self)(*args, **kwargs)


def _get(self, instance, owner=None):
    """``ctx.method``: bound to the aggregate instance inside a CPU launch, the function otherwise."""
    if instance is None or not _state.launches:
        original = _originals["__get__"]
        return self if original is None else original(self, instance, owner)
    return functools.partial(_call, self, instance)


_rewritten = weakref.WeakKeyDictionary()  # jit function -> its Python, rewritten for the interpreter


def _python(jit_fn):
    """The function's Python, rewritten as Triton's interpreter rewrites it (cached per function)."""
    fn = _rewritten.get(jit_fn)
    if fn is None:
        fn = _rewritten[jit_fn] = _interp.FunctionRewriter(jit_fn.fn).rewrite_ast()
    return fn


def _launch(jit_fn, grid, args, kwargs):
    _cpu_hopper.reset()
    fn = _python(jit_fn)
    g = fn.__globals__
    if not any(inspect.ismodule(v) and v in (tl, _tl_core) for v in g.values()):
        g["__iris_triton_language__"] = tl  # the interpreter's executor looks for triton.language here
    executor = _interp.GridExecutor(fn, jit_fn.arg_names, grid, jit_fn.pre_run_hooks)
    # Constexpr-ness as the JIT function parsed it (string annotations such as "gl.constexpr" too).
    executor.constexprs = [p.name for p in jit_fn.params if p.is_constexpr]
    saved = (_state.launches, _state.num_warps, _interp._patch_lang)
    scopes = []
    try:
        # triton.language and triton.language.core, once for the whole launch: the executor and
        # nested interpreted calls (tl.sum, ...) find them patched already (with the scalar index
        # fix of iris.mem.common.SCALAR_INDEX, which interpret() holds, where the release needs it).
        scopes.append(saved[2](_compat.both_languages()))
        scopes.append(_patch_gluon())
        _interp._patch_lang = _patched_already
        _state.launches += 1
        _state.num_warps = int(kwargs.get("num_warps") or 4)
        executor(*args, **kwargs)
    except InterpreterError as e:
        unsupported = _find_cause(e, UnsupportedOnCPUError)
        if unsupported is not None:
            raise unsupported from None  # its traceback runs through the kernel's line
        raise
    finally:
        _state.launches, _state.num_warps, _interp._patch_lang = saved
        for scope in reversed(scopes):
            scope.restore()


def _patched_already(fn):
    """Stands in for the interpreter's language patching while a CPU launch has it patched."""
    return _compat.Saved()


def _find_cause(exc, kind):
    seen = set()
    while exc is not None and id(exc) not in seen:
        if isinstance(exc, kind):
            return exc
        seen.add(id(exc))
        exc = exc.__cause__ or exc.__context__
    return None


# -- the Gluon language on CPU -------------------------------------------------------------------


def _strip(kwargs):
    kwargs.pop("_semantic", None)
    kwargs.pop("_generator", None)
    return kwargs


def _forward(name):
    """``gl.<name>`` -> the interpreted ``tl.<name>`` (looked up at call time: patched then)."""
    owner = tl if hasattr(tl, name) else tl.math

    def forward(*args, **kwargs):
        return getattr(owner, name)(*args, **_strip(kwargs))

    forward.__name__ = forward.__qualname__ = name
    return forward


def _arange(start, end, layout=None, **kwargs):
    return tl.arange(start, end)


def _full(shape, value, dtype, layout=None, **kwargs):
    return tl.full(shape, value, dtype)


def _zeros(shape, dtype, layout=None, **kwargs):
    return tl.full(shape, 0, dtype)


def _full_like(input, value, shape=None, dtype=None, layout=None, **kwargs):
    return tl.full(input.shape if shape is None else shape, value, input.dtype if dtype is None else dtype)


def _zeros_like(input, shape=None, dtype=None, layout=None, **kwargs):
    return _full_like(input, 0, shape=shape, dtype=dtype)


def _same_value(value, layout=None, assert_trivial=False, **kwargs):
    return value


def _histogram(input, num_bins, mask=None, layout=None, **kwargs):
    return tl.histogram(input, num_bins, mask=mask)


def _unwrap(x):
    return x.value if isinstance(x, tl.constexpr) else x


def _load(pointer, mask=None, other=None, boundary_check=(), padding_option="", cache_modifier=None,
          eviction_policy=None, volatile=False, cache_policy=None, **kwargs):  # fmt: skip
    extra = {}
    if _unwrap(boundary_check):
        extra.update(boundary_check=boundary_check, padding_option=padding_option)
    return tl.load(pointer, mask=mask, other=other, cache_modifier=_unwrap(cache_modifier) or "",
                   eviction_policy=_unwrap(eviction_policy) or "", volatile=_unwrap(volatile), **extra)  # fmt: skip


def _store(pointer, value, mask=None, boundary_check=(), cache_modifier=None, eviction_policy=None,
           cache_policy=None, **kwargs):  # fmt: skip
    extra = {"boundary_check": boundary_check} if _unwrap(boundary_check) else {}
    return tl.store(pointer, value, mask=mask, cache_modifier=_unwrap(cache_modifier) or "",
                    eviction_policy=_unwrap(eviction_policy) or "", **extra)  # fmt: skip


def _barrier(*args, **kwargs):
    return None  # one thread runs a program on CPU: there is nothing to wait for


def _num_warps(**kwargs):
    return _state.num_warps


def _num_ctas(**kwargs):
    return 1


def _static_range(*args, **kwargs):
    return tl.static_range(*args, **_strip(kwargs))


def _register_dot(a, b, acc, input_precision=None, **kwargs):
    """``gl.dot_fma`` and ``gl.nvidia.ampere.mma_v2``: ``acc + a @ b`` with register operands, as
    ``tl.dot`` (IEEE fp32).

    bf16 operands are widened to fp32 first (exactly): the interpreter's ``tl.dot`` would multiply
    bf16 as its raw 16-bit integers."""
    if a.dtype == tl.bfloat16:
        a = a.to(tl.float32)
    if b.dtype == tl.bfloat16:
        b = b.to(tl.float32)
    return tl.dot(a, b, acc, input_precision="ieee")


_SPECIAL = {
    "arange": _arange,
    "full": _full,
    "zeros": _zeros,
    "full_like": _full_like,
    "zeros_like": _zeros_like,
    "convert_layout": _same_value,
    "set_auto_layout": _same_value,
    "histogram": _histogram,
    "load": _load,
    "store": _store,
    "barrier": _barrier,
    "thread_barrier": _barrier,
    "num_warps": _num_warps,
    "num_ctas": _num_ctas,
    "dot_fma": _register_dot,
    "static_range": _static_range,
    **_cpu_hopper.SPECIAL,
}

#: Target intrinsics the CPU runs anyway, by their qualified names: register-operand MMA is a dot.
_TARGET_SPECIAL = {
    "gl.nvidia.ampere.mma_v2": _register_dot,
    **_cpu_hopper.TARGET_SPECIAL,
}

#: Root-level Gluon constructs the CPU cannot model, with what they are.
_UNSUPPORTED = {
    "warp_specialize": "warp specialization",
    "bank_conflicts": "shared-memory bank-conflict queries",
    "to_linear_layout": "linear-layout queries",
    "inline_asm": "inline assembly",
    "inline_asm_elementwise": "inline assembly",
    "fp4_to_fp": "fp4 conversion",
}

#: What a target intrinsic is, from words in its qualified name (first match wins).
_CONSTRUCTS = (
    ("warp_specialize", "warp specialization"),
    ("warp_pipeline", "warp pipelining"),
    ("tcgen05", "MMA (tcgen05)"),
    ("warpgroup_mma", "MMA (wgmma)"),
    ("mfma", "MMA (MFMA)"),
    ("wmma", "MMA (WMMA)"),
    ("mma", "MMA"),
    ("tma", "TMA"),
    ("tdm", "the tensor data mover (TDM)"),
    ("mbarrier", "mbarriers"),
    ("async_copy", "async copies"),
    ("async", "async copies"),
    ("tensor_memory", "tensor memory"),
    ("shared", "shared memory"),
    ("cluster", "thread-block clusters"),
    ("clc", "cluster launch control"),
    ("buffer_", "AMD buffer operations"),
    ("fpsan", "the floating-point sanitizer"),
)


def _construct_of(qualname: str) -> str:
    for word, what in _CONSTRUCTS:
        if word in qualname:
            return what
    return "target-specific intrinsics"


def _unsupported(qualname: str, what: str):
    def unsupported(*args, **kwargs):
        raise UnsupportedOnCPUError(
            f"{qualname} ({what}) cannot run on CPU ranks: iris.mem.gluon's CPU execution forwards the "
            f"layout-agnostic part of Gluon (elementwise math, masks, loads, stores, atomics, reductions, "
            f"loops) onto Triton's interpreter, and the CPU has no {what}. Run this kernel on a GPU, or "
            f"keep the code that must run on CPU ranks to that subset."
        )

    unsupported.__name__ = unsupported.__qualname__ = qualname.rsplit(".", 1)[-1]
    return unsupported


def _is_code(value) -> bool:
    """A Gluon builtin or ``@gluon.jit`` function (not a class, dtype, layout or constexpr function)."""
    if inspect.isclass(value):
        return False
    return bool(getattr(value, "__triton_builtin__", False)) or isinstance(value, JITFunction)


def _root_replacement(name, value):
    if name in _SPECIAL:
        return _SPECIAL[name]
    if name in _UNSUPPORTED:
        return _unsupported(f"gl.{name}", _UNSUPPORTED[name])
    if hasattr(tl, name) or hasattr(tl.math, name):
        return _forward(name)
    return _unsupported(f"gl.{name}", "a Gluon construct without a Triton counterpart")


@functools.lru_cache(maxsize=1)
def _plan() -> tuple:
    """(module, name, replacement) for every Gluon builtin a kernel can reach (computed once)."""
    plan = []
    root_modules = [gl] + [getattr(gl, m) for m in ("_core", "_standard", "_math") if hasattr(gl, m)]
    by_identity = {}
    for module in root_modules:
        for name, value in vars(module).items():
            if name.startswith("_") or not (_is_code(value) or name == "static_range"):
                continue
            replacement = _root_replacement(name, value)
            plan.append((module, name, replacement))
            by_identity.setdefault(id(value), replacement)
    seen = {id(m) for m in root_modules}
    stack = [getattr(gl, m) for m in ("nvidia", "amd", "fpsan") if hasattr(gl, m)]
    while stack:
        module = stack.pop()
        if id(module) in seen:
            continue
        seen.add(id(module))
        short = "gl" + module.__name__[len(_GLUON_LANGUAGE) :]
        for name, value in vars(module).items():
            if name.startswith("_"):
                continue
            if isinstance(value, types.ModuleType):
                if value.__name__.startswith(_GLUON_LANGUAGE + "."):
                    stack.append(value)
                continue
            if not _is_code(value):
                continue
            if id(value) in by_identity:  # a root builtin re-exported by a target module
                plan.append((module, name, by_identity[id(value)]))
                continue
            qualname = f"{short}.{name}"
            replacement = _TARGET_SPECIAL.get(qualname) or _unsupported(qualname, _construct_of(qualname))
            plan.append((module, name, replacement))
    return tuple(plan)


def _patch_gluon() -> _compat.Saved:
    scope = _compat.Saved()
    for module, name, replacement in _plan():
        scope.set(module, name, replacement)
    return scope
