"""The block allocator on its own: alignment, first fit, coalescing, determinism."""

import random

import pytest

from iris.heap.allocator import ALIGNMENT, BlockAllocator


def test_blocks_are_aligned_and_at_least_one_unit():
    a = BlockAllocator(1 << 16)
    offsets = [a.allocate(n) for n in (1, 255, 256, 257, 1000)]
    assert all(o % ALIGNMENT == 0 for o in offsets)
    assert [a.length(o) for o in offsets] == [256, 256, 256, 512, 1024]
    assert offsets == [0, 256, 512, 768, 1280]


def test_zero_byte_request_still_takes_a_block():
    a = BlockAllocator(4096)
    assert a.allocate(0) == 0 and a.length(0) == ALIGNMENT


def test_release_coalesces_with_both_neighbours():
    a = BlockAllocator(4 * 256)
    x, y, z, w = (a.allocate(256) for _ in range(4))
    a.release(x)
    a.release(z)
    assert a.free_blocks() == [(0, 256), (512, 256)]
    a.release(y)
    assert a.free_blocks() == [(0, 768)]
    a.release(w)
    assert a.free_blocks() == [(0, 1024)] and a.used == 0


def test_first_fit_reuses_the_lowest_hole():
    a = BlockAllocator(1 << 16)
    blocks = [a.allocate(512) for _ in range(8)]
    a.release(blocks[2])
    a.release(blocks[5])
    assert a.allocate(256) == blocks[2]
    assert a.allocate(512) == blocks[5]


def test_exhaustion_returns_none_and_keeps_state():
    a = BlockAllocator(1024)
    a.allocate(768)
    before = a.free_blocks()
    assert a.allocate(512) is None
    assert a.free_blocks() == before and a.used == 768


def test_release_of_unknown_offset_raises_keyerror():
    a = BlockAllocator(1024)
    with pytest.raises(KeyError):
        a.release(256)


def test_peak_tracks_the_high_water_mark():
    a = BlockAllocator(1 << 16)
    x = a.allocate(4096)
    a.allocate(4096)
    a.release(x)
    assert a.peak == 8192 and a.used == 4096


def test_same_sequence_gives_same_offsets_and_accounting_is_exact():
    rng = random.Random(1234)
    ops = []
    live = []
    for _ in range(3000):
        if live and rng.random() < 0.45:
            ops.append(("free", live.pop(rng.randrange(len(live)))))
        else:
            ops.append(("alloc", rng.choice([1, 100, 256, 4000, 65536, 300_000])))
            live.append(len(ops) - 1)

    def replay():
        a, got, out = BlockAllocator(1 << 24), {}, []
        for i, (op, arg) in enumerate(ops):
            if op == "alloc":
                got[i] = a.allocate(arg)
                out.append(got[i])
            elif got.get(arg) is not None:
                a.release(got.pop(arg))
        return a, out

    a1, out1 = replay()
    a2, out2 = replay()
    assert out1 == out2
    free = sum(n for _, n in a1.free_blocks())
    assert free + a1.used == a1.size
    blocks = a1.free_blocks()
    assert all(o1 + n1 < o2 for (o1, n1), (o2, _) in zip(blocks, blocks[1:])), "free blocks must be coalesced"


def _reference_first_fit(size, ops):
    """The same policy written the slow, obvious way: a sorted list of free (start, end) ranges."""
    free, used, out = [(0, size)], {}, []
    for op, arg in ops:
        if op == "alloc":
            length = max(256, -(-arg // 256) * 256)
            for i, (s, e) in enumerate(free):
                if e - s >= length:
                    free[i : i + 1] = [(s + length, e)] if e - s > length else []
                    used[s] = length
                    out.append(s)
                    break
            else:
                out.append(None)
        else:
            s = arg
            free.append((s, s + used.pop(s)))
            free.sort()
            merged = [free[0]]
            for a, b in free[1:]:
                if merged[-1][1] == a:
                    merged[-1] = (merged[-1][0], b)
                else:
                    merged.append((a, b))
            free = merged
            out.append([(a, b - a) for a, b in free])
    return out


def test_matches_a_plain_first_fit_with_coalescing_after_every_call():
    rng = random.Random(7)
    size = 1 << 20
    a, live, ops, got = BlockAllocator(size), [], [], []
    for _ in range(4000):
        if live and rng.random() < 0.5:
            offset = live.pop(rng.randrange(len(live)))
            ops.append(("free", offset))
            a.release(offset)
            got.append(a.free_blocks())
        else:
            n = rng.choice([0, 1, 255, 256, 257, 1000, 4096, 30_000, 100_000])
            ops.append(("alloc", n))
            offset = a.allocate(n)
            got.append(offset)
            if offset is not None:
                live.append(offset)
    assert got == _reference_first_fit(size, ops)
    assert sum(n for _, n in a.free_blocks()) == size - a.used
