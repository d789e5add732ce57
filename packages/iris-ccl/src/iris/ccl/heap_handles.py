"""Int handles for heaps: how a ``torch.compile`` graph names the heap a custom op runs on.

A custom op takes no Python objects, so ``iris.ccl.custom_ops`` passes a heap as an int: 0 for
``heap=None`` (the default heap when the op runs, as in eager code), else the heap's ``serial``
(``iris.heap.SymmetricHeap.serial``: unique in the process, never reused). Dynamo reads that int
attribute of the heap at trace time, guards on it and puts it into the graph as a constant; the
op finds the heap again by ``iris.heap.find_heap``. A graph never keeps a heap alive, and running
one whose heap is closed says so.

Why not a lookup marked ``torch.compiler.assume_constant_result``, taking the heap: torch 2.11's
dynamo cannot pass a heap object to such a function (2.13's can).
"""

from __future__ import annotations

import iris.heap

__all__ = ["handle", "heap_of"]


def handle(heap) -> int:
    """``heap``'s handle: its serial."""
    if not isinstance(heap, iris.heap.SymmetricHeap):
        raise TypeError(f"heap must be an iris.heap.SymmetricHeap or None, got {type(heap).__name__}")
    return heap.serial


def heap_of(h: int):
    """The heap of handle ``h`` (None for 0: the default heap, as ``heap=None`` means in eager code)."""
    if h == 0:
        return None
    heap = iris.heap.find_heap(h)
    if heap is None:
        raise iris.heap.HeapError(
            f"the heap (handle {h}) that this compiled graph was traced with is closed or gone; trace it again "
            "with an open heap (a new torch.compile, or torch.compiler.reset()), or pass heap=None for the default heap"
        )
    return heap
