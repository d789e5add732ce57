"""heap.tracing, the host side of device tracing: the buffer and its context words, enable /
disable / reset / register, reading events, and the Chrome Trace Event export (merged and per rank).

iris-heap runs no kernels, so these tests write events the way device code does (one claim on the
counter, then the words of the slot, in iris.heap.context's layout); iris-mem-triton's
test_triton_tracing records them from kernels, on GPUs too. The heaps here are CPU heaps, also on
a machine with a GPU: a CUDA heap's tracing needs a device clock that only a kernel can read.
"""

import gc
import json
import time
import weakref

import pytest
import torch

import iris.heap
from iris.heap import context as abi
from iris.heap.tracing import EVENTS, FIRST_USER_EVENT, RESERVATION, buffer_bytes, calibrate, chrome_trace, rank_path

HEAP_SIZE = 1 << 20


def new_heap():
    return iris.heap.init(HEAP_SIZE, device="cpu")


@pytest.fixture
def heap():
    """A heap of world size 1 in this process (no ranks to spawn)."""
    with new_heap() as h:
        yield h


def record(heap, event_id, start, end, *, program=0, sm=0, target_rank=0, nbytes=0, instant=False):
    """What device code does for one event: one claim, then the slot's words unless it is full."""
    words = heap.reservations()[RESERVATION].tensor.view(torch.int64)
    slot = int(words[abi.TRACE_CLAIMED])
    words[abi.TRACE_CLAIMED] = slot + 1
    if slot >= heap.tracing.capacity:
        return -1
    event = words[abi.TRACE_HEADER_WORDS + slot * abi.TRACE_EVENT_WORDS :][: abi.TRACE_EVENT_WORDS]
    event[abi.EVENT_ID] = event_id + (abi.EVENT_INSTANT if instant else 0)
    event[abi.EVENT_PROGRAM], event[abi.EVENT_SM], event[abi.EVENT_RANK] = program, sm, heap.rank
    event[abi.EVENT_TARGET_RANK], event[abi.EVENT_BYTES] = target_rank, nbytes
    event[abi.EVENT_START_NS], event[abi.EVENT_END_NS] = start, end
    return slot


def trace_words(heap):
    w = heap.world_size
    return heap.context[abi.trace_buffer_index(w)].item(), heap.context[abi.trace_capacity_index(w)].item()


def check_chrome_trace(doc):
    """The fields Perfetto's and chrome://tracing's JSON importers need, on every event."""
    assert set(doc) >= {"traceEvents", "displayTimeUnit", "otherData"} and doc["displayTimeUnit"] == "ns"
    for e in doc["traceEvents"]:
        assert isinstance(e["name"], str) and e["ph"] in ("M", "X", "i") and isinstance(e["pid"], int), e
        if e["ph"] == "M":
            assert e["name"] in ("process_name", "process_sort_index", "thread_name", "thread_sort_index"), e
            assert isinstance(e["args"], dict) and ("tid" in e) == e["name"].startswith("thread"), e
            continue
        assert isinstance(e["tid"], int) and isinstance(e["ts"], float) and e["ts"] >= 0, e
        assert set(e["args"]) == {"program", "target_rank", "bytes"}, e
        if e["ph"] == "X":
            assert isinstance(e["dur"], float) and e["dur"] >= 0, e
        else:
            assert e["s"] == "t" and "dur" not in e, e
    for pid in {e["pid"] for e in doc["traceEvents"]}:
        names = [e for e in doc["traceEvents"] if e["ph"] == "M" and e["name"] == "process_name" and e["pid"] == pid]
        assert [e["args"]["name"] for e in names] == [f"rank {pid}"]
    drawn = [e for e in doc["traceEvents"] if e["ph"] != "M"]
    for key in {(e["pid"], e["tid"]) for e in drawn}:
        ts = [e["ts"] for e in drawn if (e["pid"], e["tid"]) == key]
        assert ts == sorted(ts), f"timestamps of rank/SM {key} go backwards"
        name = [e for e in doc["traceEvents"] if e["ph"] == "M" and e["name"] == "thread_name"]
        assert [e["args"]["name"] for e in name if (e["pid"], e["tid"]) == key] == [f"SM {key[1]}"]


