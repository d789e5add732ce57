"""Plans (``iris.ccl.plans.Plan``): a call repeated with the same arguments launches what the
first call recorded, without its checks and bookkeeping (the host time of a small collective).
Nothing a plan skips may change a result, an error or the memory a call touches."""

import _ccl_plans as P
import pytest
import torch


@pytest.mark.parametrize("world_size", [1, 2, 3])
def test_repeated_calls_launch_their_plan_and_stay_right(world, backend, world_size):
    results = world.run(P.repeated, world_size, backend)
    for rank, res in enumerate(results):
        assert not res["wrong"], f"rank {rank}: results differ from torch's: {res['wrong']}"
        for name, round_, added in res["plans"]:
            # Round 1 allocates its tensors again, at the same addresses as round 0's when the
            # allocator gives them (their plans then serve again) or at others (one new plan).
            want = (1,) if round_ == 0 else (0, 1)
            assert added in want, f"rank {rank}: {name} (round {round_}) added {added} plans over three calls"
        # The repeating ranks: 7 (planned), 500, then 7 again (re-planned: the staging grew);
        # the last rank: a plan per new tensor (5).
        want = 5 if rank == world_size - 1 else 2
        assert res["plain plans"] == want, f"rank {rank}: {res['plain plans']} plans for the plain calls, not {want}"
        assert res["src=True"] is not None and res["src=True"]["type"] == "TypeError", f"rank {rank}: {res['src=True']}"
        assert res["after reset"] == 0, f"rank {rank}: reset() kept {res['after reset']} plans"


def test_a_planned_call_raises_a_pending_error_and_waits_for_reset(world, backend):
    results = world.run(P.error_then_replay, 2, backend)
    for rank, res in enumerate(results):
        assert res["planned"] >= 1, f"rank {rank}: the first call recorded no plan"
        assert res["first"] is not None and res["first"]["type"] in (
            "CollectiveMismatchError",
            "CollectiveAbandonedError",  # the race iris.ccl.protocol describes; never a return
        ), f"rank {rank}: {res['first']}"
        assert res["second"] is not None and "reset()" in res["second"]["message"], f"rank {rank}: {res['second']}"
        assert res["after reset"] == 0 and res["right"], f"rank {rank}: {res}"


@pytest.mark.parametrize("world_size", [1, 2])
def test_a_loop_on_the_same_tensors_skips_the_key_and_sees_every_change(world, backend, world_size):
    """``plans.replay_recent``: the same tensor objects again launch their plan without building
    its key, unless anything the key holds changed under them; new views for every call are
    replayed by key and never remembered."""
    for rank, res in enumerate(world.run(P.same_objects, world_size, backend)):
        assert not res["wrong"], f"rank {rank}: {res['wrong']}"
        keyed = res["keyed"]
        # the first call records (a key), the next two replay by key (the second of them on the
        # same objects is remembered), then none
        assert keyed["loop"] == 3, f"rank {rank}: {keyed}"
        assert keyed["an equal config, another object"] == 0, f"rank {rank}: {keyed}"
        # a change under the same object: every call builds a key again until one replays by key
        for case in ("same object, new memory", "same object and memory, another dtype", "resized in place",
                     "after reset"):  # fmt: skip
            assert keyed[case] >= 2, f"rank {rank}: {case} took the shortcut: {keyed}"
        assert keyed["after an allocation"] == 0 and res["generation moved"], f"rank {rank}: {keyed}"
        # views made anew for each call: every call by key, and nothing remembered for them
        assert keyed["a new view per call"] == 4 and res["entries from views"] == 0, f"rank {rank}: {res}"
        if res["id reused"]:
            assert keyed["a plain tensor at the reused id"] >= 2, f"rank {rank}: {keyed}"
        assert res["entries before reset"] >= 1 and res["entries after reset"] == 0, f"rank {rank}: {res}"


@pytest.mark.parametrize("world_size", [1, 2])
def test_a_plan_run_after_close_records_the_closed_heap_and_writes_nothing(world, backend, world_size):
    for rank, res in enumerate(world.run(P.replay_after_close, world_size, backend)):
        assert res["run"] is None, f"rank {rank}: the launches themselves raised: {res['run']}"
        assert res["error"] is not None and res["error"]["type"] == "HeapClosedError", f"rank {rank}: {res}"
        assert res["x kept"] and res["canary kept"], f"rank {rank}: memory written after close(): {res}"
        assert res["call"] is not None and res["call"]["type"] == "HeapClosedError", f"rank {rank}: {res['call']}"


