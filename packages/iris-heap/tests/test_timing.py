"""iris.heap.testing.time_launches: the timer the layers' benchmarks share."""

import time

import pytest
import torch

from iris.heap.testing import time_launches


def test_cpu_time_is_wall_time_per_call():
    calls = []

    def fn():
        calls.append(None)
        time.sleep(0.002)

    t = time_launches(fn, reps=3, iters=2, warmup=1, device="cpu")
    assert len(calls) == 1 + 3 * 2
    assert 0.0019 < t < 0.05


@pytest.mark.parametrize("kwargs", [{"reps": 0}, {"iters": 0}, {"warmup": -1}, {"reps": 1.5}, {"iters": True}], ids=str)
def test_bad_counts_are_refused(kwargs):
    with pytest.raises(ValueError, match=next(iter(kwargs))):
        time_launches(lambda: None, device="cpu", **kwargs)


@pytest.mark.gpu
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
def test_gpu_host_synchronizing_call_is_a_clear_error():
    x = torch.ones(16, device="cuda")
    with pytest.raises(RuntimeError, match="could not queue"):
        time_launches(lambda: x.sum().item(), reps=2, iters=1, device="cuda")
