"""Torch-style tensor factories over the heap's allocator.

Every factory computes its values exactly as the torch function of the same name does (same
dtype inference, same generator stream) and places them on the heap, so
``heap.randn(64, generator=g)`` equals ``torch.randn(64, generator=g2)`` for equally seeded
generators.

Bad arguments fail before anything is allocated where they can be checked up front (sizes,
dtypes, the tensor arguments), and otherwise give their block back: torch's own complaint (a
step of zero, a dtype its kernel lacks) comes out as a ``TypeError`` or ``ValueError`` that names
the heap call, never as a bare torch error with a block left behind.
"""

from __future__ import annotations

import operator
import reprlib
from collections.abc import Callable

import torch

__all__ = ["TensorFactories", "normalize_size", "check_dtype"]

_SUPPORTED = {
    getattr(torch, name)
    for name in (
        "bool", "uint8", "int8", "int16", "int32", "int64", "uint16", "uint32", "uint64",
        "float16", "bfloat16", "float32", "float64", "complex64", "complex128",
        "float8_e4m3fn", "float8_e5m2", "float8_e4m3fnuz", "float8_e5m2fnuz",
    )
    if hasattr(torch, name)
}  # fmt: skip


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


def _call(name: str, *args, **kwargs) -> str:
    """How a heap call looked, for error messages (long arguments abbreviated)."""
    shown = [reprlib.repr(a) for a in args] + [f"{k}={reprlib.repr(v)}" for k, v in kwargs.items() if v is not None]
    return f"heap.{name}({', '.join(shown)})"


def _refused(call: str, name: str, e: Exception) -> Exception:
    """torch's complaint about a factory's arguments as the heap's ``TypeError`` or ``ValueError``.

    Running out of memory is not about the arguments: it passes through as it is.
    """
    if isinstance(e, (MemoryError, torch.cuda.OutOfMemoryError)):
        return e
    kind = TypeError if isinstance(e, (TypeError, NotImplementedError)) else ValueError
    reason = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
    return kind(f"{call}: torch.{name} refuses these arguments ({reason}); pass arguments that torch.{name} accepts")


def _torch(call: str, name: str, compute: Callable):
    """``compute()``, with torch's complaint about the arguments turned into the heap's kind of error."""
    try:
        return compute()
    except Exception as e:  # noqa: BLE001 - translated (or passed through) by _refused
        raise _refused(call, name, e) from None


def _tensor(t, what: str) -> torch.Tensor:
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"{what}() takes a torch.Tensor, got {type(t).__name__}")
    return t


