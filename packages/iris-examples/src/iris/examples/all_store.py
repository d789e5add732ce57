"""all-store: every rank stores its buffer into every rank, itself included, through translated pointers.

Program (p, j) of rank r stores tile p of its ``src`` with ``ctx.store`` into row r of rank
(r + j) % W's heap ``dst`` (ranks start at different peers, so no peer is written by
everyone at once). Timed against a local copy of the same bytes over a sweep of sizes, and each
row checked against torch. See ``iris.examples.rma_sweep``.

``--trace``: each program records a "remote store" event (target rank: the peer it writes, bytes: its
tile's), in the timed calls too, so their times then include the tracing.
"""

from __future__ import annotations

import argparse

import triton
import triton.language as tl
from triton.experimental import gluon
from triton.experimental.gluon import language as gl

import iris.mem.gluon as img
import iris.mem.triton as imt
from iris.mem.gluon import Context as GluonContext
from iris.mem.triton import Context

from . import rma_sweep

__all__ = ["SUMMARY", "add_arguments", "check_arguments", "rank_main", "report"]

SUMMARY = "every rank stores its buffer into every rank through translated pointers: bandwidth vs a local copy"
BACKENDS = ("triton", "gluon")


@imt.interpret()
@triton.jit
def all_store_kernel(src, dst, context_ptr, n, EVENT, BLOCK: tl.constexpr, TRACE: tl.constexpr):
    """Program (p, j): tile p of the local ``src`` into row ``rank`` of rank (rank + j) % W's ``dst``.

    ``TRACE``: record the store as event ``EVENT`` (target rank: that peer; bytes: the tile's)."""
    ctx = Context.initialize(context_ptr)
    tr = imt.Tracing.initialize(context_ptr, TRACE)
    to_rank = (ctx.rank + tl.program_id(1)) % ctx.world_size
    start = tl.program_id(0).to(tl.int64) * BLOCK
    offs = start + tl.arange(0, BLOCK)
    mask = offs < n
    nbytes = tl.minimum(BLOCK, n - start) * src.dtype.element_ty.primitive_bitwidth // 8
    store = tr.record_start(EVENT, to_rank, nbytes)
    ctx.store(dst + ctx.rank * n + offs, tl.load(src + offs, mask=mask), to_rank, mask=mask)
    if TRACE:
        tl.debug_barrier()  # the event ends when every thread has issued its stores
    tr.record_end(store)


@img.interpret()
@gluon.jit
def gluon_all_store_kernel(src, dst, context_ptr, n, EVENT, BLOCK: gl.constexpr, TRACE: gl.constexpr,
                           LAYOUT: gl.constexpr):  # fmt: skip
    ctx = GluonContext.initialize(context_ptr)
    tr = img.Tracing.initialize(context_ptr, TRACE)
    to_rank = (ctx.rank + gl.program_id(1)) % ctx.world_size
    start = gl.program_id(0).to(gl.int64) * BLOCK
    offs = start + gl.arange(0, BLOCK, layout=LAYOUT)
    mask = offs < n
    nbytes = gl.minimum(BLOCK, n - start) * src.dtype.element_ty.primitive_bitwidth // 8
    store = tr.record_start(EVENT, to_rank, nbytes)
    ctx.store(dst + ctx.rank * n + offs, gl.load(src + offs, mask=mask), to_rank, mask=mask)
    if TRACE:
        img.barrier()
    tr.record_end(store)


def _launch(heap, src, dst, n, block, backend, num_warps, event, trace):
    grid = (triton.cdiv(n, block), heap.world_size)
    if backend == "gluon":
        layout = rma_sweep.gluon_layout(block, num_warps)
        gluon_all_store_kernel[grid](src, dst, heap.context, n, event, BLOCK=block, TRACE=trace, LAYOUT=layout,
                                     num_warps=num_warps)  # fmt: skip
    else:
        all_store_kernel[grid](src, dst, heap.context, n, event, BLOCK=block, TRACE=trace, num_warps=num_warps)


OPERATION = rma_sweep.Operation("all-store", _launch, dst_on_heap=True, event="remote store")
add_arguments = rma_sweep.add_arguments
check_arguments = rma_sweep.check_arguments


def rank_main(args: argparse.Namespace) -> dict:
    return rma_sweep.run(args, OPERATION)


def report(results: list, args: argparse.Namespace) -> int:
    return rma_sweep.report(results, args, "all-store")