# -- one rank ------------------------------------------------------------------------------------


def test_tracing_is_off_until_enabled_no_buffer_no_events(heap, tmp_path):
    tracing = heap.tracing
    assert not tracing.enabled and tracing.capacity == 0 and tracing.calibration is None
    assert RESERVATION not in heap.reservations() and heap.stats().reserved_bytes == 0
    assert trace_words(heap) == (0, 0)
    assert tracing.events() == [] and tracing.dropped == 0
    tracing.export(tmp_path / "t.json")
    doc = json.loads((tmp_path / "t.json").read_text())
    check_chrome_trace(doc)
    assert [e for e in doc["traceEvents"] if e["ph"] != "M"] == []
    assert doc["otherData"]["dropped_events"] == 0 and doc["otherData"]["ranks"][0]["events"] == 0


def test_enable_points_the_context_at_a_zeroed_buffer_and_disable_turns_it_off(heap):
    heap.tracing.enable(8)
    res = heap.reservations()[RESERVATION]
    assert res.nbytes == 8 * (abi.TRACE_HEADER_WORDS + 8 * abi.TRACE_EVENT_WORDS) == buffer_bytes(8)
    assert res.tensor.count_nonzero() == 0
    assert trace_words(heap) == (res.tensor.data_ptr(), 8)
    assert heap.tracing.enabled and heap.tracing.capacity == 8
    record(heap, 7, 100, 200)
    heap.tracing.disable()
    assert trace_words(heap) == (0, 0) and not heap.tracing.enabled
    assert [e["id"] for e in heap.tracing.events()] == [7], "disabling keeps what was recorded"
    heap.tracing.enable(8)
    assert trace_words(heap) == (res.tensor.data_ptr(), 8)
    assert [e["id"] for e in heap.tracing.events()] == [7], "enabling again at the same size resumes"
    heap.tracing.enable(4)
    assert heap.tracing.events() == [] and heap.tracing.capacity == 4, "another size is a new buffer"
    assert heap.reservations()[RESERVATION].nbytes == 8 * (abi.TRACE_HEADER_WORDS + 4 * abi.TRACE_EVENT_WORDS)
    assert trace_words(heap) == (heap.reservations()[RESERVATION].tensor.data_ptr(), 4)


def test_events_read_back_in_the_documented_layout(heap):
    heap.tracing.enable(8)
    mine = heap.tracing.register("my phase")
    record(heap, EVENTS["tile"], 1000, 1500, program=3, sm=5, target_rank=0, nbytes=4096)
    record(heap, mine, 2000, 2000, program=1, sm=2, instant=True)
    record(heap, EVENTS["remote store"], 3000, 0, program=2, sm=5, nbytes=64)  # started, never ended
    assert heap.tracing.events() == [
        {"name": "tile", "id": EVENTS["tile"], "instant": False, "start_ns": 1000, "end_ns": 1500,
         "program": 3, "sm": 5, "rank": 0, "target_rank": 0, "bytes": 4096},
        {"name": "my phase", "id": mine, "instant": True, "start_ns": 2000, "end_ns": 2000,
         "program": 1, "sm": 2, "rank": 0, "target_rank": 0, "bytes": 0},
        {"name": "remote store", "id": EVENTS["remote store"], "instant": False, "start_ns": 3000, "end_ns": None,
         "program": 2, "sm": 5, "rank": 0, "target_rank": 0, "bytes": 64},
    ]  # fmt: skip
    heap.tracing.reset()
    assert heap.tracing.events() == [] and heap.tracing.dropped == 0
    assert heap.reservations()[RESERVATION].tensor.count_nonzero() == 0


