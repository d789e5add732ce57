"""Per-heap state of the collectives: epoch flags, the arrival counter, staging buffers.

Every rank calls the same collectives in the same order, so every rank's workspace makes the
same heap allocations at the same moments: the buffers are symmetric without communication.
"""

from __future__ import annotations

import weakref

import torch

import iris.heap

__all__ = ["Workspace", "workspace_of"]

_workspaces: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


class Workspace:
    """Flags and staging memory of one heap.

    - ``entry[r]`` / ``exit[r]`` (int64): the last epoch at which rank r arrived at / finished a
      collective; written by rank r into every rank's copy, only ever increasing, never cleared.
    - ``state`` (int64, read and written by this rank's kernels only): ``[0]`` the programs of the
      running launch that have finished, so the last one knows it is last; ``[1]`` the epoch of
      the last collective this rank completed. Kept on the device, so launches replayed from a
      CUDA graph count as new collectives.
    - ``launched``: collectives this host has launched (for checks and messages; graph replays
      are not counted).
    - staging buffers, one per role, grown by doubling (to the exact size instead when the heap
      cannot hold double). An outgrown buffer is kept, not freed: a CUDA graph captured earlier
      may still copy through it. While every growth doubles, kept buffers add up to less than
      the current one; every rank keeps the same ones, whatever it captured.
    """

    def __init__(self, heap):
        self.heap = heap
        w = heap.world_size
        self.entry = heap.zeros(w, dtype=torch.int64)
        self.exit = heap.zeros(w, dtype=torch.int64)
        self.state = heap.zeros(2, dtype=torch.int64)
        self.launched = 0
        self._staging: dict[str, torch.Tensor] = {}
        self._outgrown: list[torch.Tensor] = []
        self.ranks_per_device = _ranks_per_device(heap)
        gpu = heap.device.type == "cuda"
        self.multiprocessors = torch.cuda.get_device_properties(heap.device).multi_processor_count if gpu else 1
        heap.barrier()  # every rank's flags exist (and are zero) before any rank signals them

    def staging(self, role: str, like: torch.Tensor) -> torch.Tensor:
        """A heap buffer shaped like ``like`` for ``role`` ("in", "out"), grown on demand."""
        nbytes = like.numel() * like.element_size()
        buf = self._staging.get(role)
        if buf is None or buf.numel() < nbytes:
            grown = None
            if buf is not None and 2 * buf.numel() > nbytes:
                try:  # doubling bounds what outgrown buffers hold; every rank fails alike
                    grown = self.heap.empty(2 * buf.numel(), dtype=torch.uint8)
                except iris.heap.HeapExhaustedError:
                    pass
            if grown is None:
                grown = self.heap.empty(max(nbytes, 1), dtype=torch.uint8)
            if buf is not None:
                self._outgrown.append(buf)
            buf = self._staging[role] = grown
        return buf[:nbytes].view(like.dtype).view(like.shape)

    def completed(self) -> int:
        """The epoch of the last collective this rank's device completed (a host sync)."""
        return int(self.state[1].item())

    def flag_owner(self, offset: int) -> tuple[str, int] | None:
        """Which flag (``"entry"``/``"exit"``, rank) sits at heap ``offset``, if any."""
        for name, flags in (("entry", self.entry), ("exit", self.exit)):
            start = self.heap.offset(flags)
            size = flags.element_size()
            if start <= offset < start + flags.numel() * size:
                return name, (offset - start) // size
        return None

    def reset(self) -> None:
        self.entry.zero_()
        self.exit.zero_()
        self.state.zero_()
        self.launched = 0


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
