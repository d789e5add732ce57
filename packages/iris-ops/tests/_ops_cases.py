"""Rank-side bodies of the fused operations' tests (module-level: spawned ranks import them).

References are torch's: every rank can make every rank's inputs (``sample``), so the expected
result is computed locally from the gathered inputs in fp32 and rounded as the operation rounds
(each rank's product to the dtype, ranks combined in fp32 in rank order, rounded once). Memory a
call must not touch is guarded (``iris.testing.guarded``): canary allocations after every heap
tensor, guard bytes after every tensor.
"""

from __future__ import annotations

import contextlib
import os
import threading
import time

import torch
import torch.distributed as dist

import iris.ccl as ccl
import iris.heap
import iris.ops as ops
from iris.testing.guarded import Guarded, as_bytes

HEAP_SIZE = 1 << 23
QUIET = 30.0  # wait_timeout while nothing is meant to fail: a hang still ends, a slow rank does not
DTYPES = (torch.float32, torch.bfloat16, torch.float16)
#: Shapes whose edges are not multiples of the CPU tiles (32 x 32 x 16).
M, K, N = 40, 24, 36


def config(backend: str, **fields) -> ops.Config:
    """The fused kernels unless ``variant`` says otherwise (``"auto"`` runs some operations unfused
    on some GPUs: the tests name the variant they check)."""
    return ops.Config(backend=backend, **{"variant": "fused", **fields})


def sample(shape, dtype, seed: int, rank: int, transposed: bool = False) -> torch.Tensor:
    """Rank ``rank``'s input for ``seed``; ``transposed``: the same values, column-major in memory."""
    g = torch.Generator().manual_seed(seed * 7919 + rank)
    t = torch.randn(shape, generator=g).to(dtype)
    return t.t().contiguous().t() if transposed else t


def raised(call, *args, **kwargs):
    try:
        call(*args, **kwargs)
    except Exception as e:  # noqa: BLE001 - the exception is the observation
        return e
    return None


def _product(a, b, dtype):
    """One rank's product as the operations round it: fp32, then the dtype (computed on the CPU)."""
    return (a.cpu().float() @ b.cpu().float()).to(dtype)


def _tolerance(dtype):
    return {torch.float32: 1e-4, torch.bfloat16: 2e-2, torch.float16: 4e-3}[dtype]


def _close(got, want, what: str, rank: int) -> None:
    got, want = got.cpu(), want.cpu()
    assert got.shape == want.shape, f"rank {rank}, {what}: shape {tuple(got.shape)}, want {tuple(want.shape)}"
    err = (got.float() - want.float()).abs().max().item() if got.numel() else 0.0
    scale = max(1.0, want.float().abs().max().item() if want.numel() else 1.0)
    tol = _tolerance(got.dtype) * scale
    assert err <= tol, f"rank {rank}, {what}: max error {err:g} > {tol:g}"


def _reduce(parts, op, dtype):
    parts = [p.cpu() for p in parts]
    acc = parts[0].float()
    for p in parts[1:]:
        p = p.float()
        acc = {"sum": acc + p, "avg": acc + p, "max": torch.maximum(acc, p), "min": torch.minimum(acc, p)}[op]
    if op == "avg":
        acc = acc / len(parts)
    return acc.to(dtype)


@contextlib.contextmanager
def _quiet_heap():
    """A case's heap (``HEAP_SIZE``, ``QUIET`` waits): its device errors checked when the case's
    body completes, closed in any case."""
    heap = iris.heap.init(HEAP_SIZE)
    heap.wait_timeout = QUIET
    try:
        yield heap
        heap.check_device_errors()
    finally:
        heap.close()


