"""``Config``: how a fused operation is tiled and launched, and on which backend.

Unlike a collective's launch shape, a fused operation's tiling is part of its description
(``iris.ops.description``): ranks hand each other tiles by their index, so every rank must cut the
output into the same tiles and deal them over the same number of programs. Ranks that resolve
``None`` fields alike (the same device kind, the same dtype) agree without saying so.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import torch

from iris.ccl.config import BACKENDS, check_choice, check_launch, check_power_of_two, check_range

__all__ = ["AUTO_UNFUSED", "BACKENDS", "Config", "DEFAULT", "MAX_BLOCK", "MAX_CHUNKS", "MAX_GROUP_M",
           "MAX_PROGRAMS", "VARIANTS", "resolve", "variant_of"]  # fmt: skip

#: Tile sides are powers of two in [16, MAX_BLOCK] (the description holds their logarithms in 3 bits).
MAX_BLOCK = 2048
#: Tile rows swept together (``group_m``) at most (8 bits of the description).
MAX_GROUP_M = 256
#: Programs per launch at most (16 bits of the description).
MAX_PROGRAMS = (1 << 16) - 1
_MAX_STAGES = 8
#: Chunks of the chunked variant at most.
MAX_CHUNKS = 64
#: How an operation runs: ``"fused"`` (its one kernel, the GEMM and the communication overlapped),
#: ``"unfused"`` (``torch.matmul``, then the ``iris.ccl`` collective: ``iris.ops.reference``),
#: ``"chunked"`` (``torch.matmul`` and the collective by row chunks, on two streams, so that the
#: collective of one chunk runs beside the GEMM of the next: ``iris.ops.chunked``), or ``"auto"``
#: (``AUTO_UNFUSED``: the one measured faster on the device kind).
VARIANTS = ("auto", "fused", "unfused", "chunked")

#: Where ``variant="auto"`` runs the unfused composition: (CUDA compute capability, backend) -> the
#: operations whose fused kernel was slower than ``torch.matmul`` + the ``iris.ccl`` collective at
#: every shape ``ops-bench`` measured there. Everything else (every other operation, device kind and
#: backend, CPU ranks) runs fused. sm_90, from ``ops-bench --ranks 4`` on an H100 (4 ranks under
#: MPS, bf16, MLP shapes of 1024 to 16384 tokens, hidden 4096 and 8192; figures in the iris-ops
#: CHANGELOG, 0.1.0): the fused reductions took 1.02-1.22x the unfused time with the Triton backend
#: and 1.00-1.19x with Gluon (their GEMM core reaches 0.86-0.95 of cuBLAS's rate, more than the
#: 6-16 % of the unfused time that communication takes), the fused gathers 0.79-0.98x.
AUTO_UNFUSED: dict[tuple[tuple[int, int], str], frozenset[str]] = {
    ((9, 0), backend): frozenset({"matmul_reduce_scatter", "matmul_all_reduce"}) for backend in BACKENDS
}


@dataclass(frozen=True)
class Config:
    """Tiling, launch and backend of a fused operation; ``None`` fields take defaults for the
    device and dtype (``resolve``).

    - ``block_m``, ``block_n``, ``block_k``: the output tile (``block_m`` x ``block_n``) and the
      inner-dimension step, powers of two in [16, ``MAX_BLOCK``].
    - ``group_m``: tile rows swept together across the columns, so their B tiles stay in L2.
    - ``num_programs``: programs of the persistent kernel (each deals tiles with a grid stride).
      The default fills the GPU once, shared among the ranks on it (every program of every rank
      is resident together: ranks wait for one another's tiles); 2 on CPU ranks.
    - ``num_warps``, ``num_stages``: warps per program; stages of the K loop's pipeline (Triton's
      software pipelining; the Gluon backend's ring of shared-memory slots on Hopper, at least 2;
      its portable core double-buffers in registers and ignores it).
    - ``backend``: ``"triton"`` (``tl.dot``) or ``"gluon"``; the host code and the protocol are the same.
    - ``variant``: one of ``VARIANTS``: ``"fused"``, ``"unfused"``, ``"chunked"``, or ``"auto"``
      (the default: ``AUTO_UNFUSED`` says which, per device kind, backend and operation). Every
      rank must run the same variant (``"auto"`` chooses alike on GPUs of one kind): a rank that
      runs another makes the call raise ``CollectiveMismatchError`` on every rank. The tiling
      fields apply to the fused kernels; the unfused variant runs ``torch.matmul`` and the
      collective with its defaults (``iris.ops.reference``), the chunked one ``iris.ops.chunked``.
    - ``chunks``: the chunked variant's row chunks, in [1, ``MAX_CHUNKS``] (fewer where there are
      fewer rows; default ``iris.ops.chunked.DEFAULT_CHUNKS``). There ``num_programs`` is the
      collectives' programs (default: the collectives' own launch, ``reference.collective_config``).
    - ``blocking``, ``trace``: as ``iris.ccl.Config``'s (wait and raise at once; record the
      kernel's phases into ``heap.tracing``: entry and exit waits, each tile's product, each
      tile's stores to or loads from a peer, each wait for peers' tiles).
    """

    block_m: int | None = None
    block_n: int | None = None
    block_k: int | None = None
    group_m: int | None = None
    num_programs: int | None = None
    num_warps: int | None = None
    num_stages: int | None = None
    backend: str = "triton"
    variant: str = "auto"
    chunks: int | None = None
    blocking: bool = False
    trace: bool = False

    def __post_init__(self):
        for name in ("block_m", "block_n", "block_k"):
            check_power_of_two(name, getattr(self, name), 16, MAX_BLOCK)
        check_range("group_m", self.group_m, 1, MAX_GROUP_M)
        check_range("num_stages", self.num_stages, 1, _MAX_STAGES)
        check_launch(self, MAX_PROGRAMS)
        check_choice("variant", self.variant, VARIANTS)
        check_range("chunks", self.chunks, 1, MAX_CHUNKS)


#: What a call without ``config`` runs with.
DEFAULT = Config()


def _defaults(backend: str, dtype: torch.dtype, gpu: bool, path: str) -> dict:
    """The tiles a call uses unless told otherwise (GPU: chosen for sm_90), by the backend's
    product ``path`` for the dtype on the device (its ``product_path``).

    Triton (``"tl.dot"``): 128x256x64, 8 warps, 3 stages for 16-bit inputs (144 KiB of shared
    memory for the pipeline: one program per multiprocessor), 128x128x32 for fp32. Gluon: on
    Hopper's wgmma (``"wgmma"``, 16-bit inputs on sm_90) the same 128x256x64 tiles, 8 warps (two
    warpgroups) and a ring of 3 shared-memory stages; on mma_v2 128x128x32 with 8 warps; on FMA
    units 64x64x16 with 4 warps (a K step of 32 spilled 1-6 KB a thread on sm_90: the FMA
    operands of a step and the next, double-buffered in registers, did not fit; 16 spills none
    there, nor on gfx942). CPU ranks: 32x32x16 (few, cheap programs under the interpreter) and
    3 stages (Gluon's ring then wraps around within a tile and across tiles).
    """
    if not gpu:
        return dict(block_m=32, block_n=32, block_k=16, group_m=2, num_warps=4, num_stages=3)
    if path == "mma_v2":
        return dict(block_m=128, block_n=128, block_k=32, group_m=8, num_warps=8, num_stages=1)
    if path == "fma":
        return dict(block_m=64, block_n=64, block_k=16, group_m=8, num_warps=4, num_stages=1)
    if dtype == torch.float32:
        return dict(block_m=128, block_n=128, block_k=32, group_m=8, num_warps=8, num_stages=3)
    return dict(block_m=128, block_n=256, block_k=64, group_m=8, num_warps=8, num_stages=3)


def resolve(config: Config | None, dtype: torch.dtype, heap, *, path: str | None = None) -> Config:
    """``config`` with every ``None`` field but ``num_programs`` filled for ``dtype`` on ``heap``'s
    device, as an operation fills them (``num_programs`` depends on the call's tiles). ``path``:
    how the backend multiplies ``dtype`` there (its ``product_path``: the tiles depend on it);
    None asks the backend, as the operations do."""
    if config is None:
        config = DEFAULT
    elif not isinstance(config, Config):
        raise TypeError(f"config must be an iris.ops.Config, got {type(config).__name__}")
    if path is None:
        from .operations import _kernels, _target  # (operations imports this module)

        path = _kernels(config.backend).product_path(_target(heap.device), dtype)
    base = _defaults(config.backend, dtype, heap.device.type == "cuda", path)
    chosen = {k: v for k, v in base.items() if getattr(config, k) is None}
    return dataclasses.replace(config, **chosen) if chosen else config


def variant_of(config: Config | None, name: str, device: torch.device) -> str:
    """``"fused"``, ``"unfused"`` or ``"chunked"``: what operation ``name`` runs with ``config`` on ``device``."""
    if config is None:
        config = DEFAULT
    elif not isinstance(config, Config):
        raise TypeError(f"config must be an iris.ops.Config, got {type(config).__name__}")
    if config.variant != "auto":
        return config.variant
    if device.type != "cuda":
        return "fused"
    unfused = AUTO_UNFUSED.get((_capability(device), config.backend), ())
    return "unfused" if name in unfused else "fused"


_CAPABILITIES: dict = {}


def _capability(device: torch.device) -> tuple[int, int]:
    if device not in _CAPABILITIES:
        _CAPABILITIES[device] = tuple(torch.cuda.get_device_capability(device))
    return _CAPABILITIES[device]
