"""Int handles for heaps: how a ``torch.compile`` graph names the heap a custom op runs on.

A custom op takes no Python objects, so ``iris.ccl.custom_ops`` passes a heap as an int: 0 for
``heap=None`` (the default heap when the op runs, as in eager code), else ``handle(heap)``. The
registry holds heaps weakly: a compiled graph never keeps a heap alive, and ``heap_of`` of a
handle whose heap is gone says so.

This module is imported only when a traced call names a heap (``custom_ops.heap_handle``, which
dynamo runs at trace time): ``handle`` is marked with ``torch.compiler.assume_constant_result``,
so dynamo calls it on the heap itself, guards on the heap object's identity and puts the handle
into the graph as a constant. That decorator imports ``torch._dynamo`` (about 1.2 s on the
development CPU), which ``import iris.ccl`` must not.
"""

from __future__ import annotations

import itertools
import weakref

import torch

import iris.heap

__all__ = ["handle", "heap_of"]

_heaps: weakref.WeakValueDictionary = weakref.WeakValueDictionary()  # handle -> heap
_handles: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # heap -> handle
_next = itertools.count(1)  # 0 is the default heap's


@torch.compiler.assume_constant_result
def handle(heap) -> int:
    """``heap``'s handle (registered on first use; the same one for the heap's lifetime)."""
    if not isinstance(heap, iris.heap.SymmetricHeap):
        raise TypeError(f"heap must be an iris.heap.SymmetricHeap or None, got {type(heap).__name__}")
    h = _handles.get(heap)
    if h is None:
        h = _handles[heap] = next(_next)
        _heaps[h] = heap
    return h


def heap_of(h: int):
    """The heap of handle ``h`` (None for 0: the default heap, as ``heap=None`` means in eager code)."""
    if h == 0:
        return None
    heap = _heaps.get(h)
    if heap is None:
        raise iris.heap.HeapError(
            f"the heap (handle {h}) that this compiled graph was traced with is gone; trace it again with an open "
            "heap (a new torch.compile, or torch.compiler.reset()), or pass heap=None for the default heap"
        )
    return heap
