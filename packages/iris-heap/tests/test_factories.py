"""Every tensor factory has torch's semantics: values, dtype inference, shapes, generators."""

import pytest
import torch
from _ranks import new_heap
from conftest import WORLD_SIZES


def _factories(rank, world_size):
    heap = new_heap()
    dev = heap.device
    g = lambda: torch.Generator(device="cpu").manual_seed(1234 + rank)  # noqa: E731
    cases = {
        "empty": (heap.empty(2, 3), torch.empty(2, 3)),
        "zeros": (heap.zeros(2, 3, dtype=torch.int32), torch.zeros(2, 3, dtype=torch.int32)),
        "zeros-tuple": (heap.zeros((4, 5)), torch.zeros((4, 5))),
        "zeros-list": (heap.zeros([4, 5]), torch.zeros([4, 5])),
        "zeros-size": (heap.zeros(torch.Size([3])), torch.zeros(torch.Size([3]))),
        "ones-bf16": (heap.ones(7, dtype=torch.bfloat16), torch.ones(7, dtype=torch.bfloat16)),
        "full-int": (heap.full((2, 2), 7), torch.full((2, 2), 7)),
        "full-float": (heap.full(3, 1.5), torch.full((3,), 1.5)),
        "full-bool": (heap.full((2,), True), torch.full((2,), True)),
        "full-dtype": (heap.full((2,), 3, dtype=torch.float16), torch.full((2,), 3, dtype=torch.float16)),
        "arange": (heap.arange(10), torch.arange(10)),
        "arange-float": (heap.arange(0, 1, 0.25), torch.arange(0, 1, 0.25)),
        "arange-dtype": (heap.arange(2, 9, 3, dtype=torch.float64), torch.arange(2, 9, 3, dtype=torch.float64)),
        "linspace": (heap.linspace(-1, 1, 9), torch.linspace(-1, 1, 9)),
        "linspace-dtype": (heap.linspace(0, 10, 5, dtype=torch.float64), torch.linspace(0, 10, 5, dtype=torch.float64)),
        "rand": (heap.rand(64, generator=g()), torch.rand(64, generator=g())),
        "randn": (heap.randn(8, 8, generator=g()), torch.randn(8, 8, generator=g())),
        "randn-f64": (heap.randn(5, generator=g(), dtype=torch.float64), torch.randn(5, generator=g(), dtype=torch.float64)),
        "randint": (heap.randint(0, 100, (6, 2), generator=g()), torch.randint(0, 100, (6, 2), generator=g())),
        "randint-high-size": (heap.randint(9, (4,), generator=g()), torch.randint(9, (4,), generator=g())),
        "randint-int32": (heap.randint(-5, 5, (9,), generator=g(), dtype=torch.int32),
                          torch.randint(-5, 5, (9,), generator=g(), dtype=torch.int32)),
        "uniform": (heap.uniform((3, 3), -2.0, 2.0, generator=g()),
                    torch.empty(3, 3).uniform_(-2.0, 2.0, generator=g())),
    }  # fmt: skip
    for name, (got, ref) in cases.items():
        assert got.device == dev, name
        assert heap.is_symmetric(got), name
        assert got.dtype == ref.dtype and got.shape == ref.shape, (name, got.dtype, got.shape)
        assert got.is_contiguous(), name
        if name != "empty":
            torch.testing.assert_close(got.cpu(), ref, rtol=0, atol=0, msg=name)
    # unseeded random factories still give the right dtype/shape and plausible values
    u = heap.uniform(1000, 3.0, 4.0)
    assert 3.0 <= u.min().item() and u.max().item() <= 4.0
    r = heap.randint(2, 4, (100,))
    assert set(r.unique().tolist()) <= {2, 3}


def _like_and_copies(rank, world_size):
    heap = new_heap()
    src = torch.arange(12, dtype=torch.float16).reshape(3, 4)
    for name, fn, ref in [
        ("empty_like", heap.empty_like, None),
        ("zeros_like", heap.zeros_like, torch.zeros_like(src)),
        ("ones_like", heap.ones_like, torch.ones_like(src)),
    ]:
        t = fn(src)
        assert t.shape == src.shape and t.dtype == src.dtype and heap.is_symmetric(t), name
        if ref is not None:
            assert torch.equal(t.cpu(), ref), name
    f = heap.full_like(src, 2.5)
    assert torch.equal(f.cpu(), torch.full_like(src, 2.5))
    c = heap.as_symmetric(src.t())  # non-contiguous input
    assert torch.equal(c.cpu(), src.t()) and c.is_contiguous() and heap.is_symmetric(c)


def _dtypes_and_edge_shapes(rank, world_size):
    heap = new_heap()
    for dtype in [torch.bool, torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64,
                  torch.float16, torch.bfloat16, torch.float32, torch.float64, torch.complex64]:  # fmt: skip
        t = heap.ones(5, 3, dtype=dtype)
        assert t.dtype == dtype and torch.equal(t.cpu(), torch.ones(5, 3, dtype=dtype)), dtype
        assert heap.offset(t) % 256 == 0
    scalar = heap.full((), 4.0)
    assert scalar.shape == () and scalar.item() == 4.0
    for shape in [(0,), (3, 0), (0, 0, 2)]:
        z = heap.zeros(shape)
        assert z.shape == shape and heap.is_symmetric(z)
    big = heap.zeros(1000, 37)
    assert big.shape == (1000, 37) and big.sum().item() == 0
    default = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    try:
        assert heap.zeros(2).dtype == torch.float64 and heap.randn(2).dtype == torch.float64
    finally:
        torch.set_default_dtype(default)


@pytest.mark.parametrize("world_size", [1, 2])
def test_factories_match_torch(world, world_size):
    world.run(_factories, world_size)


@pytest.mark.parametrize("world_size", [1, 2])
def test_like_factories_and_as_symmetric(world, world_size):
    world.run(_like_and_copies, world_size)


@pytest.mark.parametrize("world_size", WORLD_SIZES[:1])
def test_every_dtype_and_edge_shapes(world, world_size):
    world.run(_dtypes_and_edge_shapes, world_size)
