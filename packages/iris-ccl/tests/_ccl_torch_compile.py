"""Rank-side bodies of the torch.compile tests (module-level: spawned ranks import them).

Each body compiles a small function that calls collectives with ``torch.compile(backend="aot_eager",
fullgraph=True)`` (no graph break, or it fails to compile), runs it and the same function
eagerly on copies of the same inputs, and compares every result and every tensor the collectives
wrote bit for bit.
"""

from __future__ import annotations


import torch

import iris.ccl as ccl
import iris.heap
from iris.ccl import custom_ops
from iris.testing import refusing
from iris.testing.compiled import one_graph, same_bits

#: The ``torch.ops.iris`` calls ``collectives`` makes (one per collective, the barrier included).
CALLS = 8


def _inputs(heap, rank: int, w: int) -> dict:
    """Every rank's tensors, on and off the heap (seeded by rank: each rank's values differ)."""
    g = torch.Generator().manual_seed(1000 + rank)

    def randn(*shape, on_heap=False):
        t = torch.randn(shape, generator=g)
        return heap.as_symmetric(t) if on_heap else t.to(heap.device)

    return {
        "x": randn(37, on_heap=True),  # all_reduce of a heap tensor, in place
        "p": randn(5, 3),  # all_reduce (max, one_shot, explicit heap) of a tensor off the heap
        "g_out": heap.zeros(w * 6, 2), "g_in": randn(6, 2),  # all_gather pushing into a heap out
        "rs_out": torch.zeros(4, 3, device=heap.device), "rs_in": randn(w * 4, 3, on_heap=True),  # reduce_scatter, avg
        "a2a_out": torch.zeros(w * 3, device=heap.device), "a2a_in": randn(w * 3),  # all_to_all, both off the heap
        "b": randn(9, on_heap=True),  # broadcast from the last rank
    }  # fmt: skip


def _copies(tensors: dict, heap) -> dict:
    """Fresh tensors with ``tensors``' values, each on the heap where its original is."""
    return {k: heap.as_symmetric(t.clone()) if heap.is_symmetric(t) else t.clone() for k, t in tensors.items()}


def _no_custom_ops():
    """Any call of the collectives' op path fails: eager calls must never take it."""
    names = ("all_reduce", "all_gather", "reduce_scatter", "all_to_all", "broadcast", "barrier")
    return refusing(custom_ops, names, "an eager collective went through its torch.library op")


def compiled_collectives_match_eager(rank, world_size, backend):
    """Every collective, the barrier and torch ops around them in one graph: no graph break, the
    ops in the graph, and the same bits as eager (twice: the compiling call and the cached graph)."""
    torch.compiler.reset()
    heap = iris.heap.init(1 << 22)
    w = world_size
    cfg = ccl.Config(backend=backend)

    def collectives(x, p, g_out, g_in, rs_out, rs_in, a2a_out, a2a_in, b):
        ccl.all_reduce(x, config=cfg)
        ccl.all_reduce(p, "max", heap=heap, config=ccl.Config(variant="one_shot", backend=backend))
        h = torch.cos(p)  # an intermediate of the graph, off the heap
        ccl.all_reduce(h, config=cfg)
        ccl.all_gather(g_out, g_in * 2, config=cfg)
        ccl.reduce_scatter(rs_out, rs_in, "avg", config=cfg)
        ccl.all_to_all(a2a_out, a2a_in, config=cfg)
        ccl.broadcast(b, w - 1, config=cfg)
        ccl.barrier(config=cfg)
        return x * 2 + 1, h, rs_out.sum()

    inputs = _inputs(heap, rank, w)
    with _no_custom_ops():
        eager_args = _copies(inputs, heap)
        eager = collectives(**eager_args)
    compiled = torch.compile(collectives, backend="aot_eager", fullgraph=True)
    for attempt in ("compiling call", "cached graph"):
        args = _copies(inputs, heap)
        results = compiled(**args)
        for i, (got, want) in enumerate(zip(results, eager)):
            same_bits(got, want, f"{attempt}: result {i}")
        for name, t in args.items():
            same_bits(t, eager_args[name], f"{attempt}: {name}")

    breaks = one_graph(collectives, **_copies(inputs, heap), calls=CALLS)
    heap.barrier()
    heap.check_device_errors()
    return breaks
