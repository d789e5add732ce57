"""Per-heap state of the collectives: epoch flags, the arrival counter, staging buffers.

Every rank calls the same collectives in the same order, so every rank's workspace makes the
same heap allocations at the same moments: the buffers are symmetric without communication.
"""

from __future__ import annotations

import weakref

import torch

__all__ = ["Workspace", "workspace_of"]

_workspaces: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


class Workspace:
    """Flags and staging memory of one heap.

    - ``entry[r]`` / ``exit[r]`` (int32): the last epoch at which rank r arrived at / finished a
      collective; written by rank r into every rank's copy, only ever increasing, never cleared.
    - ``counter`` (int64): programs of this rank's collective launches that have finished, so the
      last program of a launch knows it is last (``done_target``).
    """

    def __init__(self, heap):
        self.heap = heap
        w = heap.world_size
        self.entry = heap.zeros(w, dtype=torch.int32)
        self.exit = heap.zeros(w, dtype=torch.int32)
        self.counter = heap.zeros(1, dtype=torch.int64)
        self.epoch = 0
        self.done = 0
        self._staging: dict[str, torch.Tensor] = {}
        self.ranks_per_device = _ranks_per_device(heap)
        gpu = heap.device.type == "cuda"
        self.multiprocessors = torch.cuda.get_device_properties(heap.device).multi_processor_count if gpu else 1
        heap.barrier()  # every rank's flags exist (and are zero) before any rank signals them

    def next_epoch(self, programs: int) -> tuple[int, int]:
        """The epoch of the next collective and its launch's cumulative ``done_target``."""
        self.epoch += 1
        self.done += programs
        return self.epoch, self.done

    def staging(self, role: str, like: torch.Tensor) -> torch.Tensor:
        """A heap buffer shaped like ``like`` for ``role`` ("in", "out"), grown on demand."""
        nbytes = like.numel() * like.element_size()
        buf = self._staging.get(role)
        if buf is None or buf.numel() < nbytes:
            if buf is not None:
                self.heap.free(buf)
            buf = self._staging[role] = self.heap.empty(max(nbytes, 1), dtype=torch.uint8)
        return buf[:nbytes].view(like.dtype).view(like.shape)

    def flag_owner(self, offset: int) -> tuple[str, int] | None:
        """Which flag (``"entry"``/``"exit"``, rank) sits at heap ``offset``, if any."""
        for name, flags in (("entry", self.entry), ("exit", self.exit)):
            start = self.heap.offset(flags)
            if start <= offset < start + flags.numel() * 4:
                return name, (offset - start) // 4
        return None

    def reset(self) -> None:
        self.entry.zero_()
        self.exit.zero_()
        self.counter.zero_()
        self.epoch = 0
        self.done = 0


def _ranks_per_device(heap) -> int:
    """How many ranks of the heap run on this rank's device (1 on CPU)."""
    if heap.device.type != "cuda" or heap.world_size == 1:
        return 1
    import torch.distributed as dist

    me = str(torch.cuda.get_device_properties(heap.device).uuid)
    everyone = [None] * heap.world_size
    dist.all_gather_object(everyone, me, group=heap.group)
    return everyone.count(me)


def workspace_of(heap) -> Workspace:
    ws = _workspaces.get(heap)
    if ws is None:
        ws = _workspaces[heap] = Workspace(heap)
    return ws