def every_op(rank, world_size, backend, dtype, variant="fused"):
    """Every operation (its ``variant``) against torch, on ragged shapes, row- and column-major
    inputs, with and without ``out=`` (on and off the heap), ``return_gathered``;
    ``matmul_all_reduce`` bitwise the same on every rank."""
    with _quiet_heap() as heap:
        w = world_size
        cfg = config(backend, variant=variant)
        dev = heap.device
        for seed, transposed in ((1, False), (2, True)):
            a = [sample((M, K), dtype, seed, r, transposed).to(dev) for r in range(w)]
            b = [sample((K, N), dtype, seed + 100, r, not transposed).to(dev) for r in range(w)]
            shared_b = b[0]
            # all_gather_matmul: cat_r(a_r) @ b, and the gathered rows
            want = _product(torch.cat(a), shared_b, dtype)
            gathered, c = ops.all_gather_matmul(a[rank], shared_b, return_gathered=True, config=cfg)
            _close(c, want, f"all_gather_matmul {dtype} transposed={transposed}", rank)
            assert torch.equal(gathered.cpu(), torch.cat(a).cpu()), f"rank {rank}: all_gather_matmul's gathered rows differ"
            heap_a = heap.empty(M, K, dtype=dtype)  # read in place by peers (row-major on the heap)
            heap_a.copy_(a[rank])
            out = torch.full((w * M, N), float("nan"), dtype=dtype, device=dev)
            assert ops.all_gather_matmul(heap_a, shared_b, out=out, config=cfg) is out
            _close(out, want, f"all_gather_matmul in place {dtype}", rank)
            # matmul_all_gather: c[:, r*n:(r+1)*n] = a_r @ b_r
            want = torch.cat([_product(a[r], b[r], dtype) for r in range(w)], dim=1)
            _close(ops.matmul_all_gather(a[rank], b[rank], config=cfg), want, f"matmul_all_gather {dtype}", rank)
            out = heap.full((M, w * N), float("nan"), dtype=dtype)  # written in place by every rank
            ops.matmul_all_gather(a[rank], b[rank], out=out, config=cfg)
            _close(out, want, f"matmul_all_gather into a heap out {dtype}", rank)
            # the products stacked (W x M x n): in place on the heap, and off it (staged)
            stacked = torch.full((w, M, N), float("nan"), dtype=dtype, device=dev)
            if not transposed:
                stacked = heap.full((w, M, N), float("nan"), dtype=dtype)
            assert ops.matmul_all_gather(a[rank], b[rank], out=stacked, config=cfg) is stacked
            _close(stacked, want.view(M, w, N).permute(1, 0, 2), f"matmul_all_gather stacked {dtype}", rank)
            # matmul_reduce_scatter: rows `rank` of sum_r a_r @ b_r (M divisible by W)
            rows = 8 * w
            ar = [sample((rows, K), dtype, seed + 200, r, transposed).to(dev) for r in range(w)]
            # every op with one operand layout: an op enters only where the partials combine,
            # which the layouts (A_MODE, B_MODE) never reach; each pair compiled a kernel of its own
            for op in ("sum", "avg", "max") if not transposed else ("sum",):
                want = _reduce([_product(ar[r], b[r], dtype) for r in range(w)], op, dtype)
                got = ops.matmul_reduce_scatter(ar[rank], b[rank], op, config=cfg)
                _close(got, want[rank * 8 : (rank + 1) * 8], f"matmul_reduce_scatter {op} {dtype}", rank)
            # matmul_all_reduce: every rank the same bits, W need not divide M
            want = _reduce([_product(a[r], b[r], dtype) for r in range(w)], "sum", dtype)
            got = ops.matmul_all_reduce(a[rank], b[rank], config=cfg)
            _close(got, want, f"matmul_all_reduce {dtype}", rank)
            out = heap.empty(M, N, dtype=dtype)
            ops.matmul_all_reduce(a[rank], b[rank], out=out, config=cfg)
            assert torch.equal(out, got), f"rank {rank}: matmul_all_reduce into a heap out differs"
            digests = [None] * w
            dist.all_gather_object(digests, got.cpu().view(torch.uint8 if dtype != torch.float32 else torch.int32).sum().item())
            assert len(set(digests)) == 1, f"matmul_all_reduce results differ between ranks: {digests}"
            for t in (heap_a, out) + ((stacked,) if heap.is_symmetric(stacked) else ()):
                heap.free(t)
        return True


#: Tiles that make the Hopper path's ring wrap around within a tile and carry its phases across a
#: program's tiles: 9 K steps through 3 slots, several tiles a program, edges in every dimension.
PIPELINE = dict(block_m=64, block_n=64, block_k=16, num_warps=4, num_stages=3, num_programs=2)


