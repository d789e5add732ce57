"""A symmetric heap over N ranks: allocate, write into neighbours' copies, check, free.

    python packages/iris-heap/examples/heap_demo.py [--ranks 4]

Runs on CPU ranks (shared memory) without a GPU, on one GPU shared by the ranks (CUDA IPC)
with one.
"""

import argparse
import sys

import torch

import iris.heap
from iris.heap.testing import run


def demo(rank, world_size):
    heap = iris.heap.init(1 << 24)
    x = heap.zeros(world_size, 4, dtype=torch.float32)
    heap.barrier()
    for r in range(world_size):  # write row `rank` of every rank's copy
        heap.peer(x, r)[rank] = rank + 1
    heap.barrier()
    expected = torch.arange(1, world_size + 1, dtype=torch.float32)[:, None].expand(world_size, 4)
    ok = torch.equal(x.cpu(), expected)
    offsets = heap.offset(x)
    stats = heap.stats()
    heap.free(x)
    heap.check_symmetry()
    heap.close()
    return ok, offsets, str(heap.device), heap.transport, stats.used


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--ranks", type=int, default=4)
    n = p.parse_args().ranks
    results = run(demo, n)
    print(f"{'rank':>4} {'device':>8} {'transport':>9} {'offset':>6} {'correct':>7}")
    for r, (ok, off, dev, transport, _) in enumerate(results):
        print(f"{r:>4} {dev:>8} {transport:>9} {off:>6} {str(ok):>7}")
    good = all(ok for ok, *_ in results) and len({off for _, off, *_ in results}) == 1
    print("every rank wrote its row into every peer's heap:", "OK" if good else "MISMATCH")
    return 0 if good else 1


if __name__ == "__main__":
    sys.exit(main())
