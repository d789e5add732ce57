"""The heap's factories as data: their arguments, their keywords, and the same call to torch.

``test_factories`` runs every factory x memory format x keyword through ``check`` (module-level,
so the spawned ranks import it). The reference is torch's own call on the heap's device:
``torch.<name>(...)``, or, for a memory format that torch's factory does not take (``zeros``,
``rand``, ...), the matching ``torch.<name>_like`` of ``torch.empty(size, memory_format=...)``,
which is what the heap documents those calls to equal.
"""

import warnings
from collections.abc import Callable
from dataclasses import dataclass

import torch

import iris.heap

CONTIGUOUS, PRESERVE = torch.contiguous_format, torch.preserve_format
CL, CL3D = torch.channels_last, torch.channels_last_3d
FORMAT_NAMES = {CONTIGUOUS: "contiguous", CL: "channels_last", CL3D: "channels_last_3d", PRESERVE: "preserve"}
RANK = {CL: 4, CL3D: 5}

#: The sizes each memory format is tried at: torch's strides for size-1 and empty dimensions
#: are the subtle part.
SHAPES = {
    CONTIGUOUS: [(), (7,), (2, 3, 4, 5), (3, 0, 2)],
    CL: [(2, 3, 4, 5), (1, 3, 1, 1), (2, 0, 3, 4)],
    CL3D: [(2, 3, 2, 4, 5), (1, 3, 1, 1, 1)],
}


@dataclass(frozen=True)
class Factory:
    name: str
    args: Callable  # size -> the positional arguments (after the input, for *_like)
    random: bool = False
    values: bool = True  # empty's values are not compared
    sized: bool = True  # arange and linspace make their own 1-D size
    other_dtype: torch.dtype = torch.float64  # a dtype torch accepts for it, not its default
    integral: bool = False  # its default dtype is int64 (requires_grad needs another)

    @property
    def like(self) -> bool:
        return self.name.endswith("_like")

    def __str__(self) -> str:
        return self.name


PLAIN = [
    Factory("empty", lambda s: (s,), values=False, other_dtype=torch.int16),
    Factory("zeros", lambda s: (s,), other_dtype=torch.int32),
    Factory("ones", lambda s: (s,), other_dtype=torch.bfloat16),
    Factory("full", lambda s: (s, 2.5), other_dtype=torch.int16),
    Factory("rand", lambda s: (s,), random=True),
    Factory("randn", lambda s: (s,), random=True),
    Factory("randint", lambda s: (3, 10, s), random=True, other_dtype=torch.int32, integral=True),
    Factory("uniform", lambda s: (s, -2.0, 3.0), random=True),
    Factory("arange", lambda s: (2, 11, 3), sized=False, integral=True),
    Factory("linspace", lambda s: (-1, 1, 7), sized=False),
]
LIKE = [
    Factory("empty_like", lambda s: (), values=False, other_dtype=torch.int16),
    Factory("zeros_like", lambda s: (), other_dtype=torch.int32),
    Factory("ones_like", lambda s: (), other_dtype=torch.bfloat16),
    Factory("full_like", lambda s: (2.5,), other_dtype=torch.int16),
    Factory("rand_like", lambda s: (), random=True),
    Factory("randn_like", lambda s: (), random=True),
]
FACTORIES = {f.name: f for f in PLAIN + LIKE}


def formats(f: Factory) -> list:
    if f.like:
        return [PRESERVE, CONTIGUOUS, CL, CL3D]
    return [CONTIGUOUS] if not f.sized else [CONTIGUOUS, CL, CL3D]


def result_shape(f: Factory, shape):
    return tuple(getattr(torch, f.name)(*f.args(shape)).shape) if not f.sized else tuple(shape)


def default_dtype(f: Factory) -> torch.dtype:
    return torch.int64 if f.integral else torch.get_default_dtype()


def like_inputs(heap) -> dict[str, torch.Tensor]:
    """Inputs of every kind of geometry torch's *_like tell apart."""
    dev = heap.device
    base = torch.arange(120, dtype=torch.float32, device=dev).reshape(2, 3, 4, 5)
    return {
        "contiguous": base,
        "channels_last": base.contiguous(memory_format=CL),
        "permuted": base[0].permute(2, 0, 1),  # dense, not contiguous: its strides are kept
        "sliced": base[..., ::2],  # not dense: contiguous strides
        "sliced-channels_last": base.contiguous(memory_format=CL)[..., ::2],  # not dense: the order is kept
        "expanded": torch.ones(1, 3, 1, 1, device=dev).expand(2, 3, 4, 5),  # overlapping
        "size-1-strides": torch.ones(3, device=dev).as_strided((3, 1), (1, 100)),  # kept as they are
        "empty": torch.ones(3, device=dev).as_strided((0, 3), (1, 5)),
        "0-d": torch.tensor(1.5, device=dev),
        "5-D channels_last_3d": torch.ones(2, 3, 2, 4, 5, device=dev).contiguous(memory_format=CL3D),
        "5-D permuted": torch.ones(2, 3, 2, 4, 5, device=dev).permute(0, 4, 1, 3, 2),
        "int32": base.to(torch.int32),
        "bfloat16 on the cpu": base.to("cpu", torch.bfloat16).permute(0, 2, 3, 1),
        "on the heap": heap.arange(24, dtype=torch.float64).reshape(2, 3, 4).transpose(0, 2),
        "sparse": base.cpu().to_sparse(),  # with layout=torch.strided: a dense result
    }


