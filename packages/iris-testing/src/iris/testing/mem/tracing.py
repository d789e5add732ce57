"""The tracing suite of both mem layers (``Tracing`` of ``iris.mem.triton`` and ``iris.mem.gluon``,
into ``heap.tracing``), written once. A layer runs it by subclassing :class:`TracingConformance`
with ``backend`` set, as it runs :class:`iris.testing.mem.Conformance`::

    class TestGluonTracing(TracingConformance):
        backend = Backend("gluon", package="iris.mem.gluon", kernels="_gluon_tracing_kernels")

What it checks: complete, well-formed events on world sizes 1-4 through the aggregate and the free
functions, merged on one timeline; a full buffer that drops exactly what does not fit and writes
nothing past itself; nothing recorded when tracing is compiled out or off at run time (or the heap
closed); a disabled kernel that compiles to its untraced twin on NVIDIA and AMD (no GPU needed);
the package's tracing surface; and on a GPU the same events plus the clock alignment.

The backend's kernels module (``tests/_<name>_tracing_kernels.py``, the layer's own device code)
defines ``NUM_WARPS`` and ``SOURCE`` (for ``lowering.compile_one``) and three kernels:

- ``traced_kernel(counts, context_ptr, EVENT, INSTANT, N, TRACE, FREE)``: every program adds N to
  ``counts[x + nx * y]``, one increment inside each of N intervals (interval i targets rank
  ``(rank + i) % W`` with ``8 * (i + 1)`` bytes), then records an instant ``INSTANT`` targeting
  its own rank with 0 bytes; ``TRACE`` is ``Tracing.initialize``'s constexpr, ``FREE`` picks the
  free functions over the aggregate;
- ``untraced_kernel``, the same arguments: the traced kernel without its tracing;
- ``barrier_instant_kernel(flags, context_ptr, EVENT)``: a device barrier of every rank on
  ``flags``, then an instant ``EVENT``.
"""

from __future__ import annotations

import importlib
import json
import re

import pytest
import torch

import iris.heap
from iris.heap import context as abi
from iris.heap.tracing import EVENTS, RESERVATION
from iris.testing import COMPILE_TARGETS, WORLD_SIZES, gather

from .backend import Backend
from .lowering import TARGETS, compile_one

__all__ = ["TracingConformance", "check_events", "check_merged"]

HEAP_SIZE = 1 << 20
GRID = (2, 2)  # a 2-D grid: the program word is its flattened position
PROGRAMS = GRID[0] * GRID[1]
N = 3  # intervals per program, then one instant
INSTANT = EVENTS["exit wait"]
#: The overflow test's buffer: 8 * (TRACE_HEADER_WORDS + 7 * TRACE_EVENT_WORDS) = 512 bytes, whole
#: units of the allocator (iris.heap.ALIGNMENT), so no padding hides a write past its last slot.
CAPACITY = 7
FREE_FUNCTIONS = ("record_start", "record_end", "record_instant", "trace_state")


def _launch(K, heap, counts, event, trace=True, free=False, grid=GRID, n=N):
    K.traced_kernel[grid](counts, heap.context, EVENT=event, INSTANT=INSTANT, N=n, TRACE=trace, FREE=free)


def _device_clock(backend: Backend):
    return importlib.import_module(backend.package).device_clock


def compile_cases(K):
    """(label, kernel, signature, constexprs) of every compile-only check of the kernels module ``K``."""
    cases = [
        ("traced", K.traced_kernel, True, False),
        ("traced, free functions", K.traced_kernel, True, True),
        ("disabled", K.traced_kernel, False, False),
        ("untraced", K.untraced_kernel, False, False),
    ]
    out = []
    for label, fn, trace, free in cases:
        constexprs = {"EVENT": 256, "INSTANT": 5, "N": 3, "TRACE": trace, "FREE": free}
        signature = {"counts": "*i64", "context_ptr": "*i64", **dict.fromkeys(constexprs, "constexpr")}
        out.append((label, fn, signature, constexprs))
    return out


