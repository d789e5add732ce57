"""Torch's tensor factories, placed on the heap: torch's signatures, keywords and results.

Every factory computes its values exactly as the torch function of the same name does (same
dtype inference, same generator stream, same strides: the in-place fill torch applies to its new
tensor, applied to a heap block) and places them on the heap, so
``heap.randn(64, generator=g)`` equals ``torch.randn(64, generator=g2)`` for equally seeded
generators. The keywords are torch's, with what a heap can honour:

- ``dtype``: as torch (``None`` infers it, or takes ``out``'s); ``TypeError`` for dtypes the heap
  cannot hold.
- ``layout``: ``torch.strided`` only (``None`` means it; for ``*_like``, ``None`` means the input's
  layout, so a sparse input needs ``layout=torch.strided``). Anything else is a ``ValueError``.
- ``device``: only the heap's device, in any spelling torch accepts (``torch.device``, ``"cuda:1"``,
  ``1`` for a CUDA index, ``"cuda"`` for the current CUDA device). ``None`` is the heap's device,
  also for ``*_like`` of a tensor elsewhere. Another device is a ``ValueError``.
- ``requires_grad``: as torch: the result is a leaf that requires grad; a dtype that is neither
  floating point nor complex is a ``TypeError`` (torch refuses it too).
- ``pin_memory``: ``False`` only. Heap tensors live in the heap's own memory (device memory, or
  shared memory on CPU ranks), which the heap cannot page-lock: ``True`` is a ``ValueError``.
- ``memory_format``: ``torch.contiguous_format``, ``torch.channels_last`` (4-D) or
  ``torch.channels_last_3d`` (5-D), with torch's strides; ``*_like`` also take
  ``torch.preserve_format`` (their default), which keeps the input's strides when it is
  non-overlapping and dense and otherwise picks the strides ``torch.empty_like`` picks. Factories
  that torch gives no ``memory_format`` (``zeros``, ``rand``, ...) fill the strided tensor as the
  matching ``*_like`` does: ``heap.rand(s, memory_format=f, generator=g)`` equals
  ``torch.rand_like(torch.empty(s, memory_format=f), generator=g)``. A format that does not fit
  the rank is a ``ValueError``. The block spans the tensor's strided extent.
- ``out`` (not for ``*_like``, as in torch): a live tensor of this heap, else ``NotOnHeapError``.
  Torch's rules hold: ``dtype`` must match ``out``'s (``TypeError``); an ``out`` that requires grad
  is refused; ``out`` is resized as torch resizes it (the same shape keeps its strides, another
  shape makes it contiguous). A heap tensor cannot grow beyond its block, so a result that would
  need more memory than ``out`` was allocated with is a ``ValueError`` (where torch would
  reallocate); with ``out``, ``memory_format`` must stay ``contiguous_format`` (torch refuses
  the combination too). Nothing is allocated; ``out`` is returned.
- ``generator``: a ``torch.Generator`` on any device; values are drawn on the generator's device,
  as torch draws them there, and copied to the heap.

Bad arguments fail before anything is allocated where they can be checked up front (sizes,
dtypes, keywords, the tensor arguments), and otherwise give their block back: torch's own
complaint (a step of zero, a dtype its kernel lacks) comes out as a ``TypeError`` or
``ValueError`` that names the heap call, never as a bare torch error with a block left behind.
"""

from __future__ import annotations

import operator
import reprlib
from collections.abc import Callable
from typing import NamedTuple

import torch

from .errors import NotOnHeapError

__all__ = ["DTYPES", "TensorFactories", "normalize_size", "check_dtype", "contiguous_strides", "extent"]

#: Every dtype a heap tensor may have, in a fixed order: layers above number dtypes by their
#: position here (the collectives' call descriptions), so a new dtype goes at the end.
DTYPES: tuple[torch.dtype, ...] = tuple(
    getattr(torch, name)
    for name in (
        "bool", "uint8", "int8", "int16", "int32", "int64", "uint16", "uint32", "uint64",
        "float16", "bfloat16", "float32", "float64", "complex64", "complex128",
        "float8_e4m3fn", "float8_e5m2", "float8_e4m3fnuz", "float8_e5m2fnuz",
    )
    if hasattr(torch, name)
)  # fmt: skip
_SUPPORTED = frozenset(DTYPES)

