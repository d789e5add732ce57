"""Rank-side checks of the collectives against plain torch (module-level: spawned ranks import it).

Every rank builds every rank's input from a seed, so each can compute the torch reference for
the whole world locally; results must match it exactly (the kernels combine ranks in rank order
with the same accumulation dtype as the reference).
"""

import hashlib

import torch
import torch.distributed as dist

import iris.ccl as ccl
import iris.heap
from iris.testing import gather  # every rank's expected tensor, over gloo (no device work)

DTYPES = [torch.float32, torch.float16, torch.bfloat16, torch.int32]
SHAPES = [(1,), (7,), (5, 3), (4, 6, 2), (300,)]  # (300,) spans several 64-element tiles
VARIANTS = ["one_shot", "two_shot", "rs_ag", "one_shot_push"]
BLOCK = 64


def make(rank, shape, dtype, seed):
    g = torch.Generator().manual_seed(seed * 1000 + rank)
    if dtype.is_floating_point:
        return torch.randn(shape, generator=g).to(dtype)
    return torch.randint(-1000, 1000, shape, generator=g, dtype=dtype)


def reference_reduce(inputs, op):
    acc_dtype = torch.float32 if inputs[0].dtype in (torch.float16, torch.bfloat16) else inputs[0].dtype
    acc = inputs[0].to(acc_dtype)
    for x in inputs[1:]:
        x = x.to(acc_dtype)
        acc = acc + x if op in ("sum", "avg") else (torch.maximum(acc, x) if op == "max" else torch.minimum(acc, x))
    if op == "avg":
        acc = acc / len(inputs)
    return acc.to(inputs[0].dtype)


def ops_for(dtype):
    return ["sum", "max", "min", "avg"] if dtype.is_floating_point else ["sum", "max", "min"]


def variant_ops(variant, dtype):
    """The ops ``check_all`` runs all_reduce's ``variant`` with: sum, and each other op of the
    dtype with one variant (max with the first, min with the second, ...). An op enters the kernel
    only where the ranks' values combine (``_reduce_tile``), which every variant shares; every
    variant against every op made the matrix launch 491 distinct kernel specializations (CPU
    count, Triton backend), each a compile on a GPU, 419 now, for no code path more."""
    others = [op for op in ops_for(dtype) if op != "sum"]
    i = VARIANTS.index(variant)
    return ["sum", *others[i :: len(VARIANTS)]]


def scatter_ops(dtype):
    """The ops ``check_all`` runs reduce_scatter with: sum, and one other op of the dtype, a
    different one for each dtype in turn (max for float32, min for float16, avg for bfloat16, min
    for int32), so that every op meets the scatter: the reduction is all_reduce's two-shot kernel
    without the push, where ``variant_ops`` runs every op."""
    others = [op for op in ops_for(dtype) if op != "sum"]
    return ["sum", others[DTYPES.index(dtype) % len(others)]]


def place(heap, t, on_heap):
    return heap.as_symmetric(t) if on_heap else t.to(heap.device).clone()


def _check(got, want, what):
    got = got.cpu()
    assert got.dtype == want.dtype and got.shape == want.shape, (what, got.dtype, got.shape, want.shape)
    assert torch.equal(got, want), f"{what}: max |diff| {(got.double() - want.double()).abs().max().item()}"


def check_all(rank, world_size, backend, dtype):
    """Every collective on ``dtype`` (one of DTYPES; a test each, so that on a GPU each dtype's
    kernels compile in a job of their own) x every shape, on and off the heap."""
    heap = iris.heap.init(1 << 24)
    w, dev = world_size, heap.device
    digest = hashlib.sha256()
    seed = 100 * DTYPES.index(dtype)
    for shape in SHAPES:
        for on_heap in (True, False):
            seed += 1
            cfg = ccl.Config(block_size=BLOCK, num_programs=2, backend=backend)
            inputs = [make(r, shape, dtype, seed) for r in range(w)]
            # all_reduce: every variant; on the small shapes each op but sum with one variant
            # (variant_ops), sum on all
            for variant in VARIANTS:
                vcfg = ccl.Config(variant=variant, block_size=BLOCK, num_programs=2, backend=backend)
                for op in variant_ops(variant, dtype) if shape in [(7,), (300,)] else ["sum"]:
                    t = place(heap, inputs[rank], on_heap)
                    ccl.all_reduce(t, op=op, config=vcfg)
                    _check(t, reference_reduce(inputs, op), f"all_reduce {variant} {op} {dtype} {shape} heap={on_heap}")
                    digest.update(t.cpu().view(-1).view(torch.uint8).numpy().tobytes())
            # all_gather: pushes into a heap out (from any inp), pulls into any other out
            inp = place(heap, inputs[rank], on_heap)
            for out_on_heap in (True, False):
                out = place(heap, torch.zeros((w * shape[0], *shape[1:]), dtype=dtype), out_on_heap)
                ccl.all_gather(out, inp, config=cfg)
                _check(out, torch.cat(inputs), f"all_gather {dtype} {shape} heap={on_heap} out_heap={out_on_heap}")
            # reduce_scatter and all_to_all: W chunks of `shape` along dim 0
            chunks = [make(r, (w * shape[0], *shape[1:]), dtype, seed + 7) for r in range(w)]
            for op in scatter_ops(dtype) if shape == (7,) else ["sum"]:
                out = torch.empty(shape, dtype=dtype, device=dev)
                ccl.reduce_scatter(out, place(heap, chunks[rank], on_heap), op=op, config=cfg)
                want = reference_reduce([c.chunk(w)[rank] for c in chunks], op)
                _check(out, want, f"reduce_scatter {op} {dtype} {shape} heap={on_heap}")
            for out_on_heap in (True, False):  # pushes into a heap out, pulls into any other
                out = place(heap, torch.zeros_like(chunks[rank]), out_on_heap)
                ccl.all_to_all(out, place(heap, chunks[rank], on_heap), config=cfg)
                want = torch.cat([c.chunk(w)[rank] for c in chunks])
                _check(out, want, f"all_to_all {dtype} {shape} heap={on_heap} out_heap={out_on_heap}")
            # broadcast from a rank that changes with the case
            src = seed % w
            t = place(heap, inputs[rank], on_heap)
            ccl.broadcast(t, src, config=cfg)
            _check(t, inputs[src], f"broadcast src={src} {dtype} {shape} heap={on_heap}")
    ccl.barrier()
    heap.barrier()  # raises what the (asynchronous) collectives recorded, if anything
    heap.check_symmetry()
    return digest.hexdigest()