def check_events(events, rank, world_size, event, programs, n=N, sequential=True):
    """Every program's N intervals (ended, targets and bytes as launched) and its instant, in order."""
    assert all(e["end_ns"] is not None for e in events), "every start has an end"
    assert {e["rank"] for e in events} == {rank}
    by_program = {}
    for e in events:
        by_program.setdefault(e["program"], []).append(e)
    assert sorted(by_program) == list(range(programs))
    for mine in by_program.values():  # claim order is each program's own order
        assert [(e["id"], e["instant"], e["target_rank"], e["bytes"]) for e in mine] == [
            (event, False, (rank + i) % world_size, 8 * (i + 1)) for i in range(n)
        ] + [(INSTANT, True, rank, 0)]
        times = [t for e in mine for t in (e["start_ns"], e["end_ns"])]
        assert times == sorted(times), "a program's timestamps go backwards"
    if sequential:  # CPU ranks run programs one after another on one thread: per SM too
        for sm in {e["sm"] for e in events}:
            times = [t for e in events if e["sm"] == sm for t in (e["start_ns"], e["end_ns"])]
            assert times == sorted(times), f"SM {sm}'s timestamps go backwards"


def check_merged(path, world_size, event_name, programs, n=N):
    """The merged Chrome trace of ``traced_kernel``'s events: every rank's programs, all intervals
    and instants, per-SM timestamps in order, nothing dropped."""
    doc = json.loads(path.read_text())
    assert doc["displayTimeUnit"] == "ns" and doc["otherData"]["world_size"] == world_size
    drawn = [e for e in doc["traceEvents"] if e["ph"] != "M"]
    for rank in range(world_size):
        mine = [e for e in drawn if e["pid"] == rank]
        assert sorted({e["args"]["program"] for e in mine}) == list(range(programs))
        assert sum(e["ph"] == "X" and e["name"] == event_name for e in mine) == programs * n
        assert sum(e["ph"] == "i" and e["name"] == "exit wait" for e in mine) == programs
        for sm in {e["tid"] for e in mine}:
            ts = [e["ts"] for e in mine if e["tid"] == sm]
            assert ts == sorted(ts)
    assert [r["dropped"] for r in doc["otherData"]["ranks"]] == [0] * world_size
    return doc


# -- rank bodies: CPU ranks (and GPUs: the same bodies) ----------------------------------------------


def records(rank, world_size, backend, free, path):
    """Every program of a traced launch recorded complete events; exported to ``path``."""
    K, heap = backend.load(), iris.heap.init(HEAP_SIZE)
    clock = _device_clock(backend) if heap.device.type == "cuda" else None
    event = heap.tracing.register("traced tile")
    heap.tracing.enable(64, clock=clock)
    counts = heap.zeros(PROGRAMS, dtype=torch.int64)
    _launch(K, heap, counts, event, free=free)
    events = heap.tracing.events()
    assert counts.tolist() == [N] * PROGRAMS, "the kernel did its work"
    assert len(events) == PROGRAMS * (N + 1) and heap.tracing.dropped == 0
    assert all(e["sm"] == 0 for e in events) or heap.device.type == "cuda"
    check_events(events, rank, world_size, event, PROGRAMS, sequential=heap.device.type == "cpu")
    heap.tracing.export(path)
    cal = heap.tracing.calibration
    return cal.offset_ns, cal.uncertainty_ns, heap.device.type


