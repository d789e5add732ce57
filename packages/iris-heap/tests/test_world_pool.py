"""iris.testing.world.WorldPool's bound on live rank processes (IRIS_TEST_MAX_RANKS), which lets more
test sessions share one GPU under MPS, and the plugin's world-size order that goes with it."""

import os
import subprocess
import sys
import types

import pytest

from iris.testing.plugin import world_size_of
from iris.testing.world import WorldPool


def _pid(rank, world_size):
    return os.getpid()


def test_a_bounded_pool_stops_the_least_recently_used_worlds_first():
    pool = WorldPool(max_ranks=3)
    try:
        one = pool.run(_pid, 1)
        two = pool.run(_pid, 2)
        assert pool.running_ranks() == 3  # 1 + 2: within the bound, both kept
        assert pool.run(_pid, 1) == one  # the same processes: nothing restarted
        three = pool.run(_pid, 3)  # 3 more: both others stop, the least recently used (2) first
        assert pool.running_ranks() == 3 and len(set(three)) == 3
        assert pool.run(_pid, 2) != two  # started again, in new processes
        assert pool.running_ranks() == 2
    finally:
        pool.close()
    assert pool.running_ranks() == 0


def test_a_world_larger_than_the_bound_runs_alone():
    pool = WorldPool(max_ranks=1)
    try:
        pool.run(_pid, 1)
        assert len(set(pool.run(_pid, 2))) == 2
        assert pool.running_ranks() == 2
    finally:
        pool.close()


def test_an_unbounded_pool_keeps_every_world():
    pool = WorldPool()
    assert pool.max_ranks is None  # IRIS_TEST_MAX_RANKS is unset in the test sessions
    try:
        pool.run(_pid, 1)
        pool.run(_pid, 2)
        assert pool.running_ranks() == 3
    finally:
        pool.close()


@pytest.mark.parametrize("text", ["0", "-2", "four", "1.5"])
def test_a_bad_bound_in_the_environment_fails_when_the_pool_is_made(text):
    code = "from iris.testing.world import WorldPool\ntry:\n    WorldPool()\nexcept ValueError as e:\n    print(e)\n"
    env = {**os.environ, "IRIS_TEST_MAX_RANKS": text}
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == f"IRIS_TEST_MAX_RANKS={text!r}: the bound is a positive whole number of rank processes"


def test_tests_are_ordered_by_their_world_size_parameter():
    def item(params):
        return types.SimpleNamespace(callspec=types.SimpleNamespace(params=params)) if params is not None else object()

    items = [item({"world_size": 3}), item(None), item({"world_size": 1, "dtype": "x"}), item({"dtype": "y"}),
             item({"world_size": True})]  # fmt: skip
    assert [world_size_of(i) for i in items] == [3, 0, 1, 0, 0]
    ordered = sorted(items, key=world_size_of)
    assert ordered == [items[1], items[3], items[4], items[2], items[0]]  # stable among equals
