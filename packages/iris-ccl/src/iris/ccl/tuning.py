"""all_reduce's ``"auto"``: the variant measured fastest, per device kind, world size and size.

``ALL_REDUCE_AUTO`` maps a device kind (CUDA compute capability) to, per world size, rows of
``(largest bytes per rank, variant)`` in increasing size, the last row's bound None (every larger
size). The rows come from ccl-bench's all_reduce sweep on that kind (every variant queued at every
size, the fastest kept: ``iris.examples.ccl_bench.auto_table``, which prints the rows it measured;
``tools/benchmarks.py`` steps ``ccl_auto`` and ``ccl_auto2`` keep the measurement in the report). A world size the kind has no rows for uses the rows of the
nearest measured one (the smaller on a tie); a device kind without a table (CPU ranks, other
GPUs) uses ``FALLBACK``.

Every rank of a heap runs on one device kind with one world size, so ranks that pass the same
size pick the same variant; ranks whose sizes differ across a bound pick different variants and
their call raises ``CollectiveMismatchError`` naming the variant, as any mismatch does.
"""

from __future__ import annotations

import functools

import torch

from .workspace import PUSH_BYTES

__all__ = ["ALL_REDUCE_AUTO", "AUTO_ALL_REDUCE", "AUTO_PUSH_BYTES", "FALLBACK", "all_reduce_auto", "rows_for"]

#: Up to this many bytes per rank, ``FALLBACK`` runs one_shot_push (one meeting of the ranks, no exit).
AUTO_PUSH_BYTES = 16 * 1024
#: Above ``AUTO_PUSH_BYTES``, ``FALLBACK`` runs this: two_shot, the fastest of one_shot, two_shot and
#: rs_ag at every size (1 KiB to 1 GiB per rank) and world size (2, 4) of an H200 sweep.
AUTO_ALL_REDUCE = "two_shot"

Rows = tuple[tuple[int | None, str], ...]

#: Device kinds without a table of their own, and CPU ranks.
FALLBACK: Rows = ((AUTO_PUSH_BYTES, "one_shot_push"), (None, AUTO_ALL_REDUCE))

#: (major, minor) compute capability -> {world size: rows}. sm_90: measured on an H100 80GB HBM3
#: (ranks sharing it under MPS, ccl-bench's all_reduce sweep, queued device us per call, 5 timed
#: iterations): the rows ``auto_table`` printed. 4 ranks: one_shot_push / two_shot 9.5 / 11.0 at 1 KiB, 9.8 / 11.2 at
#: 4 KiB, 11.8 / 11.2 at 16 KiB (two_shot by 5 %), then two_shot (one_shot, rs_ag slower at every
#: size: 64 KiB 12.6 against 18.0 and 26.1 us, 64 MiB 212 against 416 and 278). 2 ranks: 6.1 / 6.9
#: at 1 KiB, 7.2 / 7.1 at 16 KiB (within the 3 % margin: push kept), 8.6 / 7.5 at 32 KiB, then
#: two_shot (64 MiB 110 us against 201 and 173).
ALL_REDUCE_AUTO: dict[tuple[int, int], dict[int, Rows]] = {
    (9, 0): {
        2: ((16 * 1024, "one_shot_push"), (None, "two_shot")),
        4: ((4 * 1024, "one_shot_push"), (None, "two_shot")),
    },
}


def check_rows(rows: Rows, where: str = "rows") -> Rows:
    """``rows`` if they are a valid table of one world size, else ValueError saying what is wrong:
    bounds increasing, the last None, every variant an all_reduce variant other than ``auto``, and
    one_shot_push only up to ``PUSH_BYTES`` (its slots' size)."""
    from .config import ALL_REDUCE_VARIANTS

    if not rows or rows[-1][0] is not None:
        raise ValueError(f"{where}: the last row's bound must be None (every larger size), got {rows!r}")
    bounds = [b for b, _ in rows[:-1]]
    if any(not isinstance(b, int) or b <= 0 for b in bounds) or bounds != sorted(set(bounds)):
        raise ValueError(f"{where}: bounds must be positive ints in increasing order, got {bounds}")
    for bound, variant in rows:
        if variant not in ALL_REDUCE_VARIANTS or variant == "auto":
            raise ValueError(f"{where}: unknown variant {variant!r}")
        if variant == "one_shot_push" and (bound is None or bound > PUSH_BYTES):
            raise ValueError(f"{where}: one_shot_push holds at most {PUSH_BYTES} bytes per rank, bound {bound}")
    return rows


def rows_for(capability: tuple[int, int] | None, world_size: int) -> Rows:
    """The rows ``all_reduce_auto`` uses on a device of ``capability`` (None: CPU) at ``world_size``."""
    table = ALL_REDUCE_AUTO.get(capability) if capability is not None else None
    if not table:
        return FALLBACK
    nearest = min(table, key=lambda w: (abs(w - world_size), w))
    return table[nearest]


@functools.cache
def _capability(device_type: str, index: int | None) -> tuple[int, int] | None:
    if device_type != "cuda":
        return None
    return tuple(torch.cuda.get_device_capability(index))


def all_reduce_auto(nbytes: int, world_size: int, device: torch.device) -> str:
    """all_reduce's ``"auto"`` for ``nbytes`` per rank, ``world_size`` ranks, on ``device``."""
    for bound, variant in rows_for(_capability(device.type, device.index), world_size):
        if bound is None or nbytes <= bound:
            return variant
    raise AssertionError("unreachable: the last row's bound is None")


for _cap, _table in ALL_REDUCE_AUTO.items():  # a bad edit fails at import, not in a collective
    for _w, _rows in _table.items():
        check_rows(_rows, f"ALL_REDUCE_AUTO[{_cap}][{_w}]")
check_rows(FALLBACK, "FALLBACK")
