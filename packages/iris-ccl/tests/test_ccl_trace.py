"""``Config(trace=True)``: every collective's phases in the heap's trace buffer (issue 16); and what iris.ccl logs."""

import _ccl_trace
import pytest

import iris.ccl as ccl


@pytest.mark.parametrize("world_size", [1, 2, 3])
def test_every_collective_records_its_phases_and_the_bytes_it_moves_per_peer(world, backend, world_size):
    done = world.run(_ccl_trace.traced_collectives, world_size, backend)
    assert done == [sorted(["two_shot", "one_shot", "all_gather", "all_to_all", "broadcast", "barrier"])] * world_size


@pytest.mark.parametrize("world_size", [2])
def test_nothing_is_recorded_untraced_or_with_tracing_off(world, backend, world_size):
    assert world.run(_ccl_trace.untraced, world_size, backend) == [True] * world_size


def test_a_full_buffer_counts_what_it_dropped_and_writes_nothing_else(world, backend):
    assert all(d > 0 for d in world.run(_ccl_trace.overflow, 2, backend))


def test_trace_must_be_a_bool():
    with pytest.raises(TypeError, match="trace must be True or False"):
        ccl.Config(trace=1)
    assert ccl.Config(trace=True) != ccl.Config() and hash(ccl.Config(trace=True)) != hash(ccl.Config())


def test_the_collectives_log_rank_tagged_records(world, backend):
    assert world.run(_ccl_trace.logged, 2, backend) == [True, True]
