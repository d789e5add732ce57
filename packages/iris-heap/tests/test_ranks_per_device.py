"""``heap.ranks_per_device``: how many ranks share this rank's device, agreed once at init."""

import pytest
import torch

import iris.heap
from iris.testing import WORLD_SIZES


def _ranks_per_device(rank, world_size):
    heap = iris.heap.init(1 << 16)
    try:
        return heap.device.type, heap.ranks_per_device
    finally:
        heap.close()


def _read_only(rank, world_size):
    heap = iris.heap.init(1 << 16)
    try:
        with pytest.raises(AttributeError):
            heap.ranks_per_device = 1
    finally:
        heap.close()


def _one_rank_cannot_name_its_device(rank, world_size):
    import iris.heap.heap as module

    real = module._device_identity
    if rank == world_size - 1:

        def broken(device):
            raise RuntimeError("injected: no device properties")

        module._device_identity = broken
    try:
        with pytest.raises((RuntimeError, iris.heap.HeapError)) as raised:
            iris.heap.init(1 << 16)
    finally:
        module._device_identity = real
    return type(raised.value).__name__, str(raised.value)


@pytest.mark.cpu_ranks
@pytest.mark.parametrize("world_size", WORLD_SIZES)
def test_cpu_ranks_all_share_the_cpu(world, world_size):
    # CPU ranks of a heap run on one host (its shared memory does not span hosts): all share its CPU.
    assert world.run(_ranks_per_device, world_size) == [("cpu", world_size)] * world_size


@pytest.mark.gpu
@pytest.mark.parametrize("world_size", WORLD_SIZES)
def test_gpu_ranks_count_the_ranks_on_their_gpu(world, world_size):
    # Rank r runs on cuda:(r % device_count), so the ranks on one GPU are those congruent mod the count.
    count = torch.cuda.device_count()
    want = [("cuda", sum(1 for r in range(world_size) if r % count == me % count)) for me in range(world_size)]
    assert world.run(_ranks_per_device, world_size) == want


@pytest.mark.parametrize("world_size", [1, 2])
def test_ranks_per_device_is_read_only(world, world_size):
    world.run(_read_only, world_size)


@pytest.mark.parametrize("world_size", [2, 3])
def test_a_rank_that_cannot_name_its_device_fails_every_rank_at_init(world, world_size):
    found = world.run(_one_rank_cannot_name_its_device, world_size)
    assert found[-1] == ("RuntimeError", "injected: no device properties")
    for name, message in found[:-1]:
        assert name == "HeapError" and f"rank {world_size - 1}: RuntimeError: injected" in message, message