def pipelined(rank, world_size, backend):
    """Every operation (and the GEMM core alone) against torch with ``PIPELINE``'s tiles on shapes TMA can address (16-byte
    strides), bf16 row-major and fp16 column-major: on the Gluon backend of a Hopper GPU (and of CPU
    ranks, which answer as sm_90) the TMA + wgmma path, checked to be the one taken."""
    from iris.ops import operations
    from iris.ops.config import resolve

    with _quiet_heap() as heap:
        w, dev = world_size, heap.device
        cfg = config(backend, **PIPELINE)
        m, k, n = 100, 136, 120
        for seed, dtype, transposed in ((3, torch.bfloat16, False), (4, torch.float16, True)):
            a = [sample((m, k), dtype, seed, r, transposed).to(dev) for r in range(w)]
            b = [sample((k, n), dtype, seed + 100, r, transposed).to(dev) for r in range(w)]
            ar = [sample((72 * w, k), dtype, seed + 200, r, transposed).to(dev) for r in range(w)]
            if backend == "gluon":
                target = operations._target(dev)
                kernels = operations._kernels("gluon")
                modes = kernels.operand_modes(target, resolve(cfg, dtype, heap), ar[rank], b[rank], 72)
                if kernels.product_path(target, dtype) == "wgmma":
                    assert all(modes.values()), f"rank {rank}: the Hopper path was not taken ({modes})"
            want = _product(torch.cat(a), b[0], dtype)
            _close(ops.all_gather_matmul(a[rank], b[0], config=cfg), want, f"pipelined all_gather_matmul {dtype}", rank)
            want = torch.cat([_product(a[r], b[r], dtype) for r in range(w)], dim=1)
            _close(ops.matmul_all_gather(a[rank], b[rank], config=cfg), want, f"pipelined matmul_all_gather {dtype}", rank)
            want = _reduce([_product(ar[r], b[r], dtype) for r in range(w)], "sum", dtype)
            got = ops.matmul_reduce_scatter(ar[rank], b[rank], config=cfg)
            _close(got, want[rank * 72 : (rank + 1) * 72], f"pipelined matmul_reduce_scatter {dtype}", rank)
            want = _reduce([_product(a[r], b[r], dtype) for r in range(w)], "sum", dtype)
            _close(ops.matmul_all_reduce(a[rank], b[rank], config=cfg), want, f"pipelined matmul_all_reduce {dtype}", rank)
            # the GEMM core alone, also with fewer K steps (1) than the ring loads ahead (2)
            for x, y in ((a[rank], b[rank]), (a[rank][:, :16], b[rank][:16])):
                want = _product(x, y, dtype)
                _close(ops.local_matmul(x, y, config=cfg), want, f"pipelined local_matmul K={x.shape[1]} {dtype}", rank)
        return True


def empty_and_degenerate(rank, world_size, backend):
    """Shapes with nothing to compute still pair up with the peers (a barrier); K = 0 gives zeros."""
    with _quiet_heap() as heap:
        w, cfg, dev = world_size, config(backend), heap.device
        z = ops.matmul_all_reduce(torch.ones(5, 0, device=dev), torch.ones(0, 7, device=dev), config=cfg)
        assert torch.equal(z.cpu(), torch.zeros(5, 7)), "K = 0 must give zeros"
        rs = ops.matmul_reduce_scatter(torch.ones(0, 3, device=dev), torch.ones(3, 4, device=dev), config=cfg)
        assert rs.shape == (0, 4)
        assert ops.matmul_all_gather(torch.ones(4, 3, device=dev), torch.ones(3, 0, device=dev), config=cfg).shape == (4, 0)
        g, c = ops.all_gather_matmul(torch.full((2, 3), float(rank), device=dev), torch.ones(3, 0, device=dev),
                                     return_gathered=True, config=cfg)  # fmt: skip
        assert c.shape == (2 * w, 0) and torch.equal(g[:, 0].cpu(), torch.arange(w).repeat_interleave(2).float())
        x = ops.matmul_all_reduce(torch.ones(3, 2, device=dev), torch.ones(2, 3, device=dev), config=cfg)  # still paired up
        assert torch.equal(x.cpu(), torch.full((3, 3), 2.0 * w))
        return True


