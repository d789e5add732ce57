"""Kernel launches with less host time than ``kernel[grid](*args, **constexprs)``, on GPUs.

A JIT launch re-derives the kernel's specialization from every argument, builds a cache key
from it and looks the compiled kernel up on every call. For the collectives' kernels (about
twenty arguments) that path costs the host more than the kernels themselves take for small
messages (BENCHMARKS.md, section "iris.ccl (Triton backend): collectives against the copy
roofline"), so a loop of collectives would run at the speed of the host's launch path.

Here the first call of a kernel with a given *shape* of arguments goes through the JIT (which
compiles if needed and returns the compiled kernel); later calls of the same shape launch that
compiled kernel directly. The shape is at least as fine as Triton's own specialization: each
tensor's dtype and whether its address is a multiple of 16, each integer's ``== 1``,
``% 16 == 0`` and 32-bit range, every constexpr, the grid and the device. So a cached kernel is
only reused where the JIT would pick the same one. Anything unexpected (an argument type not
listed, a Triton whose compiled kernels launch differently) turns the shortcut off for that kernel
and launches through the JIT, which is always correct.

``bind`` goes one step further for a launch that will be repeated with the same arguments (the
collectives' recorded plans): every argument is fixed, pointers as plain addresses, so a repeat
costs the host one call of the compiled kernel's launcher (no ``data_ptr`` calls, no pointer
queries to the driver, no launch hooks while none are installed).
"""

from __future__ import annotations

import os

import torch

from . import _internals

__all__ = ["DIRECT_LAUNCH", "positional", "launch", "bind", "Bound", "hooks_idle", "stream"]

#: Launch compiled kernels directly after the first call of each argument shape: the JIT's own
#: dispatch costs the host more than a small collective takes on the GPU. Set the environment
#: variable ``IRIS_CCL_DIRECT_LAUNCH=0`` to launch every call through the JIT (read at each launch,
#: so a test may switch it).
DIRECT_LAUNCH = os.environ.get("IRIS_CCL_DIRECT_LAUNCH", "1") != "0"

_compiled: dict = {}  # shape key -> (compiled kernel, constexpr values in signature order)
_parameters: dict = {}  # kernel -> _internals.parameters(kernel)
_unsupported: set = set()  # kernels that always take the JIT path
_INT32 = range(-(2**31), 2**31)


def positional(kernel, arguments: dict) -> tuple[tuple, dict]:
    """``arguments`` (by name) as ``kernel`` takes them: its runtime arguments in signature order,
    and its constexprs. ``TypeError`` naming any argument it lacks or does not know."""
    params = _parameters.get(kernel)
    if params is None:
        params = _parameters[kernel] = _internals.parameters(kernel)
    args, constexprs = [], {}
    for name, constexpr, default in params:
        if name in arguments:
            if constexpr:
                constexprs[name] = arguments[name]
            else:
                args.append(arguments[name])
        elif not constexpr or default is _internals.NO_DEFAULT:
            raise TypeError(f"{kernel.__name__}: no value for its parameter {name!r}")
    if len(args) + len(constexprs) != len(arguments):
        unknown = sorted(set(arguments) - {name for name, _, _ in params})
        raise TypeError(f"{kernel.__name__} has no parameter {', '.join(map(repr, unknown))}")
    return tuple(args), constexprs


def _shape(args: tuple) -> tuple:
    """Per argument: a tensor's dtype and 16-byte alignment, an int's ``== 1`` / ``% 16 == 0`` /
    32-bit range; ``TypeError`` for anything else (no shortcut)."""
    key = []
    for v in args:
        if type(v) is int:
            key.append((v == 1, v % 16 == 0, v in _INT32))
        elif isinstance(v, torch.Tensor):
            key.append(v.dtype)
            key.append(v.data_ptr() % 16 == 0)
        else:
            raise TypeError(type(v).__name__)
    return tuple(key)


def _constexpr_tail(kernel, nargs: int, constexprs: dict):
    """The constexpr values after the ``nargs`` positional arguments, in signature order; None
    when the signature is not (positional arguments, then only constexprs)."""
    try:
        params = _internals.parameters(kernel)
    except TypeError:
        return None
    if len(params) < nargs or any(constexpr for _, constexpr, _ in params[:nargs]):
        return None
    tail = []
    for name, constexpr, default in params[nargs:]:
        if not constexpr:
            return None
        if name in constexprs:
            tail.append(constexprs[name])
        elif default is not _internals.NO_DEFAULT:
            tail.append(default)
        else:
            return None
    return tuple(tail)


stream = _internals.raw_stream  # the raw handle of a device's current stream (what Triton's own launch passes)


def launch(kernel, grid: tuple[int, ...], args: tuple, constexprs: dict, num_warps: int) -> None:
    """``kernel[grid](*args, num_warps=num_warps, **constexprs)`` on the current CUDA device."""
    if kernel not in _unsupported:
        try:
            device = _internals.current_device()
            key = (kernel, grid, device, num_warps, tuple(constexprs.items()), _shape(args))
        except TypeError:  # an argument (or constexpr) the shortcut does not know how to key
            key = None
        if key is not None:
            hit = _compiled.get(key)
            if hit is not None:
                compiled, tail = hit
                try:
                    _internals.run_compiled(compiled, (*grid, 1, 1)[:3], (*args, *tail), stream(device))
                    return
                except TypeError:  # this Triton's compiled kernels take their arguments differently
                    _unsupported.add(kernel)
                    _compiled.pop(key, None)
            compiled = kernel[grid](*args, num_warps=num_warps, **constexprs)
            tail = _constexpr_tail(kernel, len(args), constexprs)
            if tail is None or compiled is None:
                _unsupported.add(kernel)
            else:
                _compiled[key] = (compiled, tail)
            return
    kernel[grid](*args, num_warps=num_warps, **constexprs)


class Bound:
    """One launch with every argument fixed: ``bound(stream)`` queues it on ``stream`` (a raw CUDA
    stream), as ``bound.run(*bound.grid, stream, *bound.tail)`` does (what a plan calls itself).

    Calls the compiled kernel's launcher without launch metadata or hooks
    (``_internals.bare_launcher``): use it only while ``hooks_idle()``.
    """

    __slots__ = ("run", "grid", "tail")

    def __init__(self, run, grid: tuple[int, int, int], tail: tuple):
        self.run, self.grid, self.tail = run, grid, tail

    def __call__(self, stream: int) -> None:
        self.run(*self.grid, stream, *self.tail)


def bind(kernel, grid: tuple[int, ...], args: tuple, constexprs: dict, num_warps: int) -> Bound | None:
    """The launch that ``launch`` just made with these arguments, fixed for repeating; None when
    it did not go through a compiled kernel (the JIT path) or this Triton's kernels lack what
    ``Bound`` calls."""
    try:
        key = (kernel, grid, _internals.current_device(), num_warps, tuple(constexprs.items()), _shape(args))
    except TypeError:
        return None
    hit = _compiled.get(key)
    if hit is None:
        return None
    compiled, tail = hit
    launcher = _internals.bare_launcher(compiled)
    if launcher is None:
        return None
    run, head = launcher
    fixed = tuple(a.data_ptr() if isinstance(a, torch.Tensor) else a for a in args)
    return Bound(run, (*grid, 1, 1)[:3], (*head, *fixed, *tail))


#: Whether no launch hook is installed (a profiler such as proton installs them): ``Bound`` skips
#: the hooks, so callers take the full launch path while any is there.
hooks_idle = _internals.launch_hooks_idle
