"""Device-side tracing, the host side: ``heap.tracing``.

Kernels record events (``Tracing`` of ``iris.mem.triton`` and ``iris.mem.gluon``) into a trace
buffer in this rank's heap; this module makes the buffer, tells device code where it is (the
context's ``EXT_TRACE_BUFFER`` and ``EXT_TRACE_CAPACITY``), names the events, maps every rank's
device clock onto one timeline and writes Chrome Trace Event JSON, which Perfetto
(https://ui.perfetto.dev) and chrome://tracing open::

    heap.tracing.enable(max_events=1 << 20, clock=iris.mem.triton.device_clock)  # collective
    phase = heap.tracing.register("my phase")      # collective: the same id on every rank
    kernel[grid](..., heap.context, PHASE=phase, TRACE=True)
    heap.tracing.export("trace.json")              # collective: rank 0 writes every rank's events

The buffer's layout is ``iris.heap.context``'s (``TRACE_*``, ``EVENT_*``): a claim counter, then
fixed-size events. A kernel claims a slot with one atomic add per event and writes nothing once the
buffer is full; the host counts what was dropped (``dropped``).

**Clocks.** Device timestamps are nanoseconds of the device clock (NVIDIA ``%globaltimer``, AMD
``s_memrealtime``, the host's ``time.monotonic_ns()`` on CPU ranks). ``enable`` measures, on every
rank, the offset from its device clock to the host's ``CLOCK_REALTIME`` (``time.time_ns()``): it
reads the host clock, the device clock, the host clock again, several times, and keeps the sample
with the shortest round trip; the offset is the midpoint's, and its uncertainty half that round
trip (the device read happened somewhere inside it). ``export`` adds each rank's offset to its
timestamps, so every rank lands on ``CLOCK_REALTIME``. On one machine every rank reads the same
``CLOCK_REALTIME``, so merged timestamps agree within the two ranks' uncertainties. Across machines
the same method holds within the hosts' clock synchronization: discipline each host's
``CLOCK_REALTIME`` with PTP (sub-microsecond with hardware timestamping) or NTP (typically
milliseconds), and the merged error is that sync error plus the uncertainties. Without synchronized
hosts, align ranks by the device instead: after a device-side barrier every rank records an
instant event (``record_instant``); the barrier releases every rank within one remote-store
latency, so the differences between those instants are the clock offsets to subtract.

On a CUDA heap, iris-heap cannot read the device clock itself (it runs no kernels: the layers
that do are above it), so ``enable`` takes ``clock``: a callable ``clock(device) -> int`` that
returns the device clock now, as ``iris.mem.triton.device_clock`` does (a one-program kernel and a
synchronization). CPU ranks read the host's monotonic clock directly when no ``clock`` is given.
"""

from __future__ import annotations

import json
import os
import socket
import sys
import time
import weakref
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import torch

from . import context as abi
from .errors import AsymmetricHeapError, HeapClosedError, HeapError
from .log import get_logger
from .transport.base import exchange_or_raise

__all__ = [
    "EVENTS",
    "FIRST_USER_EVENT",
    "RESERVATION",
    "ClockCalibration",
    "Tracing",
    "buffer_bytes",
    "chrome_trace",
    "rank_path",
]

_logger = get_logger(__name__)

#: Built-in event ids, by name: the phases iris.ccl's kernels record when ``Config(trace=True)``
#: (and iris.ops's after them). Ids below ``FIRST_USER_EVENT`` are the library's.
EVENTS = {
    "entry wait": 1,  # waiting for every rank to enter a collective
    "tile": 2,  # the work on one tile
    "remote load": 3,  # loads from a peer (target rank: the peer; bytes: what was read)
    "remote store": 4,  # stores to a peer (target rank: the peer; bytes: what was written)
    "exit wait": 5,  # waiting for every rank to leave a collective
    "tile wait": 6,  # waiting for peers' tiles inside a fused operation (target rank: this one)
}
#: ``register`` hands out ids from here up, in the order names are registered.
FIRST_USER_EVENT = 256
#: The name of the trace buffer's reservation (``heap.reserve``).
RESERVATION = "iris.tracing"

