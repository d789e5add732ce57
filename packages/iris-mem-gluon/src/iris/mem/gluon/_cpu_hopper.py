"""CPU meanings of Hopper's Gluon primitives (shared memory, TMA, mbarriers, wgmma), for
:class:`iris.mem.gluon.interpret`.

A program runs on CPU as one thread, one statement after another, so an asynchronous copy or MMA
is complete when its call returns, and whatever waits for it has nothing to wait for:

* ``gl.allocate_shared_memory`` is a buffer of the program (a numpy array), and its
  ``index`` / ``slice`` / ``permute`` / ``reshape`` are views of it, sharing its storage; ``load``
  and ``store`` copy a tensor out and in (the layout arguments are dropped, as everywhere);
* ``tma.make_tensor_descriptor`` is Triton's ``tl.make_tensor_descriptor`` (the interpreter reads
  a descriptor's tile with masked loads, zeros outside the tensor: what TMA gives);
  ``tma.async_copy_global_to_shared`` (``async_load``) stores the tile into the buffer at once,
  ``tma.async_copy_shared_to_global`` (``async_store``) writes the buffer to the tensor at once,
  ``tma.store_wait`` has nothing left to wait for;
* ``mbarrier.init`` / ``expect`` / ``arrive`` / ``wait`` / ``invalidate`` and
  ``fence_async_shared`` do nothing: the copies they order are done;
* ``warpgroup_mma(a, b, acc)`` is ``acc + a @ b`` in IEEE fp32 (``a`` from the buffer or
  registers, ``b`` from the buffer; bf16 widened first, as ``mma_v2`` on CPU), its asynchronous
  token the result itself; ``warpgroup_mma_wait(n, deps)`` returns ``deps``.

So a kernel's data movement and arithmetic (tile coordinates, ring-buffer slots, bounds, the
product) are checked on CPU ranks; its synchronization (barrier phases, expected byte counts,
``num_outstanding``) is not: a wrong phase or a missing wait that hangs or races on the GPU
passes here. TF32 products are computed in IEEE fp32.
"""

from __future__ import annotations

import numpy as np
import triton.language as tl
from triton.runtime import interpreter as _interp

__all__ = ["SPECIAL", "TARGET_SPECIAL", "SharedMemory"]


def _strip(kwargs):
    kwargs.pop("_semantic", None)
    kwargs.pop("_generator", None)
    return kwargs


def _value(x):
    """A Python value of a constexpr, a 0-d interpreted tensor or a plain value."""
    if isinstance(x, tl.constexpr):
        x = x.value
    if isinstance(x, tl.tensor):
        return x.handle.data.item() if x.handle.data.size == 1 else x.handle.data
    return x


def _tensor(data: np.ndarray, dtype) -> tl.tensor:
    """An interpreted block tensor of ``dtype`` holding a copy of ``data``."""
    data = np.array(data, dtype=_interp._get_np_dtype(dtype), copy=True)
    return tl.tensor(_interp.TensorHandle(data, dtype), tl.block_type(dtype, list(data.shape)))


class SharedMemory:
    """A shared-memory buffer on CPU, or a view of one: ``gl.allocate_shared_memory``'s result.

    ``data`` is a numpy view of the allocation's storage (bf16 as its raw 16-bit words, as the
    interpreter stores it), ``order`` the permutation a ``permute`` applied (None: none)."""

    def __init__(self, data: np.ndarray, dtype, order=None):
        self._data = data
        self._order = order
        self.dtype = dtype

    @property
    def shape(self) -> list:
        shape = self._data.shape
        return [shape[i] for i in self._order] if self._order is not None else list(shape)

    @property
    def rank(self) -> int:
        return self._data.ndim

    def numel(self) -> int:
        return int(self._data.size)

    def _viewed(self) -> np.ndarray:
        return self._data if self._order is None else self._data.transpose(self._order)

    def load(self, layout=None, **kwargs) -> tl.tensor:
        return _tensor(self._viewed(), self.dtype)

    def store(self, value, **kwargs) -> None:
        data = value.handle.data if isinstance(value, tl.tensor) else np.asarray(_value(value))
        self._viewed()[...] = np.broadcast_to(data, self._viewed().shape)

    def index(self, index, **kwargs) -> SharedMemory:
        if self._order is not None:
            raise ValueError("index() of a permuted shared-memory view: index the buffer, then permute")
        return SharedMemory(self._data[int(_value(index))], self.dtype)

    def slice(self, start, length, dim=0, **kwargs) -> SharedMemory:
        start, length, dim = int(_value(start)), int(_value(length)), int(_value(dim))
        if self._order is not None:
            dim = self._order[dim]
        cut = [slice(None)] * self._data.ndim
        cut[dim] = slice(start, start + length)
        return SharedMemory(self._data[tuple(cut)], self.dtype, self._order)

    def permute(self, order, **kwargs) -> SharedMemory:
        order = [int(_value(o)) for o in _value(order)]
        base = self._order if self._order is not None else list(range(self._data.ndim))
        return SharedMemory(self._data, self.dtype, [base[o] for o in order])

    def reshape(self, shape, **kwargs) -> SharedMemory:
        shape = [int(_value(s)) for s in _value(shape)]
        viewed = self._viewed()
        if not viewed.flags.c_contiguous:
            raise ValueError("reshape() of a permuted shared-memory view is not modelled on CPU")
        return SharedMemory(viewed.reshape(shape), self.dtype)  # a view: contiguous storage

    def _keep_alive(self, **kwargs) -> None:
        return None


