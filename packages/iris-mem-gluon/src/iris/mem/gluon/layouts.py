"""Host helpers for explicit Gluon layouts with the target's warp size (32 on NVIDIA, 64 on AMD).

>>> blocked_layout(4096, num_warps=4, target=GPUTarget("hip", "gfx942", 64))
BlockedLayout(size_per_thread=[4], threads_per_warp=[64], warps_per_cta=[4], order=[0], ...)
"""

from __future__ import annotations

import triton
from triton.backends.compiler import GPUTarget
from triton.experimental.gluon import language as gl

__all__ = ["GPUTarget", "blocked_layout", "current_target", "warp_size"]

#: Bytes one thread moves per vector access (128-bit loads and stores on NVIDIA and AMD GPUs).
VECTOR_BYTES = 16

_BACKEND_WARP_SIZE = {"cuda": 32}  # "hip": from the architecture (64 on CDNA, 32 on RDNA)


def current_target() -> GPUTarget | None:
    """The active GPU driver's target, or None where there is none (CPU ranks)."""
    try:
        return triton.runtime.driver.active.get_current_target()
    except Exception:  # no driver (CPU machine, or TRITON_INTERPRET=1): no target
        return None


def warp_size(target: GPUTarget | None = None) -> int:
    """Threads per warp of ``target`` (default: the active GPU's).

    On CPU ranks (no GPU driver) the layout is dropped by CPU execution, so any valid size
    serves: 32 is returned there.
    """
    target = current_target() if target is None else target
    if target is None:
        return 32
    if not isinstance(target, GPUTarget):
        raise TypeError(f"target must be a triton GPUTarget or None, got {target!r}")
    size = getattr(target, "warp_size", None) or _BACKEND_WARP_SIZE.get(target.backend)
    if not size:
        raise ValueError(f"cannot tell the warp size of {target!r}; pass a GPUTarget with a warp_size")
    return int(size)


def _itemsize(dtype) -> int:
    if dtype is None:
        return 4
    if isinstance(dtype, int):
        return dtype
    size = getattr(dtype, "itemsize", None)  # torch.dtype
    if size is None and hasattr(dtype, "primitive_bitwidth"):  # triton dtype
        size = max(1, dtype.primitive_bitwidth // 8)
    if not size:
        raise TypeError(f"dtype must be a torch dtype, a triton dtype or a byte count, got {dtype!r}")
    return int(size)


def blocked_layout(
    block_size: int, num_warps: int = 4, target: GPUTarget | None = None, *, dtype=None
) -> gl.BlockedLayout:
    """A 1-D ``BlockedLayout`` for ``block_size`` elements over ``num_warps`` warps of ``target``.

    Each thread holds one 16-byte vector of ``dtype`` (default 4-byte elements) per repetition,
    neighbouring threads neighbouring vectors, so every warp access is coalesced; blocks larger
    than one pass of the CTA repeat the pattern. Launch the kernel with the same ``num_warps``.
    """
    if (
        isinstance(block_size, bool)
        or not isinstance(block_size, int)
        or block_size < 1
        or block_size & (block_size - 1)
    ):
        raise ValueError(f"block_size must be a positive power of two (gl.arange needs one), got {block_size!r}")
    if isinstance(num_warps, bool) or not isinstance(num_warps, int) or num_warps < 1 or num_warps & (num_warps - 1):
        raise ValueError(f"num_warps must be a positive power of two, got {num_warps!r}")
    threads = warp_size(target)
    per_thread = max(1, min(VECTOR_BYTES // _itemsize(dtype), block_size // (threads * num_warps)))
    return gl.BlockedLayout(
        size_per_thread=[per_thread], threads_per_warp=[threads], warps_per_cta=[num_warps], order=[0]
    )
