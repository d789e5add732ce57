"""Every tensor factory has torch's semantics: values, dtype inference, shapes, generators, and
torch's keywords (out, dtype, layout, device, requires_grad, pin_memory, memory_format) with
torch's results, or a clear error that allocates nothing."""

from dataclasses import dataclass

import _factories as F
import pytest
import torch
from _ranks import new_heap, on_ranks
from conftest import WORLD_SIZES

from iris.heap import NotOnHeapError


def _values_and_dtypes(rank, world_size):
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


test_factories_match_torch = on_ranks(_values_and_dtypes, [1, 2])
test_like_factories_and_as_symmetric = on_ranks(_like_and_copies, [1, 2])
test_every_dtype_and_edge_shapes = on_ranks(_dtypes_and_edge_shapes, WORLD_SIZES[:1])


# -- every factory x memory format x keyword, against the same torch call -----------------------
FORMATS = {F.FORMAT_NAMES[fmt]: fmt for fmt in F.FORMAT_NAMES}


def _plain_matches_torch(rank, world_size, name, format_name):
    heap, f, fmt = new_heap(), F.FACTORIES[name], FORMATS[format_name]
    for shape in F.SHAPES[fmt] if f.sized else [()]:
        for variant, make in F.variants(heap, f, shape, fmt):
            F.check(heap, f, shape, fmt, variant, make)


def _like_matches_torch(rank, world_size, name, format_name):
    heap, f, fmt = new_heap(), F.FACTORIES[name], FORMATS[format_name]
    tried = set()
    for input_name, x in F.like_inputs(heap).items():
        if fmt in F.RANK and x.dim() != F.RANK[fmt]:
            continue  # a format that does not fit the input's rank is a bad call (below)
        if f.random and not x.dtype.is_floating_point:
            continue  # torch's random kernels refuse integers: a bad call too
        for variant, make in F.variants(heap, f, tuple(x.shape), fmt, x):
            F.check(heap, f, tuple(x.shape), fmt, f"{variant}, input {input_name}", make, x)
        tried.add(input_name)
    return sorted(tried)


@pytest.mark.parametrize(
    "name, format_name",
    [(f.name, F.FORMAT_NAMES[fmt]) for f in F.PLAIN for fmt in F.formats(f)],
)
def test_factory_matches_torch_for_every_keyword(world, name, format_name):
    """Shape, strides, dtype, values (equally seeded), requires_grad, warnings and out= as torch's."""
    world.run(_plain_matches_torch, 1, name, format_name)


@pytest.mark.parametrize(
    "name, format_name",
    [(f.name, F.FORMAT_NAMES[fmt]) for f in F.LIKE for fmt in F.formats(f)],
)
def test_like_factory_matches_torch_for_every_input_and_keyword(world, name, format_name):
    """preserve_format keeps dense strides and otherwise picks torch.empty_like's, for every geometry."""
    (tried,) = world.run(_like_matches_torch, 1, name, format_name)
    assert len(tried) >= 2, tried


def _same_calls(rank, world_size):
    """Every factory with keywords, on every rank: the same blocks at the same offsets."""
    heap = new_heap()
    made = []
    for f in F.PLAIN:
        for fmt in F.formats(f):
            kw = {"requires_grad": True} if not f.integral else {}
            if f.random:
                kw["generator"] = torch.Generator(device=heap.device).manual_seed(rank)
            if fmt is not F.CONTIGUOUS:
                kw["memory_format"] = fmt
            made.append(F.call_heap(heap, f, F.SHAPES[fmt][0], kw))
    x = F.like_inputs(heap)["sliced-channels_last"]
    for f in F.LIKE:
        for fmt in (F.PRESERVE, F.CL):
            made.append(F.call_heap(heap, f, x.shape, {"memory_format": fmt, "device": heap.device}, x))
    out = heap.zeros(100)
    assert heap.arange(10, out=out) is out
    assert heap.randn(4, 5, out=out) is out and out.shape == (4, 5)
    freed = made.pop(1)  # empty(2, 3, 4, 5, memory_format=channels_last)
    where = heap.offset(freed)
    heap.free(freed)
    made.append(heap.rand(2, 3, 4, 5, memory_format=F.CL))
    assert heap.offset(made[-1]) == where, "the freed strided block is reused, on every rank alike"
    heap.check_symmetry()
    return [(heap.offset(t), t.shape, t.stride()) for t in made], heap.stats()