def bad_inputs(rank, world_size, backend):
    """Every usage error is raised before anything is launched: the call after them pairs up."""
    heap = iris.heap.init(HEAP_SIZE)
    heap.wait_timeout = QUIET
    cfg, dev = config(backend), heap.device
    a, b = torch.ones(4 * world_size, 3, device=dev), torch.ones(3, 5, device=dev)
    cases = [
        (lambda: ops.matmul_all_reduce(a, torch.ones(4, 5, device=dev), config=cfg), ValueError, "do not chain"),
        (lambda: ops.matmul_all_reduce(a, b.double(), config=cfg), TypeError, "float64"),
        (lambda: ops.matmul_all_reduce(a, b.half(), config=cfg), TypeError, "same dtype"),
        (lambda: ops.matmul_all_reduce(a[0], b, config=cfg), ValueError, "2-D"),
        (lambda: ops.matmul_all_reduce(a, b, out=torch.empty(2, 2, device=dev), config=cfg), ValueError,
         "out must have shape"),
        (lambda: ops.matmul_all_reduce(a, b, out=torch.empty(a.shape[0], 5, device=dev).half(), config=cfg), TypeError,
         "dtype"),
        (lambda: ops.matmul_all_reduce(a, b, out=torch.empty(1, 5, device=dev).expand(a.shape[0], 5), config=cfg),
         ValueError, "overlap"),
        (lambda: ops.matmul_all_reduce(a, b, "prod", config=cfg), ValueError, "unknown op"),
        (lambda: ops.matmul_all_reduce(a, b, config=ccl.Config()), TypeError, "iris.ops.Config"),
        (lambda: ops.all_gather_matmul(a, b, return_gathered=1, config=cfg), TypeError, "return_gathered"),
        (lambda: ops.matmul_all_gather(a, b, heap=object(), config=cfg), TypeError, "SymmetricHeap"),
        (lambda: ops.matmul_all_gather(a, b, out=torch.empty(world_size, 5, a.shape[0], device=dev), config=cfg),
         ValueError, f"out must have shape {(world_size, a.shape[0], 5)}"),
        (lambda: ops.matmul_all_gather(a, b, out=torch.empty(1, world_size, a.shape[0], 5, device=dev), config=cfg),
         ValueError, "must be a matrix (2-D)"),
        (lambda: ops.Config(block_m=24), ValueError, "power of two"),
        (lambda: ops.Config(backend="cuda"), ValueError, "unknown backend"),
        (lambda: ops.Config(num_programs=0), ValueError, "num_programs"),
    ]
    if world_size > 1:
        cases.append((lambda: ops.matmul_reduce_scatter(torch.ones(4 * world_size + 1, 3, device=dev), b, config=cfg),
                      ValueError, "split evenly"))  # fmt: skip
    try:
        for i, (call, kind, words) in enumerate(cases):
            e = raised(call)
            assert isinstance(e, kind) and words in str(e), f"rank {rank}, case {i}: got {e!r}, want {kind.__name__} ({words})"
        x = ops.matmul_all_reduce(a, b, config=cfg)  # every rank's peers saw no launch from the above
        assert torch.equal(x.cpu(), torch.full(x.shape, 3.0 * world_size))
        heap.check_device_errors()
        return True
    finally:
        heap.close()


def back_to_back(rank, world_size, backend, rounds: int):
    """Operations and collectives one after another with no host barrier: each result as torch's."""
    with _quiet_heap() as heap:
        w, cfg, dev = world_size, config(backend), heap.device
        for i in range(rounds):
            a = [sample((8 * w, 16), torch.float32, i, r).to(dev) for r in range(w)]
            b = [sample((16, 20), torch.float32, i + 50, r).to(dev) for r in range(w)]
            rs = ops.matmul_reduce_scatter(a[rank], b[rank], config=cfg)
            ag = ops.all_gather_matmul(a[rank], b[0], config=cfg)
            y = heap.as_symmetric(torch.full((10,), float(i + rank), device=dev))
            ccl.all_reduce(y)
            want = _reduce([_product(a[r], b[r], torch.float32) for r in range(w)], "sum", torch.float32)
            _close(rs, want[rank * 8 : (rank + 1) * 8], f"round {i}: matmul_reduce_scatter", rank)
            _close(ag, _product(torch.cat(a), b[0], torch.float32), f"round {i}: all_gather_matmul", rank)
            assert torch.equal(y.cpu(), torch.full((10,), float(i * w + w * (w - 1) / 2))), f"round {i}: all_reduce"
            heap.free(y)
        return True


