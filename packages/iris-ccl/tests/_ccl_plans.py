"""Rank-side bodies of the plan tests (``test_ccl_plans.py``): repeated calls launch the plan the
first call recorded (``iris.ccl.plans.Plan``), and nothing a plan skips may change what a
call does. Memory is guarded as in the fault suite (``_ccl_faults.Guarded``)."""

from __future__ import annotations

import torch
import torch.distributed as dist
from _ccl_cases import reference_reduce
from _ccl_faults import HEAP_SIZE, QUIET, Guarded, cfg, raised, same, sample, settle, summary

import iris.ccl as ccl
import iris.heap
from iris.ccl.workspace import workspace_of

ROWS = 6  # rows per rank (dim 0 of every input is a multiple of the world size)


def plans_of(heap) -> int:
    return len(workspace_of(heap).plans)


def _calls(mem: Guarded, rank: int, w: int, backend):
    """Per collective: (name, fill(seed) -> expected, call); heap tensors only, so every call is planned."""
    c = cfg(backend)
    t = {
        "ar": mem.heap_tensor(torch.zeros(ROWS * w, 3), "the all_reduce tensor"),
        "ag_in": mem.heap_tensor(torch.zeros(ROWS, 3, dtype=torch.int32), "all_gather's inp"),
        "ag_out": mem.heap_tensor(torch.zeros(ROWS * w, 3, dtype=torch.int32), "all_gather's out"),
        "rs_in": mem.heap_tensor(torch.zeros(ROWS * w, 3), "reduce_scatter's inp"),
        "rs_out": mem.heap_tensor(torch.zeros(ROWS, 3), "reduce_scatter's out"),
        "a2a_in": mem.heap_tensor(torch.zeros(ROWS * w, 2, dtype=torch.float64), "all_to_all's inp"),
        "a2a_out": mem.heap_tensor(torch.zeros(ROWS * w, 2, dtype=torch.float64), "all_to_all's out"),
        "bc": mem.heap_tensor(torch.zeros(5, dtype=torch.complex128), "the broadcast tensor"),
    }

    def inputs(shape, dtype, seed):
        return [sample(shape, dtype, seed, r) for r in range(w)]

    def all_reduce(seed):
        xs = inputs((ROWS * w, 3), torch.float32, seed)
        t["ar"].copy_(xs[rank])
        return lambda: ccl.all_reduce(t["ar"], op="max", config=c), lambda: same(t["ar"], reference_reduce(xs, "max"))

    def all_gather(seed):
        xs = inputs((ROWS, 3), torch.int32, seed)
        t["ag_in"].copy_(xs[rank])
        return lambda: ccl.all_gather(t["ag_out"], t["ag_in"], config=c), lambda: same(t["ag_out"], torch.cat(xs))

    def reduce_scatter(seed):
        xs = inputs((ROWS * w, 3), torch.float32, seed)
        t["rs_in"].copy_(xs[rank])
        want = reference_reduce(xs, "sum")[rank * ROWS : (rank + 1) * ROWS]
        return lambda: ccl.reduce_scatter(t["rs_out"], t["rs_in"], config=c), lambda: same(t["rs_out"], want)

    def all_to_all(seed):
        xs = inputs((ROWS * w, 2), torch.float64, seed)
        t["a2a_in"].copy_(xs[rank])
        want = torch.cat([x[rank * ROWS : (rank + 1) * ROWS] for x in xs])
        return lambda: ccl.all_to_all(t["a2a_out"], t["a2a_in"], config=c), lambda: same(t["a2a_out"], want)

    def broadcast(seed):
        xs = inputs((5,), torch.complex128, seed)
        t["bc"].copy_(xs[rank])
        src = (seed % 10) % w  # the round: the same src for the three calls of a round
        return lambda: ccl.broadcast(t["bc"], src, config=c), lambda: same(t["bc"], xs[src])

    return [all_reduce, all_gather, reduce_scatter, all_to_all, broadcast]


