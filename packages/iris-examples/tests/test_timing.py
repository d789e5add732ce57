"""iris.examples.harness.timing.time_launches: the one timer of the examples and benchmarks.

(Moved with the timer from iris-heap's tests.)
"""

import time

import pytest
import torch

from iris.examples.harness.timing import host_seconds, max_over_ranks, time_launches
from iris.testing.world import run

gpu = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")


@pytest.mark.parametrize("queued", [True, False])
def test_cpu_time_is_wall_time_per_call(queued):
    calls = []

    def fn():
        calls.append(None)
        time.sleep(0.002)

    t = time_launches(fn, reps=3, iters=2, warmup=1, device="cpu", queued=queued)
    assert len(calls) == 1 + 3 * 2
    assert 0.0019 < t < 0.05


def test_host_seconds_take_turns_and_take_the_median():
    """Each function once, then rounds in which they take turns; per function the median batch."""
    order, agreed = [], []

    def slow():
        order.append("slow")
        time.sleep(0.002)

    def fast():
        order.append("fast")

    def agree(value):
        agreed.append(value)
        return value

    t_slow, t_fast = host_seconds((slow, fast), calls=2, rounds=3, device=torch.device("cpu"), agree=agree)
    assert order == ["slow", "fast"] + (["slow"] * 2 + ["fast"] * 2) * 3
    assert len(agreed) == 2 * 2 * 3  # a line-up and a batch's time per batch
    assert 0.0019 < t_slow < 0.05 and 0 <= t_fast < t_slow


@pytest.mark.parametrize("kwargs", [{"reps": 0}, {"iters": 0}, {"warmup": -1}, {"reps": 1.5}, {"iters": True}], ids=str)
def test_bad_counts_are_refused(kwargs):
    with pytest.raises(ValueError, match=next(iter(kwargs))):
        time_launches(lambda: None, device="cpu", **kwargs)


def test_agree_must_be_callable():
    with pytest.raises(TypeError, match="agree"):
        time_launches(lambda: None, device="cpu", agree=3)


def test_agree_is_for_queued_samples_only():
    with pytest.raises(ValueError, match="queued=False"):
        time_launches(lambda: None, device="cpu", agree=lambda v: v, queued=False)


@pytest.mark.gpu
@gpu
def test_gpu_time_is_device_time_not_launch_time():
    """Calls whose host side takes 1 ms and whose kernel takes microseconds: queued behind the
    spin, the figure is the kernels' time, not the host's."""
    x = torch.ones(1024, device="cuda")

    def fn():
        time.sleep(0.001)
        x.add_(1)

    t = time_launches(fn, reps=4, iters=3, device="cuda")
    assert 0 < t < 0.0002
    assert bool((x > 1 + 4 * 3).all())


@pytest.mark.gpu
@gpu
def test_gpu_one_call_at_a_time_counts_the_host_path():
    """The same calls one at a time between events on an idle GPU: the host's 1 ms is in the figure."""
    x = torch.ones(1024, device="cuda")

    def fn():
        time.sleep(0.001)
        x.add_(1)

    t = time_launches(fn, reps=1, iters=3, device="cuda", queued=False)
    assert t > 0.0008


@pytest.mark.gpu
@gpu
def test_gpu_host_synchronizing_call_is_a_clear_error():
    x = torch.ones(16, device="cuda")
    with pytest.raises(RuntimeError, match="could not queue"):
        time_launches(lambda: x.sum().item(), reps=2, iters=1, device="cuda")


def _agreed_samples(rank, world_size):
    x = torch.ones(1024, device="cuda")
    calls = [0]

    def fn():  # rank 1's host is far too slow for the spin during two samples' calls
        calls[0] += 1
        if rank == 1 and 6 <= calls[0] <= 9:
            time.sleep(0.05)
        x.add_(1)

    assert time_launches(fn, reps=2, iters=3, warmup=1, device="cuda", agree=max_over_ranks()) > 0
    return calls[0]


@pytest.mark.gpu
@gpu
def test_gpu_ranks_that_agree_drop_samples_together():
    """A collective timed on every rank: a sample one rank drops is dropped by all, so every rank
    makes the same number of calls (otherwise the ranks' collectives would no longer pair up)."""
    counts = run(_agreed_samples, 2)
    assert counts[0] == counts[1], counts
    # rank 1's two slow samples were retried on both ranks, and every sample (3 kept, 2 dropped)
    # made its 2 timed calls after an untimed one that lines the ranks' streams up
    assert counts[0] >= 1 + 2 + 3 * 5, counts
