"""Joining the ranks: torch.distributed from the environment, the heap's gloo control group, and
the ranks' agreement on init's arguments before any of them can block."""

from __future__ import annotations

import atexit
import datetime
import operator
import os
from dataclasses import dataclass

import torch
import torch.distributed as dist

from .allocator import ALIGNMENT
from .errors import AsymmetricHeapError
from .log import get_logger
from .transport import available, select
from .transport.base import exchange_or_raise

__all__ = [
    "ControlGroup",
    "join",
    "pick_device",
    "check_size",
    "check_group",
    "check_device",
    "check_transport",
    "agree_on_arguments",
]

_ENV_VARS = ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")

_logger = get_logger(__name__)


@dataclass
class ControlGroup:
    """The heap's own control channel: object exchange and barriers over a gloo group.

    With one rank and no process group, every operation is local.
    """

    rank: int
    world_size: int
    group: object | None  # the caller's group (or the default group); None at world size 1 with no torch.distributed
    gloo: object | None  # a gloo group over the same ranks
    owns_gloo: bool = False  # gloo was made for this heap (beside a non-gloo group): close() destroys it

    def all_gather_object(self, obj) -> list:
        if self.gloo is None:
            return [obj]
        out = [None] * self.world_size
        dist.all_gather_object(out, obj, group=self.gloo)
        return out

    def gather_object(self, obj, dst: int = 0) -> list | None:
        """Every rank's ``obj`` in rank order on rank ``dst`` of this group, None on the others (a
        collective): for what only one rank needs, which ``all_gather_object`` would send to all."""
        if self.gloo is None:
            return [obj]
        out = [None] * self.world_size if self.rank == dst else None
        dist.gather_object(obj, out, dst=dist.get_global_rank(self.gloo, dst), group=self.gloo)
        return out

    def barrier(self) -> None:
        if self.gloo is not None:
            dist.barrier(group=self.gloo)

    def close(self) -> None:
        """Destroy the gloo group made for this heap, if one was (local; idempotent): each heap
        of a non-gloo group would otherwise keep its own gloo threads and sockets to exit."""
        if self.owns_gloo and self.gloo is not None:
            if dist.is_initialized():
                dist.destroy_process_group(self.gloo)
            self.gloo = None


_joined = None  # the default group that iris.heap.init joined from the environment, if it did


@atexit.register
def _destroy_joined_group() -> None:
    """Destroy the default group Iris joined for the caller, if it is still the default group.

    torch.distributed asks whoever initializes a group to destroy it before exit; a gloo group left
    to the interpreter's teardown sometimes aborts the process ("terminate called without an active
    exception", exit status -6), after every heap and collective finished. A group the caller made,
    or destroyed already, is left alone.
    """
    global _joined
    if _joined is not None and dist.is_initialized() and dist.group.WORLD is _joined:
        _logger.debug("destroying the torch.distributed group iris.heap.init joined from the environment")
        dist.destroy_process_group()
    _joined = None


def join(group=None, timeout: datetime.timedelta | None = None) -> ControlGroup:
    """The control group of a new heap.

    ``group`` given: use it (it must be initialized). Otherwise use the default group, joining
    it from torchrun's ``env://`` variables when they are set and no group exists yet. With
    neither, this is a single process of world size 1.
    """
    global _joined
    if group is None and not dist.is_initialized():
        if all(v in os.environ for v in _ENV_VARS):
            _logger.info(
                "joining torch.distributed from the environment (env://, gloo): rank %s of %s at %s:%s; "
                "this waits for every rank",
                *(os.environ[v] for v in _ENV_VARS),
            )
            kwargs = {"timeout": timeout} if timeout is not None else {}
            dist.init_process_group(backend="gloo", init_method="env://", **kwargs)
            _joined = dist.group.WORLD  # Iris made it, so Iris destroys it at exit
        else:
            _logger.debug("no process group and no torchrun environment: a single rank")
            return ControlGroup(rank=0, world_size=1, group=None, gloo=None)
    if group is not None and not dist.is_initialized():
        raise ValueError("a group was given but torch.distributed is not initialized")
    rank = dist.get_rank(group)
    world_size = dist.get_world_size(group)
    if rank < 0:
        raise ValueError("this process is not a member of the group given to iris.heap.init")
    if dist.get_backend(group) == "gloo":
        gloo = group if group is not None else dist.group.WORLD
    else:
        ranks = dist.get_process_group_ranks(group) if group is not None else None
        _logger.debug(
            "making a gloo control group beside the %s group (every rank of it must call init)", dist.get_backend(group)
        )
        gloo = dist.new_group(ranks=ranks, backend="gloo")
        return ControlGroup(
            rank=rank, world_size=world_size, group=group or dist.group.WORLD, gloo=gloo, owns_gloo=True
        )
    return ControlGroup(rank=rank, world_size=world_size, group=group or dist.group.WORLD, gloo=gloo)


