"""Symmetry: the same allocations land at the same offsets on every rank, and peers see each other."""

import pytest
import torch
from _ranks import new_heap, on_ranks, sync

import iris.heap
from iris.testing import WORLD_SIZES, gather


def _same_offsets(rank, world_size):
    heap = new_heap()
    tensors = [
        heap.zeros(n, dtype=d)
        for n, d in [(1, torch.int8), (1000, torch.float32), (3, torch.float64), (77, torch.bfloat16)]
    ]
    heap.free(tensors[1])
    tensors.append(heap.empty(10, 10))
    offsets = [heap.offset(t) for t in tensors[:1] + tensors[2:]]
    everyone = gather(offsets, world_size)
    assert all(o == everyone[0] for o in everyone), everyone
    heap.check_symmetry()
    # heap_bases: one distinct mapping per rank, the local one first-class in the context
    bases = heap.heap_bases.tolist()
    assert len(bases) == world_size and len(set(bases)) == world_size
    assert heap.context[0].item() == rank and heap.context[1].item() == world_size
    assert heap.heap_bases.data_ptr() == heap.context[2:].data_ptr()


def _peer_views_write_neighbours(rank, world_size):
    heap = new_heap()
    x = heap.full((4, 6), -1, dtype=torch.int32)
    sync(heap)
    right = (rank + 1) % world_size
    view = heap.peer(x, right)
    assert view.shape == x.shape and view.stride() == x.stride() and view.dtype == x.dtype
    view[rank % 4] = rank  # write one row into the right neighbour's copy
    sync(heap)
    left = (rank - 1) % world_size
    expected = torch.full((4, 6), -1, dtype=torch.int32)
    for r in range(world_size):
        if (r + 1) % world_size == rank:
            expected[r % 4] = r
    if world_size <= 4:
        assert torch.equal(x.cpu(), expected), (x, expected, left)
    # a strided view of a heap tensor maps to the same place in the peer
    col = x[:, 2]
    peer_col = heap.peer(col, rank)
    assert peer_col.stride() == col.stride() and torch.equal(peer_col.cpu(), col.cpu())
    if heap.rank == 0:
        peer_view_of_self = heap.peer(x, 0)
        assert peer_view_of_self.data_ptr() == x.data_ptr()


def _every_rank_reads_every_peer(rank, world_size):
    heap = new_heap()
    x = heap.full((257,), float(rank * 10), dtype=torch.float32)
    sync(heap)
    for r in range(world_size):
        assert torch.equal(heap.peer(x, r).cpu(), torch.full((257,), float(r * 10))), r
    sync(heap)


def _free_and_reuse(rank, world_size):
    heap = new_heap()
    a = heap.empty(1000)
    b = heap.empty(1000)
    off_a = heap.offset(a)
    heap.free(a)
    c = heap.empty(500)  # fits in a's hole: first fit reuses it
    assert heap.offset(c) == off_a
    heap.free(b)
    heap.free(c)
    s = heap.stats()
    assert s.used == 0 and s.live_allocations == 0 and s.largest_free_block == heap.size
    assert s.peak == 2 * 4096
    heap.check_symmetry()
    # generation: moves with every change of the allocated blocks, and only then
    g = heap.generation
    d = heap.empty(8)
    assert heap.generation > g
    g = heap.generation
    heap.is_symmetric(d), heap.offset(d), heap.stats(), heap.check_symmetry()
    assert heap.generation == g
    heap.free(d)
    assert heap.generation > g
    g = heap.generation
    heap.close()
    assert heap.generation > g


def _quarantine_then_collect(rank, world_size):
    heap = new_heap()
    keep = heap.zeros(64)
    dropped = heap.zeros(4096)
    off = heap.offset(dropped)
    view = dropped[10:20]  # a view keeps the block alive after the tensor is gone
    del dropped
    assert heap.stats().quarantined_allocations == 0
    g = heap.generation
    assert heap.collect() == 0
    assert heap.generation == g  # nothing reclaimed: the blocks are the same
    del view
    s = heap.stats()
    assert s.quarantined_allocations == 1 and s.quarantined_bytes == 4096 * 4
    # quarantined memory is never handed out again before collect()
    fresh = heap.empty(4096)
    assert heap.offset(fresh) != off
    heap.free(fresh)
    g = heap.generation
    assert heap.collect() == 4096 * 4
    assert heap.generation > g
    assert heap.stats().quarantined_allocations == 0
    again = heap.empty(4096)
    assert heap.offset(again) == off
    del keep