def repeated(rank, world_size, backend):
    """Each collective three times with new data in the same tensors: the first call records one
    plan, the repeats add none, and every result is torch's. Then the same with tensors freed and
    allocated again (same addresses), a plain tensor (staged: never planned), ``src=True`` where a
    plan for ``src=1`` exists, and ``reset()`` (which drops every plan)."""
    heap = iris.heap.init(HEAP_SIZE)
    heap.wait_timeout = QUIET
    ccl.barrier(config=cfg(backend))
    out = {"plans": [], "wrong": []}
    for round_ in range(2):  # the second round: every tensor freed and allocated again
        mem = Guarded(heap)
        for make in _calls(mem, rank, world_size, backend):
            before = plans_of(heap)
            for seed in range(3):
                call, check = make(10 * seed + round_)
                call()
                settle(heap)
                if not check():
                    out["wrong"].append(f"{make.__name__} call {seed} of round {round_}")
                mem.assert_guards(rank, f"{make.__name__} call {seed}")
            out["plans"].append((make.__name__, round_, plans_of(heap) - before))
        mem.free()
    # Plain tensors: staged on the heap, with the copies in the plan. The last rank calls with a
    # new tensor (a new address, so no plan) each time while the others repeat theirs (their
    # plans); a larger call in between grows the staging, which must retire the plans that copy
    # through the old buffer on every rank alike (else ranks would describe different offsets).
    mem = Guarded(heap)
    odd = rank == world_size - 1
    xs = {n: [sample((n,), torch.float32, 90 + n, r) for r in range(world_size)] for n in (7, 500)}
    kept = {n: mem.plain_tensor(xs[n][rank], f"the plain tensor of {n}") for n in (7, 500)}
    before = plans_of(heap)
    fresh = []  # the last rank's tensors, kept alive so that every call gets a new address
    for i, n in enumerate((7, 7, 500, 7, 7)):
        y = kept[n]
        if odd:
            y = torch.empty_like(y)
            fresh.append(y)
        y.copy_(xs[n][rank])
        ccl.all_reduce(y, config=cfg(backend, variant="two_shot"))
        settle(heap)
        if not same(y, reference_reduce(xs[n], "sum")):
            out["wrong"].append(f"plain all_reduce call {i} ({n} elements)")
    heap.check_device_errors()  # a rank that described other offsets than its peers would raise here
    out["plain plans"] = plans_of(heap) - before
    # A plan recorded for src=1 must not take src=True (the full path refuses a bool).
    z = mem.heap_tensor(torch.arange(4.0), "the broadcast tensor")
    if world_size > 1:
        ccl.broadcast(z, 1, config=cfg(backend))
    out["src=True"] = summary(raised(lambda: ccl.broadcast(z, True, config=cfg(backend))))
    settle(heap)
    mem.assert_guards(rank, "after the plain and broadcast calls")
    ccl.reset()
    out["after reset"] = plans_of(heap)
    mem.free()
    heap.check_symmetry()
    return out


def error_then_replay(rank, world_size, backend):
    """A planned all_reduce, then an asynchronous mismatch (the last rank's tensor is longer); the
    next call, which has a plan, raises the mismatch on every rank, the one after says to call
    reset(), and after reset() the call (recorded afresh) is right again."""
    heap = iris.heap.init(HEAP_SIZE)
    heap.wait_timeout = QUIET
    c = cfg(backend, variant="two_shot")
    mem = Guarded(heap)
    xs = [sample((12,), torch.float32, 5, r) for r in range(world_size)]
    x = mem.heap_tensor(xs[rank], "the planned tensor")
    odd = mem.heap_tensor(sample((12 + 4 * (rank == world_size - 1),), torch.float32, 6, rank), "the odd tensor")
    ccl.all_reduce(x, config=c)
    settle(heap)
    planned = plans_of(heap)
    mem.freeze()
    ccl.all_reduce(odd, config=c)  # asynchronous: returns; the mismatch is recorded on the device
    settle(heap)
    first = raised(lambda: ccl.all_reduce(x, config=c))
    second = raised(lambda: ccl.all_reduce(x, config=c))
    settle(heap)
    mem.assert_unchanged(rank, "after the mismatch and the calls that raised")
    dist.barrier()
    ccl.reset()
    after_reset = plans_of(heap)
    x.copy_(xs[rank])
    ccl.all_reduce(x, config=c)
    settle(heap)
    right = same(x, reference_reduce(xs, "sum"))
    mem.assert_guards(rank, "after reset() and the call")
    mem.free()
    heap.check_symmetry()
    return {"planned": planned, "first": summary(first), "second": summary(second),
            "after reset": after_reset, "right": right}  # fmt: skip