def pick_device(device, rank: int) -> torch.device:
    """The heap's device: the argument, else ``cuda:(local_rank % device_count)``, else CPU.

    ``IRIS_DEVICE=cpu`` forces CPU even where CUDA is available.
    """
    if device is not None:
        if isinstance(device, bool) or not isinstance(device, (str, int, torch.device)):
            raise TypeError(
                f"device must be a torch.device, a str such as 'cpu' or 'cuda:0', or a CUDA device index; "
                f"got {device!r} ({type(device).__name__})"
            )
        try:
            device = torch.device(device)
        except RuntimeError as e:  # torch's words for a string it cannot parse
            raise ValueError(f"device {device!r} names no torch device ({e}); pass e.g. 'cpu' or 'cuda:0'") from None
        if device.type == "cuda":
            count = torch.cuda.device_count() if torch.cuda.is_available() else 0
            if device.index is None and count:
                device = torch.device("cuda", torch.cuda.current_device())
            if not count or device.index >= count:
                raise ValueError(
                    f"device {str(device)!r} was asked for, but torch sees {count} CUDA devices; "
                    "pass device='cpu' (or leave device out to pick one)"
                )
        return device
    forced = os.environ.get("IRIS_DEVICE", "").strip().lower()
    if forced == "cpu":
        return torch.device("cpu")
    if forced not in ("", "cuda"):
        raise ValueError(f"IRIS_DEVICE must be 'cpu' or 'cuda', got {forced!r}")
    if torch.cuda.is_available():
        local_rank = int(os.environ.get("LOCAL_RANK", rank))
        return torch.device("cuda", local_rank % torch.cuda.device_count())
    if forced == "cuda":
        raise RuntimeError("IRIS_DEVICE=cuda but torch sees no CUDA device")
    return torch.device("cpu")


# -- init's arguments: checked without raising, then agreed on --------------------------------------
# A rank that raised at once on a bad argument would leave the others blocked in the next exchange
# for as long as the process group's timeout (30 minutes for gloo). So each check returns its
# error instead, and ``agree_on_arguments`` exchanges the verdicts right after joining.


def check_size(size) -> tuple[int, Exception | None]:
    """``size`` rounded up to whole allocator blocks, or the error that says what is wrong with it."""
    try:
        if isinstance(size, bool):
            raise TypeError
        size = operator.index(size)  # ints, numpy ints, one-element integer tensors
    except TypeError:
        return 0, TypeError(f"heap size must be an int number of bytes, got {size!r} ({type(size).__name__})")
    if size < ALIGNMENT:
        return 0, ValueError(f"heap size must be at least {ALIGNMENT} bytes, got {size}")
    return -(-size // ALIGNMENT) * ALIGNMENT, None


def check_group(group) -> tuple[object, Exception | None]:
    """``group``, or None and the error when it is not a process group.

    A rank with a bad group then joins the default group to report it, which is where its peers
    are unless they passed a subgroup.
    """
    if group is None or isinstance(group, dist.ProcessGroup):
        return group, None
    return None, TypeError(
        f"group must be a torch.distributed ProcessGroup or None (the default group), got {group!r} "
        f"({type(group).__name__})"
    )


def check_device(device, rank: int) -> tuple[torch.device | None, Exception | None]:
    """``pick_device(device, rank)``, or None and the error it raised."""
    try:
        return pick_device(device, rank), None
    except Exception as e:  # noqa: BLE001 - every rank hears of it in agree_on_arguments
        return None, e


def check_transport(name, device: torch.device | None) -> tuple[type | None, Exception | None]:
    """The transport class ``name`` picks for ``device``, or None and the error that says why not.

    Without a device (its own check failed) only the name is checked.
    """
    if not isinstance(name, str):
        return None, TypeError(f"transport must be a str ('auto' or one of {sorted(available())}), got {name!r}")
    try:
        if device is None:
            if name != "auto" and name not in available():
                raise ValueError(f"unknown transport {name!r}; choose 'auto' or one of {sorted(available())}")
            return None, None
        return select(name, device), None
    except ValueError as e:
        return None, e


def agree_on_arguments(control: ControlGroup, local_error: Exception | None, facts: dict) -> None:
    """Raise on every rank unless every rank's arguments were good and ``facts`` match everywhere.

    ``local_error`` is this rank's first bad argument (or None); ``facts`` name what every rank
    must have chosen alike (size, transport, device type). A rank with a bad argument raises its
    own error; the others raise a ``HeapError`` naming that rank and its error; facts that
    differ raise ``AsymmetricHeapError`` everywhere. One exchange, so no rank is left waiting.
    """
    everyone = exchange_or_raise(control, facts, local_error, "checking iris.heap.init's arguments")
    for key in facts:
        values = [f[key] for f in everyone]
        if len(set(values)) != 1:
            raise AsymmetricHeapError(
                f"ranks asked for different heap {key}s: {dict(enumerate(values))}; every rank must pass the same {key}"
            )
