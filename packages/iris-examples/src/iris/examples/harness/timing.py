"""The one timer of every example and benchmark: ``time_launches``, median seconds per call.

On a GPU it times calls with CUDA events, in one of two ways:

- **queued** (the default): each sample queues a spinning kernel long enough for the host to
  enqueue all ``reps`` calls behind it, then times those calls, so the figure is the device time
  of the calls back to back, without the host's launch path in it (a Triton launch costs an H200
  host tens of microseconds, more than a 64 MiB copy takes there). The spin is
  ``torch.cuda._sleep``, a private torch API (reached through ``iris.examples.harness._internals``): it
  lives in the examples, not in a layer every user installs.
- **one call at a time** (``queued=False``): events around each sample's calls and no spin, so
  on an idle GPU the figure counts the host's launch path too (what a program that waits for
  each call sees).

On CPU each sample is the wall time (``time.perf_counter``) of ``reps`` calls. ``max_over_ranks``
makes the ``agree`` callable with which ranks time a collective together.

``host_seconds`` times the host instead: what a call costs a program that does not wait for it.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable

import torch

from . import _internals

__all__ = ["host_seconds", "max_over_ranks", "time_launches"]

_spin_cycles_per_s: dict = {}


def _spin_rate(device) -> float:
    """Cycles per second of the spin (``_internals.spin``) on ``device`` (measured once per process)."""
    if device not in _spin_cycles_per_s:
        cycles = 2_000_000
        _internals.spin(cycles)  # first launch loads the kernel
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        _internals.spin(cycles)
        end.record()
        end.synchronize()
        _spin_cycles_per_s[device] = cycles / (start.elapsed_time(end) * 1e-3)
    return _spin_cycles_per_s[device]


def time_launches(fn: Callable[[], object], *, reps: int = 5, iters: int = 10, warmup: int = 1, device=None,
                  agree: Callable[[float], float] | None = None, queued: bool = True) -> float:  # fmt: skip
    """Median seconds per call of ``fn()`` over ``iters`` samples of ``reps`` calls each, after
    ``warmup`` untimed calls.

    Queued (on a CUDA device, the default): each sample first queues a spinning kernel long
    enough for the host to enqueue all ``reps`` calls behind it, then times those calls with CUDA
    events: the GPU runs them back to back, so the figure is what the kernels take, not how fast
    the host can launch them. A sample whose spin ran out before the last call was queued is
    dropped and the spin doubled. The calls must not synchronize with the host.

    ``queued=False``: each sample is ``reps`` calls between two CUDA events recorded without a
    spin (the events of all samples read after one synchronize at the end), so on an idle GPU the
    figure includes the host's launch path.

    ``device`` picks the clock (CUDA events or ``perf_counter``); left out, CUDA when this process
    has initialized CUDA. On CPU each sample is the wall time of ``reps`` calls.

    ``fn`` may be a collective that every rank times at once (queued only): pass ``agree``, a
    callable that every rank calls with a float and that returns the largest of the ranks' values
    (``max_over_ranks(group)``). The ranks then start every sample together with the same spin and
    drop or keep each sample together, so all of them make the same calls. Each sample then also
    makes one untimed call of ``fn`` between the spin and the timed calls: the ranks' spins end at
    different times (they start when each host launches them), and a collective's first call
    waits for the last rank, so that wait would be spread over the timed calls. After the untimed
    call the ranks' streams are lined up by its own synchronization, and the samples time what a
    steady stream of the collective takes.
    """
    _check_arguments(reps, iters, warmup, agree, queued)
    device = _clock(device)
    for _ in range(warmup):
        fn()
    if device.type != "cuda":
        return _wall_clock(fn, reps, iters)
    with torch.cuda.device(device):
        if not queued:
            return _one_call_at_a_time(fn, reps, iters)
        return _queued(fn, reps, iters, device, agree)


def _check_arguments(reps, iters, warmup, agree, queued) -> None:
    for name, value, least in (("reps", reps, 1), ("iters", iters, 1), ("warmup", warmup, 0)):
        if isinstance(value, bool) or not isinstance(value, int) or value < least:
            raise ValueError(f"{name} must be an int >= {least}, got {value!r}")
    if agree is not None and not callable(agree):
        raise TypeError(f"agree must be a callable (a max over the ranks) or None, got {agree!r}")
    if agree is not None and not queued:
        raise ValueError("agree lines up queued samples; with queued=False leave it out")


def _clock(device) -> torch.device:
    """The device whose clock times the calls: ``device``, or CUDA's current one when this process
    has initialized CUDA, else the CPU."""
    if device is None:
        cuda = torch.cuda.is_available() and torch.cuda.is_initialized()
        device = torch.device("cuda", torch.cuda.current_device()) if cuda else torch.device("cpu")
    device = torch.device(device)
    if device.type == "cuda" and device.index is None:
        device = torch.device("cuda", torch.cuda.current_device())
    return device


def _wall_clock(fn, reps: int, iters: int) -> float:
    """``time_launches`` on CPU: the median wall time per call of ``iters`` samples of ``reps`` calls."""
    samples = []
    for _ in range(iters):
        t0 = time.perf_counter()
        for _ in range(reps):
            fn()
        samples.append((time.perf_counter() - t0) / reps)
    return statistics.median(samples)


def _queued(fn, reps: int, iters: int, device, agree) -> float:
    """``time_launches`` queued behind a spin, on the current CUDA device (see there)."""
    samples = []
    torch.cuda.synchronize()
    rate = _spin_rate(device)
    t0 = time.perf_counter()
    for _ in range(reps):
        fn()
    spin = 2 * (time.perf_counter() - t0) + 1e-4  # seconds: twice what queueing took, and then some
    torch.cuda.synchronize()
    while len(samples) < iters:
        if agree is not None:
            spin = float(agree(spin))  # also lines the ranks up for this sample
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        _internals.spin(spin * rate)
        if agree is not None:
            fn()  # lines the ranks' streams up (see above); not timed
        start.record()
        for _ in range(reps):
            fn()
        end.record()
        covered = not start.query()  # the spin still runs: every call was queued before any ran
        end.synchronize()
        if agree is not None:
            covered = float(agree(0.0 if covered else 1.0)) == 0.0  # kept only if every rank's was
        if covered:
            samples.append(start.elapsed_time(end) * 1e-3 / reps)
            continue
        if spin > 1.0:
            raise RuntimeError(
                f"time_launches: the host could not queue {reps} calls within a {spin:.1f} s spin "
                "(does fn synchronize with the host?)"
            )
        spin *= 2
    return statistics.median(samples)


def _one_call_at_a_time(fn, reps: int, iters: int) -> float:
    """``time_launches(queued=False)`` on the current CUDA device."""
    torch.cuda.synchronize()
    events = []
    for _ in range(iters):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(reps):
            fn()
        end.record()
        events.append((start, end))
    torch.cuda.synchronize()
    return statistics.median(s.elapsed_time(e) for s, e in events) / 1e3 / reps


def host_seconds(fns, calls: int, rounds: int, device, agree: Callable[[float], float]) -> list[float]:
    """Host seconds per call of each of ``fns`` (callables without arguments), issued back to back.

    Each is timed as batches of ``calls`` calls (the device catches up and the ranks line up
    between batches; a batch below the launch queue's depth measures the host, not the device's
    pace), the functions taking turns for ``rounds`` rounds, so a slow spell of the host falls on
    all of them alike. Per function: the median over rounds of ``agree`` of each batch's time
    (``max_over_ranks``: the slowest rank's). Each function is called once before the rounds.
    """
    samples: list[list[float]] = [[] for _ in fns]
    for fn in fns:
        fn()
    for _ in range(rounds):
        for fn, times in zip(fns, samples):
            if device.type == "cuda":
                torch.cuda.synchronize(device)
            agree(0.0)
            t0 = time.perf_counter()
            for _ in range(calls):
                fn()
            times.append(agree(time.perf_counter() - t0) / calls)
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    return [statistics.median(times) for times in samples]


def max_over_ranks(group=None) -> Callable[[float], float]:
    """``time_launches``' ``agree``: a host all-reduce of max over ``group`` (a gloo group, so it
    never waits for the device; None: the default group)."""
    import torch.distributed as dist

    def agree(value: float) -> float:
        t = torch.tensor([float(value)], dtype=torch.float64)
        dist.all_reduce(t, op=dist.ReduceOp.MAX, group=group)
        return t.item()

    return agree
