"""``Config``: which algorithm a collective runs and how it is launched."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = [
    "Config",
    "DEFAULT",
    "ALL_REDUCE_VARIANTS",
    "BACKENDS",
    "MAX_BLOCK_SIZE",
    "MAX_NUM_WARPS",
    "check_choice",
    "check_flag",
    "check_launch",
    "check_power_of_two",
    "check_range",
]

#: ``"auto"`` is the variant measured fastest on the device kind at the world size and size
#: (``iris.ccl.tuning.ALL_REDUCE_AUTO``).
ALL_REDUCE_VARIANTS = ("auto", "one_shot", "two_shot", "rs_ag", "one_shot_push")
BACKENDS = ("triton", "gluon")
#: Triton's limit on the elements of one block (``triton.language.TRITON_MAX_TENSOR_NUMEL``).
MAX_BLOCK_SIZE = 1 << 20
#: Warps per program that Triton and Gluon launch (a power of two; 32 warps = 1024 threads on NVIDIA).
MAX_NUM_WARPS = 32
_MAX_PROGRAMS = 2**31 - 1  # a grid's first dimension


# -- field checks, iris.ops.Config's too ----------------------------------------------------------


def check_choice(name: str, value, choices: tuple) -> None:
    """Field ``name`` is one of the strings ``choices``."""
    if not isinstance(value, str) or value not in choices:
        raise ValueError(f"unknown {name} {value!r}; choose one of {choices}")


def check_power_of_two(name: str, value, low: int, high: int) -> None:
    """Field ``name`` is None (the default) or a power of two in [low, high]."""
    if value is not None and (not _is_int(value) or not low <= value <= high or value & (value - 1)):
        raise ValueError(f"{name} must be a power of two in [{low}, {high}], got {value!r}")


def check_range(name: str, value, low: int, high: int) -> None:
    """Field ``name`` is None (the default) or an int in [low, high]."""
    if value is not None and (not _is_int(value) or not low <= value <= high):
        raise ValueError(f"{name} must be an int in [{low}, {high}], got {value!r}")


def check_flag(name: str, value) -> None:
    """Field ``name`` is True or False."""
    if not isinstance(value, bool):
        raise TypeError(f"{name} must be True or False, got {value!r}")


def check_launch(config, max_programs: int) -> None:
    """The fields every layer's ``Config`` has (``backend``, ``num_programs`` up to ``max_programs``,
    ``num_warps``, ``blocking``, ``trace``), checked alike: this ``Config``'s and ``iris.ops.Config``'s."""
    check_choice("backend", config.backend, BACKENDS)
    check_range("num_programs", config.num_programs, 1, max_programs)
    check_power_of_two("num_warps", config.num_warps, 1, MAX_NUM_WARPS)
    check_flag("blocking", config.blocking)
    check_flag("trace", config.trace)


def _is_int(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


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
        check_choice("variant", self.variant, ALL_REDUCE_VARIANTS)
        check_power_of_two("block_size", self.block_size, 16, MAX_BLOCK_SIZE)
        check_launch(self, _MAX_PROGRAMS)

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