#: The rank each memory format other than contiguous_format needs (torch's rule).
_FORMAT_RANK = {torch.channels_last: 4, torch.channels_last_3d: 5}


def check_dtype(dtype) -> torch.dtype:
    """``dtype`` itself, or torch's default float dtype for ``None``; ``TypeError`` if unsupported."""
    if isinstance(dtype, torch.dtype) and dtype in _SUPPORTED:  # the common case first: a hot path
        return dtype
    if dtype is None:
        return torch.get_default_dtype()
    if not isinstance(dtype, torch.dtype):
        raise TypeError(f"dtype must be a torch.dtype, got {dtype!r} ({type(dtype).__name__})")
    if dtype not in _SUPPORTED:
        names = ", ".join(sorted(str(d).removeprefix("torch.") for d in _SUPPORTED))
        raise TypeError(f"the heap cannot hold {dtype} tensors; supported dtypes: {names}")
    return dtype


def normalize_size(size) -> tuple[int, ...]:
    """Torch's size conventions: ``f(2, 3)``, ``f((2, 3))``, ``f([2, 3])`` or ``f(torch.Size(...))``."""
    if len(size) == 1:
        d = size[0]
        if type(d) is int and d >= 0:  # the common case first: allocation is a hot path
            return (d,)
        if isinstance(d, (tuple, list, torch.Size)):
            size = d
    dims = []
    for d in size:
        try:
            if isinstance(d, bool):
                raise TypeError
            d = operator.index(d)  # ints, numpy ints, one-element integer tensors
        except TypeError:
            raise TypeError(
                f"size must be a sequence of non-negative integers, got {tuple(size)!r} ({type(d).__name__} in it)"
            ) from None
        if d < 0:
            raise ValueError(f"size must be non-negative, got {tuple(size)!r}")
        dims.append(d)
    return tuple(dims)


def contiguous_strides(shape: tuple[int, ...]) -> tuple[int, ...]:
    """The strides torch gives a contiguous tensor of ``shape`` (a dimension of 0 counts as 1)."""
    strides, step = [], 1
    for n in reversed(shape):
        strides.append(step)
        step *= max(n, 1)
    return tuple(reversed(strides))


def extent(shape: tuple[int, ...], strides: tuple[int, ...]) -> int:
    """How many elements a tensor of ``shape`` and ``strides`` spans from its first (0 when empty)."""
    if 0 in shape:
        return 0
    return 1 + sum((n - 1) * s for n, s in zip(shape, strides))


_DEFAULTS = (None, False, torch.strided, torch.contiguous_format, torch.preserve_format)


def _show(value) -> str:
    if isinstance(value, torch.Tensor):  # its kind, not its values (printing them may copy from the device)
        return f"<{str(value.dtype).removeprefix('torch.')}{list(value.shape)} on {value.device}>"
    return reprlib.repr(value)


class _Keywords(NamedTuple):
    """The keywords every factory takes, as the caller passed them (see the module's docstring)."""

    out: torch.Tensor | None
    dtype: torch.dtype | None
    layout: torch.layout | None
    device: torch.device | str | int | None
    requires_grad: bool | None
    pin_memory: bool | None
    memory_format: torch.memory_format | None


class _Call:
    """How a heap call looked, for error messages: formatted only when a message needs it."""

    __slots__ = ("name", "args", "keywords")

    def __init__(self, name: str, args: tuple, keywords: _Keywords | None = None):
        self.name, self.args, self.keywords = name, args, keywords

    def __str__(self) -> str:  # long arguments abbreviated, keywords left at their defaults left out
        shown = [_show(a) for a in self.args]
        if self.keywords is not None:
            shown += [
                f"{k}={_show(v)}" for k, v in self.keywords._asdict().items() if not any(v is d for d in _DEFAULTS)
            ]
        return f"heap.{self.name}({', '.join(shown)})"


