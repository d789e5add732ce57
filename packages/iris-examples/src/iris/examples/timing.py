"""One way to time a call for every example: the median of repeated calls.

On a GPU each call is bracketed by CUDA events (recorded on the current stream, read after one
synchronize at the end), so the figure is device time per call; on CPU it is wall time
(``time.perf_counter``) per call, which includes everything the call does.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable

import torch

__all__ = ["bench"]


def bench(fn: Callable[[], object], *, iters: int, warmup: int = 3, device: torch.device | str | None = None) -> float:
    """Median seconds per call of ``fn()`` over ``iters`` calls, after ``warmup`` untimed calls.

    ``device`` picks the clock: CUDA events for a CUDA device, ``perf_counter`` for CPU. Left
    out, it is CUDA when this process has initialized CUDA (the ranks' heap lives there), else CPU.
    """
    if isinstance(iters, bool) or not isinstance(iters, int) or iters < 1:
        raise ValueError(f"iters must be a positive int, got {iters!r}")
    if isinstance(warmup, bool) or not isinstance(warmup, int) or warmup < 0:
        raise ValueError(f"warmup must be a non-negative int, got {warmup!r}")
    if device is None:
        cuda = torch.cuda.is_available() and torch.cuda.is_initialized()
    else:
        cuda = torch.device(device).type == "cuda"
    for _ in range(warmup):
        fn()
    if cuda:
        torch.cuda.synchronize()
        events = []
        for _ in range(iters):
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            fn()
            end.record()
            events.append((start, end))
        torch.cuda.synchronize()
        return statistics.median(s.elapsed_time(e) for s, e in events) / 1e3
    times = []
    for _ in range(iters):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)
