"""Kernel launches with less host time than ``kernel[grid](*args, **constexprs)``, on GPUs.

A JIT launch re-derives the kernel's specialization from every argument, builds a cache key
from it and looks the compiled kernel up on every call. For the collectives' kernels (about
twenty arguments) that path costs the host tens of microseconds per call on the H200 host: more
than the kernels themselves take for small messages, so a loop of collectives ran at the speed
of the host's launch path.

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

import torch

try:
    from triton import knobs as _knobs
except ImportError:  # a Triton without knobs: its hooks cannot be checked (hooks_idle says False)
    _knobs = None

__all__ = ["launch", "bind", "Bound", "hooks_idle", "stream"]

_compiled: dict = {}  # shape key -> (compiled kernel, constexpr values in signature order)
_unsupported: set = set()  # kernels that always take the JIT path
_INT32 = range(-(2**31), 2**31)


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
    params = getattr(kernel, "params", None)
    if params is None or len(params) < nargs or any(p.is_constexpr for p in params[:nargs]):
        return None
    tail = []
    for p in params[nargs:]:
        if not p.is_constexpr:
            return None
        if p.name in constexprs:
            tail.append(constexprs[p.name])
        elif getattr(p, "has_default", False):
            tail.append(p.default)
        else:
            return None
    return tuple(tail)


_raw_stream = getattr(torch._C, "_cuda_getCurrentRawStream", None)  # what Triton's own launch asks torch


def stream(device_index: int) -> int:
    """The raw handle of ``device_index``'s current stream (what Triton's own launch passes)."""
    if _raw_stream is not None:
        return _raw_stream(device_index)
    return torch.cuda.current_stream(device_index).cuda_stream


def launch(kernel, grid: tuple[int, ...], args: tuple, constexprs: dict, num_warps: int) -> None:
    """``kernel[grid](*args, num_warps=num_warps, **constexprs)`` on the current CUDA device."""
    if kernel not in _unsupported:
        try:
            device = torch.cuda.current_device()
            key = (kernel, grid, device, num_warps, tuple(constexprs.items()), _shape(args))
        except TypeError:  # an argument (or constexpr) the shortcut does not know how to key
            key = None
        if key is not None:
            hit = _compiled.get(key)
            if hit is not None:
                compiled, tail = hit
                try:
                    compiled[(*grid, 1, 1)[:3]](*args, *tail, stream=stream(device))
                    return
                except TypeError:  # this Triton's compiled kernels take their arguments differently
                    _unsupported.add(kernel)
                    _compiled.pop(key, None)
            compiled = kernel[grid](*args, num_warps=num_warps, **constexprs)
            tail = _constexpr_tail(kernel, len(args), constexprs)
            if tail is None or not hasattr(compiled, "__getitem__"):
                _unsupported.add(kernel)
            else:
                _compiled[key] = (compiled, tail)
            return
    kernel[grid](*args, num_warps=num_warps, **constexprs)


class Bound:
    """One launch with every argument fixed: ``bound(stream)`` queues it on ``stream`` (a raw CUDA stream).

    Calls the compiled kernel's launcher the way ``CompiledKernel.__getitem__``'s runner does
    (Triton 3.6 .. 3.9), without launch metadata or hooks: use it only while ``hooks_idle()``.
    """

    __slots__ = ("compiled", "grid", "args")

    def __init__(self, compiled, grid: tuple[int, int, int], args: tuple):
        self.compiled, self.grid, self.args = compiled, grid, args

    def __call__(self, stream: int) -> None:
        c, (x, y, z) = self.compiled, self.grid
        c.run(x, y, z, stream, c.function, c.packed_metadata, None, None, None, *self.args)


def bind(kernel, grid: tuple[int, ...], args: tuple, constexprs: dict, num_warps: int) -> Bound | None:
    """The launch that ``launch`` just made with these arguments, fixed for repeating; None when
    it did not go through a compiled kernel (the JIT path) or this Triton's kernels lack what
    ``Bound`` calls."""
    try:
        key = (kernel, grid, torch.cuda.current_device(), num_warps, tuple(constexprs.items()), _shape(args))
    except TypeError:
        return None
    hit = _compiled.get(key)
    if hit is None:
        return None
    compiled, tail = hit
    if not all(hasattr(compiled, a) for a in ("run", "function", "packed_metadata")) or compiled.function is None:
        return None
    fixed = tuple(a.data_ptr() if isinstance(a, torch.Tensor) else a for a in args)
    return Bound(compiled, (*grid, 1, 1)[:3], (*fixed, *tail))


def hooks_idle() -> bool:
    """Whether no launch hook is installed (a profiler such as proton installs them): ``Bound``
    skips the hooks, so callers take the full launch path while any is there."""
    if _knobs is None:
        return False
    for hook in (_knobs.runtime.launch_enter_hook, _knobs.runtime.launch_exit_hook):
        if hook is not None and getattr(hook, "calls", True):
            return False
    return True