def overflow_and_off(rank, world_size, backend):
    """A full buffer drops exactly the claims past it, writes nothing past it; off writes nothing."""
    K, device_clock = backend.load(), _device_clock(backend)
    heap = iris.heap.init(HEAP_SIZE)
    above = heap.reserve("canary above", 256).fill_(0xA5)  # reservations grow down: the buffer goes below
    heap.tracing.enable(CAPACITY, clock=device_clock if heap.device.type == "cuda" else None)
    below = heap.empty(heap.stats().largest_free_block, dtype=torch.uint8).fill_(0x5A)  # every byte left
    buffer = heap.reservations()[RESERVATION]
    words = buffer.tensor.view(torch.int64)
    assert heap.offset(below) + below.numel() == buffer.offset, "the canary below touches the buffer"
    assert buffer.offset + buffer.nbytes == heap.reservations()["canary above"].offset, "and so does the one above"
    counts = torch.zeros(PROGRAMS, dtype=torch.int64, device=heap.device)

    _launch(K, heap, counts, 7, free=rank % 2 == 1)
    claims = PROGRAMS * (N + 1)
    assert heap.tracing.dropped == claims - CAPACITY and int(words[abi.TRACE_CLAIMED]) == claims
    events = heap.tracing.events()
    assert len(events) == CAPACITY and all(e["end_ns"] is not None for e in events)  # every kept slot complete
    assert words[1 : abi.TRACE_HEADER_WORDS].count_nonzero() == 0, "the rest of the header stays zero"

    heap.tracing.reset()
    _launch(K, heap, counts, 7, trace=False)  # compiled out
    assert words.count_nonzero() == 0 and heap.tracing.events() == []
    heap.tracing.disable()
    _launch(K, heap, counts, 7, free=False)  # off at run time: both APIs
    _launch(K, heap, counts, 7, free=True)
    assert words.count_nonzero() == 0 and heap.tracing.dropped == 0
    assert bool((above == 0xA5).all()) and bool((below == 0x5A).all()), "the neighbours are untouched"
    assert counts.tolist() == [4 * N] * PROGRAMS

    if heap.device.type == "cpu":  # the device clock read by a kernel agrees with the direct reading
        direct = heap.tracing.calibration
        heap.tracing.enable(CAPACITY, clock=device_clock)
        kernel = heap.tracing.calibration
        assert kernel.source == f"{backend.package}.tracing.device_clock", kernel.source
        assert direct.source == "host monotonic clock"
        assert abs(kernel.offset_ns - direct.offset_ns) <= kernel.uncertainty_ns + direct.uncertainty_ns + 100_000
    heap.close()
    _launch(K, heap, counts, 7, free=rank % 2 == 0)  # a closed heap's context traces nothing
    if heap.device.type == "cuda":
        torch.cuda.synchronize(heap.device)
    with pytest.raises(iris.heap.HeapClosedError):
        heap.check_device_errors()
    assert words.count_nonzero() == 0


#: Per compile target: (clock read, multiprocessor read, atomic) as they appear in its assembly,
#: the assembly, and what starts a comment in it.
_WORDS = {
    "cuda": (("%globaltimer", "%smid", "atom."), "ptx", "//"),
    "hip": (("s_memrealtime", "HW_REG_HW_ID", "global_atomic"), "amdgcn", ";"),
}


def normalized(text, kernel_name, target):
    """Assembly without the kernel's name, debug sections and line records, comments and spacing."""
    comment = _WORDS[target][2]
    text = re.sub(r"\.section\s+\.debug.*", "", text, flags=re.S)
    lines = (" ".join(line.split(comment)[0].split()) for line in text.splitlines())
    keep = [line for line in lines if line and not line.startswith((".loc", ".file"))]
    return "\n".join(keep).replace(kernel_name, "KERNEL")


def lowered(rank, world_size, backend):
    """{label: (clock reads, multiprocessor reads, atomics, normalized assembly)} on this rank's target."""
    K, name = backend.load(), COMPILE_TARGETS[rank]
    words, asm, _ = _WORDS[name]
    out = {}
    for label, fn, signature, constexprs in compile_cases(K):
        text = compile_one(K, fn, signature, constexprs, TARGETS[name]).asm[asm]
        out[label] = tuple(text.count(w) for w in words) + (normalized(text, fn.__name__, name),)
    return name, out


# -- rank bodies: GPUs ------------------------------------------------------------------------------


def gpu_records(rank, world_size, backend, path):
    """Two programs per SM: complete events, real SM ids; then one instant after a device barrier
    per rank, on the merged timeline (returned for rank 0 to compare)."""
    K, heap = backend.load(), iris.heap.init(HEAP_SIZE)
    event = heap.tracing.register("traced tile")
    heap.tracing.enable(4096, clock=_device_clock(backend))
    sms = torch.cuda.get_device_properties(heap.device).multi_processor_count
    programs = 2 * sms
    counts = heap.zeros(programs, dtype=torch.int64)
    _launch(K, heap, counts, event, grid=(programs,))
    events = heap.tracing.events()
    assert counts.tolist() == [N] * programs and len(events) == programs * (N + 1)
    # %smid is below %nsmid, which may exceed the SM count (ids need not be contiguous).
    assert all(0 <= e["sm"] < 4 * sms for e in events) and len({e["sm"] for e in events}) > sms // 2
    check_events(events, rank, world_size, event, programs, sequential=False)
    heap.tracing.export(path)
    heap.tracing.reset()
    flags = heap.zeros(1, dtype=torch.int32)
    heap.barrier()
    K.barrier_instant_kernel[(1,)](flags, heap.context, EVENT=INSTANT)
    (instant,) = heap.tracing.events()
    cal = heap.tracing.calibration
    every = gather(
        (instant["start_ns"] + cal.offset_ns, cal.offset_ns, cal.uncertainty_ns, str(heap.device)), world_size
    )
    return programs, every