def _guarded_inputs(heap, dtype, rank, k):
    mem = Guarded(heap)
    a = mem.heap_tensor(sample((8 * heap.world_size, k), dtype, 7, rank), "a")
    b = mem.heap_tensor(sample((k, 12), dtype, 8, rank), "b")
    out = mem.output((8, 12), dtype, True, "out")
    mem.freeze()
    return mem, a, b, out


def mismatch(rank, world_size, backend, field: str):
    """The last rank calls differently (``field``): every rank raises CollectiveMismatchError naming
    the field, touching nothing (guards, tensors), and after ``reset()`` the next call is correct."""
    heap = iris.heap.init(HEAP_SIZE)
    heap.wait_timeout = QUIET
    odd = rank == world_size - 1
    k = 10 if odd and field == "inner dim and columns" else 8
    dtype = torch.float16 if odd and field == "dtype" else torch.float32
    variant = {"fused and unfused": "unfused", "fused and chunked": "chunked"}.get(field, "fused") if odd else "fused"
    chunks = None
    if field == "chunks":  # every rank chunked, the last in 3 chunks, the others in 2: the first chunks' sizes differ
        variant, chunks = "chunked", 3 if odd else 2
    cfg = config(backend, block_m=16 if odd and field == "tiling" else 32, blocking=True, variant=variant, chunks=chunks)
    # the collective the odd rank calls differs; chunks of other sizes describe other element counts
    named = {"fused and unfused": "collective", "fused and chunked": "collective", "chunks": "element count"}.get(field, field)
    try:
        mem, a, b, out = _guarded_inputs(heap, dtype, rank, k)
        if odd and field == "collective":
            e = raised(lambda: ops.matmul_all_reduce(a, b, out=mem.output((8 * world_size, 12), dtype, True, "ar out"), config=cfg,
                                                     op="sum"))  # fmt: skip
            mem.freeze()
        elif field == "variant":  # matmul_all_gather's products side by side, but stacked on the last rank
            w = world_size
            c = mem.output((w, 8 * w, 12) if odd else (8 * w, w * 12), dtype, True, "mag out")  # the same bytes
            mem.freeze()
            e = raised(lambda: ops.matmul_all_gather(a, b, out=c, config=cfg))
        else:
            e = raised(lambda: ops.matmul_reduce_scatter(a, b, out=out, config=cfg))
        e = e or raised(heap.check_device_errors)
        assert isinstance(e, ccl.CollectiveMismatchError), f"rank {rank}: want a mismatch, got {e!r}"
        assert e.field == named, f"rank {rank}: the mismatch names {e.field!r}, want {named!r}: {e}"
        mem.assert_unchanged(rank, f"after a mismatch of {field}")
        return _recovers(heap, mem, rank, world_size, backend)
    finally:
        heap.close()


def _recovers(heap, mem, rank, world_size, backend) -> bool:
    """After a failed call: ``reset()`` on every rank, the guarded memory freed, the heap still
    symmetric, and the next call (``QUIET`` waits) correct."""
    heap.wait_timeout = QUIET
    ccl.reset()
    mem.free()
    heap.check_symmetry()
    w = world_size
    a = [sample((4 * w, 8), torch.float32, 99, r).to(heap.device) for r in range(w)]
    b = [sample((8, 6), torch.float32, 98, r).to(heap.device) for r in range(w)]
    got = ops.matmul_reduce_scatter(a[rank], b[rank], config=config(backend, blocking=True))
    want = _reduce([_product(a[r], b[r], torch.float32) for r in range(w)], "sum", torch.float32)
    _close(got, want[rank * 4 : (rank + 1) * 4], "the call after reset()", rank)
    return True