@pytest.mark.parametrize("world_size", [1, 2])
def test_factories_with_keywords_allocate_symmetrically(world, world_size):
    results = world.run(_same_calls, world_size)
    assert all(r == results[0] for r in results), "every rank gets the same blocks, shapes and strides"


# -- every bad keyword: a clear error naming the call, and nothing allocated ---------------------
S3, S4 = (2, 3, 4), (2, 3, 4, 5)
_DEFAULT = object()  # no input given: the *_like factories get one of the call's shape


def _other_device(heap) -> str:
    return "cpu" if heap.device.type == "cuda" else "cuda:0"


def _numel(f, shape) -> int:
    n = 1
    for d in F.result_shape(f, shape):
        n *= d
    return n


def _freed(heap, shape):
    t = heap.zeros(shape)
    heap.free(t)
    return t


@dataclass(frozen=True)
class Bad:
    error: type
    words: str
    #: (heap, another heap, factory) -> (size, keywords), or None where the factory takes no such
    #: keyword; the keyword "input" replaces a *_like factory's input.
    make: object


def _plain(make):
    return lambda h, o, f: None if f.like else make(h, o, f)


def _sized(make):
    return lambda h, o, f: None if f.like or not f.sized else make(h, o, f)


def _like(make):
    return lambda h, o, f: make(h, o, f) if f.like else None


BAD = {
    "device=meta": Bad(ValueError, "is not the heap's device", lambda h, o, f: (S3, {"device": "meta"})),
    "device of another type": Bad(
        ValueError, "is not the heap's device", lambda h, o, f: (S3, {"device": _other_device(h)})
    ),
    "device of another index": Bad(
        ValueError, "is not the heap's device", lambda h, o, f: (S3, {"device": torch.device("cuda", 7)})
    ),
    "device index of another": Bad(ValueError, "is not the heap's device", lambda h, o, f: (S3, {"device": 7})),
    "device not a device": Bad(TypeError, "device must be a torch.device", lambda h, o, f: (S3, {"device": 1.5})),
    "device=True": Bad(TypeError, "device must be a torch.device", lambda h, o, f: (S3, {"device": True})),
    "device naming none": Bad(ValueError, "names no torch device", lambda h, o, f: (S3, {"device": "gpu0"})),
    "layout=sparse_coo": Bad(ValueError, "strided (dense) tensors only", lambda h, o, f: (S3, {"layout": torch.sparse_coo})),
    "layout=sparse_csr": Bad(ValueError, "strided (dense) tensors only", lambda h, o, f: (S3, {"layout": torch.sparse_csr})),
    "layout not a layout": Bad(TypeError, "layout must be a torch.layout", lambda h, o, f: (S3, {"layout": "strided"})),
    "pin_memory=True": Bad(ValueError, "pin_memory=True", lambda h, o, f: (S3, {"pin_memory": True})),
    "pin_memory not a bool": Bad(TypeError, "pin_memory must be a bool", lambda h, o, f: (S3, {"pin_memory": "no"})),
    "requires_grad not a bool": Bad(TypeError, "requires_grad must be a bool", lambda h, o, f: (S3, {"requires_grad": 1})),
    "requires_grad of an integer dtype": Bad(
        TypeError, "floating point or complex", lambda h, o, f: (S3, {"requires_grad": True, "dtype": torch.int32})
    ),
    "requires_grad of an integer input": Bad(
        TypeError,
        "floating point or complex",
        _like(lambda h, o, f: (S3, {"requires_grad": True, "input": torch.ones(S3, dtype=torch.int64)})),
    ),
    "memory_format not a format": Bad(
        TypeError, "torch.memory_format", lambda h, o, f: (S3, {"memory_format": "channels_last"})
    ),
    "channels_last of 3-D": Bad(ValueError, "needs a 4-D tensor", lambda h, o, f: (S3, {"memory_format": F.CL})),
    "channels_last_3d of 4-D": Bad(ValueError, "needs a 5-D tensor", lambda h, o, f: (S4, {"memory_format": F.CL3D})),
    "preserve_format without an input": Bad(
        ValueError, "preserve_format", _plain(lambda h, o, f: (S3, {"memory_format": F.PRESERVE}))
    ),
    "out off the heap": Bad(
        NotOnHeapError,
        "live tensor of this heap",
        _plain(lambda h, o, f: (S3, {"out": torch.zeros(F.result_shape(f, S3), device=h.device)})),
    ),
    "out freed": Bad(
        NotOnHeapError, "live tensor of this heap", _plain(lambda h, o, f: (S3, {"out": _freed(h, F.result_shape(f, S3))}))
    ),
    "out of another heap": Bad(
        NotOnHeapError, "live tensor of this heap", _plain(lambda h, o, f: (S3, {"out": o.zeros(F.result_shape(f, S3))}))
    ),
    "out not a tensor": Bad(TypeError, "out must be a tensor", _plain(lambda h, o, f: (S3, {"out": [0.0] * 24}))),
    "out too small to grow": Bad(
        ValueError, "cannot grow beyond its block", _plain(lambda h, o, f: (S3, {"out": h.zeros(_numel(f, S3) - 1)}))
    ),
    "out view too small": Bad(
        ValueError, "cannot grow beyond its block", _plain(lambda h, o, f: (S3, {"out": h.zeros(_numel(f, S3) + 2)[3:]}))
    ),
    "out of another dtype": Bad(
        TypeError,
        "does not match out's dtype",
        _plain(lambda h, o, f: (S3, {"out": h.zeros(F.result_shape(f, S3), dtype=torch.float64), "dtype": torch.float32})),
    ),
    "out requiring grad": Bad(
        ValueError, "out requires grad", _plain(lambda h, o, f: (S3, {"out": h.zeros(F.result_shape(f, S3)).requires_grad_()}))
    ),
    "out and channels_last": Bad(
        ValueError, "cannot be combined with out=", _sized(lambda h, o, f: (S4, {"out": h.zeros(S4), "memory_format": F.CL}))
    ),
    "sparse input, layout=None": Bad(
        ValueError, "layout=torch.strided", _like(lambda h, o, f: (S3, {"input": torch.zeros(S3).to_sparse()}))
    ),
    "input not a tensor": Bad(TypeError, "takes a torch.Tensor", _like(lambda h, o, f: (S3, {"input": S3}))),
    "generator not a generator": Bad(
        TypeError, "generator must be a torch.Generator", lambda h, o, f: (S3, {"generator": 1234}) if f.random else None
    ),
}  # fmt: skip