def gpu_lowered(backend):
    """{label: normalized PTX} of the disabled and untraced kernels for the GPU here."""
    import triton

    K = backend.load()
    target = triton.runtime.driver.active.get_current_target()
    cases = {label: (fn, sig, c) for label, fn, sig, c in compile_cases(K)}
    text = {}
    for label in ("disabled", "untraced"):
        fn, sig, constexprs = cases[label]
        text[label] = normalized(compile_one(K, fn, sig, constexprs, target).asm["ptx"], fn.__name__, "cuda")
    return text


# -- the suite --------------------------------------------------------------------------------------


class TracingConformance:
    """The suite; a layer's test module subclasses it as ``Test<Name>Tracing`` with ``backend`` set."""

    backend: Backend

    @pytest.mark.parametrize("world_size", WORLD_SIZES)
    def test_every_program_records_complete_events_merged_on_one_timeline(self, world, tmp_path, world_size):
        path = tmp_path / "trace.json"
        # the free functions on even world sizes, the aggregate on odd ones
        offsets = world.run(records, world_size, self.backend, world_size % 2 == 0, path)
        check_merged(path, world_size, "traced tile", PROGRAMS)
        if offsets[0][2] == "cpu":  # one host clock: every rank's offset is the same, within the uncertainties
            for offset, uncertainty, _ in offsets:
                assert abs(offset - offsets[0][0]) <= uncertainty + offsets[0][1] + 100_000

    def test_a_full_buffer_drops_exactly_the_overflow_and_tracing_off_writes_nothing(self, world):
        world.run(overflow_and_off, 2, self.backend)

    def test_a_disabled_kernel_compiles_to_its_untraced_twin(self, compiler):
        for name, out in compiler.run(lowered, self.backend):
            untraced_atomics = out["untraced"][2]  # Context.initialize's (a closed heap's error record)
            for label in ("traced", "traced, free functions"):
                clocks, sms, atomics, _ = out[label]
                assert clocks and sms and atomics > untraced_atomics, f"{name} {label}: no clock, SM id or claim"
            assert out["disabled"][:3] == (0, 0, untraced_atomics), f"{name}: the disabled kernel still traces"
            assert out["disabled"][3] == out["untraced"][3], (
                f"{name}: the disabled kernel differs from the untraced one"
            )

    def test_exports_tracing_its_free_functions_and_device_clock(self):
        package = importlib.import_module(self.backend.package)
        assert {"Tracing", "device_clock", "tracing"} <= set(package.__all__)
        assert package.tracing is importlib.import_module(f"{self.backend.package}.tracing")
        assert set(FREE_FUNCTIONS) | {"Tracing", "device_clock"} <= set(package.tracing.__all__)
        for name in ("initialize", "record_start", "record_end", "record_instant"):
            assert callable(getattr(package.Tracing, name, None)), f"Tracing.{name} is missing"

    @pytest.mark.gpu
    @pytest.mark.parametrize("world_size", [1, 2, 4])
    def test_gpu_events_and_clock_alignment(self, world, tmp_path, world_size):
        path = tmp_path / "trace.json"
        programs, every = world.run(gpu_records, world_size, self.backend, path)[0]
        check_merged(path, world_size, "traced tile", programs)
        instants = [t for t, _, _, _ in every]
        uncertainties = [u for _, _, u, _ in every]
        print(
            f"\n{self.backend.name} W={world_size}: clock offset uncertainty per rank "
            f"{[u / 1e3 for u in uncertainties]} us; instants after one device barrier, merged: "
            f"spread {(max(instants) - min(instants)) / 1e3:.1f} us"
        )
        assert max(uncertainties) < 1_000_000, "a clock offset is uncertain by more than a millisecond"
        devices = [d for _, _, _, d in every]
        for _, offset, uncertainty, device in every:  # ranks on one GPU read one clock
            first = devices.index(device)
            assert abs(offset - every[first][1]) <= uncertainty + every[first][2]

    @pytest.mark.gpu
    def test_gpu_disabled_kernel_is_the_untraced_kernel(self):
        text = gpu_lowered(self.backend)
        assert "%globaltimer" not in text["disabled"] and "%smid" not in text["disabled"]
        assert text["disabled"] == text["untraced"]