def _refused(call: _Call, name: str, e: Exception) -> Exception:
    """torch's complaint about a factory's arguments as the heap's ``TypeError`` or ``ValueError``.

    Running out of memory is not about the arguments: it passes through as it is.
    """
    if isinstance(e, (MemoryError, torch.cuda.OutOfMemoryError)):
        return e
    kind = TypeError if isinstance(e, (TypeError, NotImplementedError)) else ValueError
    reason = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
    return kind(f"{call}: torch.{name} refuses these arguments ({reason}); pass arguments that torch.{name} accepts")


def _torch(call: _Call, name: str, compute: Callable):
    """``compute()``, with torch's complaint about the arguments turned into the heap's kind of error."""
    try:
        return compute()
    except Exception as e:  # noqa: BLE001 - translated (or passed through) by _refused
        raise _refused(call, name, e) from None


def _tensor(t, what: str) -> torch.Tensor:
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"{what}() takes a torch.Tensor, got {type(t).__name__}")
    return t


def _check_layout(call: _Call, layout) -> None:
    if layout is None or layout is torch.strided:
        return
    if not isinstance(layout, torch.layout):
        raise TypeError(f"{call}: layout must be a torch.layout, got {layout!r} ({type(layout).__name__})")
    raise ValueError(
        f"{call}: the heap holds strided (dense) tensors only, got layout={layout}; pass layout=torch.strided "
        "(or leave it out) and convert a copy off the heap (e.g. with .to_sparse())"
    )


def _check_flag(call: _Call, name: str, value) -> bool:
    if value is None or isinstance(value, bool):
        return bool(value)
    raise TypeError(f"{call}: {name} must be a bool, got {value!r} ({type(value).__name__})")


def _check_grad(call: _Call, requires_grad: bool, dtype: torch.dtype) -> None:
    if requires_grad and not (dtype.is_floating_point or dtype.is_complex):
        raise TypeError(
            f"{call}: requires_grad=True needs a floating point or complex dtype, got {dtype} (torch: Only Tensors "
            "of floating point and complex dtype can require gradients); pass a float dtype or requires_grad=False"
        )


def _check_format(call: _Call, memory_format) -> None:
    if not isinstance(memory_format, torch.memory_format):
        raise TypeError(
            f"{call}: memory_format must be a torch.memory_format, got {memory_format!r} "
            f"({type(memory_format).__name__})"
        )


def _format_strides(call: _Call, shape: tuple[int, ...], memory_format) -> tuple[int, ...] | None:
    """torch's strides for ``shape`` in ``memory_format``; ``None`` for contiguous (the default path)."""
    if memory_format is None or memory_format is torch.contiguous_format:
        return None
    _check_format(call, memory_format)
    rank = _FORMAT_RANK.get(memory_format)
    if rank is None:  # preserve_format: no input to preserve
        raise ValueError(
            f"{call}: memory_format=torch.preserve_format keeps an input tensor's strides, and this factory takes "
            "no input (torch.empty refuses it too); it is the default of the *_like factories. Pass "
            "torch.contiguous_format, torch.channels_last (4-D) or torch.channels_last_3d (5-D)"
        )
    if len(shape) != rank:
        raise ValueError(
            f"{call}: memory_format={memory_format} needs a {rank}-D tensor, got {len(shape)}-D {list(shape)} "
            f"(torch: required rank {rank} tensor to use {memory_format} format); channels_last is for 4-D "
            "tensors, channels_last_3d for 5-D ones, torch.contiguous_format for any"
        )
    meta = _torch(call, "empty", lambda: torch.empty(shape, memory_format=memory_format, device="meta"))
    return tuple(meta.stride())


def _like_strides(call: _Call, t: torch.Tensor, memory_format) -> tuple[int, ...] | None:
    """The strides ``torch.empty_like(t, memory_format=...)`` gives; ``None`` for contiguous ones."""
    shape = tuple(t.shape)
    if memory_format is not None and memory_format is not torch.preserve_format:
        return _format_strides(call, shape, memory_format)
    if t.layout != torch.strided:  # torch suggests contiguous strides for other layouts
        return None
    if t.is_contiguous():  # non-overlapping and dense: torch keeps the strides, odd ones of size-1 dims too
        strides = tuple(t.stride())
    else:  # ask torch itself, on the meta device: it depends on sizes and strides alone
        meta = torch.empty_strided(shape, t.stride(), device="meta")
        strides = tuple(torch.empty_like(meta).stride())
    return None if strides == contiguous_strides(shape) else strides