def same_objects(rank, world_size, backend):
    """A loop on the very same tensor objects skips even the plan's key (``plans.replay_recent``),
    and nothing that changed under an unchanged object goes unseen: a tensor given new memory
    (``.data =``) or another dtype over the same memory, one resized in place, the heap's blocks
    changing in between, a tensor made at a reused ``id``, and ``reset()``. Every result is
    torch's and guards stay intact. Returns per case what the check saw."""
    from iris.ccl import plans

    heap = iris.heap.init(HEAP_SIZE)
    heap.wait_timeout = QUIET
    c = cfg(backend, variant="two_shot")
    ccl.barrier(config=c)
    ws = workspace_of(heap)
    mem = Guarded(heap)
    out = {"wrong": [], "keyed": {}}
    keys = []  # every call_key call: a call that took the shortcut builds none
    real_key = plans.call_key

    def counting_key(*args):
        keys.append(args[1])
        return real_key(*args)

    plans.call_key = counting_key

    def check(case, x, xs, n_calls=3, op="sum"):
        """``n_calls`` all_reduces of ``x`` (data ``xs[rank]`` each time): right each time; how many built a key."""
        before = len(keys)
        for i in range(n_calls):
            x.copy_(xs[rank].to(x.dtype) if x.shape == xs[rank].shape else xs[rank].view(x.shape).to(x.dtype))
            ccl.all_reduce(x, op=op, config=c)
            settle(heap)
            want = reference_reduce([v.view(x.shape).to(x.dtype) for v in xs], op)
            if not same(x, want):
                out["wrong"].append(f"{case}: call {i}")
            mem.assert_guards(rank, f"{case} call {i}")
        out["keyed"][case] = len(keys) - before

    try:
        xs = [sample((ROWS * world_size, 3), torch.float32, 1, r) for r in range(world_size)]
        x = mem.heap_tensor(xs[rank], "the loop's tensor")
        check("loop", x, xs, n_calls=5)  # records, replays by key twice (then remembered), then none
        check("an equal config, another object", x, xs)  # cfg() builds a new Config per call already
        # New memory under the same object: another heap tensor of the same shape.
        other = mem.heap_tensor(xs[rank], "the new memory")
        x.data = other
        check("same object, new memory", x, xs)
        # The same memory as int32 (a view): a plan for float32 must not reduce it as floats.
        ints = [sample((ROWS * world_size, 3), torch.int32, 2, r) for r in range(world_size)]
        x.data = other.view(torch.int32)
        check("same object and memory, another dtype", x, ints)
        # Resized in place to fewer elements (the memory and address stay): the old plan would
        # reduce the old count, past the tensor's end; the elements after its end must not change.
        x.data = other.view(torch.float32)
        check("back to float32", x, xs)
        tail_before = other.view(-1)[ROWS * world_size :].clone()
        small = [v.view(-1)[: ROWS * world_size] for v in xs]
        x.resize_(ROWS * world_size)
        check("resized in place", x, small)
        if not torch.equal(other.view(-1)[ROWS * world_size :], tail_before):
            out["wrong"].append("resized in place: the elements past the tensor's new end changed")
        # The heap's blocks change (an allocation) between calls: asked again, still the shortcut.
        generation = heap.generation
        mem.heap_tensor(torch.zeros(4), "a block allocated in between")
        out["generation moved"] = heap.generation != generation
        check("after an allocation", x, small)
        # A new view for every call (x.view(-1)): replayed by key, never remembered.
        entries = len(ws.recent)
        before = len(keys)
        for i in range(4):
            x.copy_(small[rank])
            ccl.all_reduce(x.view(-1), config=c)
            settle(heap)
            if not same(x, reference_reduce(small, "sum")):
                out["wrong"].append(f"a new view per call: call {i}")
        out["keyed"]["a new view per call"] = len(keys) - before
        out["entries from views"] = len(ws.recent) - entries
        # A tensor made after the loop's tensor is gone: a reused id must not find its entry.
        y = mem.heap_tensor(xs[rank], "the tensor that goes")
        check("before it goes", y, xs)
        gone = id(y)
        del y
        reused = None
        for _ in range(1000):
            z = torch.empty(ROWS * world_size, 3, device=heap.device)  # off the heap: a staged call
            if id(z) == gone:
                reused = z
                break
            del z
        out["id reused"] = reused is not None
        if reused is not None:
            check("a plain tensor at the reused id", reused, xs)
        out["entries before reset"] = len(ws.recent)
        ccl.reset()
        out["entries after reset"] = len(ws.recent)
        check("after reset", x, small)
    finally:
        plans.call_key = real_key
    mem.free()
    heap.check_symmetry()
    return out


def heap_mappings() -> int:
    """Mappings of heap memory in this process (CPU ranks: the shared-memory transport's memfds)."""
    with open("/proc/self/maps") as f:
        return sum("memfd:iris-heap" in line for line in f)


def replay_after_close(rank, world_size, backend):
    """A plan's launches run again after ``close()``, as a CUDA graph that captured them would be
    replayed: the kernels find the heap closed, record HeapClosedError, and write nothing the
    caller can see (the tensor and a canary after it keep their bytes; the sync block they still
    write stays mapped while the heap object lives). A collective called on the closed heap says
    it is closed."""
    heap = iris.heap.init(HEAP_SIZE)
    heap.wait_timeout = QUIET
    c = cfg(backend)
    x = heap.full((ROWS * world_size, 3), float(rank + 1))
    canary = heap.full((64,), 7.0)
    for _ in range(3):
        ccl.all_reduce(x, config=c)
    settle(heap)
    (plan,) = workspace_of(heap).plans.values()
    before = x.clone()
    heap.close()
    out = {"run": summary(raised(lambda: plan.run((x,))))}
    if heap.device.type == "cuda":
        torch.cuda.synchronize(heap.device)  # the launches are queued: their error is recorded once they ran
    out["error"] = summary(raised(heap.check_device_errors))
    out["x kept"] = bool(torch.equal(x, before))
    out["canary kept"] = bool((canary == 7.0).all())
    out["call"] = summary(raised(lambda: ccl.all_reduce(x, heap=heap, config=c)))
    return out