def channels_last(rank, world_size, backend):
    """Every collective on channels_last (4-D) and channels_last_3d (5-D) tensors, on and off the
    heap, against torch on the same logical values; mixed layouts between out and inp are refused."""
    heap = iris.heap.init(1 << 22)
    w, dev = world_size, heap.device
    cfg = ccl.Config(block_size=BLOCK, num_programs=2, backend=backend)
    refused = 0
    for shape, fmt in (((2, 3, 2, 5), torch.channels_last), ((2, 3, 2, 2, 3), torch.channels_last_3d)):

        def put(t, on_heap, fmt=fmt):
            placed = place(heap, t, on_heap)  # contiguous; the same values laid out channels-last:
            strided = torch.empty_like(placed.cpu(), memory_format=fmt).stride()
            if on_heap:
                view = heap.empty(placed.numel(), dtype=t.dtype)
            else:
                view = torch.empty(placed.numel(), dtype=t.dtype, device=dev)
            view = view.as_strided(placed.shape, strided)
            view.copy_(placed)
            assert view.is_contiguous(memory_format=fmt) and not view.is_contiguous()
            return view

        for on_heap in (True, False):
            seed = 100 + on_heap
            inputs = [make(r, shape, torch.float32, seed) for r in range(w)]
            for variant in VARIANTS:
                t = put(inputs[rank], on_heap)
                ccl.all_reduce(t, config=ccl.Config(variant=variant, block_size=BLOCK, num_programs=2, backend=backend))
                _check(t, reference_reduce(inputs, "sum"), f"all_reduce {variant} {fmt} heap={on_heap}")
            out = put(torch.zeros((w * shape[0], *shape[1:])), on_heap)
            ccl.all_gather(out, put(inputs[rank], on_heap), config=cfg)
            _check(out, torch.cat(inputs), f"all_gather {fmt} heap={on_heap}")
            chunks = [make(r, (w * shape[0], *shape[1:]), torch.float32, seed + 7) for r in range(w)]
            out = put(torch.zeros(shape), on_heap)
            ccl.reduce_scatter(out, put(chunks[rank], on_heap), config=cfg)
            _check(out, reference_reduce([c.chunk(w)[rank] for c in chunks], "sum"), f"reduce_scatter {fmt}")
            out = put(torch.zeros_like(chunks[rank]), on_heap)
            ccl.all_to_all(out, put(chunks[rank], on_heap), config=cfg)
            _check(out, torch.cat([c.chunk(w)[rank] for c in chunks]), f"all_to_all {fmt} heap={on_heap}")
            t = put(inputs[rank], on_heap)
            ccl.broadcast(t, w - 1, config=cfg)
            _check(t, inputs[w - 1], f"broadcast {fmt} heap={on_heap}")
        # out in another layout than inp: refused before anything is published
        try:
            ccl.all_gather(torch.zeros((w * shape[0], *shape[1:]), device=dev), put(inputs[rank], True), config=cfg)
        except ValueError as e:
            refused += "lay their elements out alike" in str(e)
    ccl.barrier()
    heap.barrier()  # raises what the (asynchronous) collectives recorded, if anything
    heap.check_symmetry()
    return refused


