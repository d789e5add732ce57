"""The occupancy probe: how many programs of a compiled kernel one multiprocessor holds at once.

Every program of every rank on a GPU must be resident together (they wait for one another), so a
launch may not ask for more programs than fit. What fits follows from the compiled kernel's
registers, threads and shared memory and the device's limits.
"""

from __future__ import annotations

import torch

from iris.heap.log import get_logger

from . import _internals

_log = get_logger("ccl")

__all__ = ["resident_per_sm"]

_RESIDENT: dict[tuple, int] = {}  # (kernel, launch constexprs, argument dtypes) -> programs per SM that fit
_REGISTER_GRANULE = 256  # registers are given to a warp in blocks of 256
_MAX_BLOCKS_PER_SM = 32  # resident blocks per multiprocessor (NVIDIA, compute capability 9.0)


def resident_per_sm(kernel, args: tuple, launch: dict, device: torch.device) -> int:
    """How many programs of ``kernel`` (launched with ``args`` and ``launch``: its constexprs and
    ``num_warps``) one multiprocessor of ``device`` holds at once.

    Compiles the kernel (``warmup``: no launch) the first time a shape is seen; 1 when the
    compiled kernel or the device does not say.
    """
    key = (kernel, tuple(launch.items()), tuple(a.dtype for a in args if isinstance(a, torch.Tensor)))
    if key in _RESIDENT:
        return _RESIDENT[key]
    try:
        used = _internals.resources(kernel.warmup(*args, grid=(1,), **launch))
        fits = 1 if used is None else _fits(*used, launch["num_warps"], torch.cuda.get_device_properties(device))
    except Exception as e:  # a probe that fails: the safe default (a kernel that does not compile fails
        fits = 1  # again, with its own error, at the launch)
        _log.debug("occupancy probe of %s failed (%s: %s); assuming 1 program per multiprocessor",
                   getattr(kernel, "__name__", kernel), type(e).__name__, e)  # fmt: skip
    _RESIDENT[key] = fits
    return fits


def _fits(regs: int, shared: int, num_warps: int, props) -> int:
    """Programs per multiprocessor by each limit: registers, threads, blocks and shared memory."""
    warp_regs = -(-max(regs, 1) * 32 // _REGISTER_GRANULE) * _REGISTER_GRANULE
    limits = [
        props.regs_per_multiprocessor // (warp_regs * num_warps),
        props.max_threads_per_multi_processor // (32 * num_warps),
        _MAX_BLOCKS_PER_SM,
    ]
    if shared:
        limits.append(props.shared_memory_per_multiprocessor // shared)
    return max(1, min(limits))
