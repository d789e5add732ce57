"""Gluon kernels: the bounded device-side wait: each comparison, the timeout that ends in a
host-side WaitTimeoutError, the bound measured by the device clock, the early exit once an error
is recorded; record_error and healthy; and a closed heap's context."""

import _gluon_ranks as ranks
import pytest

API = pytest.mark.parametrize("free", [False, True], ids=["context", "free"])

#: Slack over 1.5 x the bound for a launch on CPU ranks of a loaded 2-core machine (the launch
#: through CPU execution, one poll of the spin, the record's writes).
LAUNCH_ALLOWANCE = 0.5


@API
def test_wait_returns_whether_the_comparison_held_and_records_timeouts(world, free):
    world.run(ranks.check_wait_outcomes, 1, free)


@API
def test_a_block_of_flags_waits_for_all_and_names_the_first_that_missed(world, free):
    world.run(ranks.check_wait_on_a_block, 1, free)


@API
def test_wait_returns_false_at_once_when_an_error_is_already_recorded(world, free):
    world.run(ranks.check_wait_after_error, 1, free)


@API
def test_record_error_first_wins_and_healthy_reports_it(world, free):
    world.run(ranks.check_first_error_wins, 1, free)


@API
@pytest.mark.parametrize("world_size", [2, 3])
def test_a_signal_that_never_comes_raises_on_the_waiting_rank(world, world_size, free):
    world.run(ranks.check_wait_for_missing_signal, world_size, free)


@pytest.mark.cpu_ranks
@API
@pytest.mark.parametrize("bound", [0.3, 1.0])
def test_a_wait_lasts_its_bound_by_the_device_clock(world, bound, free):
    ((device, wall),) = world.run(ranks.check_wait_lasts_its_bound, 1, free, bound, LAUNCH_ALLOWANCE)
    print(f"wait bound {bound} s ({'free' if free else 'context'}): device clock {device:.3f} x, wall {wall:.3f} x")


@pytest.mark.cpu_ranks
@API
def test_the_clock_on_cpu_ranks_is_the_hosts_monotonic_clock(world, free):
    world.run(ranks.check_clock_is_the_hosts_on_cpu_ranks, 1, free)


def test_a_closed_heaps_context_records_an_error_and_reaches_no_peer(world):
    world.run(ranks.check_closed_heap, 2)