_CALIBRATION_SAMPLES = 16  # reads of a clock callable (each a kernel launch and a sync)
_HOST_CALIBRATION_SAMPLES = 64  # reads of the host's monotonic clock (each well under a microsecond)
_WARMUP = 2  # clock reads thrown away first (compiling the kernel, the first launch)
_MAX_EVENTS = 1 << 40  # far more than any heap holds: a clear error before the allocator's


@dataclass(frozen=True)
class ClockCalibration:
    """How one rank's device clock maps onto the host's ``CLOCK_REALTIME``.

    ``realtime_ns = device_ns + offset_ns``, within ``uncertainty_ns`` (half the round trip of the
    best of ``samples`` measurements). ``source`` names the device clock that was read.
    """

    offset_ns: int
    uncertainty_ns: int
    samples: int
    source: str


def calibrate(read: Callable[[], int], samples: int, source: str) -> ClockCalibration:
    """The offset from the clock ``read()`` returns to ``time.time_ns()``, from the best of ``samples``."""
    best = None
    for _ in range(samples):
        before = time.time_ns()
        device = int(read())
        after = time.time_ns()
        if best is None or after - before < best[0]:
            best = (after - before, (before + after) // 2 - device)
    round_trip, offset = best
    return ClockCalibration(offset, (round_trip + 1) // 2, samples, source)


class Tracing:
    """The host side of device tracing for one heap (``heap.tracing``; see the module's docstring).

    Collective calls (every rank, in the same order, with the same arguments): ``enable``,
    ``register``, ``export``. Local calls: ``disable``, ``reset``, ``events``, ``dropped``.
    Errors in a collective call raise on every rank (the rank at fault raises its own error, the
    others a ``HeapError`` naming it), so no rank is left waiting.
    """

    def __init__(self, heap):
        self._heap = weakref.ref(heap)  # the heap owns this object: no cycle keeps the heap alive
        self._enabled = False
        self._capacity = 0
        self._clock: Callable | None = None
        self._calibration: ClockCalibration | None = None
        self._names = dict(EVENTS)  # name -> id, every rank alike
        self._ids = {i: n for n, i in EVENTS.items()}

    # -- state -------------------------------------------------------------------------------
    def _open(self):
        heap = self._heap()
        if heap is None or heap.closed:
            raise HeapClosedError(
                "heap.tracing: the heap is closed, and its trace buffer with it; read or export the "
                "events before heap.close()"
            )
        return heap

    @property
    def enabled(self) -> bool:
        """Whether kernels launched from now on record events (a host-side flag; no device read)."""
        return self._enabled and not self._heap_closed()

    @property
    def capacity(self) -> int:
        """Events the trace buffer holds (0 before the first ``enable``)."""
        return self._capacity

    @property
    def calibration(self) -> ClockCalibration | None:
        """This rank's clock offset, measured by the latest ``enable`` (None before it)."""
        return self._calibration

    @property
    def names(self) -> dict[str, int]:
        """Every event name this heap knows (``EVENTS`` and the registered ones) -> its id."""
        return dict(self._names)

    def _heap_closed(self) -> bool:
        heap = self._heap()
        return heap is None or heap.closed

    def _words(self, heap) -> torch.Tensor | None:
        """The trace buffer as int64 words (on the heap's device), or None when there is none."""
        res = heap.reservations().get(RESERVATION)
        return None if res is None else res.tensor.view(torch.int64)

    # -- enable / disable / reset --------------------------------------------------------------
    def enable(self, max_events: int = 1 << 20, *, clock: Callable | None = None) -> None:
        """Collective: trace kernels launched from now on, into a buffer of ``max_events`` events.

        Every rank must pass the same ``max_events``. The buffer (``8 * (TRACE_HEADER_WORDS +
        TRACE_EVENT_WORDS * max_events)`` bytes) is a heap reservation named ``RESERVATION``,
        outside the user's allocations; enabling again with the same ``max_events`` keeps the
        events recorded so far (``reset()`` clears them), with another size it replaces the buffer
        (and its events). Also measures this rank's clock offset (``calibration``).

        ``clock(device) -> int``: the device clock now (``iris.mem.triton.device_clock``); needed
        on CUDA heaps, where iris-heap cannot read the device clock itself, and remembered for
        later calls. CPU ranks read the host's ``time.monotonic_ns()`` without it (which is what
        their kernels read). Takes effect in stream order: for kernels launched after this call.
        """
        heap = self._open()
        clock = self._clock if clock is None else clock
        error = _check_max_events(max_events) or _check_clock(clock, heap.device)
        _agree(heap, "enable", max_events, error, "max_events")
        made, error = False, None
        try:
            made = self._buffer(heap, max_events)
            calibration = self._calibrate(heap.device, clock)
            self._point_context(heap, self._words(heap).data_ptr(), max_events)
        except Exception as e:  # noqa: BLE001 - every rank hears of it below
            error = e
        try:
            # Also the barrier after the zeros: the calibration synchronized this rank's device.
            exchange_or_raise(heap._control, None, error, "enabling tracing")
        except BaseException:
            self._point_context(heap, 0, 0)  # off on every rank; a buffer made here is given back
            self._enabled = False
            if made:
                heap.unreserve(RESERVATION)
                self._capacity = 0
            raise
        self._clock, self._calibration, self._enabled = clock, calibration, True
        _logger.debug(
            "tracing enabled: %d events; clock offset %d ns +- %d ns (%s)",
            max_events, calibration.offset_ns, calibration.uncertainty_ns, calibration.source,
        )  # fmt: skip

    def _buffer(self, heap, max_events: int) -> bool:
        """Reserve (or keep) the buffer for ``max_events``; whether a new one was made."""
        have = heap.reservations().get(RESERVATION)
        if have is not None and self._capacity == max_events:
            return False
        if have is not None:
            self._point_context(heap, 0, 0)
            heap.unreserve(RESERVATION)
            self._capacity = 0
        # reserve() gives zeros: untouched memory is zero on every rank already, reused memory
        # is zeroed here in stream order, before any kernel this rank launches afterwards.
        heap.reserve(RESERVATION, buffer_bytes(max_events))
        self._capacity = max_events
        return True

    def _calibrate(self, device: torch.device, clock: Callable | None) -> ClockCalibration:
        if clock is None:  # CPU ranks: their kernels read this very clock
            return calibrate(time.monotonic_ns, _HOST_CALIBRATION_SAMPLES, "host monotonic clock")
        for _ in range(_WARMUP):
            clock(device)
        name = getattr(clock, "__qualname__", type(clock).__name__)
        module = getattr(clock, "__module__", None)
        source = f"{module}.{name}" if module else name
        return calibrate(lambda: clock(device), _CALIBRATION_SAMPLES, source)

    def _point_context(self, heap, address: int, capacity: int) -> None:
        """Tell device code where the buffer is (stream order: kernels launched afterwards see it)."""
        w = heap.world_size
        if not heap.closed:
            heap.context[abi.trace_capacity_index(w)] = capacity
            heap.context[abi.trace_buffer_index(w)] = address

    def disable(self) -> None:
        """Kernels launched from now on record nothing; the recorded events stay readable.

        Rank-local, in stream order (the context's buffer address and capacity become 0).
        """
        heap = self._open()
        self._point_context(heap, 0, 0)
        self._enabled = False

    def reset(self) -> None:
        """Forget every recorded event and the dropped count (rank-local; zeroes the buffer in stream order)."""
        heap = self._open()
        words = self._words(heap)
        if words is not None:
            words.zero_()

    # -- names ---------------------------------------------------------------------------------
    def register(self, name: str) -> int:
        """Collective: the event id of ``name``, the same on every rank, for kernels to record.

        A new name gets the next id from ``FIRST_USER_EVENT`` up; a name registered before (or
        one of ``EVENTS``) gets its id again. Every rank must register the same names in the same
        order: a different name on some rank raises ``AsymmetricHeapError`` on every rank.
        """
        heap = self._open()
        error = None
        if not isinstance(name, str) or not name.strip():
            error = TypeError(f"heap.tracing.register() takes a non-empty str name, got {name!r}")
        _agree(heap, "register", name, error, "names (register the same names in the same order)")
        if name not in self._names:
            event_id = FIRST_USER_EVENT + len(self._names) - len(EVENTS)
            self._names[name], self._ids[event_id] = event_id, name
        return self._names[name]

    def name_of(self, event_id: int) -> str:
        """The name of ``event_id`` (``"event N"`` for an id nobody registered)."""
        return self._ids.get(event_id, f"event {event_id}")

    # -- reading ---------------------------------------------------------------------------------
    def _claimed(self, words: torch.Tensor | None) -> int:
        """Slots claimed so far, kept or dropped (waits for the device's queued work)."""
        if words is None:
            return 0
        if words.device.type == "cuda":
            torch.cuda.synchronize(words.device)
        return int(words[abi.TRACE_CLAIMED].item())

    def _read(self, heap) -> tuple[int, np.ndarray]:
        """(slots claimed, the recorded events as an (n, TRACE_EVENT_WORDS) int64 array). Syncs the device."""
        words = self._words(heap)
        claimed = self._claimed(words)
        n = min(claimed, self._capacity)
        if n == 0:
            return claimed, np.zeros((0, abi.TRACE_EVENT_WORDS), dtype=np.int64)
        body = words[abi.TRACE_HEADER_WORDS : abi.TRACE_HEADER_WORDS + n * abi.TRACE_EVENT_WORDS]
        body = body.cpu().numpy() if body.device.type != "cpu" else body.numpy().copy()
        return claimed, body.reshape(n, abi.TRACE_EVENT_WORDS)

    @property
    def dropped(self) -> int:
        """Events that found the buffer full (and were not written): ``max(0, claimed - capacity)``. Syncs."""
        return max(0, self._claimed(self._words(self._open())) - self._capacity)

    def events(self) -> list[dict]:
        """This rank's recorded events, in the order they were claimed (synchronizes the device).

        Each is a dict: ``name``, ``id``, ``instant`` (bool), ``start_ns`` and ``end_ns`` (device
        clock; ``end_ns`` is None for an event started but not ended), ``program``, ``sm``,
        ``rank``, ``target_rank``, ``bytes``. ``calibration.offset_ns`` maps the times onto
        ``CLOCK_REALTIME``.
        """
        _, rows = self._read(self._open())
        return [_event(row, self.name_of) for row in rows]

    # -- export ------------------------------------------------------------------------------------
    def export(self, path: str | os.PathLike, merge: bool = True) -> str | None:
        """Collective: write the events as Chrome Trace Event JSON (Perfetto, chrome://tracing).

        ``merge=True``: rank 0 gathers every rank's events (over the heap's gloo control group)
        and writes one file at ``path``, every rank's device timestamps mapped onto
        ``CLOCK_REALTIME`` by its own offset; the other ranks write nothing. ``merge=False``: every
        rank writes its own events to ``rank_path(path, rank)``: ``{rank}`` in ``path`` is
        replaced by the rank, otherwise ``.rank<r>`` goes before the suffix (``trace.json`` ->
        ``trace.rank1.json``). Each file's timestamps are CLOCK_REALTIME too, counted from its
        ``origin_realtime_ns`` (in ``otherData``), so per-rank files can be merged later.

        The file: one process per rank (``pid`` = rank, named ``rank r``), one thread per
        multiprocessor (``tid`` = its id, named ``SM s``), an ``X`` event per ended event and an
        ``i`` event per instant (``ts``/``dur`` in microseconds; ``args``: program, target_rank,
        bytes), and ``otherData``: world size, versions, and per rank the device, clock offset
        and uncertainty, events, dropped and incomplete (started, never ended: not drawn) counts.
        Every rank formats its own events (so the ranks share the work) and rank 0 gathers the
        text: a million events a rank take seconds, not minutes. Event names are each rank's own
        (``register`` gives every rank the same). Synchronizes the device. Returns the path this
        rank wrote, or None.
        """
        heap = self._open()
        error = None
        if not isinstance(path, (str, os.PathLike)):
            error = TypeError(f"heap.tracing.export() takes a path (str or os.PathLike), got {path!r}")
        elif not isinstance(merge, bool):
            error = TypeError(f"heap.tracing.export(): merge must be a bool, got {merge!r}")
        mine = None
        if error is None:
            try:
                mine = self._payload(heap)
            except Exception as e:  # noqa: BLE001 - every rank hears of it
                error = e
        earliest = None if mine is None else _earliest(mine)
        everyone = _agree(heap, "export", (merge, earliest), error, "merge", key=lambda sent: sent[0])
        written, error, part = None, None, None
        try:
            starts = [s for _, s in everyone] if merge else [earliest]
            part = _rank_part(mine, min((s for s in starts if s is not None), default=0), self.name_of)
            if not merge:
                written = _write(rank_path(path, heap.rank), [part], heap.world_size)
        except Exception as e:  # noqa: BLE001 - every rank hears of it
            error = e
        if merge:
            parts = heap._control.gather_object(part if error is None else None)
            try:
                if parts is not None and all(p is not None for p in parts):
                    written = _write(path, parts, heap.world_size)
            except Exception as e:  # noqa: BLE001 - every rank hears of it
                error = e
        exchange_or_raise(heap._control, None, error, "writing the trace")
        if written is not None:
            _logger.info("wrote the trace to %s", written)
        _warn_dropped(mine["claimed"], mine["capacity"])
        return written

    def _payload(self, heap) -> dict:
        claimed, rows = self._read(heap)
        cal = self._calibration or ClockCalibration(0, 0, 0, "not calibrated (tracing never enabled)")
        device = heap.device
        return {
            "rank": heap.rank,
            "host": socket.gethostname(),
            "device": torch.cuda.get_device_name(device) if device.type == "cuda" else str(device),
            "calibration": asdict(cal),
            "capacity": self._capacity,
            "claimed": claimed,
            "events": rows,
        }


def _warn_dropped(claimed: int, capacity: int) -> None:
    """Say how many events found the buffer full, and the ``max_events`` that would have held them."""
    if claimed <= capacity:
        return
    enough = 1 << (claimed - 1).bit_length()
    _logger.warning(
        "%d trace events found the buffer full and were dropped (it holds %d); to keep them, enable tracing "
        "with max_events=%d (%d MiB of heap a rank: size the heap with iris.heap.tracing.buffer_bytes(%d))",
        claimed - capacity, capacity, enough, -(-buffer_bytes(enough) // (1 << 20)), enough,
    )  # fmt: skip


def buffer_bytes(max_events: int) -> int:
    """Bytes of heap that ``enable(max_events)`` reserves for the trace buffer (size a heap with
    it: reservations come out of the same region as tensors, rounded up to the allocator's 256)."""
    return 8 * (abi.TRACE_HEADER_WORDS + abi.TRACE_EVENT_WORDS * max_events)


def _agree(heap, call: str, value, error: Exception | None, what: str, key=lambda v: v) -> list:
    """Every rank's ``value`` (a collective): raise on every rank when a rank's call failed
    (``error``) or the ranks' ``key(value)`` differ; ``what`` names it in the message."""
    everyone = exchange_or_raise(heap._control, value, error, f"heap.tracing.{call}()")
    keys = [key(v) for v in everyone]
    if any(k != keys[0] for k in keys):
        raise AsymmetricHeapError(
            f"heap.tracing.{call}(): ranks passed different {what}: {dict(enumerate(keys))}; every rank must "
            f"call it alike"
        )
    return everyone


def _check_max_events(max_events) -> Exception | None:
    if isinstance(max_events, bool) or not isinstance(max_events, int):
        return TypeError(f"heap.tracing.enable(): max_events must be an int, got {max_events!r}")
    if not 0 < max_events <= _MAX_EVENTS:
        return ValueError(f"heap.tracing.enable(): max_events must be in [1, {_MAX_EVENTS}], got {max_events}")
    return None


def _check_clock(clock, device: torch.device) -> Exception | None:
    if clock is not None and not callable(clock):
        return TypeError(f"heap.tracing.enable(): clock must be a callable clock(device) -> int, got {clock!r}")
    if clock is None and device.type != "cpu":
        return HeapError(
            f"heap.tracing.enable() on a {device.type} heap needs the device's clock, which iris-heap cannot "
            "read (it runs no kernels): pass clock=iris.mem.triton.device_clock (or any callable "
            "clock(device) -> int returning the device clock in nanoseconds)"
        )
    return None


def _event(row, name_of) -> dict:
    word = int(row[abi.EVENT_ID])
    instant = word >= abi.EVENT_INSTANT
    event_id = word - abi.EVENT_INSTANT if instant else word
    end = int(row[abi.EVENT_END_NS])
    return {
        "name": name_of(event_id),
        "id": event_id,
        "instant": instant,
        "start_ns": int(row[abi.EVENT_START_NS]),
        "end_ns": end if end != 0 else None,
        "program": int(row[abi.EVENT_PROGRAM]),
        "sm": int(row[abi.EVENT_SM]),
        "rank": int(row[abi.EVENT_RANK]),
        "target_rank": int(row[abi.EVENT_TARGET_RANK]),
        "bytes": int(row[abi.EVENT_BYTES]),
    }


def rank_path(path: str | os.PathLike, rank: int) -> str:
    """Where rank ``rank`` writes with ``export(merge=False)``: ``{rank}`` in ``path`` replaced, or
    ``.rank<r>`` inserted before the suffix (``out/trace.json`` -> ``out/trace.rank3.json``)."""
    text = os.fspath(path)
    if "{rank}" in text:
        return text.replace("{rank}", str(rank))
    p = Path(text)
    return str(p.with_name(f"{p.stem}.rank{rank}{p.suffix}"))


def _versions() -> dict[str, str]:
    """Versions of what made the trace, where known (installed distributions, or loaded modules)."""
    from importlib import metadata

    out = {}
    for dist, module in (
        ("iris-heap", "iris.heap"),
        ("iris-mem-triton", "iris.mem.triton"),
        ("iris-mem-gluon", "iris.mem.gluon"),
        ("iris-ccl", "iris.ccl"),
        ("torch", "torch"),
        ("triton", "triton"),
    ):
        version = getattr(sys.modules.get(module), "__version__", None)  # never imports anything
        if version is None:
            try:
                version = metadata.version(dist)
            except metadata.PackageNotFoundError:
                continue
        out[dist] = str(version)
    return out


#: One event of the Chrome trace, as ``_rank_part`` formats it: an ended event ("X"), an instant ("i").
_ENDED = (
    '{"name":%s,"cat":"iris","pid":%d,"tid":%d,"ts":%.3f,"ph":"X","dur":%.3f,'
    '"args":{"program":%d,"target_rank":%d,"bytes":%d}}'
)
_INSTANT = (
    '{"name":%s,"cat":"iris","pid":%d,"tid":%d,"ts":%.3f,"ph":"i","s":"t",'
    '"args":{"program":%d,"target_rank":%d,"bytes":%d}}'
)


def _earliest(payload: dict) -> int | None:
    """The earliest event's start on ``CLOCK_REALTIME`` (ns), or None for a rank with no events."""
    rows = payload["events"]
    if not len(rows):
        return None
    return int(rows[:, abi.EVENT_START_NS].min()) + payload["calibration"]["offset_ns"]


def _rank_part(payload: dict, origin: int, name_of: Callable[[int], str]) -> tuple[str, dict, int]:
    """One rank's share of the Chrome trace (``Tracing.export``'s payload): its metadata and drawn
    events as comma-joined JSON objects, the events in time order; its row of ``otherData.ranks``;
    and ``origin``. Times are microseconds after ``origin`` (ns, ``CLOCK_REALTIME``); events
    started and never ended are counted (``incomplete``), not drawn.

    Computed column by column with numpy, then one string format per event: the per-event dicts
    and ``json.dump`` of a whole document cost ten times more (a million events: seconds)."""
    rank, rows, cal = payload["rank"], payload["events"], payload["calibration"]
    ended = rows[:, abi.EVENT_END_NS] != 0  # (an instant's end is its start)
    incomplete = int(len(rows) - ended.sum())
    rows = rows[ended]
    start = rows[:, abi.EVENT_START_NS]
    ts = (start + cal["offset_ns"] - origin) / 1e3
    order = np.argsort(ts, kind="stable")
    rows, ts = rows[order], ts[order]
    word = rows[:, abi.EVENT_ID]
    instant = word >= abi.EVENT_INSTANT
    ids = np.where(instant, word - abi.EVENT_INSTANT, word)
    dur = (rows[:, abi.EVENT_END_NS] - rows[:, abi.EVENT_START_NS]) / 1e3
    names = {i: json.dumps(name_of(i)) for i in np.unique(ids).tolist()}
    sms = rows[:, abi.EVENT_SM]
    meta = [
        {"name": "process_name", "ph": "M", "pid": rank, "args": {"name": f"rank {rank}"}},
        {"name": "process_sort_index", "ph": "M", "pid": rank, "args": {"sort_index": rank}},
    ]
    for sm in np.unique(sms).tolist():
        meta.append({"name": "thread_name", "ph": "M", "pid": rank, "tid": sm, "args": {"name": f"SM {sm}"}})
        meta.append({"name": "thread_sort_index", "ph": "M", "pid": rank, "tid": sm, "args": {"sort_index": sm}})
    columns = zip(
        ids.tolist(), instant.tolist(), sms.tolist(), ts.tolist(), dur.tolist(),
        rows[:, abi.EVENT_PROGRAM].tolist(), rows[:, abi.EVENT_TARGET_RANK].tolist(), rows[:, abi.EVENT_BYTES].tolist(),
    )  # fmt: skip
    events = [
        _INSTANT % (names[i], rank, sm, t, p, to, b) if flag else _ENDED % (names[i], rank, sm, t, d, p, to, b)
        for i, flag, sm, t, d, p, to, b in columns
    ]
    text = ",".join([json.dumps(m, separators=(",", ":")) for m in meta] + events)
    row = {
        "rank": rank,
        "host": payload["host"],
        "device": payload["device"],
        "clock_offset_ns": cal["offset_ns"],
        "clock_uncertainty_ns": cal["uncertainty_ns"],
        "clock_source": cal["source"],
        "capacity": payload["capacity"],
        "events": len(events),
        "dropped": max(0, payload["claimed"] - payload["capacity"]),
        "incomplete": incomplete,
    }
    return text, row, origin


def _document(parts: list[tuple[str, dict, int]], world_size: int):
    """The Chrome Trace Event JSON document of some ranks' parts (``_rank_part``), as pieces of
    text to write one after another."""
    ranks = [row for _, row, _ in parts]
    other = {
        "producer": "iris heap.tracing.export",
        "world_size": world_size,
        "clock": "CLOCK_REALTIME: each rank's device clock plus its measured offset",
        "origin_realtime_ns": parts[0][2] if parts else 0,
        "versions": _versions(),
        "dropped_events": sum(r["dropped"] for r in ranks),
        "incomplete_events": sum(r["incomplete"] for r in ranks),
        "ranks": ranks,
    }
    yield '{"traceEvents":['
    yield ",".join(text for text, _, _ in parts if text)
    yield '],"displayTimeUnit":"ns","otherData":'
    yield json.dumps(other, separators=(",", ":"))
    yield "}"


def chrome_trace(payloads: list[dict], world_size: int, name_of: Callable[[int], str]) -> dict:
    """The Chrome Trace Event JSON object of some ranks' events (``Tracing.export``'s payloads),
    as ``export`` writes it.

    Timestamps are ``CLOCK_REALTIME`` (device time plus the rank's offset) in microseconds after
    the earliest event (``otherData.origin_realtime_ns``): absolute microseconds since 1970 would
    keep only a quarter-microsecond in a double.
    """
    origin = min((s for s in map(_earliest, payloads) if s is not None), default=0)
    parts = [_rank_part(p, origin, name_of) for p in payloads]
    return json.loads("".join(_document(parts, world_size)))


def _write(path, parts: list[tuple[str, dict, int]], world_size: int) -> str:
    path = os.fspath(path)
    with open(path, "w") as f:
        for piece in _document(parts, world_size):
            f.write(piece)
    return path