def _generator(device, seed: int = 1234) -> torch.Generator:
    return torch.Generator(device=device).manual_seed(seed)


def _twin(t: torch.Tensor, device=None) -> torch.Tensor:
    """A torch tensor off the heap with ``t``'s geometry: the same memory to resize into."""
    room = t.untyped_storage().nbytes() // t.element_size()
    base = torch.empty(room, dtype=t.dtype, device=device or t.device)
    return base.as_strided(t.shape, t.stride(), t.storage_offset())


def variants(heap, f: Factory, shape, fmt, x: torch.Tensor | None = None) -> list[tuple[str, Callable]]:
    """``(name, make)`` for every keyword (and spelling) ``f`` takes; ``make()`` gives fresh
    ``(heap keywords, torch keywords)``. ``x`` is the input of a *_like factory."""
    dev = heap.device
    dtype = default_dtype(f) if x is None else x.dtype
    floating = dtype.is_floating_point or dtype.is_complex
    other = f.other_dtype
    found = []

    def add(name, **kw):
        found.append((name, lambda: (dict(kw), dict(kw))))

    add("no keywords")
    add("dtype", dtype=other)
    add("requires_grad", requires_grad=True, **({} if floating else {"dtype": torch.float32}))
    add("requires_grad=False", requires_grad=False)
    add("layout", layout=torch.strided)
    add("pin_memory=False", pin_memory=False)
    add("None for defaults", layout=None, requires_grad=None, pin_memory=None)
    add("device", device=dev)
    add("device as str", device=str(dev))
    if dev.type == "cuda":
        add("device as index", device=dev.index)
        if torch.cuda.current_device() == dev.index:
            add("device 'cuda'", device="cuda")
    if f.like:
        if fmt is PRESERVE:
            add("memory_format=None", memory_format=None)
            add("layout=None", layout=None)
    elif fmt is CONTIGUOUS:
        add("memory_format", memory_format=CONTIGUOUS)
    if f.random:
        found.append(("generator", lambda: ({"generator": _generator(dev)}, {"generator": _generator(dev)})))
        found.append(("cpu generator", lambda: ({"generator": _generator("cpu")}, {"generator": _generator("cpu")})))
        found.append(
            (
                "generator and dtype",
                lambda: (
                    {"generator": _generator(dev), "dtype": other},
                    {"generator": _generator(dev), "dtype": other},
                ),
            )
        )
    if not f.like and fmt is CONTIGUOUS:
        found += _out_variants(heap, f, result_shape(f, shape))
    return found


def _out_variants(heap, f: Factory, shape) -> list[tuple[str, Callable]]:
    """``out=`` of every geometry torch resizes differently: kept, restrided, offset."""
    numel = 1
    for n in shape:
        numel *= n
    dtype = default_dtype(f)

    def out(make_out, generator=heap.device, **kw):
        def make():
            o = make_out()
            heap_kw, torch_kw = {"out": o, **kw}, {"out": _twin(o), **kw}
            if f.random:
                heap_kw["generator"], torch_kw["generator"] = _generator(generator), _generator(generator)
            return heap_kw, torch_kw

        return make

    found = [
        ("out", out(lambda: heap.empty(shape, dtype=dtype))),
        ("out of another size", out(lambda: heap.empty(numel + 5, dtype=dtype))),
        ("out with an offset", out(lambda: heap.empty(numel + 9, dtype=dtype)[4:])),
        ("out of out's dtype", out(lambda: heap.empty(shape, dtype=f.other_dtype))),
        ("out and its dtype", out(lambda: heap.empty(shape, dtype=f.other_dtype), dtype=f.other_dtype)),
        ("out and requires_grad", out(lambda: heap.empty(shape, dtype=torch.float32), requires_grad=True)),
    ]
    if f.random:  # drawn on the cpu, into out resized as torch resizes it (on the heap's device)
        found.append(("out and a cpu generator", out(lambda: heap.empty(numel + 9, dtype=dtype)[4:], "cpu")))
    if len(shape) >= 2:
        dims = tuple(reversed(range(len(shape))))
        found.append(("out with other strides", out(lambda: heap.empty(shape[::-1], dtype=dtype).permute(dims))))
    return found


def call_heap(heap, f: Factory, shape, kw, x=None):
    args = f.args(shape)
    return getattr(heap, f.name)(*((x,) + args if f.like else args), **kw)