class TensorFactories:
    """Mixin: the torch factory functions, placed on the heap through ``_allocate``."""

    device: torch.device

    def _allocate(self, shape: tuple[int, ...], dtype: torch.dtype) -> torch.Tensor:
        raise NotImplementedError

    def free(self, t: torch.Tensor) -> None:
        raise NotImplementedError

    def _make(self, call: str, name: str, shape: tuple[int, ...], dtype: torch.dtype, write: Callable) -> torch.Tensor:
        """A heap tensor of ``shape`` and ``dtype`` with values from ``write(out)``.

        The block is taken first, so a request larger than the heap is a ``HeapExhaustedError``
        before torch computes anything; if torch then refuses the arguments, the block goes back.
        """
        out = self._allocate(shape, dtype)
        try:
            write(out)
        except Exception as e:  # noqa: BLE001 - translated (or passed through) by _refused
            self.free(out)
            raise _refused(call, name, e) from None
        return out

    def _source_device(self, generator):
        if generator is None:
            return self.device
        if not isinstance(generator, torch.Generator):
            raise TypeError(
                f"generator must be a torch.Generator or None, got {generator!r} ({type(generator).__name__})"
            )
        return generator.device

    # -- uninitialised and constant ----------------------------------------------------------
    def empty(self, *size, dtype=None) -> torch.Tensor:
        return self._allocate(normalize_size(size), check_dtype(dtype))

    def zeros(self, *size, dtype=None) -> torch.Tensor:
        return self.empty(*size, dtype=dtype).zero_()

    def ones(self, *size, dtype=None) -> torch.Tensor:
        return self.empty(*size, dtype=dtype).fill_(1)

    def full(self, size, fill_value, dtype=None) -> torch.Tensor:
        shape = normalize_size((size,))
        call = _call("full", size, fill_value, dtype=dtype)
        if dtype is None:  # torch infers bool/int64/default-float/complex from the value
            dtype = _torch(call, "full", lambda: torch.full((), fill_value).dtype)
        return self._make(call, "full", shape, check_dtype(dtype), lambda out: out.fill_(fill_value))

    # -- ranges ---------------------------------------------------------------------------
    def _range(self, call: str, name: str, make: Callable) -> torch.Tensor:
        """``make(device)`` on the heap: its shape and dtype come from the meta device (nothing computed)."""
        meta = _torch(call, name, lambda: make("meta"))
        return self._make(
            call, name, tuple(meta.shape), check_dtype(meta.dtype), lambda out: out.copy_(make(self.device))
        )

    def arange(self, start, end=None, step=1, dtype=None) -> torch.Tensor:
        if dtype is not None:
            check_dtype(dtype)
        if end is None:
            start, end = 0, start
        call = _call("arange", start, end, step, dtype=dtype)
        return self._range(call, "arange", lambda device: torch.arange(start, end, step, dtype=dtype, device=device))

    def linspace(self, start, end, steps, dtype=None) -> torch.Tensor:
        if dtype is not None:
            check_dtype(dtype)
        call = _call("linspace", start, end, steps, dtype=dtype)
        return self._range(
            call, "linspace", lambda device: torch.linspace(start, end, steps, dtype=dtype, device=device)
        )

    # -- random -----------------------------------------------------------------------------
    def rand(self, *size, generator=None, dtype=None) -> torch.Tensor:
        call = _call("rand", *size, dtype=dtype)
        shape, dtype, device = normalize_size(size), check_dtype(dtype), self._source_device(generator)
        return self._make(
            call,
            "rand",
            shape,
            dtype,
            lambda out: out.copy_(torch.rand(shape, generator=generator, dtype=dtype, device=device)),
        )

    def randn(self, *size, generator=None, dtype=None) -> torch.Tensor:
        call = _call("randn", *size, dtype=dtype)
        shape, dtype, device = normalize_size(size), check_dtype(dtype), self._source_device(generator)
        return self._make(
            call,
            "randn",
            shape,
            dtype,
            lambda out: out.copy_(torch.randn(shape, generator=generator, dtype=dtype, device=device)),
        )

    def randint(self, low, high=None, size=None, generator=None, dtype=torch.int64) -> torch.Tensor:
        if size is None:  # torch.randint(high, size)
            if high is None:
                raise TypeError("randint() needs high and size: randint(low, high, size) or randint(high, size)")
            low, high, size = 0, low, high
        call = _call("randint", low, high, size, dtype=dtype)
        shape, dtype, device = normalize_size((size,)), check_dtype(dtype), self._source_device(generator)
        return self._make(
            call,
            "randint",
            shape,
            dtype,
            lambda out: out.copy_(torch.randint(low, high, shape, generator=generator, dtype=dtype, device=device)),
        )

    def uniform(self, size, low=0.0, high=1.0, dtype=None, generator=None) -> torch.Tensor:
        call = _call("uniform", size, low, high, dtype=dtype)
        shape, dtype, device = normalize_size((size,)), check_dtype(dtype), self._source_device(generator)
        return self._make(
            call,
            "Tensor.uniform_",
            shape,
            dtype,
            lambda out: out.copy_(
                torch.empty(shape, dtype=dtype, device=device).uniform_(low, high, generator=generator)
            ),
        )

    # -- like ----------------------------------------------------------------------------------
    def empty_like(self, t: torch.Tensor) -> torch.Tensor:
        t = _tensor(t, "empty_like")
        return self.empty(t.shape, dtype=t.dtype)

    def zeros_like(self, t: torch.Tensor) -> torch.Tensor:
        t = _tensor(t, "zeros_like")
        return self.zeros(t.shape, dtype=t.dtype)

    def ones_like(self, t: torch.Tensor) -> torch.Tensor:
        t = _tensor(t, "ones_like")
        return self.ones(t.shape, dtype=t.dtype)

    def full_like(self, t: torch.Tensor, fill_value) -> torch.Tensor:
        t = _tensor(t, "full_like")
        return self.full(t.shape, fill_value, dtype=t.dtype)

    def as_symmetric(self, t: torch.Tensor) -> torch.Tensor:
        """A heap copy of ``t`` (any device), contiguous, same shape and dtype."""
        t = _tensor(t, "as_symmetric")
        if t.layout != torch.strided:
            raise TypeError(f"as_symmetric() copies dense tensors, got a {t.layout} one; pass t.to_dense()")
        if t.is_meta:
            raise ValueError("as_symmetric() got a meta tensor, which holds no values to copy; use heap.empty_like(t)")
        return self._make(
            _call("as_symmetric", t), "Tensor.copy_", tuple(t.shape), check_dtype(t.dtype), lambda out: out.copy_(t)
        )
