"""all-store: every rank stores its buffer into every rank, itself included, through translated pointers.

Program (p, j) of rank r stores tile p of its ``src`` with ``ctx.store`` into row r of rank
(r + j) % W's heap ``dst`` (ranks start at different peers, so no peer is written by
everyone at once). Timed against a local copy of the same bytes over a sweep of sizes, and each
row checked against torch. See ``iris.examples.rma_sweep``.
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
def all_store_kernel(src, dst, context_ptr, n, BLOCK: tl.constexpr):
    ctx = Context.initialize(context_ptr)
    to_rank = (ctx.rank + tl.program_id(1)) % ctx.world_size
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    ctx.store(dst + ctx.rank * n + offs, tl.load(src + offs, mask=mask), to_rank, mask=mask)


@img.interpret()
@gluon.jit
def gluon_all_store_kernel(src, dst, context_ptr, n, BLOCK: gl.constexpr, LAYOUT: gl.constexpr):
    ctx = GluonContext.initialize(context_ptr)
    to_rank = (ctx.rank + gl.program_id(1)) % ctx.world_size
    offs = gl.program_id(0).to(gl.int64) * BLOCK + gl.arange(0, BLOCK, layout=LAYOUT)
    mask = offs < n
    ctx.store(dst + ctx.rank * n + offs, gl.load(src + offs, mask=mask), to_rank, mask=mask)


def _launch(heap, src, dst, n, block, backend, num_warps):
    grid = (triton.cdiv(n, block), heap.world_size)
    if backend == "gluon":
        layout = rma_sweep.gluon_layout(block, num_warps)
        gluon_all_store_kernel[grid](src, dst, heap.context, n, BLOCK=block, LAYOUT=layout, num_warps=num_warps)
    else:
        all_store_kernel[grid](src, dst, heap.context, n, BLOCK=block, num_warps=num_warps)


OPERATION = rma_sweep.Operation("all-store", _launch, dst_on_heap=True)
add_arguments = rma_sweep.add_arguments
check_arguments = rma_sweep.check_arguments


def rank_main(args: argparse.Namespace) -> dict:
    return rma_sweep.run(args, OPERATION)


def report(results: list, args: argparse.Namespace) -> int:
    return rma_sweep.report(results, args, "all-store")