def test_a_full_buffer_counts_dropped_events_and_leaves_its_neighbours_alone(heap):
    above = heap.reserve("canary above", 512)  # reservations grow down: the trace buffer goes below it
    above.fill_(0xA5)
    heap.tracing.enable(4)
    trace = heap.reservations()[RESERVATION]
    below = heap.empty(heap.stats().largest_free_block, dtype=torch.uint8).fill_(0x5A)  # every byte left
    assert heap.offset(below) + below.numel() == trace.offset
    assert trace.offset + trace.nbytes <= heap.reservations()["canary above"].offset
    slots = [record(heap, 1, 10 * i + 1, 10 * i + 5) for i in range(11)]
    assert slots == [0, 1, 2, 3] + [-1] * 7
    assert heap.tracing.dropped == 7 and len(heap.tracing.events()) == 4
    heap.tracing.reset()
    heap.tracing.disable()
    assert bool((above == 0xA5).all()) and bool((below == 0x5A).all())


def test_export_after_an_overflow_names_the_max_events_that_would_have_held_it(heap, tmp_path, caplog):
    heap.tracing.enable(4)
    for i in range(11):
        record(heap, EVENTS["tile"], 10 * i + 1, 10 * i + 5)
    with caplog.at_level("WARNING", logger="iris.heap.tracing"):
        heap.tracing.export(tmp_path / "t.json")
    (message,) = [r.getMessage() for r in caplog.records if "dropped" in r.getMessage()]
    assert "7 trace events" in message and "max_events=16" in message, message
    assert f"buffer_bytes(16)" in message and buffer_bytes(16) < 1 << 20 and "1 MiB" in message, message


def test_export_formats_every_field_as_the_events_read_back(heap, tmp_path):
    """The text renderer against ``events()``: times in microseconds after the earliest start,
    rounded to nanoseconds; instants without a duration; unended events counted, not drawn;
    events sorted by time; names of registered ids."""
    heap.tracing.enable(8)
    mine = heap.tracing.register("my phase")
    record(heap, mine, 5_123_456, 5_124_000, program=3, sm=7, target_rank=0, nbytes=123)
    record(heap, EVENTS["tile"], 1_000_001, 2_500_000, program=1, sm=2, nbytes=1 << 40)
    record(heap, EVENTS["remote store"], 3_000_000, 3_000_000, sm=2, instant=True)
    record(heap, EVENTS["tile wait"], 4_000_000, 0)  # started, never ended
    doc = json.loads(open(heap.tracing.export(tmp_path / "t.json")).read())
    check_chrome_trace(doc)
    offset = heap.tracing.calibration.offset_ns
    drawn = [e for e in doc["traceEvents"] if e["ph"] != "M"]
    assert [(e["name"], e["ph"], e["tid"], e["ts"], e.get("dur")) for e in drawn] == [
        ("tile", "X", 2, 0.0, 1499.999),
        ("remote store", "i", 2, 1999.999, None),
        ("my phase", "X", 7, 4123.455, 0.544),
    ]
    assert drawn[2]["args"] == {"program": 3, "target_rank": 0, "bytes": 123} and drawn[0]["args"]["bytes"] == 1 << 40
    assert doc["otherData"]["origin_realtime_ns"] == 1_000_001 + offset
    assert doc["otherData"]["incomplete_events"] == 1 and doc["otherData"]["ranks"][0]["events"] == 3
    assert [e["args"]["name"] for e in doc["traceEvents"] if e["name"] == "thread_name"] == ["SM 2", "SM 7"]


def test_close_releases_the_buffer_with_the_heap(tmp_path):
    heap = new_heap()
    heap.tracing.enable(16)
    buffer = weakref.ref(heap.reservations()[RESERVATION].tensor)
    tracing = heap.tracing
    heap.close()
    with pytest.raises(iris.heap.HeapClosedError, match="before heap.close"):
        tracing.events()
    with pytest.raises(iris.heap.HeapClosedError):
        tracing.enable(16)
    assert not tracing.enabled
    gone = weakref.ref(heap)
    del heap
    gc.collect()
    assert buffer() is None and gone() is None, "tracing keeps neither the buffer nor the heap alive"


def test_calibration_finds_a_clocks_offset_within_its_uncertainty():
    skew = 123_456_789
    cal = calibrate(lambda: time.time_ns() - skew, 32, "a test clock")
    assert abs(cal.offset_ns - skew) <= cal.uncertainty_ns + 1_000 and cal.samples == 32
    with new_heap() as heap:
        heap.tracing.enable(1)
        cal = heap.tracing.calibration
        assert cal.source == "host monotonic clock" and cal.uncertainty_ns < 1_000_000
        assert abs(time.time_ns() - time.monotonic_ns() - cal.offset_ns) <= cal.uncertainty_ns + 100_000


