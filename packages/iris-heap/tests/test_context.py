"""The device context tensor (ABI version 2), the host-visible error record, reservations, the watchdog."""

import threading
import time

import pytest
import torch
from _ranks import new_heap, on_ranks

import iris.heap
from iris.heap import context as abi


def _layout(rank, world_size):
    heap = new_heap()
    ctx = heap.context
    w = world_size
    assert ctx.dtype == torch.int64 and ctx.device == heap.device
    assert len(ctx) == abi.context_length(w) == abi.BASES_INDEX + w + abi.EXTENSIONS
    assert ctx[abi.RANK_INDEX].item() == rank and ctx[abi.WORLD_SIZE_INDEX].item() == w
    assert heap.heap_bases.tolist() == ctx[abi.BASES_INDEX : abi.BASES_INDEX + w].tolist()
    assert all(b % abi.BASE_ALIGNMENT == 0 for b in heap.heap_bases.tolist())
    x = heap.zeros(16)
    assert heap.heap_bases[rank].item() == x.data_ptr() - heap.offset(x)
    for r in range(w):
        assert heap.peer(x, r).data_ptr() == heap.heap_bases[r].item() + heap.offset(x)
    assert ctx is heap.context, "the context is one tensor for the heap's lifetime"
    assert ctx[abi.error_record_index(w)].item() == heap._record.address
    assert ctx[abi.status_index(w)].item() == abi.STATUS_OPEN
    heap.wait_timeout = 2.5
    assert heap.wait_timeout == 2.5 and ctx[abi.wait_timeout_index(w)].item() == 2_500_000_000
    heap.wait_timeout = 1e-6
    assert ctx[abi.wait_timeout_index(w)].item() == 1000
    heap.close()
    assert ctx[abi.status_index(w)].item() == abi.STATUS_CLOSED
    assert ctx[abi.BASES_INDEX : abi.BASES_INDEX + w].tolist() == [0] * w, "a closed context reaches nothing"


def _write_record(heap, code, detail=0, value=0, peer=-1, aux=0):
    """What device code does: the context's word first (CAS), then the record, its code last."""
    heap.context[abi.error_code_index(heap.world_size)] = code
    words = heap._record.words
    words[abi.RECORD_DETAIL], words[abi.RECORD_VALUE] = detail, value
    words[abi.RECORD_PEER], words[abi.RECORD_AUX] = peer, aux
    words[abi.RECORD_CODE] = code


def _error_record(rank, world_size):
    heap = new_heap()
    flag = heap.zeros(4, dtype=torch.int32)
    heap.check_device_errors()  # nothing recorded: no error
    heap.wait_timeout = 2.0
    _write_record(heap, abi.ERROR_WAIT_TIMEOUT, heap.offset(flag) + 8, 3, -1, 2_100_000_000)
    with pytest.raises(
        iris.heap.WaitTimeoutError, match=rf"rank {rank}: a device-side wait gave up after 2.1 s"
    ) as info:
        heap.check_device_errors()
    assert "byte 8 of the live torch.int32[4]" in str(info.value) and "still held 3" in str(info.value)
    assert isinstance(info.value, TimeoutError) and info.value.offset == heap.offset(flag) + 8
    assert heap.context[abi.error_code_index(world_size)].item() == 0, "the device-side word is cleared too"
    heap.check_device_errors()  # cleared once reported
    _write_record(heap, 99, 1, 2, 3, 4)
    with pytest.raises(iris.heap.HeapError, match="code 99"):
        heap.check_device_errors()
    heap.barrier()


def _translators(rank, world_size):
    heap = new_heap()
    seen = []

    def mine(h, error):
        seen.append(error)
        return RuntimeError(f"translated {error.code}") if error.code == 42 else None

    heap.add_error_translator(mine)
    heap.add_error_translator(mine)  # once only
    _write_record(heap, 42, 5, 6, 1, 7)
    with pytest.raises(RuntimeError, match="translated 42"):
        heap.check_device_errors()
    assert seen == [iris.heap.DeviceError(42, 5, 6, 1, 7)]
    _write_record(heap, abi.ERROR_HEAP_CLOSED)
    with pytest.raises(iris.heap.HeapClosedError):  # not claimed: the heap's own
        heap.check_device_errors()
    with pytest.raises(TypeError, match="callable"):
        heap.add_error_translator("no")


