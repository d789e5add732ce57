"""``Config``: which algorithm a collective runs and how it is launched."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["Config", "DEFAULT", "ALL_REDUCE_VARIANTS", "BACKENDS", "MAX_BLOCK_SIZE", "MAX_NUM_WARPS"]

#: ``"auto"`` is the variant measured fastest (``iris.ccl.AUTO_ALL_REDUCE``: two_shot).
ALL_REDUCE_VARIANTS = ("auto", "one_shot", "two_shot", "rs_ag")
BACKENDS = ("triton", "gluon")
#: Triton's limit on the elements of one block (``triton.language.TRITON_MAX_TENSOR_NUMEL``).
MAX_BLOCK_SIZE = 1 << 20
#: Warps per program that Triton and Gluon launch (a power of two; 32 warps = 1024 threads on NVIDIA).
MAX_NUM_WARPS = 32
_MAX_PROGRAMS = 2**31 - 1  # a grid's first dimension


@dataclass(frozen=True)
class Config:
    """Algorithm and launch shape of a collective; ``None`` fields take device-dependent defaults.

    - ``variant``: all_reduce algorithm, one of ``ALL_REDUCE_VARIANTS`` (other collectives have one).
    - ``block_size``: elements per tile, a power of two in [16, ``MAX_BLOCK_SIZE``].
    - ``num_programs``: programs per launch (each walks tiles with a grid stride).
    - ``num_warps``: warps per program (compiled backends), a power of two <= ``MAX_NUM_WARPS``.
    - ``backend``: ``"triton"`` or ``"gluon"`` kernels; the host code and the protocol are the same.
    - ``blocking``: wait for the collective and raise its device errors at once (a host sync, as
      today's ``torch.distributed`` with a synchronizing stream). The default is asynchronous, as
      NCCL: the call returns once its work is queued, and a device error (timeout, mismatch, a
      peer that gave up) is raised by the next Iris call on this rank, by
      ``heap.check_device_errors()`` or by the heap's watchdog. Ignored while the stream captures
      a CUDA graph (which cannot sync).
    - ``trace``: the kernels record their phases into the heap's trace buffer (``heap.tracing``,
      which must be enabled for anything to be recorded): per program an "entry wait" and an
      "exit wait" (the last program's includes waiting for every rank), per tile a "tile", and
      per tile and peer a "remote load" or "remote store" (target rank, bytes). The events
      serialize each tile's loads, so a traced collective runs slower; ``False`` (the default)
      compiles all of it away.
    """

    variant: str = "auto"
    block_size: int | None = None
    num_programs: int | None = None
    num_warps: int | None = None
    backend: str = "triton"
    blocking: bool = False
    trace: bool = False

    def __post_init__(self):
        if not isinstance(self.variant, str) or self.variant not in ALL_REDUCE_VARIANTS:
            raise ValueError(f"unknown variant {self.variant!r}; choose one of {ALL_REDUCE_VARIANTS}")
        if not isinstance(self.backend, str) or self.backend not in BACKENDS:
            raise ValueError(f"unknown backend {self.backend!r}; choose one of {BACKENDS}")
        b = self.block_size
        if b is not None and (not _is_int(b) or b < 16 or b > MAX_BLOCK_SIZE or b & (b - 1)):
            raise ValueError(f"block_size must be a power of two in [16, {MAX_BLOCK_SIZE}], got {b!r}")
        p = self.num_programs
        if p is not None and (not _is_int(p) or not 1 <= p <= _MAX_PROGRAMS):
            raise ValueError(f"num_programs must be a positive int (at most {_MAX_PROGRAMS}), got {p!r}")
        w = self.num_warps
        if w is not None and (not _is_int(w) or not 1 <= w <= MAX_NUM_WARPS or w & (w - 1)):
            raise ValueError(f"num_warps must be a power of two in [1, {MAX_NUM_WARPS}], got {w!r}")
        if not isinstance(self.blocking, bool):
            raise TypeError(f"blocking must be True or False, got {self.blocking!r}")
        if not isinstance(self.trace, bool):
            raise TypeError(f"trace must be True or False, got {self.trace!r}")

    def __hash__(self) -> int:
        # Configs key the collectives' plans (one hash per call): the fields are hashed once, at
        # the first call, not in __init__, which torch 2.11's dynamo traces when a compiled
        # function builds a Config (it cannot trace hash() of a tuple).
        h = self.__dict__.get("_hash")
        if h is None:
            h = hash((self.variant, self.block_size, self.num_programs, self.num_warps, self.backend, self.blocking,
                      self.trace))  # fmt: skip
            object.__setattr__(self, "_hash", h)
        return h


#: What a call without ``config`` runs with.
DEFAULT = Config()


def _is_int(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)
