"""Every private torch and Triton internal that iris.ccl touches, each behind a feature check.

The rest of iris.ccl uses public APIs and these functions only, so a release that moves one of
them breaks one function here, with a fallback or an error naming the release, not a collective.
``tests/test_ccl_internals.py`` checks each on the Triton releases iris.ccl supports (3.6, 3.9).

=====================  ===================================================  ==============================
function               what it reaches into                                 where it is missing
=====================  ===================================================  ==============================
``current_device``     ``torch._C._cuda_getDevice`` (no lazy-init check)    ``torch.cuda.current_device``
``raw_stream``         ``torch._C._cuda_getCurrentRawStream``               ``torch.cuda.current_stream``
``parameters``         a JIT function's ``params`` (the interpreter's       ``TypeError`` naming Triton
                       ``fn`` signature)
``run_compiled``       ``CompiledKernel[grid](*args, stream=)``             ``TypeError``: the JIT path
``bare_launcher``      ``CompiledKernel.run`` / ``function`` /              None: the full launch path
                       ``packed_metadata``
``launch_hooks_idle``  ``triton.knobs.runtime.launch_{enter,exit}_hook``    False: the full launch path
``resources``          ``CompiledKernel._init_handles``, ``n_regs``,        None: one program per SM
                       ``metadata.shared``
=====================  ===================================================  ==============================

The builtin through which the Gluon kernels read the compile target's warp size is
``iris.mem.common.target.target_builtin`` (the mem layers' fence, tabled and tested there).

The torch probes run once, at import (a ``getattr``, which changes nothing), as does the import
of ``triton.knobs``; the others at each call, on the object at hand.
"""

from __future__ import annotations

import inspect

import torch

try:  # read at every call's plan lookup: imported once
    from triton import knobs as _knobs
except ImportError:  # a Triton without knobs: its hooks cannot be checked
    _knobs = None

__all__ = [
    "NO_DEFAULT",
    "bare_launcher",
    "current_device",
    "launch_hooks_idle",
    "parameters",
    "raw_stream",
    "resources",
    "run_compiled",
]

#: ``parameters``' default of a parameter without one.
NO_DEFAULT = inspect.Parameter.empty


def _triton_version() -> str:
    import triton

    return f"triton {getattr(triton, '__version__', '(unknown version)')}"


# -- torch ------------------------------------------------------------------------------------------

#: The current device's index without ``torch.cuda.current_device``'s lazy-init check: a plan's
#: key is built on every call, so its host cost counts. Missing (CPU builds): the public call.
_cuda_get_device = getattr(torch._C, "_cuda_getDevice", None) or torch.cuda.current_device
#: What Triton's own launch asks torch for the stream (a raw handle, no ``Stream`` object).
_cuda_raw_stream = getattr(torch._C, "_cuda_getCurrentRawStream", None)


def current_device() -> int:
    """The index of the current CUDA device."""
    return _cuda_get_device()


def _public_raw_stream(device_index: int) -> int:
    return torch.cuda.current_stream(device_index).cuda_stream


#: ``raw_stream(device_index)``: the raw handle of that device's current CUDA stream (what a
#: compiled kernel's launcher takes); torch's own function where it has one (no Python frame).
raw_stream = _cuda_raw_stream if _cuda_raw_stream is not None else _public_raw_stream


# -- Triton: kernels and their compiled launches ----------------------------------------------------


def parameters(kernel) -> tuple[tuple[str, bool, object], ...]:
    """``(name, is constexpr, default or inspect.Parameter.empty)`` of each of ``kernel``'s
    parameters, in order: a ``@triton.jit`` / ``@gluon.jit`` function's own view (``params``), or,
    for the interpreter's functions, the Python signature's (constexprs annotated ``tl.constexpr``)."""
    params = getattr(kernel, "params", None)
    if params is not None and all(hasattr(p, a) for p in params for a in ("name", "is_constexpr")):
        return tuple(
            (p.name, bool(p.is_constexpr), p.default if getattr(p, "has_default", False) else NO_DEFAULT)
            for p in params
        )
    fn = getattr(kernel, "fn", None)
    if not callable(fn):
        raise TypeError(
            f"cannot read the parameters of {kernel!r} on {_triton_version()}: it has neither a JIT "
            "function's params nor an interpreted function's fn; iris.ccl supports triton 3.6 to 3.9"
        )
    import triton.language as tl

    return tuple(
        (name, p.annotation is tl.constexpr or "constexpr" in str(p.annotation), p.default)
        for name, p in inspect.signature(fn).parameters.items()
    )


def run_compiled(compiled, grid: tuple[int, int, int], args: tuple, stream: int) -> None:
    """Launch the compiled kernel that a JIT launch returned, with its own runner (launch hooks
    included). ``TypeError`` when this Triton's compiled kernels cannot be launched this way."""
    if not hasattr(type(compiled), "__getitem__"):
        raise TypeError(f"{_triton_version()}'s compiled kernels have no launcher by grid")
    compiled[grid](*args, stream=stream)


def bare_launcher(compiled) -> tuple | None:
    """``(run, fixed)``: ``run(gx, gy, gz, stream, *fixed, *args)`` queues ``compiled`` as its runner
    (``run_compiled``) does, without launch metadata or hooks (so only while
    ``launch_hooks_idle()``); None when this Triton's compiled kernels lack what it calls, or the
    kernel is not loaded yet. (A pair, not a function: a planned collective calls ``run`` itself,
    one Python call fewer per launch.)"""
    if not all(hasattr(compiled, a) for a in ("run", "function", "packed_metadata")) or compiled.function is None:
        return None
    return compiled.run, (compiled.function, compiled.packed_metadata, None, None, None)


def launch_hooks_idle() -> bool:
    """Whether no launch hook is installed (a profiler such as proton installs them); False when
    this Triton does not say (``bare_launcher`` skips hooks, so callers then take the full path)."""
    runtime = getattr(_knobs, "runtime", None)
    try:  # triton 3.6 to 3.9: two HookChains, idle while neither holds a hook (one check per planned call)
        return not (runtime.launch_enter_hook.calls or runtime.launch_exit_hook.calls)
    except AttributeError:  # a hook assigned directly, None, or another Triton: look at each
        pass
    for name in ("launch_enter_hook", "launch_exit_hook"):
        if not hasattr(runtime, name):
            return False
        hook = getattr(runtime, name)
        if hook is not None and getattr(hook, "calls", True):
            return False
    return True


def resources(compiled) -> tuple[int, int] | None:
    """(registers per thread, bytes of shared memory per program) of a compiled kernel (loading
    it on the current device); None when this Triton's compiled kernels do not say."""
    load = getattr(compiled, "_init_handles", None)
    if load is None:
        return None
    load()
    regs = getattr(compiled, "n_regs", None)
    shared = getattr(getattr(compiled, "metadata", None), "shared", None)
    if regs is None or shared is None:
        return None
    return int(regs), int(shared)
