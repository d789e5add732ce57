"""A module with the example interface whose rank 1 raises after the heap is mapped.

Not an example of the package: test_launch.py registers it under a name of its own and runs it
through ``iris.examples.harness.cli.main``, to check what a user sees when a rank fails (rank, message,
traceback, exit status 1) and that nothing leaks.
"""

import iris.heap

SUMMARY = "fails on rank 1 (a launcher test)"


def add_arguments(parser, *, gpu):
    pass


def report(results, args):
    return 0


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