def missing_rank(rank, world_size, backend, timeout: float, variant: str = "fused"):
    """The last rank never calls (the others run ``variant``): they time out within the bound,
    naming it, and touch nothing; after ``reset()`` on every rank the next call is correct."""
    heap = iris.heap.init(HEAP_SIZE)
    odd = rank == world_size - 1
    try:
        mem, a, b, out = _guarded_inputs(heap, torch.float32, rank, 8)
        dist.barrier()
        heap.wait_timeout = timeout
        start = time.monotonic()
        if not odd:
            cfg = config(backend, blocking=True, variant=variant)
            e = raised(lambda: ops.matmul_reduce_scatter(a, b, out=out, config=cfg))
            took = time.monotonic() - start
            assert isinstance(e, ccl.CollectiveTimeoutError), f"rank {rank}: want a timeout, got {e!r}"
            assert e.missing_rank == world_size - 1 and took < 10 * timeout + 5, (e, took)
        mem.assert_unchanged(rank, "after a peer never arrived")
        return _recovers(heap, mem, rank, world_size, backend)
    finally:
        heap.close()


def lost_tile(rank, world_size, backend, timeout: float):
    """The last rank arrives but never hands over its partial tiles (its ``signal`` is dropped):
    the owners wait for them within the bound and raise CollectiveTimeoutError naming it and the
    partial tiles; every rank stops (the others learn of the give-up), nothing outside the call's
    tensors is written, and after ``reset()`` the next call is correct."""
    import importlib

    proto = importlib.import_module(f"iris.ccl.protocol_{backend}")
    heap = iris.heap.init(HEAP_SIZE)
    odd = rank == world_size - 1
    real = proto.signal
    try:
        mem, a, b, out = _guarded_inputs(heap, torch.float32, rank, 8)
        warm = ops.matmul_reduce_scatter(a, b, config=config(backend, blocking=True))  # compiled/checked first
        del warm
        dist.barrier()
        heap.wait_timeout = timeout
        if odd:

            def dropped(ctx, flags, epoch, to, SCOPE):  # noqa: N803 - the kernel's names
                return epoch == epoch  # says it signalled; the peer never sees the flag (a rank
                # raises its own lane without signal)

            proto.signal = dropped
        try:
            e = raised(lambda: ops.matmul_reduce_scatter(a, b, out=out, config=config(backend, blocking=True)))
        finally:
            proto.signal = real
        assert isinstance(e, ccl.CollectiveTimeoutError), f"rank {rank}: want a timeout or a give-up, got {e!r}"
        if not odd:  # an owner of tiles the last rank computed: it waited for them itself
            assert "did not hand over its partial tiles" in str(e) and e.missing_rank == world_size - 1, str(e)
        else:  # it had every tile it waited for, and stops at its exit: the owners' give-up, or its
            # own deadline there if that comes first (both bounds run at once)
            assert isinstance(e, ccl.CollectiveAbandonedError) or "did not finish it" in str(e), str(e)
        mem.assert_guards(rank, "after a lost tile")
        return _recovers(heap, mem, rank, world_size, backend)
    finally:
        heap.close()


def killed(rank, world_size, backend, victim: int, sig: int, timeout: float):
    """Rank ``victim`` dies by ``sig`` in the middle of ``matmul_reduce_scatter``: rank 0 sends the
    signal (a timer thread) a third of a whole call's time after every rank started the call,
    while the ranks compute and hand over tiles. Each survivor reports what the call raised, how
    long it took and how long a whole call took (spawned by ``iris.testing.processes.spawn``: a
    rank may die)."""
    heap = iris.heap.init(HEAP_SIZE)
    heap.wait_timeout = QUIET
    w, cfg = world_size, config(backend, blocking=True)
    a = sample((192 * w, 48), torch.float32, 5, rank).to(heap.device)  # 36 tiles a group: seconds interpreted
    b = sample((48, 192), torch.float32, 6, rank).to(heap.device)
    t0 = time.monotonic()
    ops.matmul_reduce_scatter(a, b, config=cfg)  # every rank works before the kill
    took = time.monotonic() - t0
    pids = [None] * w
    dist.all_gather_object(pids, os.getpid())
    heap.wait_timeout = timeout
    dist.barrier()
    if rank == 0:  # a third into the call, however fast this machine interprets it
        threading.Timer(took / 3, os.kill, (pids[victim], sig)).start()
    t0 = time.monotonic()
    e = raised(lambda: ops.matmul_reduce_scatter(a, b, config=cfg))
    if rank == victim:
        time.sleep(60)  # the signal ends this process before
        return "survived the signal"
    return {"type": type(e).__name__ if e is not None else None, "message": str(e),
            "missing_rank": getattr(e, "missing_rank", None), "abandoned_by": getattr(e, "abandoned_by", None),
            "elapsed": time.monotonic() - t0, "call": took}  # fmt: skip