def _state(t):
    """What a refused call must leave as it was: a tensor's geometry, grad and values."""
    if not isinstance(t, torch.Tensor):
        return t
    return tuple(t.shape), t.stride(), t.storage_offset(), t.requires_grad, t.detach().cpu().tolist()


def _bad_keyword(rank, world_size, case):
    bad = BAD[case]
    heap, other = new_heap(), new_heap()
    refused, alive = [], []  # the outs stay alive: one dropped meanwhile would change the stats
    for f in F.PLAIN + F.LIKE:
        made = bad.make(heap, other, f)
        if made is None:
            continue
        shape, kw = made
        x = kw.pop("input", _DEFAULT)
        if f.like and x is _DEFAULT:
            x = torch.ones(shape, device=heap.device)
        kept = _state(kw.get("out"))
        before = heap.stats()
        with pytest.raises(bad.error) as info:
            F.call_heap(heap, f, shape, kw, x)
        message = str(info.value)
        assert bad.words in message and f"{f.name}(" in message, (f.name, message)
        assert heap.stats() == before, f"{f.name}: a refused call allocates nothing ({before} -> {heap.stats()})"
        assert _state(kw.get("out")) == kept, f"{f.name}: a refused call leaves out as it was"
        refused.append(f.name)
        alive.append(kw)
    return refused


@pytest.mark.parametrize("case", list(BAD))
def test_bad_keyword_is_a_clear_error_and_allocates_nothing(world, case):
    (refused,) = world.run(_bad_keyword, 1, case)
    assert refused, f"{case} applies to some factory"


def _peer_view_as_out(rank, world_size):
    heap = new_heap()
    mine = heap.zeros(6)
    remote = heap.peer(mine, (rank + 1) % world_size)
    before = heap.stats()
    for call in (
        lambda: heap.zeros(6, out=remote),
        lambda: heap.rand(6, out=remote),
        lambda: heap.arange(6, out=remote),
    ):
        with pytest.raises(NotOnHeapError, match="live tensor of this heap"):
            call()
    assert heap.stats() == before
    heap.check_symmetry()


def test_a_peer_view_is_not_an_out(world):
    world.run(_peer_view_as_out, 2)
