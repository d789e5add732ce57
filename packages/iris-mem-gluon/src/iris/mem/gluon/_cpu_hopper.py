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
* an mbarrier keeps its state as on the GPU, in its own 64-bit word of the buffer: the arrivals
  a phase needs (``init``'s count), those still missing, the bytes still expected, and the phases
  completed. ``expect`` adds bytes and arrives once (``mbarrier.arrive.expect_tx``), ``arrive``
  arrives, a TMA copy's bytes count down when it lands, and a phase completes when nothing is
  missing. ``wait(bar, phase)`` returns if the phase of that parity has completed, and raises
  where the GPU would wait forever (the program is alone: nothing else will arrive): a wrong
  phase, a missing ``expect``, an expected byte count that the copies do not make up. An
  mbarrier used before ``init``, or arrived at more often than its count, raises too;
* ``fence_async_shared`` does nothing: the copies it orders are done;
* ``warpgroup_mma(a, b, acc)`` is ``acc + a @ b`` in IEEE fp32 (``a`` from the buffer or
  registers, ``b`` from the buffer; bf16 widened first, as ``mma_v2`` on CPU), its asynchronous
  token the result itself; ``warpgroup_mma_wait(n, deps)`` returns ``deps``. The shared memory
  an asynchronous MMA reads stays marked as read until a ``warpgroup_mma_wait`` leaves fewer
  MMAs in flight than were issued after it, and a TMA copy or ``store`` into it raises: the race
  of a ring slot refilled while the MMA that reads it may still run.

So a kernel's data movement and arithmetic (tile coordinates, ring-buffer slots, bounds, the
product) and its single-program synchronization (mbarrier phases and byte counts, the MMAs in
flight) are checked on CPU ranks. What is not: the ordering between a program's warps (the GPU
runs warpgroups concurrently, and the compiler's barriers between them), memory-model effects
(a missing ``fence_async_shared`` after ordinary stores that TMA or wgmma read next), and whether
a layout or a tile shape suits the instruction. TF32 products are computed in IEEE fp32.
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
        _check_unread(self, "a store")
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
    """Fences and ``store_wait`` on CPU: what they order or wait for is done."""
    return None


# An mbarrier's word: bit 62 marks it initialized; the phases completed (mod 2**18), the
# arrivals a phase needs, the arrivals still missing and the bytes still expected below it.
_INIT = 1 << 62
_PHASE, _COUNT, _MISSING, _BYTES = (44, 18), (36, 8), (28, 8), (0, 28)


def _field(word: int, field) -> int:
    shift, bits = field
    return (word >> shift) & ((1 << bits) - 1)


def _word(phase: int, count: int, missing: int, nbytes: int) -> int:
    if not 0 <= nbytes < 1 << _BYTES[1]:
        raise ValueError(f"an mbarrier's expected bytes must be in [0, {1 << _BYTES[1]}), got {nbytes}")
    return (_INIT | (phase % (1 << _PHASE[1])) << _PHASE[0] | count << _COUNT[0] | missing << _MISSING[0]
            | nbytes << _BYTES[0])  # fmt: skip


def _state(bar: SharedMemory, what: str) -> tuple[int, int, int, int]:
    if not isinstance(bar, SharedMemory) or bar.numel() != 1:
        raise TypeError(f"mbarrier.{what} takes one barrier (a shared-memory word), got {bar!r}")
    word = int(bar._data.reshape(-1)[0])
    if not word & _INIT:
        raise RuntimeError(f"mbarrier.{what} on a barrier that mbarrier.init has not initialized")
    return _field(word, _PHASE), _field(word, _COUNT), _field(word, _MISSING), _field(word, _BYTES)


def _set(bar: SharedMemory, phase: int, count: int, missing: int, nbytes: int) -> None:
    if missing == 0 and nbytes == 0:  # the phase completes; the next one needs every arrival again
        phase, missing = phase + 1, count
    bar._data.reshape(-1)[0] = _word(phase, count, missing, nbytes)


def _arrivals(bar, n: int, nbytes: int, what: str) -> None:
    phase, count, missing, pending = _state(bar, what)
    if n > missing:
        raise RuntimeError(f"mbarrier.{what}: {n} arrival(s) where the phase misses {missing} (count {count})")
    _set(bar, phase, count, missing - n, pending + nbytes)