def test_a_dropped_heap_is_collected_with_its_workspace(backend):
    """In this process, without a runner keeping the heap: a heap that ran collectives and is
    dropped (closed or not) is collected with its workspace, plans and staging, so its memory is
    unmapped (CPU: no heap mapping left), not kept for the life of the process."""
    import gc
    import weakref

    import iris.ccl as ccl
    import iris.heap
    from iris.ccl.workspace import workspace_of

    for close in (False, True):
        gc.collect()
        before = None if torch.cuda.is_available() else P.heap_mappings()
        heap = iris.heap.init(1 << 20)
        c = ccl.Config(block_size=64, num_programs=1, backend=backend, variant="two_shot")  # (auto would not stage)
        x = heap.ones(64)
        for _ in range(4):  # a plan, then the same-object shortcut
            ccl.all_reduce(x, config=c)
        ccl.all_reduce(torch.ones(64, device=heap.device), config=c)  # staged
        ws = workspace_of(heap)
        assert ws.plans and ws.recent and ws.staging_buffer("in") is not None
        refs = [weakref.ref(heap), weakref.ref(ws), weakref.ref(ws.sync)]
        if heap.device.type == "cuda":
            torch.cuda.synchronize()
        assert bool((x == 1).all())
        if close:
            heap.close()
        del heap, x, ws
        gc.collect()
        assert [r() for r in refs] == [None] * 3, f"close={close}: a dropped heap (or its workspace) kept alive"
        if before is not None:
            assert P.heap_mappings() == before, f"close={close}: the dropped heap's memory is still mapped"


def test_an_error_recorded_before_close_is_named_after_it(world, backend):
    errors = world.run(P.error_named_after_close, 2, backend)
    assert errors[1] is None, f"the skipping rank: {errors[1]}"
    assert errors[0] is not None and errors[0]["type"] == "CollectiveTimeoutError", f"rank 0: {errors[0]}"
    assert errors[0]["missing_rank"] == 1 and errors[0]["collective"] == "all_reduce", f"rank 0: {errors[0]}"


@pytest.mark.parametrize("world_size", [1, 3])
def test_workspace_bytes_bounds_what_the_collectives_reserve(world, backend, world_size):
    for rank, res in enumerate(world.run(P.reserved_within_workspace_bytes, world_size, backend)):
        assert res["sync"] == res["sync bound"], f"rank {rank}: {res}"
        assert res["sync"] < res["staged"] <= res["staged bound"], f"rank {rank}: {res}"
        assert res["pushed"] - res["staged"] == res["pushed bound"] - res["staged bound"], f"rank {rank}: {res}"


def test_workspace_bytes_refuses_what_is_not_a_size():
    import iris.ccl as ccl

    with pytest.raises(ValueError, match="world_size must be a positive int, got 0"):
        ccl.workspace_bytes(0)
    with pytest.raises(ValueError, match="largest_input must be a non-negative int"):
        ccl.workspace_bytes(2, -1)
    staging, mib = ccl.workspace_bytes(4, 1 << 20) - ccl.workspace_bytes(4), 1 << 20  # (push slots in both)
    assert 2 * 2 * mib < staging < 2 * 4 * mib + 2 * 22 * 256  # two roles, each between 2x and 4x, rounded


@pytest.mark.parametrize("world_size", [1, 2])
def test_a_replayed_launch_that_fails_raises_and_leaves_the_collectives_to_reset(world, backend, world_size):
    for rank, res in enumerate(world.run(P.failed_replay, world_size, backend)):
        assert res["first"] is not None and res["first"]["type"] == "RuntimeError", f"rank {rank}: {res}"
        assert "the launch failed" in res["first"]["message"], f"rank {rank}: {res}"
        assert res["counted"] >= 1, f"rank {rank}: {res}"
        assert res["second"] is not None and "reset()" in res["second"]["message"], f"rank {rank}: {res}"
        assert res["right"], f"rank {rank}: {res}"
