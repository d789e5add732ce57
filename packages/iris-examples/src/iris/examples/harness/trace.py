"""``--trace FILE`` of every example: device-side tracing around a rank's work, merged into one file.

In ``rank_main``, once the heap exists::

    with trace.session(heap, args) as tracing:      # tracing.on: whether --trace was given
        kernel[grid](..., heap.context, TRACE=tracing.on, EVENT=tracing.event("put"))
        ...

``session`` enables ``heap.tracing`` (a collective) with the backend's device clock and, when the
body returns normally, exports every rank's events into ``--trace`` on rank 0 (one timeline, see
``iris.heap.tracing``) and turns tracing off. When the body raises, nothing is exported: export is
a collective and a failed rank's peers must not wait for it; the error is the result. Kernels
compile their tracing away when ``tracing.on`` is False (a constexpr).

An example that sweeps world sizes writes one file per size: ``{ranks}`` in FILE is replaced by
the world size, or ``.w<N>`` is added before the suffix (``t.json`` -> ``t.w4.json``); the CLI
gives each launch its path (``path_for``).
"""

from __future__ import annotations

import argparse
import contextlib
import time
from dataclasses import dataclass, field
from pathlib import Path

from .options import positive_int

__all__ = ["Session", "add_arguments", "heap_bytes", "path_for", "session", "summary"]

DEFAULT_EVENTS = 1 << 18  # 16 MiB of heap per rank


def add_arguments(group) -> None:
    group.add_argument("--trace", metavar="FILE", default=None,
                       help="record device events and write the merged Chrome trace (Perfetto, trace-view) here; "
                       "timed figures then include the tracing's own cost")  # fmt: skip
    group.add_argument("--trace-events", type=positive_int, default=DEFAULT_EVENTS, metavar="N",
                       help=f"events each rank's trace buffer holds (default {DEFAULT_EVENTS}); "
                       "later ones are counted as dropped")  # fmt: skip


def heap_bytes(args: argparse.Namespace) -> int:
    """What the trace buffer takes from the heap (``heap.tracing.enable``'s reservation): add it to
    the heap size an example asks for; 0 without ``--trace``."""
    if getattr(args, "trace", None) is None:
        return 0
    from iris.heap.tracing import buffer_bytes

    return buffer_bytes(args.trace_events) + 4096  # and the allocator's rounding, with room


def path_for(path: str, world_size: int) -> str:
    """Where the run at ``world_size`` of an example that sweeps world sizes writes its trace."""
    if "{ranks}" in path:
        return path.replace("{ranks}", str(world_size))
    p = Path(path)
    return str(p.with_name(f"{p.stem}.w{world_size}{p.suffix}"))


def _clock(backend: str | None):
    """The device clock reader of the example's backend (any backend's reads the same clock)."""
    if backend == "gluon":
        import iris.mem.gluon as img

        clock = getattr(img, "device_clock", None)
        if clock is not None:
            return clock
    import iris.mem.triton as imt

    return imt.device_clock


@dataclass
class Session:
    """What a traced body needs: ``on`` (the kernels' ``TRACE`` constexpr) and event ids; once the
    ``with`` block is done, on the rank that wrote the trace (rank 0), how long the export took
    (``export_seconds``: gathering, formatting and writing every rank's events) and how many events
    the file holds (``events``) and found the buffers full (``dropped``); None elsewhere."""

    heap: object
    on: bool
    _ids: dict = field(default_factory=dict)
    export_seconds: float | None = None
    events: int | None = None
    dropped: int | None = None

    def event(self, name: str) -> int:
        """The id of event ``name``: a built-in one (``iris.heap.tracing.EVENTS``) or one registered
        on first use (a collective then: every rank must ask for the same names in the same order)."""
        from iris.heap.tracing import EVENTS

        if name in EVENTS:
            return EVENTS[name]
        if name not in self._ids:
            self._ids[name] = self.heap.tracing.register(name) if self.on else 0
        return self._ids[name]


@contextlib.contextmanager
def session(heap, args: argparse.Namespace):
    """Trace the body when ``args.trace`` names a file (see the module's docstring)."""
    path = getattr(args, "trace", None)
    if path is None:
        yield Session(heap, False)
        return
    heap.tracing.enable(args.trace_events, clock=_clock(getattr(args, "backend", None)))
    traced = Session(heap, True)
    yield traced
    start = time.perf_counter()
    written = heap.tracing.export(path)  # synchronizes; rank 0 writes
    if written is not None:
        traced.export_seconds = time.perf_counter() - start
        meta = _other_data(written)
        traced.events = sum(r.get("events", 0) for r in meta.get("ranks", []))
        traced.dropped = meta.get("dropped_events", 0)
    heap.tracing.disable()


def summary(path: str) -> str:
    """One line about a written trace, for the CLI to print after the example's report."""
    try:
        meta = _other_data(path)
    except (OSError, ValueError) as e:
        return f"trace: {path} could not be read back ({e})"
    ranks = meta.get("ranks", [])
    events = sum(r.get("events", 0) for r in ranks)
    line = f"trace: {path} ({events} events of {meta.get('world_size', '?')} ranks"
    if meta.get("dropped_events"):
        claimed = max(r.get("events", 0) + r.get("incomplete", 0) + r.get("dropped", 0) for r in ranks)
        line += f", {meta['dropped_events']} dropped: pass --trace-events {1 << (claimed - 1).bit_length()}"
    return line + "; open it in https://ui.perfetto.dev or: python -m iris.examples trace-view FILE --png OUT)"


_TAIL = 1 << 20  # otherData (a few hundred bytes a rank) is the last key ``export`` writes


def _other_data(path: str) -> dict:
    """The trace's ``otherData``, read from the file's end (``export`` writes it last), so that a
    trace of millions of events is not parsed whole for one line; the whole file otherwise."""
    import json

    with open(path, "rb") as f:
        f.seek(max(0, f.seek(0, 2) - _TAIL))
        tail = f.read().decode("utf-8", errors="replace")
    at = tail.rfind('"otherData":')
    if at >= 0:
        try:
            return json.loads(tail[at + len('"otherData":') : tail.rstrip().rfind("}")])
        except ValueError:
            pass
    with open(path) as f:
        return json.load(f).get("otherData", {})
