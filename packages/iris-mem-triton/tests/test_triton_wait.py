"""The bounded device-side wait: each comparison, the timeout that ends in a host-side
WaitTimeoutError, and the early exit once an error is recorded."""

import _triton_ranks as ranks
import pytest

API = pytest.mark.parametrize("free", [False, True], ids=["context", "free"])


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
@pytest.mark.parametrize("world_size", [2, 3])
def test_a_signal_that_never_comes_raises_on_the_waiting_rank(world, world_size, free):
    world.run(ranks.check_wait_for_missing_signal, world_size, free)