def traced(rank, world_size, backend):
    """Config(trace=True): each operation records its entry and exit waits, its tiles, its stores
    to peers and its waits for peers' tiles into the heap's trace buffer."""
    heap = iris.heap.init(HEAP_SIZE)
    heap.wait_timeout = QUIET
    w = world_size
    try:
        clock = None
        if heap.device.type == "cuda":  # a GPU heap's calibration reads the device clock
            from iris.mem.triton import device_clock as clock
        heap.tracing.enable(max_events=1 << 12, clock=clock)
        cfg = config(backend, trace=True)
        a = sample((8 * w, 16), torch.float32, 1, rank).to(heap.device)
        b = sample((16, 20), torch.float32, 2, rank).to(heap.device)
        ops.matmul_reduce_scatter(a, b, config=cfg)
        ops.matmul_all_gather(a, b, config=cfg)
        events = heap.tracing.events()
        names = {e["name"] for e in events}
        want = {"entry wait", "tile", "remote store", "tile wait", "exit wait"}
        assert want <= names, f"rank {rank}: traced events {sorted(names)} lack {sorted(want - names)}"
        heap.tracing.disable()
        return True
    finally:
        heap.close()


def cuda_graph(rank, world_size, backend, variant="fused"):
    """Operations captured in a CUDA graph synchronize on every replay and match torch (the
    chunked variant's side stream forks from the capturing stream and joins it again)."""
    heap = iris.heap.init(1 << 26)
    heap.wait_timeout = QUIET
    w, dev, cfg = world_size, heap.device, config(backend, variant=variant)
    try:
        a = [sample((64 * w, 64), torch.bfloat16, 3, r).to(dev) for r in range(w)]
        b = [sample((64, 96), torch.bfloat16, 4, r).to(dev) for r in range(w)]
        x, y = a[rank].clone(), b[rank].clone()
        out = torch.empty(64, 96, dtype=torch.bfloat16, device=dev)
        ops.matmul_reduce_scatter(x, y, out=out, config=cfg)  # compile and stage outside the capture
        torch.cuda.synchronize()
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            ops.matmul_reduce_scatter(x, y, out=out, config=cfg)
        for i in range(3):
            x.copy_(a[rank] * (i + 1))
            graph.replay()
            torch.cuda.synchronize()
            heap.check_device_errors()
            parts = [_product(a[r].cpu().float() * (i + 1), b[r].cpu(), torch.bfloat16) for r in range(w)]
            _close(out.cpu(), _reduce(parts, "sum", torch.bfloat16)[rank * 64 : (rank + 1) * 64], f"replay {i}", rank)
        return True
    finally:
        heap.close()


