"""Rank-side bodies of the fused operations' torch.compile tests (module-level: spawned ranks import them).

Each body compiles a small function that calls every fused operation with
``torch.compile(backend="aot_eager", fullgraph=True)`` (no graph break, or it fails to compile),
runs it and the same function eagerly on the same inputs, and compares every result bit for bit.
"""

from __future__ import annotations


import torch

import iris.heap
import iris.ops as ops
from iris.ops import custom_ops
from iris.testing import refusing
from iris.testing.compiled import one_graph, same_bits

#: The ``torch.ops.iris`` calls ``fused`` makes (one per operation).
CALLS = 6
#: Rows of ``a`` per rank, inner dimension, columns (not multiples of the CPU tiles, 32 x 32 x 16).
M, K, N = 6, 20, 12


def _no_custom_ops():
    """Any call of the fused operations' op path fails: eager calls must never take it."""
    return refusing(custom_ops, custom_ops.__all__, "an eager fused operation went through its torch.library op")


def compiled_operations_match_eager(rank, world_size, backend, dtype):
    """Every fused operation (``return_gathered``, ``out=`` on the heap, an explicit heap, ``op``)
    and torch ops around them in one graph: no graph break, the ops in the graph, and the same
    bits as eager (twice: the compiling call and the cached graph)."""
    torch.compiler.reset()
    heap = iris.heap.init(1 << 23)
    w = world_size
    cfg = ops.Config(backend=backend)
    g = torch.Generator().manual_seed(2000 + rank)
    a = torch.randn((w * M, K), generator=g).to(heap.device, dtype)  # M x k per rank for the reductions
    b = torch.randn((K, N), generator=g).to(heap.device, dtype)
    rows = torch.randn((M, K), generator=g).to(heap.device, dtype)  # this rank's rows for all_gather_matmul
    out = heap.zeros(w * M, N, dtype=dtype)  # matmul_all_reduce's out=, on the heap
    stacked = torch.zeros(w, w * M, N // 2, dtype=dtype, device=heap.device)  # matmul_all_gather's, stacked

    def fused(a, b, rows, out):
        c1 = ops.all_gather_matmul(rows, b, config=cfg)
        gathered, c2 = ops.all_gather_matmul(torch.relu(rows), b, return_gathered=True, heap=heap, config=cfg)
        c3 = ops.matmul_all_gather(a, b[:, : N // 2], config=cfg)
        c4 = ops.matmul_reduce_scatter(a, b, "max", config=cfg)
        c5 = ops.matmul_all_reduce(a, b, out=out, config=cfg)
        c6 = ops.matmul_all_gather(a, b[:, N // 2 :], out=stacked, config=cfg)
        return c1, gathered, c2, c3, c4, c5 * 2, c6 + 1

    with _no_custom_ops():
        eager = [t.clone() for t in fused(a, b, rows, out)]
    eager_out = out.clone()
    compiled = torch.compile(fused, backend="aot_eager", fullgraph=True)
    for attempt in ("compiling call", "cached graph"):
        out.zero_()
        results = compiled(a, b, rows, out)
        for i, (got, want) in enumerate(zip(results, eager)):
            same_bits(got, want, f"{attempt}: result {i}")
        same_bits(out, eager_out, f"{attempt}: out")

    breaks = one_graph(fused, a, b, rows, out, calls=CALLS)
    heap.barrier()
    heap.check_device_errors()
    return breaks


def compiled_mlp_block_matches_eager(rank, world_size, backend, dtype):
    """The tensor-parallel MLP block of ``tp-mlp`` (sequence-parallel rows -> ``all_gather_matmul``
    -> GELU -> ``matmul_reduce_scatter``) compiled whole, with no graph break: by ``aot_eager`` the
    same bits as eager; on a GPU also by inductor, which generates its own GELU kernel around the
    fused operations (so close to eager, not bitwise: its GELU rounds on its own)."""
    torch.compiler.reset()
    heap = iris.heap.init(1 << 23)
    w = world_size
    cfg = ops.Config(backend=backend)
    g = torch.Generator().manual_seed(3000 + rank)
    dev = heap.device
    x = torch.randn((M, K), generator=g).to(dev, dtype)  # this rank's tokens
    up = (torch.randn((K, 2 * N), generator=g) / 4).to(dev, dtype)  # this rank's columns of w_up
    down = (torch.randn((2 * N, K), generator=g) / 4).to(dev, dtype)  # this rank's rows of w_down

    def block(x, up, down):
        h = ops.all_gather_matmul(x, up, config=cfg)
        return ops.matmul_reduce_scatter(torch.nn.functional.gelu(h), down, config=cfg)

    with _no_custom_ops():
        eager = block(x, up, down).clone()
    assert eager.shape == (M, K), eager.shape
    compilers = ["aot_eager"] + (["inductor"] if dev.type == "cuda" else [])
    for compiler in compilers:
        torch.compiler.reset()
        compiled = torch.compile(block, backend=compiler, fullgraph=True)
        for attempt in ("compiling call", "cached graph"):
            got = compiled(x, up, down)
            if compiler == "aot_eager":
                same_bits(got, eager, f"{compiler}, {attempt}")
            else:
                tol = 1e-5 if dtype == torch.float32 else 3e-2
                torch.testing.assert_close(got, eager, rtol=tol, atol=tol, msg=lambda m: f"{compiler}, {attempt}: {m}")
    one_graph(block, x, up, down, calls=2)  # all_gather_matmul, matmul_reduce_scatter
    heap.barrier()
    heap.check_device_errors()
    return len(compilers)