class TensorFactories:
    """Mixin: the torch factory functions, placed on the heap through ``_allocate``."""

    device: torch.device
    rank: int

    def _allocate(self, shape: tuple[int, ...], dtype: torch.dtype, stride: tuple[int, ...] | None = None):
        raise NotImplementedError

    def free(self, t: torch.Tensor) -> None:
        raise NotImplementedError

    def is_symmetric(self, t: torch.Tensor) -> bool:
        raise NotImplementedError

    # -- the keywords, checked before anything is allocated -----------------------------------
    def _check_device(self, call: _Call, device) -> None:
        """``device`` must name the heap's device, in any of torch's spellings."""
        if device is None:
            return
        if isinstance(device, bool) or not isinstance(device, (str, int, torch.device)):
            raise TypeError(
                f"{call}: device must be a torch.device, a str such as {str(self.device)!r} or a CUDA device index, "
                f"got {device!r} ({type(device).__name__})"
            )
        mine, why = self.device, ""
        if isinstance(device, int):  # torch reads an int as an index of the accelerator (here: CUDA)
            if mine.type == "cuda" and device == mine.index:
                return
        else:
            try:
                asked = torch.device(device)
            except RuntimeError as e:  # torch's words for a string it cannot parse
                raise ValueError(
                    f"{call}: device={device!r} names no torch device ({e}); pass device={str(mine)!r} or leave it out"
                ) from None
            if asked.type == mine.type:
                if asked.type != "cuda":  # "cpu:0" is the CPU too
                    return
                index = asked.index
                if index is None:  # torch reads "cuda" as the current CUDA device
                    index = torch.cuda.current_device()
                    why = f" ('cuda' is the current device, cuda:{index}; torch.cuda.set_device({mine.index}) makes it the heap's)"
                if index == mine.index:
                    return
        raise ValueError(
            f"{call}: device={device!r} is not the heap's device ({mine}){why}; heap tensors live on the heap's "
            f"device: pass device={str(mine)!r} or leave it out, and copy the result with .to() where it is needed"
        )

    def _prepare(self, call: _Call, name: str, kw: _Keywords, infer: Callable | None) -> tuple[torch.dtype, bool]:
        """Check the keywords but ``memory_format``; the result's dtype and whether it requires grad.

        The dtype is the one asked for, else ``out``'s, else ``infer()`` (torch's inference, or
        torch's default float dtype for ``None``). ``name`` is the torch function computing the values.
        """
        _check_layout(call, kw.layout)
        self._check_device(call, kw.device)
        requires_grad = _check_flag(call, "requires_grad", kw.requires_grad)
        if _check_flag(call, "pin_memory", kw.pin_memory):
            raise ValueError(
                f"{call}: pin_memory=True asks for page-locked host memory, but heap tensors live in the heap's own "
                f"memory (on {self.device}), which the heap cannot pin; leave pin_memory out, or pin a copy off the "
                "heap (t.cpu().pin_memory())"
            )
        dtype = None if kw.dtype is None else check_dtype(kw.dtype)
        if kw.out is not None:
            dtype = self._check_out(call, name, kw.out, dtype)
        elif dtype is None:
            dtype = check_dtype(infer() if infer is not None else None)
        _check_grad(call, requires_grad, dtype)
        return dtype, requires_grad

    def _check_out(self, call: _Call, name: str, out, dtype) -> torch.dtype:
        """``out`` must be a live tensor of this heap that torch's ``name(out=...)`` accepts; its dtype."""
        if not isinstance(out, torch.Tensor):
            raise TypeError(f"{call}: out must be a tensor of this heap, got {type(out).__name__}")
        if not self.is_symmetric(out):
            raise NotOnHeapError(
                f"{call}: out must be a live tensor of this heap (rank {self.rank}, {self.device}), got a "
                f"{out.dtype}{list(out.shape)} tensor on {out.device} that is not (off the heap, freed, of another "
                "heap, or a peer's copy); allocate out with this heap's factories, or leave out= out"
            )
        if out.requires_grad:
            raise ValueError(
                f"{call}: out requires grad, and torch.{name}(out=...) does not support automatic differentiation "
                "(torch refuses it too); pass out.detach() (the same heap memory) or leave out= out"
            )
        if dtype is not None and dtype != out.dtype:
            raise TypeError(
                f"{call}: dtype={dtype} does not match out's dtype ({out.dtype}), which torch refuses too; leave "
                f"dtype out (the result takes out's) or pass an out of dtype {dtype}"
            )
        return check_dtype(out.dtype)

    @staticmethod
    def _check_room(call: _Call, out: torch.Tensor, shape: tuple[int, ...]) -> None:
        """``out``, resized to ``shape`` as torch resizes it, must fit in the memory it was allocated with."""
        strides = tuple(out.stride()) if tuple(out.shape) == shape else contiguous_strides(shape)
        need = out.storage_offset() + extent(shape, strides)
        room = out.untyped_storage().nbytes() // out.element_size()
        if need > room:
            raise ValueError(
                f"{call}: the result ({list(shape)}) needs {need} {out.dtype} elements of out's heap memory from its "
                f"start, and out was allocated with {room}: a heap tensor cannot grow beyond its block (torch would "
                f"reallocate out). Pass an out with room for {list(shape)}, or leave out= out to allocate a new block"
            )

    @staticmethod
    def _strides(call: _Call, shape: tuple[int, ...], kw: _Keywords) -> tuple[int, ...] | None:
        """torch's strides for ``kw.memory_format`` (``None``: contiguous), which ``out`` excludes."""
        strides = _format_strides(call, shape, kw.memory_format)
        if strides is not None and kw.out is not None:
            raise ValueError(
                f"{call}: memory_format={kw.memory_format} cannot be combined with out= (torch: 'memory_format' "
                "argument is incompatible with 'out' tensor argument); out keeps its strides when its shape matches"
            )
        return strides

    # -- placing a result ---------------------------------------------------------------------
    def _make(
        self, call, name, shape, dtype, write, *, out=None, stride=None, requires_grad=False, resizes=False
    ) -> torch.Tensor:
        """A tensor of ``shape`` and ``dtype`` holding ``write(target)``: ``out``, or a new block.

        The block is taken first, so a request larger than the heap is a ``HeapExhaustedError``
        before torch computes anything; if torch then refuses the arguments, the block goes back.
        ``write`` fills a tensor of the final shape and strides in place, as torch's function
        fills its new tensor (``None`` writes nothing); ``out`` is first resized as torch's ``out=``
        functions resize it, unless ``write`` is that function (``resizes``).
        """
        if out is not None:
            self._check_room(call, out, shape)

            def fill():
                if not resizes and tuple(out.shape) != shape:
                    out.resize_(shape)
                if write is not None:
                    write(out)

            _torch(call, name, fill)
            target = out
        else:
            target = self._allocate(shape, dtype, stride)
            if write is not None:
                try:
                    write(target)
                except Exception as e:  # noqa: BLE001 - translated (or passed through) by _refused
                    self.free(target)
                    raise _refused(call, name, e) from None
        if requires_grad:
            target.requires_grad_(True)
        return target

    def _source_device(self, name: str, generator) -> torch.device:
        """Where ``name``'s values are drawn: the generator's device, else the heap's."""
        if generator is None:
            return self.device
        if not isinstance(generator, torch.Generator):
            raise TypeError(
                f"heap.{name}(generator=...): generator must be a torch.Generator or None, got {generator!r} "
                f"({type(generator).__name__})"
            )
        return generator.device

    def _drawn(self, name: str, generator, draw: Callable) -> Callable:
        """A ``write`` that fills its target with ``draw(t)`` as torch does on the generator's device."""
        device = self._source_device(name, generator)
        if device == self.device:
            return draw

        def write(target):  # draw where the generator lives, in the target's strides, then copy
            drawn = torch.empty_strided(target.shape, target.stride(), dtype=target.dtype, device=device)
            draw(drawn)
            target.copy_(drawn)

        return write

    def _sized(self, name, args, shape, write, kw: _Keywords, infer=None, torch_name=None) -> torch.Tensor:
        """A factory that takes a size: check every keyword, then place ``write``'s result.

        ``infer(call)`` is torch's dtype when none is asked for; ``torch_name`` is the torch
        function that computes the values (``name`` by default), named when torch refuses.
        """
        call = _Call(name, args, kw)
        torch_name = torch_name or name
        dtype, requires_grad = self._prepare(call, torch_name, kw, infer and (lambda: infer(call)))
        stride = self._strides(call, shape, kw)
        return self._make(call, torch_name, shape, dtype, write, out=kw.out, stride=stride, requires_grad=requires_grad)

    # -- uninitialised and constant ----------------------------------------------------------
    def empty(self, *size, out=None, dtype=None, layout=torch.strided, device=None, requires_grad=False,
              pin_memory=False, memory_format=torch.contiguous_format) -> torch.Tensor:  # fmt: skip
        """``torch.empty`` on the heap."""
        if (
            out is None
            and device is None
            and layout is torch.strided
            and requires_grad is False
            and pin_memory is False
            and memory_format is torch.contiguous_format
        ):  # the common case first: allocation is a hot path
            return self._allocate(normalize_size(size), check_dtype(dtype))
        kw = _Keywords(out, dtype, layout, device, requires_grad, pin_memory, memory_format)
        return self._sized("empty", size, normalize_size(size), None, kw)

    def zeros(self, *size, out=None, dtype=None, layout=torch.strided, device=None, requires_grad=False,
              pin_memory=False, memory_format=torch.contiguous_format) -> torch.Tensor:  # fmt: skip
        """``torch.zeros`` on the heap."""
        shape = normalize_size(size)
        kw = _Keywords(out, dtype, layout, device, requires_grad, pin_memory, memory_format)
        return self._sized("zeros", size, shape, lambda t: t.zero_(), kw)

    def ones(self, *size, out=None, dtype=None, layout=torch.strided, device=None, requires_grad=False,
             pin_memory=False, memory_format=torch.contiguous_format) -> torch.Tensor:  # fmt: skip
        """``torch.ones`` on the heap."""
        shape = normalize_size(size)
        kw = _Keywords(out, dtype, layout, device, requires_grad, pin_memory, memory_format)
        return self._sized("ones", size, shape, lambda t: t.fill_(1), kw)

    def full(self, size, fill_value, *, out=None, dtype=None, layout=torch.strided, device=None,
             requires_grad=False, pin_memory=False, memory_format=torch.contiguous_format) -> torch.Tensor:  # fmt: skip
        """``torch.full`` on the heap (``size`` may also be a single int)."""
        shape = normalize_size((size,))
        kw = _Keywords(out, dtype, layout, device, requires_grad, pin_memory, memory_format)
        # torch infers bool/int64/default-float/complex from the value
        infer = lambda call: _torch(call, "full", lambda: torch.full((), fill_value).dtype)  # noqa: E731
        return self._sized("full", (size, fill_value), shape, lambda t: t.fill_(fill_value), kw, infer)

    # -- ranges ---------------------------------------------------------------------------
    def _range(self, name: str, args: tuple, make: Callable, kw: _Keywords) -> torch.Tensor:
        """``make(**keywords)`` on the heap: its dtype (when none is asked for) and its shape come
        from the meta device, where nothing is computed; torch's ``out=`` function writes it."""
        call = _Call(name, args, kw)
        meta = []  # torch's result on the meta device, once made

        def infer():
            meta.append(_torch(call, name, lambda: make(device="meta")))
            return meta[0].dtype

        dtype, requires_grad = self._prepare(call, name, kw, infer)
        if not meta:  # a dtype asked for, or out's: torch sizes the result by it
            meta.append(_torch(call, name, lambda: make(dtype=dtype, device="meta")))
        shape = tuple(meta[0].shape)
        stride = self._strides(call, shape, kw)
        return self._make(
            call, name, shape, dtype, lambda t: make(out=t), out=kw.out, stride=stride, requires_grad=requires_grad,
            resizes=True,
        )  # fmt: skip

    def arange(self, start=0, end=None, step=1, *, out=None, dtype=None, layout=torch.strided, device=None,
               requires_grad=False, pin_memory=False, memory_format=torch.contiguous_format) -> torch.Tensor:  # fmt: skip
        """``torch.arange`` on the heap: ``arange(end)`` or ``arange(start, end, step=1)``."""
        if end is None:
            start, end = 0, start
        kw = _Keywords(out, dtype, layout, device, requires_grad, pin_memory, memory_format)
        return self._range("arange", (start, end, step), lambda **k: torch.arange(start, end, step, **k), kw)

    def linspace(self, start, end, steps, *, out=None, dtype=None, layout=torch.strided, device=None,
                 requires_grad=False, pin_memory=False, memory_format=torch.contiguous_format) -> torch.Tensor:  # fmt: skip
        """``torch.linspace`` on the heap."""
        kw = _Keywords(out, dtype, layout, device, requires_grad, pin_memory, memory_format)
        return self._range("linspace", (start, end, steps), lambda **k: torch.linspace(start, end, steps, **k), kw)

    # -- random -----------------------------------------------------------------------------
    def _random(self, name, args, size, generator, draw, kw: _Keywords, **sized) -> torch.Tensor:
        """A random factory of ``size`` (torch's conventions): ``draw(t)`` fills ``t`` from ``generator``
        as ``torch.<name>`` does; ``sized`` is ``_sized``'s ``infer`` and ``torch_name``."""
        shape = normalize_size(size)
        return self._sized(name, args, shape, self._drawn(name, generator, draw), kw, **sized)

    def rand(self, *size, generator=None, out=None, dtype=None, layout=torch.strided, device=None,
             requires_grad=False, pin_memory=False, memory_format=torch.contiguous_format) -> torch.Tensor:  # fmt: skip
        """``torch.rand`` on the heap."""
        kw = _Keywords(out, dtype, layout, device, requires_grad, pin_memory, memory_format)
        return self._random("rand", size, size, generator, lambda t: t.uniform_(0, 1, generator=generator), kw)

    def randn(self, *size, generator=None, out=None, dtype=None, layout=torch.strided, device=None,
              requires_grad=False, pin_memory=False, memory_format=torch.contiguous_format) -> torch.Tensor:  # fmt: skip
        """``torch.randn`` on the heap."""
        kw = _Keywords(out, dtype, layout, device, requires_grad, pin_memory, memory_format)
        return self._random("randn", size, size, generator, lambda t: t.normal_(0, 1, generator=generator), kw)

    def randint(self, low=0, high=None, size=None, *, generator=None, out=None, dtype=None, layout=torch.strided,
                device=None, requires_grad=False, pin_memory=False,
                memory_format=torch.contiguous_format) -> torch.Tensor:  # fmt: skip
        """``torch.randint`` on the heap: ``randint(low, high, size)`` or ``randint(high, size)``; int64 by default."""
        if size is None:  # torch.randint(high, size)
            if high is None:
                raise TypeError("randint() needs high and size: randint(low, high, size) or randint(high, size)")
            low, high, size = 0, low, high
        elif high is None:  # torch.randint(high, size=...)
            low, high = 0, low
        kw = _Keywords(out, dtype, layout, device, requires_grad, pin_memory, memory_format)
        draw = lambda t: t.random_(low, high, generator=generator)  # noqa: E731
        return self._random("randint", (low, high, size), (size,), generator, draw, kw, infer=lambda call: torch.int64)

    def uniform(self, size, low=0.0, high=1.0, *, generator=None, out=None, dtype=None, layout=torch.strided,
                device=None, requires_grad=False, pin_memory=False,
                memory_format=torch.contiguous_format) -> torch.Tensor:  # fmt: skip
        """``torch.empty(size, ...).uniform_(low, high, generator=generator)`` on the heap."""
        kw = _Keywords(out, dtype, layout, device, requires_grad, pin_memory, memory_format)
        draw = lambda t: t.uniform_(low, high, generator=generator)  # noqa: E731
        return self._random("uniform", (size, low, high), (size,), generator, draw, kw, torch_name="Tensor.uniform_")

    # -- like ----------------------------------------------------------------------------------
    def _like(self, name: str, t, args: tuple, torch_name: str, write, kw: _Keywords) -> torch.Tensor:
        """``torch.<name>`` on the heap: ``t``'s shape, and its dtype and strides unless others are asked.

        ``write`` fills the result in place as ``torch.<torch_name>`` fills its new tensor.
        """
        t = _tensor(t, name)
        call = _Call(name, (t, *args), kw)
        if kw.layout is None and t.layout != torch.strided:
            raise ValueError(
                f"{call}: the input is a {t.layout} tensor and layout=None keeps its layout, but the heap holds "
                "strided (dense) tensors only; pass layout=torch.strided for a dense tensor of its shape"
            )
        if kw.memory_format is not None:
            _check_format(call, kw.memory_format)
        dtype, requires_grad = self._prepare(call, torch_name, kw, infer=lambda: t.dtype)
        shape = tuple(t.shape)
        stride = _like_strides(call, t, kw.memory_format)
        return self._make(call, torch_name, shape, dtype, write, stride=stride, requires_grad=requires_grad)

    def empty_like(self, t, *, dtype=None, layout=None, device=None, requires_grad=False, pin_memory=False,
                   memory_format=torch.preserve_format) -> torch.Tensor:  # fmt: skip
        """``torch.empty_like`` on the heap."""
        kw = _Keywords(None, dtype, layout, device, requires_grad, pin_memory, memory_format)
        return self._like("empty_like", t, (), "empty", None, kw)

    def zeros_like(self, t, *, dtype=None, layout=None, device=None, requires_grad=False, pin_memory=False,
                   memory_format=torch.preserve_format) -> torch.Tensor:  # fmt: skip
        """``torch.zeros_like`` on the heap."""
        kw = _Keywords(None, dtype, layout, device, requires_grad, pin_memory, memory_format)
        return self._like("zeros_like", t, (), "zeros", lambda x: x.zero_(), kw)

    def ones_like(self, t, *, dtype=None, layout=None, device=None, requires_grad=False, pin_memory=False,
                  memory_format=torch.preserve_format) -> torch.Tensor:  # fmt: skip
        """``torch.ones_like`` on the heap."""
        kw = _Keywords(None, dtype, layout, device, requires_grad, pin_memory, memory_format)
        return self._like("ones_like", t, (), "ones", lambda x: x.fill_(1), kw)

    def full_like(self, t, fill_value, *, dtype=None, layout=None, device=None, requires_grad=False,
                  pin_memory=False, memory_format=torch.preserve_format) -> torch.Tensor:  # fmt: skip
        """``torch.full_like`` on the heap (``t``'s dtype unless ``dtype`` is given, as torch)."""
        kw = _Keywords(None, dtype, layout, device, requires_grad, pin_memory, memory_format)
        return self._like("full_like", t, (fill_value,), "full", lambda x: x.fill_(fill_value), kw)

    def rand_like(self, t, *, generator=None, dtype=None, layout=None, device=None, requires_grad=False,
                  pin_memory=False, memory_format=torch.preserve_format) -> torch.Tensor:  # fmt: skip
        """``torch.rand_like`` on the heap."""
        kw = _Keywords(None, dtype, layout, device, requires_grad, pin_memory, memory_format)
        write = self._drawn("rand_like", generator, lambda x: x.uniform_(0, 1, generator=generator))
        return self._like("rand_like", t, (), "rand", write, kw)

    def randn_like(self, t, *, generator=None, dtype=None, layout=None, device=None, requires_grad=False,
                   pin_memory=False, memory_format=torch.preserve_format) -> torch.Tensor:  # fmt: skip
        """``torch.randn_like`` on the heap."""
        kw = _Keywords(None, dtype, layout, device, requires_grad, pin_memory, memory_format)
        write = self._drawn("randn_like", generator, lambda x: x.normal_(0, 1, generator=generator))
        return self._like("randn_like", t, (), "randn", write, kw)

    def as_symmetric(self, t: torch.Tensor) -> torch.Tensor:
        """A heap copy of ``t`` (any device), contiguous, same shape and dtype."""
        t = _tensor(t, "as_symmetric")
        if t.layout != torch.strided:
            raise TypeError(f"as_symmetric() copies dense tensors, got a {t.layout} one; pass t.to_dense()")
        if t.is_meta:
            raise ValueError("as_symmetric() got a meta tensor, which holds no values to copy; use heap.empty_like(t)")
        return self._make(
            _Call("as_symmetric", (t,)), "Tensor.copy_", tuple(t.shape), check_dtype(t.dtype), lambda out: out.copy_(t)
        )
