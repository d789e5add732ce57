"""Launch shape: how many programs a collective's kernel runs with, over tiles of how many elements.

Launch shapes are each rank's own business: they are not part of a call's description, and ranks
that tile differently still move the same bytes. ``Config`` fields set them; ``None`` fields take
the defaults here.
"""

from __future__ import annotations

import functools
import os

import torch

from . import occupancy

__all__ = [
    "DEFAULT_BLOCK",
    "MEET_FIRST_TILES",
    "MEET_FIRST_TILES_ENV",
    "PROGRAMS_PER_SM",
    "TILED_OVER",
    "LaunchShape",
    "meets_first",
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
#: once: ``occupancy``), shared among the ranks on one GPU. The reduction kernels need many loads in
#: flight, the gather kernel does best at one (the H200 sweep: BENCHMARKS.md, section "iris.ccl
#: (Triton backend): collectives against the copy roofline").
PROGRAMS_PER_SM = {"reduce_kernel": 4, "gather_kernel": 1, "push_kernel": 1}


#: Where ranks share a GPU, a reduction whose tiles of the default block, over the ranks of the
#: most crowded GPU, number more than this holds a one-program meeting of the ranks before its
#: launch (``meets_first``); a smaller one runs at most one program per multiprocessor over the
#: ranks of its GPU instead. 128 is at most the multiprocessors of an H100 or H200 (132), so at the
#: default block the smaller launches already run that few programs and lose nothing to the cap.
MEET_FIRST_TILES = 128
#: The environment variable that replaces ``MEET_FIRST_TILES`` for a run (a positive int; set it
#: alike for every rank, as a launcher's environment is: ranks that decide differently raise a
#: mismatch naming the meeting). A large value holds no meeting and caps every reduction at one
#: program per multiprocessor over the ranks; 1 holds one before every tiled reduction. For
#: timing the two cures against each other (ccl-bench), not for production.
MEET_FIRST_TILES_ENV = "IRIS_CCL_MEET_FIRST_TILES"


@functools.cache
def _tiles_from_env() -> int | None:
    raw = os.environ.get(MEET_FIRST_TILES_ENV)
    if raw is None:
        return None
    try:
        tiles = int(raw)
    except ValueError:
        tiles = 0
    if tiles < 1:
        raise ValueError(f"{MEET_FIRST_TILES_ENV} must be a positive int (tiles), got {raw!r}")
    return tiles


def meets_first(kernel_name: str, tiled: int | None, staged: bool, most_ranks_per_device: int) -> bool:
    """Whether the launch of ``kernel_name`` over ``tiled`` elements a rank (its ``TILED_OVER``
    argument: a reduction's chunk) is preceded by a one-program meeting of the ranks: a kernel of
    more than one program per multiprocessor (``PROGRAMS_PER_SM``: the reductions) that does not
    stage its input in one program, where some GPU runs several ranks, whose tiles of
    ``DEFAULT_BLOCK`` elements times ``most_ranks_per_device`` exceed ``MEET_FIRST_TILES`` (or
    ``$IRIS_CCL_MEET_FIRST_TILES``). The same on every rank of a heap: the collectives derive
    ``tiled`` from the call's element count and the world size alone (all_reduce's chunk is ceil(n / W) on every rank), and
    ``most_ranks_per_device`` is world-uniform; never a rank's own block size, program count or
    device. Two_shot all_reduce at 4 ranks of a GPU meets above 512 K elements (2 MiB of fp32),
    one_shot above 128 K.

    Why (docs/architecture.md, section "Ranks sharing a GPU: a timeout under MPS, and the meeting
    that avoids it"): on an H100 shared by 4 ranks under MPS, a reduction whose programs of all ranks
    together fill the GPU sometimes waited at its entry for a rank whose kernel did not start until
    the wait's bound; never with a meeting first, never with one program per multiprocessor over all
    ranks. Launches below the bound take the second cure (``LaunchShape.programs``' cap), which at
    the default block costs nothing; above it the meeting costs one launch of one program."""
    if tiled is None or staged or most_ranks_per_device <= 1 or PROGRAMS_PER_SM.get(kernel_name, 1) <= 1:
        return False
    bound = _tiles_from_env() or MEET_FIRST_TILES
    return -(-tiled // DEFAULT_BLOCK) * most_ranks_per_device > bound


class LaunchShape:
    """The launch shape of one call's kernels: ``config``'s fields, else the defaults for the heap's device."""

    __slots__ = ("block", "warps", "num_programs", "device", "ranks_per_device")

    def __init__(self, config, heap):
        self.device = heap.device
        self.block = getattr(config, "block_size", None) or DEFAULT_BLOCK
        self.warps = config.num_warps or _DEFAULT_WARPS.get(heap.device.type, _DEFAULT_WARPS["cpu"])
        self.num_programs = getattr(config, "num_programs", None)
        self.ranks_per_device = heap.ranks_per_device

    def constexprs(self, kernel) -> dict:
        """What the shape adds to ``kernel``'s constexprs: ``BLOCK`` for a tiled kernel."""
        return {"BLOCK": self.block} if kernel.__name__ in TILED_OVER else {}

    def programs(self, kernel, arguments: dict, args: tuple, constexprs: dict, unmet: bool = False) -> int:
        """Programs for a launch of ``kernel`` with ``arguments`` (by name; ``args`` and
        ``constexprs``: the same, as the kernel takes them).

        One per tile at most; one for a kernel that stages its input itself (``staged``). On a GPU,
        ``PROGRAMS_PER_SM`` per multiprocessor, at most as many as
        fit at once (``occupancy``), divided among the ranks that share the GPU: every program of
        every rank must be resident together, since they wait for one another. ``unmet``: the
        ranks did not meet first although some GPU runs several of them (``meets_first`` said no):
        at most one program per multiprocessor over the ranks of this GPU, also where
        ``num_programs`` or a small block would launch more.
        """
        over = TILED_OVER.get(kernel.__name__)
        if over is None or arguments.get("staged"):  # a staged kernel copies in (and out) in one program
            return 1
        tiles = max(1, -(-arguments[over] // self.block))
        if unmet and self.device.type == "cuda":
            tiles = min(tiles, one_per_multiprocessor(self.device, self.ranks_per_device))
        if self.num_programs:
            return min(tiles, self.num_programs)
        if self.device.type != "cuda":
            return min(tiles, _CPU_PROGRAMS)
        per_sm = PROGRAMS_PER_SM.get(kernel.__name__, 1)
        if per_sm > 1:  # one program per multiprocessor always fits; more needs the compiled kernel's size
            launch = {**constexprs, "num_warps": self.warps}
            per_sm = min(per_sm, occupancy.resident_per_sm(kernel, args, launch, self.device))
        return min(tiles, max(1, per_sm * _multiprocessors(self.device) // self.ranks_per_device))


@functools.cache
def _multiprocessors(device: torch.device) -> int:
    return torch.cuda.get_device_properties(device).multi_processor_count


def one_per_multiprocessor(device: torch.device, ranks_per_device: int) -> int:
    """Programs a rank launches so that the ranks sharing ``device`` (a GPU) run one program per
    multiprocessor together, at least one: the launch that always fits beside the others (the
    fused kernels', the unfused operations' collectives', and a reduction's without a meeting)."""
    return max(1, _multiprocessors(device) // ranks_per_device)
