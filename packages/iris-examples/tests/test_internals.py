"""iris.examples.harness._internals: the one place the examples reach into torch's private API, each
reach checked for on the installed torch, with a clear error where it is missing."""

import re

import pytest
import torch

from iris.examples.harness import _internals, timing


def test_this_torch_has_the_spin():
    assert _internals.has_spin(), f"torch {torch.__version__} lacks torch.cuda._sleep; queued timing needs it"


def test_a_torch_without_the_spin_is_named_and_queued_timing_says_what_to_do(monkeypatch):
    monkeypatch.delattr(torch.cuda, "_sleep")
    assert not _internals.has_spin()
    with pytest.raises(
        RuntimeError, match=re.escape(f"torch {torch.__version__} has no torch.cuda._sleep") + ".*queued=False"
    ):
        _internals.spin(1000)


@pytest.mark.gpu
def test_the_spin_keeps_the_stream_busy():
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    torch.cuda.synchronize()
    start.record()
    _internals.spin(10_000_000)
    end.record()
    end.synchronize()
    assert start.elapsed_time(end) > 0.1  # ms: ten million cycles at any clock below 100 GHz


@pytest.mark.gpu
def test_queued_timing_goes_through_the_spin(monkeypatch):
    cycles = []
    real = _internals.spin
    monkeypatch.setattr(_internals, "spin", lambda n: (cycles.append(n), real(n))[1])
    timing.time_launches(lambda: torch.empty(1, device="cuda").add_(1), reps=2, iters=2, device="cuda")
    assert cycles, "time_launches queued no spin"