def test_a_cuda_heap_must_be_given_the_device_clock():
    from iris.heap.tracing import _check_clock

    error = _check_clock(None, torch.device("cuda", 0))
    assert isinstance(error, iris.heap.HeapError) and "clock=iris.mem.triton.device_clock" in str(error)
    assert isinstance(_check_clock(42, torch.device("cpu")), TypeError)
    assert _check_clock(None, torch.device("cpu")) is None


def test_rank_paths_for_per_rank_files():
    assert rank_path("out/trace.json", 3) == "out/trace.rank3.json"
    assert rank_path("trace", 0) == "trace.rank0"
    assert rank_path("t-{rank}.json", 12) == "t-12.json"


def test_merging_maps_every_rank_onto_one_timeline():
    """Two ranks whose device clocks differ by a known offset record at the same real moments."""
    import numpy as np

    def payload(rank, offset, starts):
        rows = np.zeros((len(starts), abi.TRACE_EVENT_WORDS), dtype=np.int64)
        rows[:, abi.EVENT_START_NS], rows[:, abi.EVENT_END_NS] = starts, [s + 2_000 for s in starts]
        rows[:, abi.EVENT_ID], rows[:, abi.EVENT_RANK] = EVENTS["tile"], rank
        cal = {"offset_ns": offset, "uncertainty_ns": 50, "samples": 4, "source": "test"}
        return {"rank": rank, "host": "h", "device": "cpu", "calibration": cal, "capacity": 8, "claimed": len(starts),
                "events": rows}  # fmt: skip

    real = [10_000_000, 10_005_000]
    doc = chrome_trace([payload(0, 1_000, [t - 1_000 for t in real]), payload(1, -7_000, [t + 7_000 for t in real])],
                       2, lambda i: "tile")  # fmt: skip
    check_chrome_trace(doc)
    assert doc["otherData"]["origin_realtime_ns"] == real[0]
    for rank in (0, 1):
        x = [e for e in doc["traceEvents"] if e["ph"] == "X" and e["pid"] == rank]
        assert [(e["ts"], e["dur"]) for e in x] == [(0.0, 2.0), (5.0, 2.0)]


# -- several ranks -------------------------------------------------------------------------------------


def _collectives(rank, world_size, path):
    """register and enable agree across ranks; export merges every rank's events into rank 0's file."""
    heap = new_heap()
    tracing = heap.tracing
    ids = [tracing.register("phase a"), tracing.register("phase b"), tracing.register("phase a")]
    assert ids == [FIRST_USER_EVENT, FIRST_USER_EVENT + 1, FIRST_USER_EVENT]
    assert tracing.register("remote load") == EVENTS["remote load"]
    if world_size > 1:
        with pytest.raises(iris.heap.AsymmetricHeapError, match="different names"):
            tracing.register(f"rank {rank}'s name" if rank == world_size - 1 else "common")
    with pytest.raises(TypeError if rank == 0 else iris.heap.HeapError, match="register"):
        tracing.register("" if rank == 0 else "fine")
    assert tracing.register("phase c") == FIRST_USER_EVENT + 2, "a failed register hands out nothing"

    if world_size > 1:
        with pytest.raises(iris.heap.AsymmetricHeapError, match="different max_events"):
            tracing.enable(8 + rank)
        with pytest.raises(TypeError if rank == 1 else iris.heap.HeapError, match="max_events|enable"):
            tracing.enable("8" if rank == 1 else 8)
        assert not tracing.enabled and RESERVATION not in heap.reservations()
    with pytest.raises(ValueError, match="max_events"):
        tracing.enable(0)

    tracing.enable(5)
    heap.check_symmetry()  # the reservation is at the same offset everywhere
    base = 1_000_000 * (rank + 1)
    for i in range(3):
        record(heap, ids[1], base + 100 * i, base + 100 * i + 50, program=i, sm=rank + i % 2, target_rank=(rank + 1) % world_size, nbytes=8 * i)  # fmt: skip
    record(heap, EVENTS["exit wait"], base + 400, base + 400, sm=rank, instant=True)
    record(heap, EVENTS["tile"], base + 500, 0, sm=rank)  # incomplete
    for _ in range(rank + 1):
        record(heap, EVENTS["tile"], base, base + 1)  # claims past the 5 slots: dropped
    written = tracing.export(path)
    assert written == (str(path) if rank == 0 else None)
    cal = tracing.calibration
    return cal.offset_ns, cal.uncertainty_ns