def chunked_variant(rank, world_size, backend, dtype):
    """Every operation's chunked variant against torch: uneven chunks (rows that do not split
    evenly, more chunks than rows), row- and column-major ``a``, ``out`` on the heap (in place),
    off it and strided, every reduction op once, the gathered rows, the products side by side and
    stacked; guarded memory around every tensor, so a chunk written at the wrong offset shows;
    ``matmul_all_reduce`` bitwise the same on every rank."""
    with _quiet_heap() as heap:
        w, dev = world_size, heap.device
        k, n = 24, 20
        for seed, transposed, chunks, rows, op in ((11, False, 3, 7, "sum"), (12, True, 4, 2, "avg"),
                                                    (13, False, 2, 5, "max"), (14, True, None, 6, "sum")):  # fmt: skip
            cfg = config(backend, variant="chunked", chunks=chunks)
            mem = Guarded(heap)
            a = [sample((rows * w, k), dtype, seed, r, transposed) for r in range(w)]
            b = [sample((k, n), dtype, seed + 100, r) for r in range(w)]
            mine_a = mem.tensor(a[rank], seed % 2 == 0, "a")
            mine_b = mem.tensor(b[rank], False, "b")
            if transposed:  # the same values, column-major (a guarded copy of the bytes is row-major)
                mine_a = mine_a.t().contiguous().t()
            scatter_out = mem.output((rows, n), dtype, seed % 2 == 1, "reduce_scatter out")
            strided = mem.output((n, rows), dtype, False, "strided out").t()  # rows x n, column-major
            heap_out = mem.output((rows * w, n), dtype, True, "all_reduce heap out")
            plain_out = mem.output((rows * w, n), dtype, False, "all_reduce out")
            want = _reduce([_product(a[r], b[r], dtype) for r in range(w)], op, dtype)
            mine = want[rank * rows : (rank + 1) * rows]
            assert ops.matmul_reduce_scatter(mine_a, mine_b, op, out=scatter_out, config=cfg) is scatter_out
            _close(scatter_out, mine, f"chunked matmul_reduce_scatter {op} chunks={chunks}", rank)
            ops.matmul_reduce_scatter(mine_a, mine_b, op, out=strided, config=cfg)
            _close(strided, mine, "chunked matmul_reduce_scatter into a strided out", rank)
            _close(ops.matmul_reduce_scatter(mine_a, mine_b, op, config=cfg), mine, "chunked, a new out", rank)
            for out in (heap_out, plain_out):
                assert ops.matmul_all_reduce(mine_a, mine_b, op, out=out, config=cfg) is out
                _close(out, want, f"chunked matmul_all_reduce {op} chunks={chunks}", rank)
            assert torch.equal(heap_out, plain_out), f"rank {rank}: in place and staged differ"
            got = ops.matmul_all_reduce(mine_a, mine_b, op, config=cfg)
            assert torch.equal(got, heap_out), f"rank {rank}: a new out differs"
            digests = [None] * w
            dist.all_gather_object(digests, as_bytes(got).sum().item())
            assert len(set(digests)) == 1, f"chunked matmul_all_reduce results differ between ranks: {digests}"
            heap.barrier()  # every peer done reading this rank's tensors before they are checked and freed
            mem.assert_guards(rank, f"after the chunked calls of seed {seed}")
            mem.free()
        for seed, transposed, chunks, rows in ((21, False, 3, 5), (22, True, None, 2)):
            cfg = config(backend, variant="chunked", chunks=chunks)
            mem = Guarded(heap)
            a = [sample((rows, k), dtype, seed, r, transposed) for r in range(w)]
            b = [sample((k, n), dtype, seed + 100, r) for r in range(w)]
            mine_a = mem.tensor(a[rank], not transposed, "a")
            if transposed:
                mine_a = mine_a.t().contiguous().t()
            shared_b = mem.tensor(b[0], False, "shared b")
            mine_b = mem.tensor(b[rank], False, "b")
            gather_out = mem.output((w * rows, n), dtype, seed % 2 == 1, "all_gather_matmul out")
            side = mem.output((rows, w * n), dtype, not transposed, "matmul_all_gather out")
            stacked = mem.output((w, rows, n), dtype, transposed, "matmul_all_gather stacked out")
            want = _product(torch.cat(a), b[0], dtype)
            assert ops.all_gather_matmul(mine_a, shared_b, out=gather_out, config=cfg) is gather_out
            _close(gather_out, want, f"chunked all_gather_matmul chunks={chunks}", rank)
            gathered, c = ops.all_gather_matmul(mine_a, shared_b, return_gathered=True, config=cfg)
            _close(c, want, "chunked all_gather_matmul, a new out", rank)
            assert torch.equal(gathered.cpu(), torch.cat(a)), f"rank {rank}: the chunked gathered rows differ"
            want = torch.cat([_product(a[r], b[r], dtype) for r in range(w)], dim=1)
            assert ops.matmul_all_gather(mine_a, mine_b, out=side, config=cfg) is side
            _close(side, want, f"chunked matmul_all_gather chunks={chunks}", rank)
            assert ops.matmul_all_gather(mine_a, mine_b, out=stacked, config=cfg) is stacked
            _close(stacked, want.view(rows, w, n).permute(1, 0, 2), "chunked matmul_all_gather stacked", rank)
            _close(ops.matmul_all_gather(mine_a, mine_b, config=cfg), want, "chunked matmul_all_gather, a new out", rank)
            heap.barrier()
            mem.assert_guards(rank, f"after the chunked gathers of seed {seed}")
            mem.free()
        return True
