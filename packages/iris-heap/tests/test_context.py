"""The device context tensor (ABI version 1) and the device-side error word."""

import pytest
import torch
from _ranks import new_heap

import iris.heap
from iris.heap import context as abi


def _layout(rank, world_size):
    heap = new_heap()
    ctx = heap.context
    assert ctx.dtype == torch.int64 and ctx.device == heap.device
    assert len(ctx) == abi.context_length(world_size)
    assert ctx[abi.RANK_INDEX].item() == rank and ctx[abi.WORLD_SIZE_INDEX].item() == world_size
    assert heap.heap_bases.tolist() == ctx[2 : 2 + world_size].tolist()
    x = heap.zeros(16)
    assert heap.heap_bases[rank].item() == x.data_ptr() - heap.offset(x)
    for r in range(world_size):
        assert heap.peer(x, r).data_ptr() == heap.heap_bases[r].item() + heap.offset(x)
    assert ctx is heap.context, "the context is one tensor for the heap's lifetime"
    heap.wait_timeout = 2.0
    assert heap.wait_limit == int(2.0 * heap._transport.spins_per_second)
    assert ctx[abi.wait_limit_index(world_size)].item() == heap.wait_limit
    heap.wait_limit = 1234
    assert heap.wait_timeout == pytest.approx(1234 / heap._transport.spins_per_second)


def _error_word(rank, world_size):
    heap = new_heap()
    flag = heap.zeros(4, dtype=torch.int32)
    heap.check_device_errors()  # nothing recorded: no error
    w = world_size
    heap.context[abi.error_code_index(w)] = abi.ERROR_WAIT_TIMEOUT  # what a timed-out device wait writes
    heap.context[abi.error_detail_index(w)] = heap.offset(flag) + 8
    heap.context[abi.error_value_index(w)] = 3
    with pytest.raises(iris.heap.WaitTimeoutError, match=rf"rank {rank}: a device-side wait gave up") as info:
        heap.check_device_errors()
    assert "byte 8 of the live torch.int32[4]" in str(info.value) and "still held 3" in str(info.value)
    assert isinstance(info.value, TimeoutError)
    heap.check_device_errors()  # cleared once reported
    heap.barrier()


def test_abi_version_is_one():
    assert iris.heap.CONTEXT_ABI_VERSION == 1


@pytest.mark.parametrize("world_size", [1, 2, 3])
def test_context_layout(world, world_size):
    world.run(_layout, world_size)


@pytest.mark.parametrize("world_size", [1, 2])
def test_device_error_word_raises_on_the_host(world, world_size):
    world.run(_error_word, world_size)
