"""CPU execution of Gluon kernels: ``@gluon.jit`` code on CPU ranks, under ``TRITON_INTERPRET=1``.

Gluon kernels do not run under Triton's interpreter (it has no Gluon front end). This module
runs them anyway, by forwarding the Gluon language onto the interpreted Triton language:

* layouts are dropped (``gl.arange(0, N, layout=L)`` is ``tl.arange(0, N)``, ``gl.full``,
  ``gl.zeros``, ``gl.full_like``, ``gl.zeros_like`` likewise) and ``gl.convert_layout`` /
  ``gl.set_auto_layout`` are the identity;
* loads, stores, atomics, ``where``, math, reductions, scans, ``static_range`` ... are Triton's
  own, interpreted (a Gluon tensor *is* a ``triton.language.tensor``);
* ``gl.barrier`` / ``gl.thread_barrier`` are no-ops (a program is one thread on CPU);
  ``gl.num_warps()`` is the launch's ``num_warps`` (default 4), ``gl.num_ctas()`` is 1;
* ``gl.dot_fma`` and ``gl.nvidia.ampere.mma_v2`` (whose operands are registers) are ``tl.dot``
  in IEEE fp32 (``mma_v2`` widens bf16 operands to fp32 first).

What the CPU cannot model raises :class:`UnsupportedOnCPUError` naming the construct: shared
memory (``gl.allocate_shared_memory``), warp specialization, TMA, mbarriers, async copies,
the other MMA instructions (wgmma, tcgen05, MFMA, WMMA, whose operands live in shared or tensor
memory or in target layouts), inline assembly, tensor memory, and every other target intrinsic
under ``gl.nvidia`` / ``gl.amd``.

How it hooks in: :func:`enable` teaches Triton's ``GluonJITFunction`` class to launch through
the interpreter (``kernel[grid](...)``), to call ``@gluon.jit`` device functions as Python while
such a launch runs, and to bind ``@gluon.jit`` methods of aggregates to their instance. Kernel
source is unchanged: ``@gluon.jit`` stays ``@gluon.jit``, whether the kernel was decorated before
or after :func:`enable`. ``import iris.mem.gluon`` calls :func:`enable` when ``TRITON_INTERPRET=1``
(the variable must be set before the process imports triton, as for Triton's own interpreter).

The Gluon language is swapped in only while a CPU launch runs and restored afterwards, so
compile-only work (``triton.compile(GluonASTSource(...), target=...)``) in the same process is
unaffected. Code must reach Gluon through its modules (``gl.arange``, ``tma.async_load``), as
Gluon code does; a builtin imported by name (``from ...gluon.language import arange``) before the
launch is the original and cannot run on CPU.
"""

from __future__ import annotations

import functools
import inspect
import types

import triton
import triton.language as tl
from triton.experimental.gluon import language as gl
from triton.language import core as _tl_core
from triton.runtime import interpreter as _interp
from triton.runtime.errors import InterpreterError
from triton.runtime.jit import JITFunction

__all__ = ["UnsupportedOnCPUError", "active", "enable", "enabled"]

_GLUON_LANGUAGE = gl.__name__  # "triton.experimental.gluon.language"


class UnsupportedOnCPUError(NotImplementedError):
    """A Gluon construct that CPU execution cannot model (shared memory, TMA, MMA, ...)."""


def _jit_function_class():
    # GluonJITFunction lives in triton.experimental.gluon._runtime on every supported release.
    from triton.experimental.gluon import _runtime

    return _runtime.GluonJITFunction


_GluonJITFunction = _jit_function_class()
_ORIGINAL_CALL = _GluonJITFunction.__dict__.get("__call__") or JITFunction.__call__

_enabled = False
_active = 0  # depth of CPU launches in progress (0: none)
_launch_num_warps = 4


def enabled() -> bool:
    """Whether :func:`enable` has installed CPU execution in this process."""
    return _enabled


def active() -> bool:
    """Whether a Gluon kernel is being run on CPU right now (true only inside such a launch)."""
    return _active > 0


def enable() -> None:
    """Run ``@gluon.jit`` kernels on CPU in this process (idempotent; needs ``TRITON_INTERPRET=1``)."""
    global _enabled
    if _enabled:
        return
    if not triton.knobs.runtime.interpret:
        raise RuntimeError(
            "iris.mem.gluon.interpret.enable(): CPU execution of Gluon kernels forwards onto Triton's "
            "interpreter, which is off in this process. Set TRITON_INTERPRET=1 in the environment before "
            "anything imports triton (spawned rank processes inherit it)."
        )
    _GluonJITFunction.run = _run
    _GluonJITFunction.__call__ = _call
    _GluonJITFunction.__get__ = _get
    _enabled = True