def staged_in_and_out_of_the_kernel(rank, world_size, backend):
    """Every collective with tensors off the heap, both ways their inputs are staged: inside the
    kernel (up to ``iris.ccl.call.FOLD_BYTES``) and by copies around it (above it; here by setting
    the bound to 0). Each tensor is a view inside a larger plain buffer whose margins must stay as
    they were; back to back with no host barrier, so a rank's copy into its staging never races a
    peer still reading the staging of the call before. Returns the calls made."""
    from iris.ccl import call as call_module  # FOLD_BYTES lives there

    heap = iris.heap.init(1 << 22)
    w = world_size
    fold = call_module.FOLD_BYTES

    def guarded(numel, values=None):
        whole = torch.full((numel + 128,), -7.0, device=heap.device)
        t = whole[64 : 64 + numel]
        if values is not None:
            t.copy_(values)
        return whole, t

    def margins_kept(whole, numel, what):
        margins = torch.cat([whole[:64], whole[64 + numel :]]).cpu()
        assert torch.equal(margins, torch.full((128,), -7.0)), f"{what}: wrote outside the tensor"

    calls = 0
    try:
        for bound in (fold, 0):
            call_module.FOLD_BYTES = bound
            for numel in (1, 63, 300):
                seed = 7000 + calls
                what = f"{numel} elements per rank, fold bound {bound}"
                inputs = [make(r, (w * numel,), torch.float32, seed) for r in range(w)]
                for variant in ("one_shot", "two_shot"):
                    c = ccl.Config(variant=variant, block_size=64, num_programs=2, backend=backend)
                    whole, t = guarded(w * numel, inputs[rank])
                    ccl.all_reduce(t, config=c)
                    _check(t, reference_reduce(inputs, "sum"), f"all_reduce {variant}, {what}")
                    margins_kept(whole, w * numel, f"all_reduce {variant}")
                    calls += 1
                c = ccl.Config(block_size=64, num_programs=2, backend=backend)
                mine = [x[:numel] for x in inputs]
                _, inp = guarded(numel, mine[rank])
                whole, out = guarded(w * numel)
                ccl.all_gather(out, inp, config=c)
                _check(out, torch.cat(mine), f"all_gather, {what}")
                margins_kept(whole, w * numel, "all_gather")
                _, inp = guarded(w * numel, inputs[rank])
                whole, out = guarded(numel)
                ccl.reduce_scatter(out, inp, config=c)
                _check(
                    out, reference_reduce(inputs, "sum")[rank * numel : (rank + 1) * numel], f"reduce_scatter, {what}"
                )
                margins_kept(whole, numel, "reduce_scatter")
                whole, out = guarded(w * numel)
                ccl.all_to_all(out, inp, config=c)
                _check(out, torch.cat([x[rank * numel : (rank + 1) * numel] for x in inputs]), f"all_to_all, {what}")
                margins_kept(whole, w * numel, "all_to_all")
                src = calls % w
                whole, t = guarded(numel, mine[rank])
                ccl.broadcast(t, src, config=c)
                _check(t, mine[src], f"broadcast from {src}, {what}")
                margins_kept(whole, numel, "broadcast")
                calls += 4
    finally:
        call_module.FOLD_BYTES = fold
    heap.barrier()  # raises what the (asynchronous) collectives recorded, if anything
    heap.check_symmetry()
    return calls


def pushed_into_heap_tensors(rank, world_size, backend):
    """The collectives that store into peers' heap tensors (all_gather's and all_to_all's push into
    a heap ``out``, broadcast's relay of a heap tensor, where every rank stores its piece of the
    root's tensor into the others) write their tensors and nothing else: each tensor is a view
    inside a larger heap allocation whose margins, and a canary allocation after it, must stay as
    they were on every rank. Sizes that leave ranks a short or an empty piece, float32 and bfloat16
    (16-bit words), back to back with no host barrier. Returns the calls made."""
    heap = iris.heap.init(1 << 22)
    w = world_size
    canaries = []

    margin = -7.0 - rank  # each rank's own: a peer's margin copied in shows

    def guarded(numel, dtype, values=None):
        whole = heap.full((numel + 128,), margin, dtype=dtype)
        canaries.append((whole, numel, heap.full((64,), -9.0, dtype=dtype)))
        t = whole[64 : 64 + numel]
        if values is not None:
            t.copy_(values)
        return t

    calls = 0
    for dtype in (torch.float32, torch.bfloat16):
        for numel in (1, 17, 300):
            c = ccl.Config(block_size=64, num_programs=2, backend=backend)
            seed = 9000 + calls
            what = f"{numel} {dtype} per rank"
            mine = [make(r, (numel,), dtype, seed) for r in range(w)]
            out = guarded(w * numel, dtype)
            ccl.all_gather(out, mine[rank].to(heap.device), config=c)
            _check(out, torch.cat(mine), f"all_gather, {what}")
            chunks = [make(r, (w * numel,), dtype, seed + 1) for r in range(w)]
            for inp in (chunks[rank].to(heap.device), guarded(w * numel, dtype, chunks[rank])):
                out = guarded(w * numel, dtype)
                ccl.all_to_all(out, inp, config=c)
                _check(out, torch.cat([x[rank * numel : (rank + 1) * numel] for x in chunks]), f"all_to_all, {what}")
            for src in range(w):
                t = guarded(w * numel, dtype, chunks[rank])
                ccl.broadcast(t, src, config=c)
                _check(t, chunks[src], f"broadcast from {src}, {what}")
            calls += 3 + w
    heap.barrier()  # raises what the (asynchronous) collectives recorded, if anything
    for whole, numel, canary in canaries:
        margins = torch.cat([whole[:64], whole[64 + numel :]]).float().cpu()
        assert torch.equal(margins, torch.full((128,), margin)), f"rank {rank}: a collective wrote outside its tensor"
        assert torch.equal(canary.float().cpu(), torch.full((64,), -9.0)), f"rank {rank}: the canary changed"
    heap.check_symmetry()
    return calls


