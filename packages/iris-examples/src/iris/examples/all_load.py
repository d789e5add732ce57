"""all-load: every rank loads one buffer from every rank, itself included, through translated pointers.

Program (p, j) of rank r reads tile p of rank (r + j) % W's ``src`` with ``ctx.load`` and stores
it into row (r + j) % W of a local ``dst`` (ranks start at different peers, so no peer is read by
everyone at once). Timed against a local copy of the same bytes over a sweep of sizes, and each
row checked against torch. See ``iris.examples.rma_sweep``.

``--trace``: each program records a "remote load" event (target rank: the peer it reads, bytes: its
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

SUMMARY = "every rank loads a buffer from every rank through translated pointers: bandwidth vs a local copy"
BACKENDS = ("triton", "gluon")


@imt.interpret()
@triton.jit
def all_load_kernel(src, dst, context_ptr, n, EVENT, BLOCK: tl.constexpr, TRACE: tl.constexpr):
    """Program (p, j): tile p of rank (rank + j) % W's ``src`` into row (rank + j) % W of ``dst``.

    ``TRACE``: record the load as event ``EVENT`` (target rank: that peer; bytes: the tile's)."""
    ctx = Context.initialize(context_ptr)
    tr = imt.Tracing.initialize(context_ptr, TRACE)
    from_rank = (ctx.rank + tl.program_id(1)) % ctx.world_size
    start = tl.program_id(0).to(tl.int64) * BLOCK
    offs = start + tl.arange(0, BLOCK)
    mask = offs < n
    nbytes = tl.minimum(BLOCK, n - start) * src.dtype.element_ty.primitive_bitwidth // 8
    load = tr.record_start(EVENT, from_rank, nbytes)
    tl.store(dst + from_rank * n + offs, ctx.load(src + offs, from_rank, mask=mask), mask=mask)
    if TRACE:
        tl.debug_barrier()  # the event ends when every thread's loads have arrived
    tr.record_end(load)


@img.interpret()
@gluon.jit
def gluon_all_load_kernel(src, dst, context_ptr, n, EVENT, BLOCK: gl.constexpr, TRACE: gl.constexpr,
                          LAYOUT: gl.constexpr):  # fmt: skip
    ctx = GluonContext.initialize(context_ptr)
    tr = img.Tracing.initialize(context_ptr, TRACE)
    from_rank = (ctx.rank + gl.program_id(1)) % ctx.world_size
    start = gl.program_id(0).to(gl.int64) * BLOCK
    offs = start + gl.arange(0, BLOCK, layout=LAYOUT)
    mask = offs < n
    nbytes = gl.minimum(BLOCK, n - start) * src.dtype.element_ty.primitive_bitwidth // 8
    load = tr.record_start(EVENT, from_rank, nbytes)
    gl.store(dst + from_rank * n + offs, ctx.load(src + offs, from_rank, mask=mask), mask=mask)
    if TRACE:
        img.barrier()
    tr.record_end(load)


def _launch(heap, src, dst, n, block, backend, num_warps, event, trace):
    grid = (triton.cdiv(n, block), heap.world_size)
    if backend == "gluon":
        layout = rma_sweep.gluon_layout(block, num_warps)
        gluon_all_load_kernel[grid](src, dst, heap.context, n, event, BLOCK=block, TRACE=trace, LAYOUT=layout,
                                    num_warps=num_warps)  # fmt: skip
    else:
        all_load_kernel[grid](src, dst, heap.context, n, event, BLOCK=block, TRACE=trace, num_warps=num_warps)


OPERATION = rma_sweep.Operation("all-load", _launch, dst_on_heap=False, event="remote load")
add_arguments = rma_sweep.add_arguments
check_arguments = rma_sweep.check_arguments


def rank_main(args: argparse.Namespace) -> dict:
    return rma_sweep.run(args, OPERATION)


def report(results: list, args: argparse.Namespace) -> int:
    return rma_sweep.report(results, args, "all-load")