def mbarrier_init(bar, count, **kwargs) -> None:
    count = int(_value(count))
    if not 1 <= count < 1 << _COUNT[1]:
        raise ValueError(f"mbarrier.init: count must be in [1, {(1 << _COUNT[1]) - 1}], got {count}")
    if not isinstance(bar, SharedMemory) or bar.numel() != 1:
        raise TypeError(f"mbarrier.init takes one barrier (a shared-memory word), got {bar!r}")
    bar._data.reshape(-1)[0] = _word(0, count, count, 0)


def mbarrier_invalidate(bar, **kwargs) -> None:
    _state(bar, "invalidate")
    bar._data.reshape(-1)[0] = 0


def mbarrier_expect(bar, nbytes, pred=True, **kwargs) -> None:
    """``mbarrier.arrive.expect_tx``: ``nbytes`` more to land this phase, and one arrival."""
    if _value(pred):
        _arrivals(bar, 1, int(_value(nbytes)), "expect")


def mbarrier_arrive(bar, *, count=1, pred=True, **kwargs) -> None:
    if _value(pred):
        _arrivals(bar, int(_value(count)), 0, "arrive")


def mbarrier_wait(bar, phase, pred=True, deps=(), **kwargs) -> None:
    """Return if the phase of parity ``phase`` has completed; raise where the GPU would hang."""
    if not _value(pred):
        return
    done, count, missing, nbytes = _state(bar, "wait")
    parity = int(_value(phase)) & 1
    if done & 1 == parity:  # the phase in progress has that parity: it has not completed
        raise RuntimeError(
            f"mbarrier.wait(phase={parity}) would never return: {done} phase(s) of this barrier completed, and "
            f"the one in progress (parity {done & 1}) misses {missing} of {count} arrival(s) and {nbytes} expected "
            f"byte(s), which nothing in flight will bring (a wrong phase, a missing expect or copy, or a byte "
            f"count the copies do not make up)"
        )


def _landed(bar, nbytes: int) -> None:
    """A TMA copy of ``nbytes`` completed on ``bar`` (``complete_tx``)."""
    phase, count, missing, pending = _state(bar, "(TMA completion)")
    if nbytes > pending:
        raise RuntimeError(f"a TMA copy of {nbytes} bytes landed on an mbarrier expecting {pending} (mbarrier.expect "
                           f"must cover every copy that completes on it)")  # fmt: skip
    _set(bar, phase, count, missing, pending - nbytes)


# Shared memory that asynchronous MMAs of this program still read, oldest first (one entry per MMA).
_reading: list = []


def reset() -> None:
    """Forget MMAs in flight (a launch begins)."""
    _reading.clear()


def _check_unread(target: SharedMemory, what: str) -> None:
    for operands in _reading:
        if any(np.shares_memory(target._data, d) for d in operands):
            raise RuntimeError(
                f"{what} writes shared memory that an asynchronous warpgroup_mma still reads: wait for it first "
                f"(warpgroup_mma_wait with fewer MMAs left in flight)"
            )


def make_tensor_descriptor(base, shape, strides, block_shape, layout=None, padding_option="zero", **kwargs):
    """``tma.make_tensor_descriptor``: Triton's descriptor (the layout is the GPU's business)."""
    return tl.make_tensor_descriptor(base, shape, strides, block_shape, padding_option=padding_option)


def async_load(tensor_desc, coord, barrier, result, pred=True, **kwargs) -> None:
    """``tma.async_copy_global_to_shared`` / ``async_load``: the tile at ``coord`` into ``result``,
    now; its bytes land on ``barrier``."""
    if _value(pred):
        _check_unread(result, "a TMA copy")
        result.store(tensor_desc.load(list(coord)))
        _landed(barrier, result._data.nbytes)


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
    result = tl.dot(_operand(a), _operand(b), acc, input_precision="ieee")
    if _value(is_async):
        _reading.append([x._data for x in (a, b) if isinstance(x, SharedMemory)])
    return result


def warpgroup_mma_wait(num_outstanding=0, deps=None, **kwargs):
    """``deps`` as they are (every MMA finished when it was issued); all but the last
    ``num_outstanding`` MMAs stop reading their shared memory."""
    if deps is None:
        raise ValueError("warpgroup_mma_wait deps must be given")
    left = int(_value(num_outstanding))
    del _reading[: max(0, len(_reading) - left)]
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
_MBARRIER = {
    "init": mbarrier_init,
    "expect": mbarrier_expect,
    "arrive": mbarrier_arrive,
    "wait": mbarrier_wait,
    "invalidate": mbarrier_invalidate,
}
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
