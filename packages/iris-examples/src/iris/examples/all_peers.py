"""all-load and all-store: every rank moves one buffer to or from every rank, itself included,
through translated pointers (one module, one kernel per backend: the two differ by one line).

- **all-load**: program (p, j) of rank r reads tile p of rank (r + j) % W's ``src`` with
  ``ctx.load`` and stores it into row (r + j) % W of a local ``dst``.
- **all-store**: program (p, j) of rank r stores tile p of its ``src`` with ``ctx.store`` into row
  r of rank (r + j) % W's heap ``dst``.

Ranks start at different peers, so no peer is read or written by everyone at once. Timed against
a local copy of the same bytes over a sweep of sizes, and each row checked against torch. See
``iris.examples.rma_sweep``.

``--trace``: each program records a "remote load" or "remote store" event (target rank: the peer
it reads or writes, bytes: its tile's), in the timed calls too, so their times then include the
tracing.
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

__all__ = ["OPERATIONS", "SUMMARIES", "add_arguments", "check_arguments", "rank_main", "report"]

#: One line per example this module runs (the registry's summaries; a module serving one example
#: names it ``SUMMARY``).
SUMMARIES = {
    "all-load": "every rank loads a buffer from every rank through translated pointers: bandwidth vs a local copy",
    "all-store": "every rank stores its buffer into every rank through translated pointers: bandwidth vs a local copy",
}
BACKENDS = ("triton", "gluon")


@imt.interpret()
@triton.jit
def all_peers_kernel(src, dst, context_ptr, n, EVENT, STORE: tl.constexpr, BLOCK: tl.constexpr,
                     TRACE: tl.constexpr):  # fmt: skip
    """Program (p, j), peer = (rank + j) % W. ``STORE``: tile p of the local ``src`` into row
    ``rank`` of the peer's ``dst``; otherwise tile p of the peer's ``src`` into row ``peer`` of the
    local ``dst``.

    ``TRACE``: record the move as event ``EVENT`` (target rank: the peer; bytes: the tile's)."""
    ctx = Context.initialize(context_ptr)
    tr = imt.Tracing.initialize(context_ptr, TRACE)
    peer = (ctx.rank + tl.program_id(1)) % ctx.world_size
    start = tl.program_id(0).to(tl.int64) * BLOCK
    offs = start + tl.arange(0, BLOCK)
    mask = offs < n
    nbytes = tl.minimum(BLOCK, n - start) * src.dtype.element_ty.primitive_bitwidth // 8
    moved = tr.record_start(EVENT, peer, nbytes)
    if STORE:
        ctx.store(dst + ctx.rank * n + offs, tl.load(src + offs, mask=mask), peer, mask=mask)
    else:
        tl.store(dst + peer * n + offs, ctx.load(src + offs, peer, mask=mask), mask=mask)
    if TRACE:
        tl.debug_barrier()  # the event ends when every thread's loads arrived (stores: were issued)
    tr.record_end(moved)


@img.interpret()
@gluon.jit
def gluon_all_peers_kernel(src, dst, context_ptr, n, EVENT, STORE: gl.constexpr, BLOCK: gl.constexpr,
                           TRACE: gl.constexpr, LAYOUT: gl.constexpr):  # fmt: skip
    ctx = GluonContext.initialize(context_ptr)
    tr = img.Tracing.initialize(context_ptr, TRACE)
    peer = (ctx.rank + gl.program_id(1)) % ctx.world_size
    start = gl.program_id(0).to(gl.int64) * BLOCK
    offs = start + gl.arange(0, BLOCK, layout=LAYOUT)
    mask = offs < n
    nbytes = gl.minimum(BLOCK, n - start) * src.dtype.element_ty.primitive_bitwidth // 8
    moved = tr.record_start(EVENT, peer, nbytes)
    if STORE:
        ctx.store(dst + ctx.rank * n + offs, gl.load(src + offs, mask=mask), peer, mask=mask)
    else:
        gl.store(dst + peer * n + offs, ctx.load(src + offs, peer, mask=mask), mask=mask)
    if TRACE:
        img.barrier()
    tr.record_end(moved)


def _launcher(store: bool):
    def launch(heap, src, dst, n, block, backend, num_warps, event, trace):
        grid = (triton.cdiv(n, block), heap.world_size)
        if backend == "gluon":
            layout = rma_sweep.gluon_layout(block, num_warps)
            gluon_all_peers_kernel[grid](src, dst, heap.context, n, event, STORE=store, BLOCK=block, TRACE=trace,
                                         LAYOUT=layout, num_warps=num_warps)  # fmt: skip
        else:
            all_peers_kernel[grid](src, dst, heap.context, n, event, STORE=store, BLOCK=block, TRACE=trace,
                                   num_warps=num_warps)  # fmt: skip

    return launch


#: The two examples, by CLI name (``args.example``).
OPERATIONS = {
    "all-load": rma_sweep.Operation("all-load", _launcher(False), dst_on_heap=False, event="remote load"),
    "all-store": rma_sweep.Operation("all-store", _launcher(True), dst_on_heap=True, event="remote store"),
}
add_arguments = rma_sweep.add_arguments
check_arguments = rma_sweep.check_arguments


def rank_main(args: argparse.Namespace) -> dict:
    return rma_sweep.run(args, OPERATIONS[args.example])


def report(results: list, args: argparse.Namespace) -> int:
    return rma_sweep.report(results, args, args.example)
