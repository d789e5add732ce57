"""The heap's block allocator: first fit over an address-ordered free list, with coalescing.

The allocator is plain deterministic bookkeeping over byte offsets. It never communicates:
every rank that runs the same sequence of ``allocate``/``release`` calls gets the same offsets,
which is what makes the heap symmetric.
"""

from __future__ import annotations

import bisect

__all__ = ["ALIGNMENT", "BlockAllocator"]

#: Every block starts at a multiple of this many bytes and spans a multiple of it.
ALIGNMENT = 256


class BlockAllocator:
    """Hands out aligned byte ranges of a region of ``size`` bytes.

    Free blocks are kept in address order (``_starts`` sorted, ``_free`` start -> length), so
    a release merges with its neighbours in O(log n) and the layout after any sequence of calls
    depends only on that sequence.
    """

    def __init__(self, size: int, alignment: int = ALIGNMENT):
        if alignment <= 0 or alignment & (alignment - 1):
            raise ValueError(f"alignment must be a positive power of two, got {alignment}")
        self.alignment = alignment
        self.size = size - size % alignment
        self._starts: list[int] = [0] if self.size else []
        self._free: dict[int, int] = {0: self.size} if self.size else {}
        self._used_blocks: dict[int, int] = {}
        self.used = 0
        self.peak = 0
        #: End of the highest block ``allocate`` ever handed out, and start of the lowest block
        #: ``allocate_top`` ever did: memory between them was never handed out since the region
        #: was made (so it still holds what the region was created with: zeros).
        self.low_high_water = 0
        self.top_low_water = self.size
        self.last_top_untouched = False

    def allocate(self, nbytes: int) -> int | None:
        """Reserve a block for ``nbytes``; its offset, or ``None`` when no free block is large enough."""
        mask = self.alignment - 1
        length = (nbytes + mask) & ~mask or self.alignment  # whole alignment units, at least one
        free, starts = self._free, self._starts
        i = 0
        for start in starts:  # first fit: the lowest free block that is large enough
            have = free[start]
            if have >= length:
                del free[start]
                if have == length:
                    del starts[i]
                else:
                    starts[i] = rest = start + length
                    free[rest] = have - length
                self._used_blocks[start] = length
                self.used = used = self.used + length
                if used > self.peak:
                    self.peak = used
                if start + length > self.low_high_water:
                    self.low_high_water = start + length
                return start
            i += 1
        return None

    def allocate_top(self, nbytes: int) -> int | None:
        """Like :meth:`allocate`, from the other end: the end of the highest free block that is
        large enough (library state grows down from the top, the user's tensors up from 0)."""
        mask = self.alignment - 1
        length = (nbytes + mask) & ~mask or self.alignment
        free, starts = self._free, self._starts
        for i in range(len(starts) - 1, -1, -1):
            start = starts[i]
            have = free[start]
            if have >= length:
                if have == length:
                    del free[start]
                    del starts[i]
                else:
                    free[start] = have - length
                offset = start + have - length
                self._used_blocks[offset] = length
                self.used += length
                self.peak = max(self.peak, self.used)
                #: Whether the block just returned had never been handed out before.
                self.last_top_untouched = offset >= self.low_high_water and offset + length <= self.top_low_water
                self.top_low_water = min(self.top_low_water, offset)
                return offset
        return None

    def release(self, offset: int) -> int:
        """Return the block at ``offset`` to the free list; its length. ``KeyError`` if not allocated."""
        length = self._used_blocks.pop(offset)
        self.used -= length
        starts, free = self._starts, self._free
        i = bisect.bisect_left(starts, offset)
        end = offset + length
        nxt = free.pop(end, None)
        if nxt is not None:  # merge with the next free block (it starts at starts[i])
            end += nxt
            if i > 0:
                prev = starts[i - 1]
                if prev + free[prev] == offset:  # and with the previous one
                    free[prev] = end - prev
                    del starts[i]
                    return length
            starts[i] = offset
            free[offset] = end - offset
            return length
        if i > 0:
            prev = starts[i - 1]
            if prev + free[prev] == offset:  # merge with the previous free block
                free[prev] = end - prev
                return length
        starts.insert(i, offset)
        free[offset] = length
        return length

    def length(self, offset: int) -> int | None:
        """The length of the allocated block at ``offset``, or ``None``."""
        return self._used_blocks.get(offset)

    @property
    def free_bytes(self) -> int:
        return self.size - self.used

    @property
    def largest_free_block(self) -> int:
        return max(self._free.values(), default=0)

    def free_blocks(self) -> list[tuple[int, int]]:
        """``(offset, length)`` of every free block, in address order."""
        return [(s, self._free[s]) for s in self._starts]
