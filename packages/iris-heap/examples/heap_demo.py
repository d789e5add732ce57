"""A symmetric heap over N ranks: allocate, write into neighbours' copies, check, free.

    python packages/iris-heap/examples/heap_demo.py [--ranks 4]

Runs on CPU ranks (shared memory) without a GPU, on one GPU shared by the ranks (CUDA IPC)
with one. Needs nothing but iris-heap: the ranks are started here with torch.multiprocessing, as
torchrun would start them (``torchrun --nproc-per-node 4`` runs ``demo`` the same way).
"""

import argparse
import multiprocessing as mp
import os
import socket
import sys

import torch
import torch.distributed as dist

import iris.heap


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
    return ok, offsets, str(heap.device), heap.transport_name, stats.used


def _rank(rank, fn, world_size, port, results):
    os.environ.update(RANK=str(rank), LOCAL_RANK=str(rank), WORLD_SIZE=str(world_size),
                      LOCAL_WORLD_SIZE=str(world_size), MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))  # fmt: skip
    dist.init_process_group("gloo")
    try:
        results.put((rank, fn(rank, world_size)))
    finally:
        dist.destroy_process_group()


def run(fn, world_size):
    """``fn(rank, world_size)`` on ``world_size`` spawned ranks; the results in rank order."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    results = mp.get_context("spawn").SimpleQueue()
    # A rank that raises makes spawn raise it here (ProcessRaisedException).
    torch.multiprocessing.spawn(_rank, args=(fn, world_size, port, results), nprocs=world_size)
    return [value for _, value in sorted((results.get() for _ in range(world_size)), key=lambda kv: kv[0])]


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
