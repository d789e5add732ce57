"""The unfused equivalent of every fused operation: ``torch.matmul`` and the ``iris.ccl`` collective.

What each fused operation computes, written as its parts (as torch's ``_symmetric_memory`` keeps
``fused_all_gather_matmul``'s fallback beside it). The tests compare the fused operations with
these, and ``ops-bench`` times them as the baseline; they round as the fused operations do (each
product to the dtype, ranks combined in fp32 in rank order), so the two agree to the last bit
wherever the GEMMs do.
"""

from __future__ import annotations

import torch

import iris.ccl as ccl

__all__ = ["all_gather_matmul", "matmul_all_gather", "matmul_all_reduce", "matmul_reduce_scatter"]


def all_gather_matmul(a, b, *, return_gathered=False, heap=None, config=None):
    """``all_gather`` of ``a`` (m x K per rank) into W*m x K, then ``torch.matmul`` with ``b``."""
    heap = ccl.arguments.check_heap(heap)
    gathered = torch.empty((heap.world_size * a.shape[0], a.shape[1]), dtype=a.dtype, device=a.device)
    ccl.all_gather(gathered, a, heap=heap, config=config)
    c = torch.matmul(gathered, b)
    return (gathered, c) if return_gathered else c


def matmul_all_gather(a, b, *, heap=None, config=None):
    """``torch.matmul(a, b)`` (M x n per rank), ``all_gather`` into W x M x n, permuted to M x W*n."""
    heap = ccl.arguments.check_heap(heap)
    w = heap.world_size
    part = torch.matmul(a, b)
    blocks = torch.empty((w, *part.shape), dtype=part.dtype, device=part.device)
    ccl.all_gather(blocks, part, heap=heap, config=config)
    return blocks.permute(1, 0, 2).reshape(part.shape[0], w * part.shape[1])


def matmul_reduce_scatter(a, b, op="sum", *, heap=None, config=None):
    """``torch.matmul(a, b)`` (M x N per rank), then ``reduce_scatter`` into M/W x N."""
    heap = ccl.arguments.check_heap(heap)
    part = torch.matmul(a, b)
    out = torch.empty((part.shape[0] // heap.world_size, part.shape[1]), dtype=part.dtype, device=part.device)
    return ccl.reduce_scatter(out, part, op, heap=heap, config=config)


def matmul_all_reduce(a, b, op="sum", *, heap=None, config=None):
    """``torch.matmul(a, b)`` (M x N per rank), then ``all_reduce`` in place."""
    heap = ccl.arguments.check_heap(heap)
    return ccl.all_reduce(torch.matmul(a, b), op, heap=heap, config=config)
