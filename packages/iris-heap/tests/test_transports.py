"""The transport registry ("auto"'s order, stated), what a heap says of its transport, and its
host-side object exchange."""

import warnings

import pytest
import torch

import iris.heap
from iris.heap import transport


def test_the_registry_is_autos_order_and_every_row_names_its_class():
    assert [name for name, _ in transport.REGISTRY] == ["cuda-ipc", "cuda-vmm", "shm"]
    found = transport.available()
    assert list(found) == ["cuda-ipc", "cuda-vmm", "shm"] and all(cls.name == name for name, cls in found.items())
    assert transport.select("auto", torch.device("cpu")) is found["shm"]
    assert transport.select("auto", torch.device("cuda", 0)) is found["cuda-ipc"]
    for name in ("cuda-ipc", "cuda-vmm"):
        with pytest.raises(ValueError, match="serves cuda devices, not cpu"):
            transport.select(name, torch.device("cpu"))


def test_cuda_vmm_is_chosen_by_name_only():
    found = transport.available()
    assert transport.select("cuda-vmm", torch.device("cuda", 0)) is found["cuda-vmm"]
    assert found["cuda-vmm"].device_types == ("cuda",)


def _names_its_transport(rank, world_size):
    heap = iris.heap.init(1 << 20, device="cpu")
    t = heap.transport
    assert heap.transport_name == t.name == str(t) == "shm"
    assert t.mapped_size >= heap.size and t.device_types == ("cpu",)
    assert repr(t).startswith("<ShmTransport 'shm' on cpu")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert t == "shm" and not (t == "cuda-ipc")  # the old comparison, for one release
    assert [w.category for w in caught] == [DeprecationWarning] * 2
    assert "heap.transport_name" in str(caught[0].message)
    assert {t: 1}[t] == 1  # still hashable
    heap.close()


def test_a_heap_names_its_transport_beside_the_object(world):
    if torch.cuda.is_available():
        pytest.skip("the shared-memory transport is the CPU path")
    world.run(_names_its_transport, 1)


def _gathers_objects(rank, world_size):
    heap = iris.heap.init(1 << 20)
    assert heap.all_gather_object({"rank": rank}) == [{"rank": r} for r in range(world_size)]
    heap.close()
    with pytest.raises(iris.heap.HeapClosedError):
        heap.all_gather_object(rank)


@pytest.mark.parametrize("world_size", [1, 3])
def test_all_gather_object_is_every_ranks_object_in_rank_order(world, world_size):
    world.run(_gathers_objects, world_size)