def error_named_after_close(rank, world_size, backend):
    """The last rank skips an asynchronous all_reduce; the others' kernels give up and record it.
    ``close()`` (which waits for the device) comes before anyone looks: the error is still raised
    as the collectives name it, though close() dropped their workspace's memory."""
    import time

    heap = iris.heap.init(HEAP_SIZE)
    heap.wait_timeout = QUIET
    c = cfg(backend, variant="two_shot")
    x = heap.ones(ROWS * world_size, 3)
    ccl.all_reduce(x, config=c)  # every kernel compiled and the workspace made on every rank
    settle(heap)
    heap.wait_timeout = 0.5
    dist.barrier()
    if rank != world_size - 1:
        ccl.all_reduce(x, config=c)  # returns at once; its kernel gives up after 0.5 s
    time.sleep(1.0)
    heap.close()
    return summary(raised(heap.check_device_errors))


def reserved_within_workspace_bytes(rank: int, w: int, backend) -> dict:
    """What the collectives reserve on a heap, against ``ccl.workspace_bytes``: the sync block alone
    after a barrier (exactly), then staged all_reduces (CPU inputs, rs_ag's two roles) that grow the
    staging in the worst order (each just over double the last) and all_gather and broadcast.
    Tensors off the heap, on the heap's device."""
    heap = iris.heap.init(HEAP_SIZE)
    ccl.barrier(heap=heap)
    sync_only = heap.stats().reserved_bytes
    largest = 0
    for n in (6 * w, 6 * w * 2 + w, 6 * w * 5 + w, 6 * w * 11 + w):  # floats, a multiple of w
        x = torch.full((n,), float(rank + 1), device=heap.device)
        ccl.all_reduce(x, heap=heap, config=cfg(backend, variant="rs_ag", blocking=True))
        assert torch.equal(x.cpu(), torch.full((n,), float(w * (w + 1) // 2))), n
        largest = max(largest, 4 * n)
    out = torch.empty(6 * w, device=heap.device)
    mine = torch.full((6,), float(rank), device=heap.device)
    ccl.all_gather(out, mine, heap=heap, config=cfg(backend, blocking=True))
    ccl.broadcast(torch.ones(6 * w, device=heap.device), src=0, heap=heap, config=cfg(backend, blocking=True))
    staged = heap.stats().reserved_bytes
    ccl.all_reduce(torch.ones(4, device=heap.device), heap=heap, config=cfg(backend, variant="one_shot_push"))
    pushed = heap.stats().reserved_bytes
    heap.close()
    return {"sync": sync_only, "sync bound": ccl.workspace_bytes(w, push_slots=False), "staged": staged,
            "staged bound": ccl.workspace_bytes(w, largest, push_slots=False), "pushed": pushed,
            "pushed bound": ccl.workspace_bytes(w, largest)}  # fmt: skip


def failed_replay(rank, world_size, backend):
    """A loop's replayed plan whose launch raises (``plans.replay_recent``, which counts and guards
    its launches itself, not through ``Workspace.launching``): the call raises that error, the next
    one says the collectives need reset(), and after reset() the call is right again."""
    heap = iris.heap.init(HEAP_SIZE)
    c = cfg(backend)
    xs = [sample((12,), torch.float32, 7, r) for r in range(world_size)]
    x = heap.empty(12)
    x.copy_(xs[rank])
    for _ in range(2):  # the second call replays the first's plan
        ccl.all_reduce(x, config=c)
    settle(heap)
    (plan,) = workspace_of(heap).plans.values()
    launched = workspace_of(heap).launched

    def refused(*grid_stream_and_args):
        raise RuntimeError("the launch failed")

    steps = plan.steps
    plan.steps = [("launch", refused, 1, 1, 1, ())]  # a launch step (Plan.run) that raises
    out = {"first": summary(raised(lambda: ccl.all_reduce(x, config=c)))}
    out["counted"] = workspace_of(heap).launched - launched  # the failed launches are counted
    plan.steps = steps
    out["second"] = summary(raised(lambda: ccl.all_reduce(x, config=c)))
    dist.barrier()
    ccl.reset()
    x.copy_(xs[rank])
    ccl.all_reduce(x, config=c)
    settle(heap)
    out["right"] = same(x, reference_reduce(xs, "sum"))
    return out