def _collect_waits_for_every_rank(rank, world_size):
    heap = new_heap()
    t = heap.zeros(1024)
    off = heap.offset(t)
    if rank == 0:
        del t  # only rank 0 drops it
    assert heap.collect() == (1024 * 4 if world_size == 1 else 0)
    if rank != 0:
        del t
    assert heap.collect() == (0 if world_size == 1 else 1024 * 4)
    assert heap.offset(heap.empty(1024)) == off


def _asymmetry_is_detected(rank, world_size):
    heap = new_heap()
    heap.zeros(10)
    if rank == world_size - 1:
        heap.zeros(3, dtype=torch.int64)
    else:
        heap.zeros(3, dtype=torch.float64)
    with pytest.raises(iris.heap.AsymmetricHeapError, match="allocation 1 differs"):
        heap.check_symmetry()
    if rank == 0:
        heap.zeros(1)
    with pytest.raises(iris.heap.AsymmetricHeapError):
        heap.check_symmetry()


def _mismatched_sizes_fail_on_every_rank(rank, world_size):
    with pytest.raises(iris.heap.AsymmetricHeapError, match="different heap sizes"):
        iris.heap.init((1 << 20) + 4096 * rank)


def _context_manager_and_default(rank, world_size):
    with iris.heap.init(1 << 16) as heap:
        assert iris.heap.default_heap() is heap
        heap.zeros(3)
    assert heap.closed
    with pytest.raises(iris.heap.HeapError, match="no open heap"):
        iris.heap.default_heap()


def _default_falls_back_to_the_newest_open_heap(rank, world_size):
    older, newer = iris.heap.init(1 << 16), iris.heap.init(1 << 16)
    assert iris.heap.default_heap() is newer
    newer.close()
    assert iris.heap.default_heap() is older, "closing the newer heap leaves the older one the default"
    newest = iris.heap.init(1 << 16)
    older.close()
    assert iris.heap.default_heap() is newest
    newest.close()
    with pytest.raises(iris.heap.HeapError, match="no open heap"):
        iris.heap.default_heap()


def _find_heap_by_serial(rank, world_size):
    first, second = iris.heap.init(1 << 16), iris.heap.init(1 << 16)
    assert second.serial > first.serial >= 1
    assert iris.heap.find_heap(first.serial) is first and iris.heap.find_heap(second.serial) is second
    first.close()
    assert iris.heap.find_heap(first.serial) is None, "a closed heap is not found"
    third = iris.heap.init(1 << 16)
    assert third.serial > second.serial, "serials are never reused"
    assert iris.heap.find_heap(third.serial) is third and iris.heap.find_heap(0) is None
    second.close()
    third.close()


test_find_heap_by_serial = on_ranks(_find_heap_by_serial, [1])
test_offsets_are_symmetric = on_ranks(_same_offsets, WORLD_SIZES)
test_peer_views_write_into_neighbours = on_ranks(_peer_views_write_neighbours, WORLD_SIZES)
test_every_rank_reads_every_peer = on_ranks(_every_rank_reads_every_peer, [2, 4])
test_free_then_reuse = on_ranks(_free_and_reuse, [1, 2])
test_dropped_tensors_are_quarantined_until_collect = on_ranks(_quarantine_then_collect, [1, 3])
test_collect_reclaims_only_blocks_dropped_everywhere = on_ranks(_collect_waits_for_every_rank, [1, 2, 4])
test_check_symmetry_names_the_first_difference = on_ranks(_asymmetry_is_detected, [2, 3])
test_ranks_must_agree_on_the_heap_size = on_ranks(_mismatched_sizes_fail_on_every_rank, [2])
test_context_manager_closes_and_clears_default = on_ranks(_context_manager_and_default, [1, 2])
test_default_heap_falls_back_to_the_newest_open_heap = on_ranks(_default_falls_back_to_the_newest_open_heap, [1, 2])
