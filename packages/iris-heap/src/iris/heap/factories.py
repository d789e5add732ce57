"""Torch-style tensor factories over the heap's allocator.

Every factory computes its values exactly as the torch function of the same name does (same
dtype inference, same generator stream) and places them on the heap, so
``heap.randn(64, generator=g)`` equals ``torch.randn(64, generator=g2)`` for equally seeded
generators.
"""

from __future__ import annotations

import operator

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
        if isinstance(d, bool) or not hasattr(d, "__index__"):
            raise TypeError(
                f"size must be a sequence of non-negative integers, got {tuple(size)!r} ({type(d).__name__} in it)"
            )
        d = operator.index(d)
        if d < 0:
            raise ValueError(f"size must be non-negative, got {tuple(size)!r}")
        dims.append(d)
    return tuple(dims)


class TensorFactories:
    """Mixin: the torch factory functions, placed on the heap through ``_allocate``."""

    device: torch.device

    def _allocate(self, shape: tuple[int, ...], dtype: torch.dtype) -> torch.Tensor:
        raise NotImplementedError

    def _place(self, values: torch.Tensor) -> torch.Tensor:
        out = self._allocate(tuple(values.shape), check_dtype(values.dtype))
        out.copy_(values)
        return out

    def _source_device(self, generator):
        return generator.device if generator is not None else self.device

    # -- uninitialised and constant ----------------------------------------------------------
    def empty(self, *size, dtype=None) -> torch.Tensor:
        return self._allocate(normalize_size(size), check_dtype(dtype))

    def zeros(self, *size, dtype=None) -> torch.Tensor:
        return self.empty(*size, dtype=dtype).zero_()

    def ones(self, *size, dtype=None) -> torch.Tensor:
        return self.empty(*size, dtype=dtype).fill_(1)

    def full(self, size, fill_value, dtype=None) -> torch.Tensor:
        shape = normalize_size((size,))
        if dtype is None:  # torch infers bool/int64/default-float/complex from the value
            dtype = torch.full((), fill_value).dtype
        return self._allocate(shape, check_dtype(dtype)).fill_(fill_value)

    # -- ranges ---------------------------------------------------------------------------
    def arange(self, start, end=None, step=1, dtype=None) -> torch.Tensor:
        if dtype is not None:
            check_dtype(dtype)
        if end is None:
            start, end = 0, start
        return self._place(torch.arange(start, end, step, dtype=dtype, device=self.device))

    def linspace(self, start, end, steps, dtype=None) -> torch.Tensor:
        if dtype is not None:
            check_dtype(dtype)
        return self._place(torch.linspace(start, end, steps, dtype=dtype, device=self.device))

    # -- random -----------------------------------------------------------------------------
    def rand(self, *size, generator=None, dtype=None) -> torch.Tensor:
        shape, dtype = normalize_size(size), check_dtype(dtype)
        return self._place(torch.rand(shape, generator=generator, dtype=dtype, device=self._source_device(generator)))

    def randn(self, *size, generator=None, dtype=None) -> torch.Tensor:
        shape, dtype = normalize_size(size), check_dtype(dtype)
        return self._place(torch.randn(shape, generator=generator, dtype=dtype, device=self._source_device(generator)))

    def randint(self, low, high=None, size=None, generator=None, dtype=torch.int64) -> torch.Tensor:
        if size is None:  # torch.randint(high, size)
            if high is None:
                raise TypeError("randint() needs high and size: randint(low, high, size) or randint(high, size)")
            low, high, size = 0, low, high
        shape, dtype = normalize_size((size,)), check_dtype(dtype)
        return self._place(
            torch.randint(low, high, shape, generator=generator, dtype=dtype, device=self._source_device(generator))
        )

    def uniform(self, size, low=0.0, high=1.0, dtype=None, generator=None) -> torch.Tensor:
        shape = normalize_size((size,))
        dtype = check_dtype(dtype)
        values = torch.empty(shape, dtype=dtype, device=self._source_device(generator))
        return self._place(values.uniform_(low, high, generator=generator))

    # -- like ----------------------------------------------------------------------------------
    def empty_like(self, t: torch.Tensor) -> torch.Tensor:
        return self.empty(t.shape, dtype=t.dtype)

    def zeros_like(self, t: torch.Tensor) -> torch.Tensor:
        return self.zeros(t.shape, dtype=t.dtype)

    def ones_like(self, t: torch.Tensor) -> torch.Tensor:
        return self.ones(t.shape, dtype=t.dtype)

    def full_like(self, t: torch.Tensor, fill_value) -> torch.Tensor:
        return self.full(t.shape, fill_value, dtype=t.dtype)

    def as_symmetric(self, t: torch.Tensor) -> torch.Tensor:
        """A heap copy of ``t`` (any device), contiguous, same shape and dtype."""
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"as_symmetric() takes a torch.Tensor, got {type(t).__name__}")
        return self._place(t)
