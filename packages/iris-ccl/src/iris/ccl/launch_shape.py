"""Launch shape: how many programs a collective's kernel runs with, over tiles of how many elements.

Launch shapes are each rank's own business: they are not part of a call's description, and ranks
that tile differently still move the same bytes. ``Config`` fields set them; ``None`` fields take
the defaults here.
"""

from __future__ import annotations

import functools

import torch

from . import occupancy

__all__ = [
    "DEFAULT_BLOCK",
    "PROGRAMS_PER_SM",
    "SHARED_GPU_TILE",
    "TILED_OVER",
    "LaunchShape",
    "one_per_multiprocessor",
]

DEFAULT_BLOCK = 4096  # elements per tile
_DEFAULT_WARPS = {"cuda": 8, "cpu": 4}
#: Programs a launch has on CPU ranks at most: the interpreter runs them one after another, so
#: more only cost time; two still check that programs share the work.
_CPU_PROGRAMS = 2

#: The argument whose elements a tiled kernel's programs cover, BLOCK at a time with a grid stride.
#: A kernel not named here (the barrier) runs one program and takes no BLOCK.
TILED_OVER = {"reduce_kernel": "chunk", "gather_kernel": "piece", "push_kernel": "n"}

#: Programs per multiprocessor that each kernel is launched with, at most (fewer when fewer fit at
#: once: ``occupancy``), where a GPU runs one rank. The reduction kernels need many loads in
#: flight, the gather kernel does best at one (the H200 sweep: BENCHMARKS.md, section "iris.ccl
#: (Triton backend): collectives against the copy roofline"). Where ranks share a GPU every tiled
#: launch runs one program per multiprocessor over them instead (``LaunchShape.programs``).
PROGRAMS_PER_SM = {"reduce_kernel": 4, "gather_kernel": 1, "push_kernel": 1}

#: Where ranks share a GPU: the tile (elements, warps) of a reduction whose chunk gives each of its
#: programs (one per multiprocessor over the ranks) at least one such tile, when the config sets
#: neither ``block_size`` nor ``num_warps``. One program of 16 warps over 16384 elements keeps as
#: many elements in flight on a multiprocessor as the four programs of 8 warps over 4096 that a GPU
#: of one rank runs: on an H100 shared by 4 ranks under MPS, two_shot all_reduce took 60.0 us at
#: 16 MiB a rank and 201 us at 64 MiB against 69.9 and 229 us with the default tile, reduce_scatter
#: 42.6 and 125 us against 52.7 and 161 (32 warps over 32768: 94.1 and 336 us; docs/architecture.md,
#: section "Ranks sharing a GPU").
SHARED_GPU_TILE = (16384, 16)


class LaunchShape:
    """The launch shape of one call's kernels: ``config``'s fields, else the defaults for the heap's device."""

    __slots__ = ("block", "warps", "num_programs", "device", "ranks_per_device", "_set")

    def __init__(self, config, heap):
        self.device = heap.device
        self.block = getattr(config, "block_size", None) or DEFAULT_BLOCK
        self.warps = config.num_warps or _DEFAULT_WARPS.get(heap.device.type, _DEFAULT_WARPS["cpu"])
        self.num_programs = getattr(config, "num_programs", None)
        self.ranks_per_device = heap.ranks_per_device
        self._set = bool(getattr(config, "block_size", None) or config.num_warps)  # the config chose the tile

    @property
    def _shared_gpu(self) -> bool:
        return self.device.type == "cuda" and self.ranks_per_device > 1

    def tile(self, kernel, arguments: dict) -> tuple[int | None, int]:
        """``(BLOCK, num_warps)`` for a launch of ``kernel`` with ``arguments`` (by name): ``BLOCK``
        is None for a kernel that is not tiled. The config's fields where set, else the defaults,
        else (both unset, ranks sharing this GPU, a reduction with a ``SHARED_GPU_TILE`` for every
        program) ``SHARED_GPU_TILE``."""
        over = TILED_OVER.get(kernel.__name__)
        if over is None:
            return None, self.warps
        if self._set or not self._shared_gpu or PROGRAMS_PER_SM.get(kernel.__name__, 1) <= 1:
            return self.block, self.warps
        block, warps = SHARED_GPU_TILE
        if arguments.get("staged") or arguments[over] < self._capped(arguments[over], block) * block:
            return self.block, self.warps
        return block, warps

    def _capped(self, elements: int, block: int) -> int:
        """Programs over ``elements`` in tiles of ``block`` where ranks share this GPU: one per tile,
        at most one per multiprocessor over the ranks (and at most ``num_programs``)."""
        tiles = min(max(1, -(-elements // block)), one_per_multiprocessor(self.device, self.ranks_per_device))
        return min(tiles, self.num_programs) if self.num_programs else tiles

    def programs(self, kernel, arguments: dict, args: tuple, constexprs: dict, warps: int) -> int:
        """Programs for a launch of ``kernel`` with ``arguments`` (by name; ``args`` and
        ``constexprs``: the same, as the kernel takes them, ``BLOCK`` among them for a tiled one) in
        programs of ``warps`` warps.

        One per tile at most; one for a kernel that stages its input itself (``staged``). On a GPU
        of one rank, ``PROGRAMS_PER_SM`` per multiprocessor, at most as many as fit at once
        (``occupancy``). Where ranks share the GPU, at most one program per multiprocessor over them,
        also where ``num_programs`` or a small block would launch more: every program of every rank
        must be resident together, since they wait for one another, and under MPS a reduction whose
        programs of all ranks filled an H100 sometimes waited at its entry for a peer's kernel that
        did not start until the wait gave up; one program per multiprocessor over the ranks never
        did (docs/architecture.md, section "Ranks sharing a GPU").
        """
        over = TILED_OVER.get(kernel.__name__)
        if over is None or arguments.get("staged"):  # a staged kernel copies in (and out) in one program
            return 1
        if self._shared_gpu:
            return self._capped(arguments[over], constexprs["BLOCK"])
        tiles = max(1, -(-arguments[over] // constexprs["BLOCK"]))
        if self.num_programs:
            return min(tiles, self.num_programs)
        if self.device.type != "cuda":
            return min(tiles, _CPU_PROGRAMS)
        per_sm = PROGRAMS_PER_SM.get(kernel.__name__, 1)
        if per_sm > 1:  # one program per multiprocessor always fits; more needs the compiled kernel's size
            launch = {**constexprs, "num_warps": warps}
            per_sm = min(per_sm, occupancy.resident_per_sm(kernel, args, launch, self.device))
        return min(tiles, max(1, per_sm * _multiprocessors(self.device)))


@functools.cache
def _multiprocessors(device: torch.device) -> int:
    return torch.cuda.get_device_properties(device).multi_processor_count


def one_per_multiprocessor(device: torch.device, ranks_per_device: int) -> int:
    """Programs a rank launches so that the ranks sharing ``device`` (a GPU) run one program per
    multiprocessor together, at least one: the launch that always fits beside the others (the
    fused kernels', the unfused operations' collectives', and every tiled collective's there)."""
    return max(1, _multiprocessors(device) // ranks_per_device)
