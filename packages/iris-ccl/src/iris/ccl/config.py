"""``Config``: which algorithm a collective runs and how it is launched."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["Config", "ALL_REDUCE_VARIANTS", "BACKENDS"]

#: ``"auto"`` picks among the others by message size and world size (see ``variants.py``).
ALL_REDUCE_VARIANTS = ("auto", "one_shot", "two_shot", "rs_ag")
BACKENDS = ("triton", "gluon")


@dataclass(frozen=True)
class Config:
    """Algorithm and launch shape of a collective; ``None`` fields take device-dependent defaults.

    - ``variant``: all_reduce algorithm, one of ``ALL_REDUCE_VARIANTS`` (other collectives have one).
    - ``block_size``: elements per tile, a power of two >= 16.
    - ``num_programs``: programs per launch (each walks tiles with a grid stride).
    - ``num_warps``: warps per program (compiled backends).
    - ``backend``: ``"triton"`` or ``"gluon"`` kernels; the host code is the same.
    - ``check_errors``: after each collective, read the device error word (a device sync on
      GPUs) and raise a timeout naming the missing rank. Turn off only to time kernels back to
      back; errors then surface at the next check (``heap.barrier()``, ``ccl.barrier()``).
      Skipped while the stream captures a CUDA graph (which cannot sync).
    """

    variant: str = "auto"
    block_size: int | None = None
    num_programs: int | None = None
    num_warps: int | None = None
    backend: str = "triton"
    check_errors: bool = True

    def __post_init__(self):
        if self.variant not in ALL_REDUCE_VARIANTS:
            raise ValueError(f"unknown variant {self.variant!r}; choose one of {ALL_REDUCE_VARIANTS}")
        if self.backend not in BACKENDS:
            raise ValueError(f"unknown backend {self.backend!r}; choose one of {BACKENDS}")
        b = self.block_size
        if b is not None and (isinstance(b, bool) or not isinstance(b, int) or b < 16 or b & (b - 1)):
            raise ValueError(f"block_size must be a power of two >= 16, got {b!r}")
        for name in ("num_programs", "num_warps"):
            v = getattr(self, name)
            if v is not None and (isinstance(v, bool) or not isinstance(v, int) or v < 1):
                raise ValueError(f"{name} must be a positive int, got {v!r}")
