"""The unfused equivalent of every fused operation: ``torch.matmul`` and the ``iris.ccl`` collective.

What each fused operation computes, written as its parts (as torch's ``_symmetric_memory`` keeps
``fused_all_gather_matmul``'s fallback beside it), and what an operation runs with
``Config(variant="unfused")`` (or ``"auto"`` where ``iris.ops.config.AUTO_UNFUSED`` says so). They
round as the fused operations do (each product to the dtype, ranks combined in fp32 in rank
order), so the two agree to the last bit wherever the GEMMs do.

Buffers that peers reach (the gathered rows, the products a reduction reads) are the heap's:
the caller's ``out`` where it is a row-major heap tensor, else the reserved ``ops.unfused``
staging (``iris.ccl.workspace``), so the collective moves them in place and nothing is copied
twice. ``config`` is the collective's (an ``iris.ccl.Config``; by default ``collective_config``).
"""

from __future__ import annotations

import torch

import iris.ccl as ccl
from iris.ccl.workspace import workspace_of

__all__ = ["all_gather_matmul", "collective_config", "matmul_all_gather", "matmul_all_reduce", "matmul_reduce_scatter"]

#: The staging role of the unfused variant's heap buffers.
_ROLE = "ops.unfused"


def collective_config(backend: str = "triton", blocking: bool = False, trace: bool = False) -> ccl.Config:
    """The collective's ``Config`` in an unfused operation: ``backend``, ``blocking`` and ``trace``
    as the operation's, the launch the collectives' own.

    Where ranks share a GPU that launch is at most one program per multiprocessor over them
    (``iris.ccl.launch_shape``), which also leaves a rank still in its ``torch.matmul`` room to
    finish: with up to 4 programs per multiprocessor and rank, the programs of the ranks that
    reached the collective first, waiting at its entry, held every multiprocessor's registers so
    that the late rank's matmul could not run, and the others timed out (an H100, 4 ranks under
    MPS)."""
    return ccl.Config(backend=backend, blocking=blocking, trace=trace)


def _in_place(heap, t) -> bool:
    """Whether peers can reach ``t`` itself: a row-major heap tensor."""
    return t is not None and heap.is_symmetric(t) and t.is_contiguous()


def _staging(heap, shape: tuple[int, ...], dtype: torch.dtype, role: str = _ROLE) -> torch.Tensor:
    """The reserved heap buffer of ``role`` (the unfused variant's by default; the chunked
    variant's too), as a row-major ``shape`` of ``dtype``. Its own until this rank's next
    collective on it: the last one's exit saw every peer done with it."""
    return workspace_of(heap).staging(role, torch.empty(shape, dtype=dtype, device="meta"))


def _config(config):
    return collective_config() if config is None else config


def all_gather_matmul(a, b, *, out=None, return_gathered=False, heap=None, config=None):
    """``all_gather`` of ``a`` (m x K per rank) into W*m x K, then ``torch.matmul`` with ``b``
    (into ``out`` if given); ``(gathered, c)`` with ``return_gathered``."""
    heap = ccl.arguments.check_heap(heap)
    shape = (heap.world_size * a.shape[0], a.shape[1])
    if return_gathered:
        gathered = torch.empty(shape, dtype=a.dtype, device=a.device)
    else:
        gathered = _staging(heap, shape, a.dtype)
    ccl.all_gather(gathered, a.contiguous(), heap=heap, config=_config(config))  # rows, as gathered lays them
    c = torch.matmul(gathered, b) if out is None else torch.matmul(gathered, b, out=out)
    return (gathered, c) if return_gathered else c


def matmul_all_gather(a, b, *, out=None, heap=None, config=None):
    """``torch.matmul(a, b)`` (M x n per rank), ``all_gather`` into W x M x n, permuted to M x W*n
    (or into ``out`` of either shape: W x M x n keeps the products stacked)."""
    heap = ccl.arguments.check_heap(heap)
    w, m, n = heap.world_size, a.shape[0], b.shape[1]
    part = torch.matmul(a, b)
    stacked = out is not None and out.dim() == 3
    blocks = out if stacked and _in_place(heap, out) else _staging(heap, (w, m, n), part.dtype)
    ccl.all_gather(blocks, part, heap=heap, config=_config(config))
    if blocks is out:
        return out
    if stacked:
        return out.copy_(blocks)
    side_by_side = blocks.permute(1, 0, 2).reshape(m, w * n)
    return side_by_side if out is None else out.copy_(side_by_side)


def _product(heap, a, b, out) -> torch.Tensor:
    """``a @ b`` into ``out`` where peers can reach it, else into the staging."""
    target = out if _in_place(heap, out) else _staging(heap, (a.shape[0], b.shape[1]), a.dtype)
    return torch.matmul(a, b, out=target)


def matmul_reduce_scatter(a, b, op="sum", *, out=None, heap=None, config=None):
    """``torch.matmul(a, b)`` (M x N per rank), then ``reduce_scatter`` into M/W x N (``out`` if given)."""
    heap = ccl.arguments.check_heap(heap)
    part = _product(heap, a, b, None)
    if out is None:
        out = torch.empty((part.shape[0] // heap.world_size, part.shape[1]), dtype=part.dtype, device=part.device)
    return ccl.reduce_scatter(out, part, op, heap=heap, config=_config(config))


def matmul_all_reduce(a, b, op="sum", *, out=None, heap=None, config=None):
    """``torch.matmul(a, b)`` (M x N per rank), then ``all_reduce`` in place (in ``out`` if given)."""
    heap = ccl.arguments.check_heap(heap)
    part = _product(heap, a, b, out)
    ccl.all_reduce(part, op, heap=heap, config=_config(config))
    if out is None:
        return part.clone()  # the staging is the workspace's: the caller gets a tensor of its own
    return part if part is out else out.copy_(part)
