"""ccl-bench's yardsticks: the traffic each collective must move, and the copy roofline.

The ratio the benchmark reports is only as honest as these two: the traffic must be the least any
algorithm moves (not what this release's algorithm happens to move), and the roofline must be the
bandwidth of the devices the ranks run on, not one rank's share of it while the others copy too.
"""

import pytest
import torch

from iris.examples import ccl_bench
from iris.examples.ccl_bench import copy_bytes, traffic
from iris.testing.world import run


@pytest.mark.parametrize("w", [1, 2, 3, 4])
def test_traffic_is_each_input_read_once_and_each_output_written_once(w):
    n = 12 * 64  # bytes per rank, divisible by every w
    assert traffic("all_gather", n, w) == w * n + w * (w * n)
    assert traffic("reduce_scatter", n, w) == w * n + n
    assert traffic("all_reduce", n, w) == 2 * w * n
    assert traffic("all_to_all", n, w) == 2 * w * n
    assert traffic("broadcast", n, w) == w * n


def test_the_roofline_copy_moves_what_the_collective_moves_through_a_device():
    # 4 ranks, 1 MiB each: all_gather moves 4 + 16 MiB; on one shared GPU the copy is of 10 MiB
    # (read and written), on a GPU per rank of a quarter of that. A roofline timed at 1 MiB (a
    # launch-bound copy) once gave all_gather 1.57 times the hardware.
    mib = 1 << 20
    assert copy_bytes("all_gather", mib, 4, ranks_per_device=4) == 10 * mib
    assert copy_bytes("all_gather", mib, 4) == 10 * mib // 4
    assert copy_bytes("all_reduce", mib, 4) == mib  # each device reads and writes its own 1 MiB
    assert copy_bytes("all_reduce", mib, 4, ranks_per_device=4) == 4 * mib
    assert copy_bytes("reduce_scatter", mib, 2, ranks_per_device=2) == (2 * mib + 2 * (mib // 2)) // 2
    assert copy_bytes("broadcast", 12, 4) == 4 and copy_bytes("all_reduce", 2, 1) == 4  # whole words, never 0


def _roofline(rank, world_size):
    import iris.heap
    from iris.examples.ccl_bench import copy_roofline

    heap = iris.heap.init(1 << 20)
    try:
        return copy_roofline(1 << 16, heap, iters=2)
    finally:
        heap.close()


@pytest.mark.parametrize("w", [1, 2])
def test_copy_roofline_counts_a_shared_device_once(w):
    # CPU ranks of one host (or ranks of one GPU) share one memory: the roofline is one figure for
    # it, the same on every rank, not the sum of every rank's measurement.
    env = {} if torch.cuda.is_available() else {"IRIS_DEVICE": "cpu"}
    found = run(_roofline, w, env=env)
    assert len(set(found)) == 1 and found[0] > 0


def _ar(variant, size, us, pick="two_shot"):
    return {"collective": f"all_reduce:{variant}", "bytes_per_rank": size, "time_us": us, "auto_pick": pick}


def test_the_auto_table_keeps_the_fastest_variant_per_size_and_proposes_its_rows():
    rows = [
        _ar("one_shot_push", 1024, 5.0, "one_shot_push"), _ar("two_shot", 1024, 7.0, "one_shot_push"),
        _ar("one_shot_push", 16384, 7.1, "one_shot_push"), _ar("two_shot", 16384, 7.0, "one_shot_push"),  # within 3%
        _ar("one_shot", 65536, 9.0), _ar("two_shot", 65536, 11.0),  # one_shot faster: a row of its own
        _ar("one_shot", 1 << 20, 30.0), _ar("two_shot", 1 << 20, 20.0), _ar("rs_ag", 1 << 20, 25.0),
        _ar("two_shot", 1 << 24, 100.0),  # one variant only: no comparison at this size
        _ar("auto", 1 << 20, 1.0), {"collective": "all_gather", "bytes_per_rank": 1024, "time_us": 1.0},
        dict(_ar("one_shot", 1 << 20, 1.0), latency=True),  # the latency table's rows are not the sweep's
    ]  # fmt: skip
    table, proposed = ccl_bench.auto_table(rows)
    assert [(r["bytes_per_rank"], r["fastest"], r["auto_pick"]) for r in table] == [
        (1024, "one_shot_push", "one_shot_push"), (16384, "one_shot_push", "one_shot_push"),
        (65536, "one_shot", "two_shot"), (1 << 20, "two_shot", "two_shot")]  # fmt: skip
    assert table[2]["pick_vs_fastest"] == pytest.approx(11.0 / 9.0)
    assert proposed == ((16384, "one_shot_push"), (65536, "one_shot"), (None, "two_shot"))
    assert ccl_bench.auto_table([_ar("two_shot", 1024, 5.0)]) == ([], ())