def back_to_back(rank, world_size, backend, count):
    """``count`` collectives with no host barrier between them; each consumes the previous result."""
    heap = iris.heap.init(1 << 22)
    w = world_size
    x = heap.full((257,), float(rank + 1))
    gathered = torch.empty(w * 257, device=heap.device)
    expected = torch.full((257,), float(rank + 1))
    variants = ["one_shot", "two_shot", "rs_ag", "one_shot_push"]
    for i in range(count):
        kind = i % 4
        # every 4th call is an all_reduce: its variant cycles over all (i // 4), the others' do not matter
        cfg = ccl.Config(variant=variants[(i // 4 if kind == 0 else i) % 4], block_size=128, num_programs=2,
                         backend=backend)  # fmt: skip
        if kind == 0:
            ccl.all_reduce(x, config=cfg)  # x = sum over ranks
            total = sum(expected_r for expected_r in gather(expected, w))
            expected = total
        elif kind == 1:
            x.mul_(0.5)
            expected = expected * 0.5
        elif kind == 2:
            ccl.all_gather(gathered, x, config=cfg)
            x.copy_(gathered.view(w, 257)[(rank + 1) % w])  # now holds the right neighbour's values
            expected = gather(expected, w)[(rank + 1) % w]
        else:
            ccl.broadcast(x, i % w, config=cfg)
            expected = gather(expected, w)[i % w]
    heap.barrier()  # raises what the (asynchronous) collectives recorded, if anything
    assert torch.equal(x.cpu(), expected), (x, expected)
    return x.sum().item()


def bad_inputs(rank, world_size, backend):
    heap = iris.heap.init(1 << 20)
    w, dev = world_size, heap.device
    cfg = ccl.Config(backend=backend)
    x = heap.zeros(8 * w)
    from iris.ccl.workspace import workspace_of

    ccl.barrier()
    launched = workspace_of(heap).launched
    import pytest

    cases = [
        (
            ValueError,
            "out must have shape",
            lambda: ccl.all_gather(torch.empty(w * 8 + 1, device=dev), x[:8], config=cfg),
        ),
        (
            TypeError,
            "same dtype",
            lambda: ccl.all_gather(torch.empty(w * 8, dtype=torch.float64, device=dev), x[:8].clone(), config=cfg),
        ),
        (
            ValueError,
            "overlap",
            lambda: ccl.all_gather(x, x[:8], config=cfg) if w > 1 else ccl.all_to_all(x, x, config=cfg),
        ),
        (ValueError, "out must have shape", lambda: ccl.reduce_scatter(torch.empty(3, device=dev), x, config=cfg)),
        (
            TypeError,
            "same dtype",
            lambda: ccl.reduce_scatter(torch.empty(8, dtype=torch.float16, device=dev), x, config=cfg),
        ),
        (ValueError, "unknown op", lambda: ccl.all_reduce(x, op="prod", config=cfg)),
        (
            ValueError,
            "'one_shot_push' takes at most 32768 bytes",
            lambda: ccl.all_reduce(torch.zeros(8193, device=dev), config=ccl.Config(variant="one_shot_push")),
        ),
        (ValueError, "unknown op", lambda: ccl.reduce_scatter(torch.empty(8, device=dev), x, op="mean", config=cfg)),
        (
            TypeError,
            "needs a floating-point",
            lambda: ccl.all_reduce(heap.zeros(4, dtype=torch.int32), op="avg", config=cfg),
        ),
        (TypeError, "cannot reduce", lambda: ccl.all_reduce(heap.zeros(4, dtype=torch.bool), config=cfg)),
        (ValueError, "not dense", lambda: ccl.all_reduce(heap.zeros(4, 4)[:, ::2], config=cfg)),
        (
            ValueError,
            "dim 0 must be its outermost",
            lambda: ccl.all_to_all(x.view(2, -1).t(), x.view(2, -1).t().clone(), config=cfg),
        ),
        (
            ValueError,
            "must have inp's shape",
            lambda: ccl.all_to_all(torch.empty(w * 8 + w, device=dev), x, config=cfg),
        ),
        (ValueError, "src rank", lambda: ccl.broadcast(x, w, config=cfg)),
        (ValueError, "src rank", lambda: ccl.broadcast(x, -1, config=cfg)),
        (TypeError, "src must be an int", lambda: ccl.broadcast(x, 0.0, config=cfg)),
        (
            ValueError,
            r"fewer than 2\*\*31",  # never touched: CPU pages stay unallocated
            lambda: ccl.broadcast(torch.empty(2**31, dtype=torch.uint8, device=dev), 0, config=cfg),
        ),
        (TypeError, "torch.Tensor", lambda: ccl.all_reduce([1.0], config=cfg)),
        (TypeError, "iris.ccl.Config", lambda: ccl.all_reduce(x, config={"variant": "one_shot"})),
        (ValueError, "unknown variant", lambda: ccl.Config(variant="tree")),
        (ValueError, "unknown backend", lambda: ccl.Config(backend="cuda")),
        (ValueError, "power of two", lambda: ccl.Config(block_size=100)),
        (ValueError, "power of two", lambda: ccl.Config(block_size=2**21)),
        (ValueError, r"num_programs must be an int in \[1, ", lambda: ccl.Config(num_programs=0)),
        (ValueError, "power of two", lambda: ccl.Config(num_warps=3)),
        (TypeError, "blocking must be", lambda: ccl.Config(blocking="no")),
        (TypeError, "unexpected keyword", lambda: ccl.Config(check_errors=False)),
        (TypeError, "iris.heap.SymmetricHeap", lambda: ccl.all_reduce(x, heap="heap")),
    ]
    if w > 1:
        cases += [
            (
                ValueError,
                "divisible by the world size",
                lambda: ccl.reduce_scatter(torch.empty(1, device=dev), heap.zeros(w + 1), config=cfg),
            ),
            (
                ValueError,
                "divisible by the world size",
                lambda: ccl.all_to_all(heap.zeros(w + 1), heap.zeros(w + 1), config=cfg),
            ),
        ]
    if dev.type == "cpu":
        cases.append((ValueError, "is on meta", lambda: ccl.all_reduce(torch.empty(4, device="meta"), config=cfg)))
    else:
        cases.append((ValueError, "is on cpu", lambda: ccl.all_reduce(torch.zeros(4), config=cfg)))
    for exc, match, call in cases:
        with pytest.raises(exc, match=match):
            call()
    assert workspace_of(heap).launched == launched, "a rejected call must not launch anything"
    y = heap.ones(5)
    ccl.all_reduce(y, config=cfg)  # still fine afterwards
    assert torch.equal(y.cpu(), torch.full((5,), float(w)))


def missing_rank(rank, world_size, backend):
    import time

    import pytest

    heap = iris.heap.init(1 << 20)
    cfg = ccl.Config(backend=backend, block_size=64, blocking=True)
    x = heap.ones(100)
    ccl.all_reduce(x, config=cfg)  # under the default bound: ranks start (and compile) at their own pace
    heap.wait_timeout = 1.0
    skipper = world_size - 1
    if rank == skipper:
        time.sleep(0.5)  # this rank skips the collective the others enter
    else:
        t0 = time.monotonic()
        with pytest.raises(
            ccl.CollectiveTimeoutError, match=rf"all_reduce timed out on rank {rank}: rank {skipper} did not reach it"
        ) as info:
            ccl.all_reduce(x, config=cfg)
        assert info.value.missing_rank == skipper and info.value.collective == "all_reduce"
        assert time.monotonic() - t0 < 60
    ccl.reset()
    heap.wait_timeout = 60.0
    y = heap.full((70,), float(rank))
    ccl.all_reduce(y, config=cfg)  # the heap and the collectives work again
    assert torch.equal(y.cpu(), torch.full((70,), float(sum(range(world_size)))))


def unchecked_barrier(rank, world_size, backend):
    """The default (asynchronous) barrier does not sync with the host: a missing rank's timeout is
    left in the error record for the next check, which names it; the heap works again after reset()."""
    import time

    import pytest

    heap = iris.heap.init(1 << 20)
    quiet = ccl.Config(backend=backend)
    ccl.barrier(config=quiet)  # everyone arrives (under the default bound): nothing to report
    if heap.device.type == "cuda":
        torch.cuda.synchronize(heap.device)
    heap.check_device_errors()
    heap.wait_timeout = 1.0
    skipper = world_size - 1
    if rank == skipper:
        time.sleep(0.5)  # this rank skips the barrier the others enter
    else:
        ccl.barrier(config=quiet)  # returns without raising (on a GPU: before the wait even ends)
        with pytest.raises(ccl.CollectiveTimeoutError, match=rf"rank {skipper} did not reach it"):
            if heap.device.type == "cuda":
                torch.cuda.synchronize(heap.device)
            heap.check_device_errors()
    ccl.reset()
    heap.wait_timeout = 60.0
    ccl.barrier(config=ccl.Config(backend=backend, blocking=True))  # checked, and every rank arrives


def empty_inputs(rank, world_size, backend):
    """Every collective on tensors of no elements, on and off the heap, twice (the repeat replays
    the first call's plan): nothing is written anywhere (the guard bytes and canaries around every
    tensor stay), and each call still pairs up with its peers' (the all_reduce after them is right)."""
    from _ccl_faults import Guarded

    heap = iris.heap.init(1 << 22)
    w = world_size
    cfg = ccl.Config(backend=backend)
    mem = Guarded(heap)
    e = torch.zeros(0)
    calls = []
    for on in (True, False):
        t = {name: mem.tensor(e, on, f"{name} (heap={on})") for name in ("tensor", "inp", "out")}
        calls += [
            lambda t=t: ccl.all_reduce(t["tensor"], config=cfg),
            lambda t=t: ccl.all_reduce(t["tensor"], op="max", config=ccl.Config(backend=backend, variant="one_shot")),
            lambda t=t: ccl.all_gather(t["out"], t["inp"], config=cfg),
            lambda t=t: ccl.reduce_scatter(t["out"], t["inp"], config=cfg),
            lambda t=t: ccl.all_to_all(t["out"], t["inp"], config=cfg),
            lambda t=t: ccl.broadcast(t["tensor"], w - 1, config=cfg),
        ]
    for _ in range(2):
        for c in calls:
            c()
    x = heap.full((5,), float(rank + 1))
    ccl.all_reduce(x, config=cfg)
    _check(x, torch.full((5,), float(sum(range(1, w + 1)))), "all_reduce after the empty collectives")
    heap.barrier()  # raises what the collectives recorded, if anything
    mem.assert_guards(rank, "after the empty collectives")
    return len(calls)


def launch_specializations(rank, world_size, backend):
    """Every launch of every collective (each all_reduce variant, heap and off-heap tensors, sizes
    whose per-rank chunks are 1, 8 and 11 elements), as the key Triton specializes its kernel on:
    each tensor's dtype and 16-byte alignment, each integer's ``== 1`` / multiple of 16 / 32-bit
    range, every constexpr, leaving out the arguments no kernel is specialized on
    (``iris.ccl.protocol.UNSPECIALIZED``). broadcast is left out: its source reads nothing and
    launches another kernel by design."""
    from iris.ccl import _internals, call, protocol

    heap = iris.heap.init(1 << 22)
    w, dev = world_size, heap.device
    keys = []
    positional = call._launch.positional

    def recording(kernel, arguments):
        key = []
        for name, constexpr, _ in _internals.parameters(kernel):
            v = arguments.get(name)
            if name in protocol.UNSPECIALIZED or name not in arguments:
                continue
            if constexpr:
                key.append((name, v))
            elif isinstance(v, torch.Tensor):
                key.append((name, v.dtype, v.data_ptr() % 16 == 0))
            else:
                key.append((name, v == 1, v % 16 == 0, -(2**31) <= v < 2**31))
        keys.append((kernel.__name__, tuple(key)))
        return positional(kernel, arguments)

    call._launch.positional = recording
    try:
        for chunk in (1, 8, 11):
            n = chunk * w
            for variant in ("one_shot", "two_shot", "rs_ag"):
                for on_heap in (True, False):
                    x = place(heap, make(rank, (n,), torch.float32, 3), on_heap)
                    ccl.all_reduce(x, config=ccl.Config(backend=backend, variant=variant))
            for on_heap in (True, False):
                inp = make(rank, (chunk,), torch.float16, 4).to(dev)
                out = place(heap, torch.zeros(n, dtype=torch.float16), on_heap)
                ccl.all_gather(out, inp, config=ccl.Config(backend=backend))
                inp = place(heap, make(rank, (n,), torch.float32, 5), on_heap)
                ccl.reduce_scatter(torch.zeros(chunk, device=dev), inp, config=ccl.Config(backend=backend))
                ccl.all_to_all(torch.zeros(n, device=dev), inp, config=ccl.Config(backend=backend))
        ccl.barrier(config=ccl.Config(backend=backend, blocking=True))
    finally:
        call._launch.positional = positional
    return keys


def direct_launch(rank, world_size, backend):
    """GPU: after the first call of a shape, kernels launch without the JIT (``iris.ccl._launch``);
    a tensor whose address is not 16-byte aligned gets a kernel of its own (Triton specializes on
    alignment), and the results equal torch's and the JIT path's."""
    from iris.ccl import _launch, call

    heap = iris.heap.init(1 << 24)
    w, dev = world_size, heap.device
    cfg = ccl.Config(backend=backend)
    chunks = [make(r, (w * 1000,), torch.float32, 99) for r in range(w)]
    want = reference_reduce([c.chunk(w)[rank] for c in chunks], "sum")
    inp = heap.as_symmetric(chunks[rank])
    backing = torch.empty(1001, device=dev)
    outs = {"aligned": backing[:1000], "misaligned": backing[1:]}  # 4 bytes off: not a multiple of 16
    assert outs["misaligned"].data_ptr() % 16 and not outs["aligned"].data_ptr() % 16
    for _ in range(3):  # first round compiles and caches; later rounds hit the cache
        for name, out in outs.items():
            out.fill_(float("nan"))
            ccl.reduce_scatter(out, inp, config=cfg)
            _check(out, want, f"reduce_scatter into a {name} out")
    kernel = call.kernels_of(backend).reduce_kernel
    assert kernel not in _launch._unsupported, "the direct launch turned itself off"
    keys = [k for k in _launch._compiled if k[0] is kernel]
    assert len(keys) >= 2, f"expected a cached kernel per alignment, got {len(keys)}"
    x = heap.as_symmetric(make(rank, (4099,), torch.bfloat16, 5))
    results = []
    for direct in (True, False):
        _launch.DIRECT_LAUNCH = direct
        y = heap.as_symmetric(x)
        for _ in range(5):
            ccl.all_reduce(y, op="avg", config=ccl.Config(backend=backend))
        ccl.barrier()
        results.append(y.cpu())
    _launch.DIRECT_LAUNCH = True
    assert torch.equal(results[0], results[1]), "direct and JIT launches disagree"
    return True


def relaunch(rank, world_size, backend):
    """The epoch is read from the device, not passed in: launching a collective's kernel again
    with the very same arguments (what a CUDA graph's replay does) synchronizes as a new
    collective, and the host's collectives afterwards still pair up."""
    from iris.ccl import call, protocol
    from iris.ccl.workspace import workspace_of

    heap = iris.heap.init(1 << 20)
    w = world_size
    cfg = ccl.Config(backend=backend, block_size=BLOCK)
    ws = workspace_of(heap)
    x = heap.ones(100)
    ccl.all_reduce(x, config=cfg)
    ccl.barrier(config=cfg)
    before = ws.completed()
    K = call.kernels_of(backend)
    chunk = -(-x.numel() // w)
    flags = ws.flags
    code = protocol.describe("all_reduce", variant="two_shot", op="sum", dtype=x.dtype, on_heap=(True,))
    # reduce_kernel's arguments: the description's, src, dst, N, chunk_index (this rank), chunk, user, staged
    args = (heap.context, ws.sync, code, x.numel(), heap.offset(x), -1, 0, x, x, x.numel(), rank, chunk, x, 0)
    consts = dict(PUSH=True, DST_CHUNKED=True, COPY_BACK=False, W=w, OP=0, ACC_F32=False, IS_FLOAT=True, FLAGS=flags,
                  BLOCK=BLOCK, SCOPE=ws.scope, TRACE=False)  # fmt: skip
    for i in range(3):  # the two_shot all_reduce's launch, three times with identical arguments
        x.fill_(float(rank + i))
        K.reduce_kernel[(2,)](*args, **consts)
        heap.check_device_errors()
        _check(x, torch.full((100,), float(sum(r + i for r in range(w)))), f"relaunch {i}")
    assert ws.completed() == before + 3, (before, ws.completed())
    assert int(ws.state[0].item()) == 0, "the last program resets the launch's count"
    # every rank finished the relaunches (peers may already have entered the next collective)
    assert ws.exit.cpu().tolist()[:w] == [before + 3] * w, ws.exit
    assert int(ws.entry[rank].item()) == before + 3 and bool((ws.entry[:w] >= before + 3).all()), ws.entry
    y = heap.full((70,), float(rank))
    ccl.all_reduce(y, config=cfg)  # host-launched collectives still pair up with the peers'
    _check(y, torch.full((70,), float(sum(range(w)))), "all_reduce after the relaunches")


def cuda_graph(rank, world_size, backend):
    """GPU: collectives captured into a CUDA graph and replayed (inputs refilled between replays)
    give torch's results on every replay, heap and non-heap tensors alike, and eager collectives
    before and after the replays are unaffected; a replay after ``close()`` raises
    HeapClosedError."""
    heap = iris.heap.init(1 << 24)
    w, dev = world_size, heap.device
    cfg = ccl.Config(backend=backend)
    a = heap.zeros(3000)  # two_shot in place
    b = torch.zeros(5, 7, device=dev)  # staged through the workspace
    g_in, g_out = heap.zeros(w * 256), heap.zeros(w * w * 256)
    r_out = torch.zeros(256, device=dev)

    def fill(i):
        a.copy_(torch.arange(3000, device=dev) * 0 + rank + i)
        b.copy_(torch.full((5, 7), float(rank * i + 1), device=dev))
        g_in.copy_(torch.arange(w * 256, device=dev, dtype=torch.float32) + 1000 * rank + i)

    def collectives():
        ccl.all_reduce(a, config=cfg)
        ccl.all_reduce(b, op="max", config=cfg)
        ccl.all_gather(g_out, g_in, config=cfg)
        ccl.reduce_scatter(r_out, g_in, config=cfg)
        ccl.barrier(config=cfg)

    def check(i):
        _check(a, torch.full((3000,), float(sum(r + i for r in range(w)))), f"all_reduce, replay {i}")
        _check(b, torch.full((5, 7), float(max(r * i + 1 for r in range(w)))), f"all_reduce max, replay {i}")
        ins = [torch.arange(w * 256, dtype=torch.float32) + 1000 * r + i for r in range(w)]
        _check(g_out, torch.cat(ins), f"all_gather, replay {i}")
        _check(r_out, sum(x.chunk(w)[rank] for x in ins), f"reduce_scatter, replay {i}")

    side = torch.cuda.Stream(dev)
    side.wait_stream(torch.cuda.current_stream(dev))
    with torch.cuda.stream(side):  # warm up (compiles, grows staging) off the default stream
        fill(0)
        collectives()
    torch.cuda.current_stream(dev).wait_stream(side)
    check(0)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        collectives()
    for i in range(1, 6):
        fill(i)
        graph.replay()
        heap.check_device_errors()
        torch.cuda.synchronize(dev)
        check(i)
    fill(9)
    collectives()  # eager again, after the replays
    check(9)
    dist.barrier(group=heap.group)
    # Replayed after close() (the heap object still alive): every kernel finds the heap closed,
    # records it and touches nothing of a peer; the memory it still writes (the collectives' sync
    # block) stays mapped while the heap object lives, so nothing faults.
    heap.close()
    graph.replay()
    torch.cuda.synchronize(dev)
    try:
        heap.check_device_errors()
    except iris.heap.HeapClosedError:
        pass
    else:
        raise AssertionError(f"rank {rank}: a graph replayed after close() recorded no HeapClosedError")


def no_host_sync(rank, world_size, backend):
    """GPU: no collective waits for the device. Each is called behind a long queued kernel and
    returns while that kernel still runs; their results are right once the stream gets to them."""
    heap = iris.heap.init(1 << 24)
    w, dev = world_size, heap.device
    cfg = ccl.Config(backend=backend)
    x = heap.full((1000,), float(rank + 1))
    y = torch.full((300,), float(rank + 1), device=dev)  # staged: its copies are queued too
    out = heap.zeros(w * 1000)
    ccl.all_reduce(x, config=cfg)  # compile everything first (the first call of a shape may compile)
    ccl.all_reduce(y, config=cfg)
    ccl.all_gather(out, x, config=cfg)
    ccl.barrier(config=cfg)
    heap.barrier()
    x.fill_(float(rank + 1))
    y.fill_(float(rank + 1))
    dist.barrier(group=heap.group)
    blocker = torch.cuda.Event()
    torch.cuda._sleep(int(2e9))  # about a second of spinning on the stream
    blocker.record()
    calls = {
        "all_reduce": lambda: ccl.all_reduce(x, config=cfg),
        "staged all_reduce": lambda: ccl.all_reduce(y, config=cfg),
        "all_gather": lambda: ccl.all_gather(out, x, config=cfg),
        "barrier": lambda: ccl.barrier(config=cfg),
    }
    for name, call in calls.items():
        call()
        assert not blocker.query(), f"{name} waited for the device (the queued spin had ended when it returned)"
    heap.barrier()
    total = float(sum(range(1, w + 1)))
    _check(x, torch.full((1000,), total), "all_reduce behind the spin")
    _check(y, torch.full((300,), total), "staged all_reduce behind the spin")
    _check(out, torch.cat([torch.full((1000,), total)] * w), "all_gather behind the spin")


def auto_resolves_like_its_table(rank, world_size, backend):
    """``variant="auto"`` on some ranks and the variant ``iris.ccl.tuning`` names on the others pair
    up (a collective's description names the variant it runs), both below and above the table's
    first bound; the results match torch. Returns the variants auto ran."""
    from iris.ccl import tuning

    heap = iris.heap.init(1 << 22)
    try:
        ran = []
        for nbytes in (1024, 4 * tuning.AUTO_PUSH_BYTES):
            picked = tuning.all_reduce_auto(nbytes, world_size, heap.device)
            variant = "auto" if rank % 2 == 0 else picked
            x = heap.empty(nbytes // 4)
            x.copy_(make(rank, (nbytes // 4,), torch.float32, seed=nbytes))
            want = reference_reduce([make(r, (nbytes // 4,), torch.float32, seed=nbytes) for r in range(world_size)],
                                    "sum")  # fmt: skip
            ccl.all_reduce(x, config=ccl.Config(variant=variant, backend=backend, block_size=BLOCK, blocking=True))
            assert torch.equal(x.cpu(), want), f"rank {rank}: {nbytes} B, auto against {picked}"
            heap.free(x)
            ran.append(picked)
        return ran
    finally:
        heap.close()


def shared_gpu_tile(rank, world_size, backend):
    """Where ranks share a GPU (forced here on every rank, with 8 multiprocessors on CPU ranks:
    one_shot's chunk below the bound is then above what it stages in its kernel), every tiled
    launch runs at most one program per multiprocessor over the ranks, and a reduction whose chunk
    gives each of those programs a ``SHARED_GPU_TILE`` runs that tile (16384 elements, 16 warps)
    unless the config sets the tile: just below and at that size, two_shot and one_shot all_reduce
    and reduce_scatter match torch on and off the heap (ragged: the chunk is no multiple of the
    tile), twice each, writing nothing outside their tensors. The configs are blocking, so no call
    is planned: every call takes the full path and its launch is seen. Returns (kernel, BLOCK,
    warps, programs within the cap) of every tiled launch, in order."""
    from _ccl_faults import Guarded

    from iris.ccl import call, launch_shape

    gpu = torch.cuda.is_available()
    shared, sms = launch_shape.LaunchShape._shared_gpu, launch_shape._multiprocessors
    tile, programs = launch_shape.LaunchShape.tile, launch_shape.LaunchShape.programs
    seen, chosen = [], {}

    def record_tile(self, kernel, arguments):
        chosen[kernel.__name__] = tile(self, kernel, arguments)
        return chosen[kernel.__name__]

    def record_programs(self, kernel, arguments, args, constexprs, warps):
        got = programs(self, kernel, arguments, args, constexprs, warps)
        block, _ = chosen[kernel.__name__]
        if block is not None and not arguments.get("staged"):
            seen.append((kernel.__name__, constexprs["BLOCK"], warps, got))
        return got

    launch_shape.LaunchShape._shared_gpu = property(lambda self: True)
    launch_shape.LaunchShape.tile, launch_shape.LaunchShape.programs = record_tile, record_programs
    if not gpu:
        launch_shape._multiprocessors = lambda device: 8
    w = world_size
    cap = launch_shape.one_per_multiprocessor(torch.device("cuda" if gpu else "cpu"), w)
    fat = cap * launch_shape.SHARED_GPU_TILE[0]  # the smallest chunk that takes the shared GPU's tile
    assert (fat - 1) * 4 > call.FOLD_BYTES, "one_shot below the bound would be staged, in one program"
    big = w * (fat + 7)  # two_shot's and reduce_scatter's chunk: fat + 7 elements, ragged
    heap = iris.heap.init(max(1 << 23, 16 * big * 4))
    heap.wait_timeout = 30.0
    try:
        mem = Guarded(heap)
        for n, on in ((w * (fat - 1), True), (big, True), (big, False)):
            x = mem.tensor(torch.zeros(n), on, f"x ({n}, heap={on})")
            part = mem.tensor(torch.zeros(n // w), on, f"part ({n}, heap={on})")
            base = torch.arange(n, dtype=torch.float32) % 13
            for _ in range(2):  # the second call chooses as the first did
                x.copy_(base + rank)
                ccl.all_reduce(x, config=ccl.Config(backend=backend, variant="two_shot", blocking=True))
                _check(x, base * w + w * (w - 1) // 2, f"two_shot all_reduce of {n}")
                x.copy_(base + rank)
                ccl.reduce_scatter(part, x, config=ccl.Config(backend=backend, blocking=True))
                want = (base * w + w * (w - 1) // 2)[rank * (n // w) : (rank + 1) * (n // w)]
                _check(part, want, f"reduce_scatter of {n}")
        small = mem.tensor(torch.zeros(fat - 1), True, "small one_shot")
        one = mem.tensor(torch.zeros(fat), True, "one_shot")
        for t in (small, one):
            t.copy_(torch.arange(t.numel(), dtype=torch.float32) % 5 + rank)
            ccl.all_reduce(t, config=ccl.Config(backend=backend, variant="one_shot", blocking=True))
            _check(t, (torch.arange(t.numel(), dtype=torch.float32) % 5) * w + w * (w - 1) // 2, "one_shot")
        one.fill_(1.0)  # a tile set by the config is the config's
        ccl.all_reduce(one, config=ccl.Config(backend=backend, variant="one_shot", num_warps=4, blocking=True))
        _check(one, torch.full((fat,), float(w)), "one_shot with num_warps=4")
        mem.assert_guards(rank, "after the reductions on a shared GPU")
        return [(name, block, warps, progs <= cap) for name, block, warps, progs in seen]
    finally:
        launch_shape.LaunchShape._shared_gpu, launch_shape._multiprocessors = shared, sms
        launch_shape.LaunchShape.tile, launch_shape.LaunchShape.programs = tile, programs
        heap.close()