def _reserve(rank, world_size):
    heap = new_heap()
    user = heap.full((64,), 5.0)
    a = heap.reserve("lib.flags", 1000)
    assert a.dtype == torch.uint8 and a.numel() == 1000 and bool((a == 0).all())
    res = heap.reservations()["lib.flags"]
    assert res.untouched and res.offset >= heap.size - 1024, "library state comes from the top of the heap"
    assert heap.reserve("lib.flags", 10) is a, "made once per name"
    with pytest.raises(ValueError, match="already reserved with 1000 bytes"):
        heap.reserve("lib.flags", 2000)
    assert not heap.is_symmetric(a), "a reservation is not one of the user's allocations"
    assert heap.stats().live_allocations == 1 and heap.stats().reserved_bytes == 1024
    assert "reservation 'lib.flags'" in heap.describe(res.offset + 3)
    b = heap.reserve("lib.staging", 4096)
    b.fill_(7)
    heap.unreserve("lib.staging")
    c = heap.reserve("lib.staging.again", 4096)
    assert not heap.reservations()["lib.staging.again"].untouched and bool((c == 0).all()), "reused: zeroed"
    with pytest.raises(KeyError, match="nothing is reserved"):
        heap.unreserve("nope")
    for bad, exc in (("", TypeError), (3, TypeError)):
        with pytest.raises(exc):
            heap.reserve(bad, 8)
    with pytest.raises(ValueError, match="positive int"):
        heap.reserve("x", 0)
    with pytest.raises(iris.heap.HeapExhaustedError, match="reservation 'huge'"):
        heap.reserve("huge", heap.size)
    assert torch.equal(user.cpu(), torch.full((64,), 5.0)), "the user's tensor is untouched"
    heap.check_symmetry()
    if world_size > 1:
        if rank == 0:
            heap.reserve("only.here", 256)
        with pytest.raises(iris.heap.AsymmetricHeapError, match="reservations differ"):
            heap.check_symmetry()


def _watchdog(rank, world_size):
    heap = new_heap()
    with pytest.raises(ValueError, match="on_error"):
        heap.watchdog(on_error="ignore")
    with pytest.raises(ValueError, match="interval"):
        heap.watchdog(interval=0)
    dog = heap.watchdog(interval=0.05)
    assert heap.watchdog_running
    with pytest.raises(iris.heap.HeapError, match="already running"):
        heap.watchdog()
    _write_record(heap, abi.ERROR_WAIT_TIMEOUT, 0, 1, -1, 10)
    deadline = time.monotonic() + 10
    while dog.running and time.monotonic() < deadline:
        time.sleep(0.01)
    assert not dog.running, "the watchdog stops once it found an error"
    assert heap._record.read() is None, "the watchdog took the error; the next call raises it"
    with pytest.raises(iris.heap.WaitTimeoutError):
        heap.barrier()
    heap.check_device_errors()
    dog = heap.watchdog(interval=0.05)
    heap.close()
    assert not dog.running, "close() stops the watchdog"
    assert not any(t.name.startswith("iris-watchdog") and t.is_alive() for t in threading.enumerate())


def test_abi_version_is_two():
    assert iris.heap.CONTEXT_ABI_VERSION == 2
    iris.heap.context.check_version("iris.mem.test", "0", 2)
    with pytest.raises(ImportError, match="reads device-context ABI version 1"):
        iris.heap.context.check_version("iris.mem.test", "0", 1)


test_context_layout = on_ranks(_layout, [1, 2, 3])
test_device_error_record_raises_on_the_host = on_ranks(_error_record, [1, 2])


def test_layers_translate_their_own_device_errors(world):
    world.run(_translators, 1)


test_reservations_sit_outside_the_users_allocations = on_ranks(_reserve, [1, 2])


def test_watchdog_finds_a_device_error_without_a_sync(world):
    world.run(_watchdog, 1)
