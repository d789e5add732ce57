"""Helpers shared by the heap's multi-rank tests (module-level so spawned ranks can import them)."""

import torch
import torch.distributed as dist

import iris.heap

HEAP_SIZE = 1 << 20


def gather(obj, world_size):
    if world_size == 1:
        return [obj]
    out = [None] * world_size
    dist.all_gather_object(out, obj)
    return out


def new_heap(size=HEAP_SIZE):
    return iris.heap.init(size)


def sync(heap):
    if heap.device.type == "cuda":
        torch.cuda.synchronize(heap.device)
    heap.barrier()
