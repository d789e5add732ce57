"""GPU-specific behaviour of the heap (skipped without CUDA)."""

import pytest
import torch
from _ranks import new_heap, sync

import iris.heap

pytestmark = pytest.mark.gpu


def _cuda_ipc(rank, world_size):
    heap = new_heap(1 << 24)
    assert heap.transport == "cuda-ipc" and heap.device.type == "cuda"
    x = heap.full((1 << 16,), float(rank), dtype=torch.float32)
    sync(heap)
    for r in range(world_size):
        assert torch.equal(heap.peer(x, r), torch.full_like(x, float(r)))
    heap.peer(x, (rank + 1) % world_size).add_(100)
    sync(heap)
    assert torch.equal(x, torch.full_like(x, float(rank) + 100))
    free, _ = torch.cuda.mem_get_info(heap.device)
    with pytest.raises(iris.heap.HeapExhaustedError, match="bytes free"):
        iris.heap.init(free * 2)


@pytest.mark.parametrize("world_size", [1, 2, 4])
def test_cuda_ipc_heap_shares_one_gpu(world, world_size):
    world.run(_cuda_ipc, world_size)
