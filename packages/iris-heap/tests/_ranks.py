"""Helpers shared by the heap's multi-rank tests (module-level so spawned ranks can import them)."""

import torch

import iris.heap

HEAP_SIZE = 1 << 20


def new_heap(size=HEAP_SIZE):
    return iris.heap.init(size)


def sync(heap):
    if heap.device.type == "cuda":
        torch.cuda.synchronize(heap.device)
    heap.barrier()
