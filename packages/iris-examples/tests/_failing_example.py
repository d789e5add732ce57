"""A module with the example interface whose rank 1 raises after the heap is mapped.

Not an example of the package: test_launch.py runs it through ``iris.examples.launch`` to check
what the launcher reports when a rank fails (rank, message, traceback) and that nothing leaks.
"""

import iris.heap

SUMMARY = "fails on rank 1 (a launcher test)"


def rank_main(args):
    heap = iris.heap.init(1 << 20)
    try:
        x = heap.zeros(16)
        heap.barrier()
        if heap.rank == 1:
            raise ZeroDivisionError(f"rank {heap.rank} divides by zero on purpose (sum {float(x.sum())})")
        heap.barrier()  # rank 0 waits here for rank 1, whose failure ends the run
        return {"rank": heap.rank}
    finally:
        heap.close()
