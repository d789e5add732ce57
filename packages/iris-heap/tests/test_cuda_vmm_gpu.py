"""The cuda-vmm transport on a GPU (skipped without CUDA): a heap per rank from cuMemCreate, passed as
a descriptor, mapped in every rank; closing it leaves no mapping once its tensors are gone."""

import gc

import pytest
import torch
from _ranks import on_ranks, shares_one_gpu, sync

import iris.heap

pytestmark = pytest.mark.gpu


def _heap(size=1 << 24):
    return iris.heap.init(size, transport="cuda-vmm")


def _shares_one_gpu(rank, world_size):
    shares_one_gpu(rank, world_size, "cuda-vmm", "cuda-vmm")


test_cuda_vmm_heap_shares_one_gpu = on_ranks(_shares_one_gpu, [1, 2, 4])


def _odd_size(rank, world_size):
    from iris.heap.transport.cuda_base import MAPPING_GRANULE

    size = (3 << 20) + 4096 * 3  # not a whole number of 2 MiB pages
    heap = _heap(size)
    assert heap.transport.mapped_size % MAPPING_GRANULE == 0 and heap.transport.mapped_size >= size
    x = heap.full((heap.size // 4,), float(rank + 1))  # every usable byte, peers included
    sync(heap)
    for r in range(world_size):
        assert torch.equal(heap.peer(x, r), torch.full_like(x, float(r + 1)))
    heap.close()


test_cuda_vmm_rounds_up_to_whole_pages = on_ranks(_odd_size, [2])


def _mapped(base: int) -> bool:
    from cuda.bindings import driver

    err, *_ = driver.cuMemGetAddressRange(base)
    return err == driver.CUresult.CUDA_SUCCESS


def _close_unmaps(rank, world_size):
    heap = _heap()
    x = heap.ones(10)
    other = (rank + 1) % world_size
    y = heap.peer(x, other)  # keeps the next rank's mapping in this process
    bases = heap.heap_bases.tolist()
    assert all(_mapped(b) for b in bases)
    heap.close()
    kept = {rank: bases[rank], other: bases[other]}
    assert all(_mapped(b) for b in kept.values()), "a tensor kept past close still has its memory"
    assert not any(_mapped(b) for r, b in enumerate(bases) if r not in kept), "close unmaps what no tensor holds"
    assert torch.equal(x, torch.ones_like(x))
    del x, y, heap
    gc.collect()
    torch.cuda.synchronize()
    assert not any(_mapped(b) for b in bases), "every rank's mapping goes with the closed heap's last tensor"


test_cuda_vmm_close_unmaps_once_the_last_tensor_is_gone = on_ranks(_close_unmaps, [1, 2, 3])