def allocate_shared_memory(element_ty, shape, layout=None, value=None, **kwargs) -> SharedMemory:
    """``gl.allocate_shared_memory``: zeros (or ``value``) of ``element_ty`` in ``shape``."""
    dtype = _value(element_ty)
    buffer = SharedMemory(np.zeros([int(_value(s)) for s in _value(shape)], _interp._get_np_dtype(dtype)), dtype)
    if value is not None:
        buffer.store(value)
    return buffer


def _nothing(*args, **kwargs) -> None:
    """mbarriers, fences, ``store_wait`` on CPU: what they order or wait for is done."""
    return None


def make_tensor_descriptor(base, shape, strides, block_shape, layout=None, padding_option="zero", **kwargs):
    """``tma.make_tensor_descriptor``: Triton's descriptor (the layout is the GPU's business)."""
    return tl.make_tensor_descriptor(base, shape, strides, block_shape, padding_option=padding_option)


def async_load(tensor_desc, coord, barrier, result, pred=True, **kwargs) -> None:
    """``tma.async_copy_global_to_shared`` / ``async_load``: the tile at ``coord`` into ``result``, now."""
    if _value(pred):
        result.store(tensor_desc.load(list(coord)))


def async_store(tensor_desc, coord, src, **kwargs) -> None:
    """``tma.async_copy_shared_to_global`` / ``async_store``: ``src`` into the tensor at ``coord``, now."""
    tensor_desc.store(list(coord), src.load())


def _operand(x):
    x = x.load() if isinstance(x, SharedMemory) else x
    return x.to(tl.float32) if x.dtype == tl.bfloat16 else x  # the interpreter's dot takes bf16 as integers


def warpgroup_mma(a, b, acc, *, use_acc=True, precision=None, max_num_imprecise_acc=None, is_async=False, **kwargs):
    """``acc + a @ b`` (``a @ b`` if not ``use_acc``), IEEE fp32; complete on return."""
    if not _value(use_acc):
        acc = tl.zeros(acc.shape, acc.dtype)
    return tl.dot(_operand(a), _operand(b), acc, input_precision="ieee")


def warpgroup_mma_wait(num_outstanding=0, deps=None, **kwargs):
    """``deps`` as they are: every MMA finished when it was issued."""
    if deps is None:
        raise ValueError("warpgroup_mma_wait deps must be given")
    deps = list(deps)
    return deps[0] if len(deps) == 1 else tuple(deps)


def warpgroup_mma_init(value, **kwargs):
    return value


#: Root-level Gluon builtins these meanings replace.
SPECIAL = {"allocate_shared_memory": allocate_shared_memory}

_TMA = {
    "async_copy_global_to_shared": async_load,
    "async_load": async_load,
    "async_copy_shared_to_global": async_store,
    "async_store": async_store,
    "store_wait": _nothing,
    "make_tensor_descriptor": make_tensor_descriptor,
}
_MBARRIER = {name: _nothing for name in ("init", "expect", "arrive", "wait", "invalidate")}
_HOPPER = {
    "fence_async_shared": _nothing,
    "warpgroup_mma": warpgroup_mma,
    "warpgroup_mma_wait": warpgroup_mma_wait,
    "warpgroup_mma_init": warpgroup_mma_init,
}

#: Hopper intrinsics by their qualified names (mbarriers under both modules that export them).
TARGET_SPECIAL = {
    **{f"gl.nvidia.hopper.tma.{k}": v for k, v in _TMA.items()},
    **{f"gl.nvidia.hopper.mbarrier.{k}": v for k, v in _MBARRIER.items()},
    **{f"gl.nvidia.ampere.mbarrier.{k}": v for k, v in _MBARRIER.items()},
    **{f"gl.nvidia.hopper.{k}": v for k, v in _HOPPER.items()},
}
