"""Guarded memory for fault tests: tensors with guard bytes and canary allocations around them.

A heap tensor is the head of an allocation whose tail holds guard bytes, followed by a separate
canary allocation; a plain tensor sits between guard bytes; one canary allocation precedes
everything. After a call, every guard must hold its bytes: a write outside the call's tensors is
the worst bug a collective or a fused operation can have. The collectives' and the fused
operations' fault suites both use it.
"""

from __future__ import annotations

import torch

__all__ = ["CANARY", "GUARD", "TAIL", "UNWRITTEN", "Guarded", "as_bytes"]

GUARD = 256  # guard bytes after each tensor (and a canary allocation of as many)
TAIL, CANARY, UNWRITTEN = 0xA5, 0x5A, 0xCC  # guard, canary and not-yet-written output bytes


def as_bytes(t: torch.Tensor) -> torch.Tensor:
    return t.detach().cpu().contiguous().reshape(-1).view(torch.uint8)


class Guarded:
    """The memory of one case: tensors with guard bytes around them, and checks that only the
    call's tensors changed."""

    def __init__(self, heap):
        self.heap = heap
        self.guards: list[tuple[str, torch.Tensor, int]] = []  # (what, bytes, the byte they hold)
        self.tensors: dict[str, torch.Tensor] = {}
        self.frozen: dict[str, torch.Tensor] = {}
        self.blocks: list[torch.Tensor] = []  # heap allocations, in allocation order
        self._canary("the canary allocated before every tensor")

    def _canary(self, what: str) -> None:
        c = self.heap.full((GUARD,), CANARY, dtype=torch.uint8)
        self.blocks.append(c)
        self.guards.append((what, c, CANARY))

    def heap_tensor(self, data: torch.Tensor, name: str) -> torch.Tensor:
        """A heap copy of ``data``: the head of an allocation whose tail is guard bytes, then a canary allocation."""
        nbytes = data.numel() * data.element_size()
        raw = self.heap.full((nbytes + GUARD,), TAIL, dtype=torch.uint8)
        self.blocks.append(raw)
        t = raw[:nbytes].view(data.dtype).view(data.shape)
        t.copy_(data.to(self.heap.device))
        self.guards.append((f"the guard bytes right after {name} (same allocation)", raw[nbytes:], TAIL))
        self._canary(f"the canary allocation after {name}")
        self.tensors[name] = t
        return t

    def plain_tensor(self, data: torch.Tensor, name: str) -> torch.Tensor:
        """A copy of ``data`` on the heap's device but not on the heap, between guard bytes."""
        nbytes = data.numel() * data.element_size()
        raw = torch.full((GUARD + nbytes + GUARD,), TAIL, dtype=torch.uint8, device=self.heap.device)
        t = raw[GUARD : GUARD + nbytes].view(data.dtype).view(data.shape)
        t.copy_(data.to(self.heap.device))
        self.guards.append((f"the guard bytes before {name} (plain memory)", raw[:GUARD], TAIL))
        self.guards.append((f"the guard bytes after {name} (plain memory)", raw[GUARD + nbytes :], TAIL))
        self.tensors[name] = t
        return t

    def tensor(self, data: torch.Tensor, on_heap: bool, name: str) -> torch.Tensor:
        return self.heap_tensor(data, name) if on_heap else self.plain_tensor(data, name)

    def output(self, shape, dtype, on_heap: bool, name: str) -> torch.Tensor:
        """An output tensor filled with a byte pattern no collective writes (a missed element shows)."""
        nbytes = torch.Size(shape).numel() * dtype.itemsize
        blank = torch.full((nbytes,), UNWRITTEN, dtype=torch.uint8).view(dtype).view(shape)
        return self.tensor(blank, on_heap, name)

    def freeze(self) -> None:
        """Remember every tensor's bytes now (for :meth:`changed_tensors`)."""
        self.frozen = {name: as_bytes(t).clone() for name, t in self.tensors.items()}

    def changed_tensors(self) -> list[str]:
        return [name for name, t in self.tensors.items() if not torch.equal(as_bytes(t), self.frozen[name])]

    def broken_guards(self) -> list[str]:
        return [what for what, g, byte in self.guards if not bool((g.cpu() == byte).all())]

    def assert_guards(self, rank: int, when: str) -> None:
        broken = self.broken_guards()
        assert not broken, f"rank {rank}, {when}: a collective wrote outside its tensors, into {broken}"

    def assert_unchanged(self, rank: int, when: str) -> None:
        self.assert_guards(rank, when)
        changed = self.changed_tensors()
        assert not changed, f"rank {rank}, {when}: tensors that no rank may touch changed: {changed}"

    def free(self) -> None:
        for block in self.blocks:
            self.heap.free(block)
        self.blocks.clear()
        self.tensors.clear()
