"""Joining the ranks: torch.distributed from the environment, and the heap's gloo control group."""

from __future__ import annotations

import datetime
import os
from dataclasses import dataclass

import torch
import torch.distributed as dist

__all__ = ["ControlGroup", "join", "pick_device"]

_ENV_VARS = ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")


@dataclass
class ControlGroup:
    """The heap's own control channel: object exchange and barriers over a gloo group.

    With one rank and no process group, every operation is local.
    """

    rank: int
    world_size: int
    group: object | None  # the caller's group (or the default group); None at world size 1 with no torch.distributed
    gloo: object | None  # a gloo group over the same ranks

    def all_gather_object(self, obj) -> list:
        if self.gloo is None:
            return [obj]
        out = [None] * self.world_size
        dist.all_gather_object(out, obj, group=self.gloo)
        return out

    def barrier(self) -> None:
        if self.gloo is not None:
            dist.barrier(group=self.gloo)


def join(group=None, timeout: datetime.timedelta | None = None) -> ControlGroup:
    """The control group of a new heap.

    ``group`` given: use it (it must be initialized). Otherwise use the default group, joining
    it from torchrun's ``env://`` variables when they are set and no group exists yet. With
    neither, this is a single process of world size 1.
    """
    if group is None and not dist.is_initialized():
        if all(v in os.environ for v in _ENV_VARS):
            kwargs = {"timeout": timeout} if timeout is not None else {}
            dist.init_process_group(backend="gloo", init_method="env://", **kwargs)
        else:
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
        gloo = dist.new_group(ranks=ranks, backend="gloo")
    return ControlGroup(rank=rank, world_size=world_size, group=group or dist.group.WORLD, gloo=gloo)


def pick_device(device, rank: int) -> torch.device:
    """The heap's device: the argument, else ``cuda:(local_rank % device_count)``, else CPU.

    ``IRIS_DEVICE=cpu`` forces CPU even where CUDA is available.
    """
    if device is not None:
        device = torch.device(device)
        if device.type == "cuda" and device.index is None:
            device = torch.device("cuda", torch.cuda.current_device())
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