# -- the GluonJITFunction hooks ------------------------------------------------------------------


def _run(self, *args, grid, warmup, **kwargs):
    """``kernel[grid](*args, **kwargs)``: every program of the grid, one after another, on CPU."""
    if warmup:
        return None
    return _launch(self, grid, args, kwargs)


def _call(self, *args, **kwargs):
    """A device-function call: inside a CPU launch, run the function's (rewritten) Python."""
    if not _active:
        return _ORIGINAL_CALL(self, *args, **kwargs)
    kwargs.pop("_semantic", None)
    kwargs.pop("_generator", None)
    return _python(self)(*args, **kwargs)


def _get(self, instance, owner=None):
    """``ctx.method``: bound to the aggregate instance inside a CPU launch, the function otherwise."""
    if instance is None or not _active:
        return self
    return functools.partial(_call, self, instance)


def _python(jit_fn):
    """The function's Python, rewritten as Triton's interpreter rewrites it (cached on the object)."""
    fn = jit_fn.__dict__.get("_iris_cpu_fn")
    if fn is None:
        fn = _interp.FunctionRewriter(jit_fn.fn).rewrite_ast()
        jit_fn._iris_cpu_fn = fn
    return fn


def _launch(jit_fn, grid, args, kwargs):
    global _active, _launch_num_warps
    fn = _python(jit_fn)
    g = fn.__globals__
    if not any(inspect.ismodule(v) and v in (tl, _tl_core) for v in g.values()):
        g["__iris_triton_language__"] = tl  # the interpreter's executor looks for triton.language here
    executor = _interp.GridExecutor(fn, jit_fn.arg_names, grid, jit_fn.pre_run_hooks)
    # Constexpr-ness as the JIT function parsed it (string annotations such as "gl.constexpr" too).
    executor.constexprs = [p.name for p in jit_fn.params if p.is_constexpr]
    saved = (_active, _launch_num_warps, _interp._patch_lang)
    scopes = []
    try:
        # triton.language and triton.language.core, once for the whole launch: the executor and
        # nested interpreted calls (tl.sum, ...) find them patched already.
        scopes.append(saved[2](_anchor))
        # A scalar's data is a 1-element array; triton 3.6's int() of it fails on numpy >= 2.4.
        scopes[0].set_attr(tl.tensor, "__index__", _index)
        scopes.append(_patch_gluon())
        _interp._patch_lang = _patched_already
        _active += 1
        _launch_num_warps = int(kwargs.get("num_warps") or 4)
        executor(*args, **kwargs)
    except InterpreterError as e:
        unsupported = _find_cause(e, UnsupportedOnCPUError)
        if unsupported is not None:
            raise unsupported from None  # its traceback runs through the kernel's line
        raise
    finally:
        _active, _launch_num_warps, _interp._patch_lang = saved
        for scope in reversed(scopes):
            scope.restore()


def _index(self):
    return int(self.handle.data.reshape(-1)[0]) if self.handle.data.size == 1 else int(self.handle.data)


def _patched_already(fn):
    """Stands in for the interpreter's language patching while a CPU launch has it patched."""
    return _Scope()


def _anchor():
    """Never called: its module globals show the interpreter both triton.language and its core."""
    return tl, _tl_core


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
    return _launch_num_warps


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
}

#: Target intrinsics the CPU runs anyway, by their qualified names: register-operand MMA is a dot.
_TARGET_SPECIAL = {
    "gl.nvidia.ampere.mma_v2": _register_dot,
}

#: Root-level Gluon constructs the CPU cannot model, with what they are.
_UNSUPPORTED = {
    "allocate_shared_memory": "shared memory",
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


class _Scope:
    def __init__(self):
        self._saved = []

    def set(self, obj, name, value):
        self._saved.append((obj, name, obj.__dict__.get(name, _MISSING)))
        setattr(obj, name, value)

    def restore(self):
        while self._saved:
            obj, name, old = self._saved.pop()
            if old is _MISSING:
                delattr(obj, name)
            else:
                setattr(obj, name, old)


_MISSING = object()


def _patch_gluon() -> _Scope:
    scope = _Scope()
    for module, name, replacement in _plan():
        scope.set(module, name, replacement)
    return scope