def test_register_enable_and_merged_export_across_ranks(world, tmp_path):
    for world_size in (1, 2, 3):
        path = tmp_path / f"merged{world_size}.json"
        offsets = world.run(_collectives, world_size, path)
        doc = json.loads(path.read_text())
        check_chrome_trace(doc)
        meta = doc["otherData"]
        assert meta["world_size"] == world_size and meta["origin_realtime_ns"] > 0
        assert [r["rank"] for r in meta["ranks"]] == list(range(world_size))
        assert [r["dropped"] for r in meta["ranks"]] == [r + 1 for r in range(world_size)]
        assert [r["incomplete"] for r in meta["ranks"]] == [1] * world_size
        assert meta["dropped_events"] == sum(range(1, world_size + 1)) and "iris-heap" in meta["versions"]
        for r, (offset, uncertainty) in enumerate(offsets):
            assert (
                meta["ranks"][r]["clock_offset_ns"] == offset
                and meta["ranks"][r]["clock_uncertainty_ns"] == uncertainty
            )
            drawn = [e for e in doc["traceEvents"] if e["ph"] != "M" and e["pid"] == r]
            assert sorted((e["name"], e["ph"]) for e in drawn) == [("exit wait", "i")] + [("phase b", "X")] * 3
            assert {e["tid"] for e in drawn} == {r, r + 1}
            phase = sorted((e for e in drawn if e["ph"] == "X"), key=lambda e: e["args"]["program"])
            assert [e["args"] for e in phase] == [
                {"program": i, "target_rank": (r + 1) % world_size, "bytes": 8 * i} for i in range(3)
            ]
            base = 1_000_000 * (r + 1) + offset - meta["origin_realtime_ns"]
            assert [(round(e["ts"] * 1e3), round(e["dur"] * 1e3)) for e in phase] == [
                (base + 100 * i, 50) for i in range(3)
            ]


def _per_rank_files_and_errors(rank, world_size, folder):
    heap = new_heap()
    heap.tracing.enable(4)
    record(heap, EVENTS["tile"], 10, 20, sm=rank)
    written = heap.tracing.export(folder / "trace.json", merge=False)
    assert written == str(folder / f"trace.rank{rank}.json")
    assert heap.tracing.export(str(folder / "t-{rank}.json"), merge=False) == str(folder / f"t-{rank}.json")
    with pytest.raises(iris.heap.AsymmetricHeapError, match="merge"):
        heap.tracing.export(folder / "x.json", merge=rank == 0)
    # Rank 0 alone cannot write: every rank raises.
    with pytest.raises(OSError if rank == 0 else iris.heap.HeapError, match="No such file|writing the trace"):
        heap.tracing.export(folder / "missing" / "x.json")
    with pytest.raises(TypeError if rank == 1 else iris.heap.HeapError, match="path|exporting"):
        heap.tracing.export(42 if rank == 1 else folder / "y.json")
    assert [e["name"] for e in heap.tracing.events()] == ["tile"]


def test_per_rank_export_and_errors_raise_on_every_rank(world, tmp_path):
    world.run(_per_rank_files_and_errors, 2, tmp_path)
    for r in range(2):
        doc = json.loads((tmp_path / f"trace.rank{r}.json").read_text())
        check_chrome_trace(doc)
        assert {e["pid"] for e in doc["traceEvents"]} == {r} and doc["otherData"]["world_size"] == 2
        assert [e["name"] for e in doc["traceEvents"] if e["ph"] == "X"] == ["tile"]
    assert not (tmp_path / "x.json").exists() and not (tmp_path / "y.json").exists()