def call_torch(f: Factory, shape, fmt, kw, device, x=None):
    """The same call to torch, on ``device``; drawn on the generator's device where it has one."""
    gen = kw.get("generator")
    if gen is not None and gen.device != torch.device(device):
        if "out" not in kw:
            return call_torch(f, shape, fmt, {**kw, "device": gen.device}, gen.device, x).to(device)
        out = kw["out"]  # drawn into a twin of out on the generator's device, resized there as out is here
        drawn = call_torch(f, shape, fmt, {**kw, "out": _twin(out, gen.device)}, gen.device, x)
        return out.resize_(drawn.shape).copy_(drawn)
    kw = dict(kw)
    if "out" not in kw:
        kw.setdefault("device", device)
    args = f.args(shape)
    if f.like:
        return getattr(torch, f.name)(x, *args, **kw)
    if f.name == "uniform":
        return _torch_uniform(shape, fmt, *args[1:], **kw)
    if fmt is CONTIGUOUS or f.name == "empty":
        extra = {} if fmt is CONTIGUOUS else {"memory_format": fmt}
        return getattr(torch, f.name)(*args, **kw, **extra)
    like_args = args[:2] if f.name == "randint" else args[1:]  # randint_like(x, low, high)
    dtype = kw.pop("dtype", None) or default_dtype(f)
    template = torch.empty(shape, memory_format=fmt, dtype=dtype, device=kw.pop("device"))
    return getattr(torch, f.name + "_like")(template, *like_args, **kw)


def _torch_uniform(shape, fmt, low, high, *, out=None, generator=None, requires_grad=False, device=None, **kw):
    if out is None:
        out = torch.empty(shape, memory_format=fmt, device=device, **kw)
    elif kw.get("dtype") not in (None, out.dtype):
        raise TypeError("dtype does not match out")
    out.resize_(shape).uniform_(low, high, generator=generator)
    return out.requires_grad_(True) if requires_grad else out


def check(heap, f: Factory, shape, fmt, name, make, x=None) -> None:
    """The heap's call and torch's agree: geometry, dtype, values, grad, warnings; the block spans
    exactly the strided extent, and ``out=`` allocates nothing and comes back."""
    what = f"{f}{list(shape)} {FORMAT_NAMES[fmt]}, {name}" + ("" if x is None else f", input {list(x.shape)}")
    heap_kw, torch_kw = make()
    if not f.like:  # call_torch passes the format as torch takes it
        torch_kw.pop("memory_format", None)
        if fmt is not CONTIGUOUS:
            heap_kw["memory_format"] = fmt
    elif fmt is not PRESERVE:
        heap_kw["memory_format"] = torch_kw["memory_format"] = fmt
    if x is not None and x.layout != torch.strided:
        heap_kw["layout"] = torch_kw["layout"] = torch.strided
    used = heap.stats().used
    with warnings.catch_warnings(record=True) as heap_warnings:
        warnings.simplefilter("always")
        torch.manual_seed(99)  # the default generators, for the calls without one
        got = call_heap(heap, f, shape, heap_kw, x)
    with warnings.catch_warnings(record=True) as torch_warnings:
        warnings.simplefilter("always")
        torch.manual_seed(99)
        ref = call_torch(f, shape, fmt, torch_kw, heap.device, x)
    assert [str(w.message) for w in heap_warnings] == [str(w.message) for w in torch_warnings], what
    assert got.device == torch.device(heap.device) and ref.device == got.device, what
    assert got.shape == ref.shape, (what, got.shape, ref.shape)
    assert got.stride() == ref.stride(), (what, got.stride(), ref.stride())
    assert got.storage_offset() == ref.storage_offset(), what
    assert got.dtype == ref.dtype, (what, got.dtype, ref.dtype)
    assert got.requires_grad == ref.requires_grad and got.is_leaf, what
    for mf in (CONTIGUOUS, CL, CL3D):
        assert got.is_contiguous(memory_format=mf) == ref.is_contiguous(memory_format=mf), (what, mf)
    assert heap.is_symmetric(got), what
    if f.values:
        torch.testing.assert_close(got.detach(), ref.detach(), rtol=0, atol=0, equal_nan=True, msg=what)
    if "out" in heap_kw:
        assert got is heap_kw["out"], f"{what}: out= returns out"
        assert heap.stats().used == used, f"{what}: out= allocates nothing"
    else:
        spans = got.storage_offset() + _extent(got)
        nbytes = max(spans * got.element_size(), got.element_size())
        block = -(-nbytes // iris.heap.ALIGNMENT) * iris.heap.ALIGNMENT
        assert heap.stats().used - used == block, f"{what}: the block spans the strided extent ({nbytes} bytes)"
    heap.free(got)


def _extent(t: torch.Tensor) -> int:
    if t.numel() == 0:
        return 0
    return 1 + sum((n - 1) * s for n, s in zip(t.shape, t.stride()))
