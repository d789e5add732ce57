"""What the collectives accept: every check of their arguments, and the flat views they move.

Every check runs before anything is published to peers, so a rejected call launches nothing and
leaves the peers' protocol untouched. The collectives work on a tensor's memory as one flat run of
elements (``flat``, or ``words`` for data movement, which does not care what the bytes mean), so
a tensor must be dense and non-overlapping, in any order of its dims (``layout``).
"""

from __future__ import annotations

import torch

import iris.heap

from .protocol import REDUCE_OPS

__all__ = [
    "MAX_ELEMENTS",
    "MAX_PERMUTED_DIMS",
    "REDUCIBLE",
    "check_all_gather",
    "check_all_to_all",
    "check_chunks",
    "check_disjoint",
    "check_heap",
    "check_op",
    "check_out_shape",
    "check_pair",
    "check_reduce_scatter",
    "check_split",
    "check_src",
    "check_strided",
    "check_tensor",
    "flat",
    "layout",
    "words",
]

REDUCIBLE = frozenset({torch.float16, torch.bfloat16, torch.float32, torch.float64,
                       torch.int8, torch.int16, torch.int32, torch.int64, torch.uint8})  # fmt: skip
#: Data movement needs only the element size; 16-byte elements move as two 8-byte words.
_WORDS = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64, 16: torch.int64}
#: Kernels index elements (and all_gather's W * n outputs) with int32.
MAX_ELEMENTS = 2**31
#: Dims (of more than one element) that a tensor in another order than row-major may have: the
#: order is described to peers by its Lehmer code in 16 bits (8! < 2**16).
MAX_PERMUTED_DIMS = 8


def check_heap(heap):
    """The heap a collective runs on: ``heap``, or the default heap; it must be open."""
    if heap is None:
        return iris.heap.default_heap()  # an open one, or HeapError
    if not isinstance(heap, iris.heap.SymmetricHeap):
        raise TypeError(f"heap must be an iris.heap.SymmetricHeap or None, got {type(heap).__name__}")
    if heap.closed:
        raise iris.heap.HeapClosedError("the heap given to the collective is closed")
    return heap


def check_strided(t, name: str, heap, takes: str) -> None:
    """That ``t`` is a strided torch.Tensor on the heap's device; ``takes`` ends the message about
    another layout (what the caller takes). ``iris.ops`` checks its matrices with it too."""
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
    if t.device != heap.device:
        raise ValueError(f"{name} is on {t.device}, but the heap (rank {heap.rank}) is on {heap.device}")
    if t.layout != torch.strided:
        raise TypeError(f"{name} is a {t.layout} tensor; {takes}")


def check_tensor(t, name: str, heap) -> int:
    """Checks of one tensor argument; its memory layout (``layout``)."""
    check_strided(t, name, heap, "the collectives take strided (dense) tensors")
    order = layout(t, name)
    if t.numel() * max(1, t.element_size() // 8) >= MAX_ELEMENTS:
        raise ValueError(
            f"{name} has {t.numel()} elements; the collectives index elements with 32-bit integers, so a "
            f"tensor must have fewer than 2**31 (split it into several collectives)"
        )
    if t.element_size() not in _WORDS:
        raise TypeError(
            f"{name} has {t.element_size()}-byte elements ({t.dtype}); the collectives move 1, 2, 4, 8 or 16-byte elements"
        )
    return order


def check_pair(out, inp, heap) -> int:
    """Checks of an ``out``/``inp`` pair (each a tensor the collectives take, of one dtype); ``inp``'s layout."""
    check_tensor(out, "out", heap)
    order = check_tensor(inp, "inp", heap)
    if out.dtype != inp.dtype:
        raise TypeError(f"out and inp must have the same dtype, got out {out.dtype} and inp {inp.dtype}")
    return order


def check_split(name: str, inp: torch.Tensor, world_size: int) -> None:
    """``inp`` must be ``world_size`` equal chunks along dim 0 (one per rank)."""
    if inp.dim() == 0 or inp.shape[0] % world_size:
        raise ValueError(f"{name}: inp's dim 0 ({tuple(inp.shape)}) must be divisible by the world size {world_size}")


def check_out_shape(name: str, out: torch.Tensor, inp: torch.Tensor, world_size: int, *shapes: tuple) -> None:
    """``out`` must have one of ``shapes`` (what ``inp`` and the world size call for)."""
    if tuple(out.shape) not in shapes:
        alternatives = "".join(f" (or {s})" for s in shapes[1:])
        raise ValueError(
            f"{name}: out must have shape {shapes[0]}{alternatives} for inp of shape {tuple(inp.shape)} and world "
            f"size {world_size}; got {tuple(out.shape)}"
        )


def layout(t: torch.Tensor, name: str) -> int:
    """Which order ``t``'s elements have in memory: 0 for row-major (contiguous), else the Lehmer
    code of the order of its dims (those of more than one element) by decreasing stride. Two
    tensors of one shape hold their elements in the same memory order exactly when these agree.

    The collectives work on a tensor's memory as one flat run of elements, so it must be dense and
    non-overlapping (contiguous, channels_last, a permutation of a contiguous tensor, ...).
    """
    if t.numel() == 0 or t.is_contiguous():
        return 0
    dims = [d for d in range(t.dim()) if t.shape[d] > 1]
    order = sorted(dims, key=lambda d: -t.stride(d))  # stable
    span = 1
    for d in reversed(order):
        if t.stride(d) != span:
            raise ValueError(
                f"{name} is not dense (shape {tuple(t.shape)}, strides {t.stride()}): the collectives take "
                "tensors whose elements fill one block of memory, in any order of dims; call .contiguous() first"
            )
        span *= t.shape[d]
    if len(dims) > MAX_PERMUTED_DIMS:
        raise ValueError(
            f"{name} has {len(dims)} dims of more than one element in an order other than row-major; the "
            f"collectives describe at most {MAX_PERMUTED_DIMS} (call .contiguous() first)"
        )
    perm = [dims.index(d) for d in order]
    code = 0
    for i, p in enumerate(perm):
        code = code * (len(perm) - i) + sum(q < p for q in perm[i + 1 :])
    return code


def check_chunks(name: str, whole: torch.Tensor, part: torch.Tensor, whole_name: str, part_name: str) -> None:
    """``whole``'s chunks along dim 0 must each be one run of memory laid out as ``part`` is."""
    if whole.numel() == 0:
        return
    if whole.shape[0] > 1 and whole.stride(0) * whole.shape[0] != whole.numel():
        raise ValueError(
            f"{name}: {whole_name}'s dim 0 must be its outermost in memory (each rank's chunk one block); got "
            f"shape {tuple(whole.shape)}, strides {whole.stride()}"
        )
    chunk = whole[0] if whole.dim() == part.dim() + 1 else whole[: part.shape[0] if part.dim() else 1]
    if chunk.numel() and layout(chunk, whole_name) != layout(part, part_name):
        raise ValueError(
            f"{name}: {whole_name} and {part_name} must lay their elements out alike (strides {whole.stride()} and "
            f"{part.stride()} for shapes {tuple(whole.shape)} and {tuple(part.shape)})"
        )


def check_op(op: str, dtype: torch.dtype) -> int:
    """``op``'s code (``protocol.REDUCE_OPS``), if ``dtype`` tensors can be reduced with it."""
    if not isinstance(op, str) or op not in REDUCE_OPS:
        raise ValueError(f"unknown op {op!r}; choose one of {sorted(REDUCE_OPS)}")
    if dtype not in REDUCIBLE:
        raise TypeError(f"cannot reduce {dtype} tensors; supported: {sorted(str(d) for d in REDUCIBLE)}")
    if op == "avg" and not dtype.is_floating_point:
        raise TypeError(f"op 'avg' needs a floating-point tensor, got {dtype}; use 'sum' and divide")
    return REDUCE_OPS[op]


def check_disjoint(out, inp) -> None:
    a0, a1 = out.data_ptr(), out.data_ptr() + out.numel() * out.element_size()
    b0, b1 = inp.data_ptr(), inp.data_ptr() + inp.numel() * inp.element_size()
    if out.numel() and inp.numel() and a0 < b1 and b0 < a1:
        raise ValueError("out and inp overlap in memory; the collective needs separate tensors")


def flat(t: torch.Tensor) -> torch.Tensor:
    """The memory of a dense tensor (``layout``) as one dim, in memory order (a view, never a copy)."""
    return t.as_strided((t.numel(),), (1,))


def words(t: torch.Tensor) -> torch.Tensor:
    """``t`` as 1-D integers of its element's size (16-byte elements as pairs of 8-byte words):
    data movement does not care what the bytes mean."""
    return flat(t).view(_WORDS[t.element_size()])


# -- each collective's shapes (after its tensors' own checks) ----------------------------------------


def check_all_gather(out: torch.Tensor, inp: torch.Tensor, world_size: int) -> None:
    """``out`` is every rank's ``inp`` along dim 0: ``(W * d0, ...)`` or ``(W, *inp.shape)``."""
    cat = (world_size * inp.shape[0], *inp.shape[1:]) if inp.dim() else (world_size,)
    check_out_shape("all_gather", out, inp, world_size, cat, (world_size, *inp.shape))
    check_chunks("all_gather", out, inp, "out", "inp")
    check_disjoint(out, inp)


def check_reduce_scatter(out: torch.Tensor, inp: torch.Tensor, world_size: int) -> None:
    """``inp`` is W chunks along dim 0; ``out`` has one chunk's shape."""
    check_split("reduce_scatter", inp, world_size)
    check_out_shape("reduce_scatter", out, inp, world_size, (inp.shape[0] // world_size, *inp.shape[1:]))
    check_chunks("reduce_scatter", inp, out, "inp", "out")
    check_disjoint(out, inp)


def check_all_to_all(out: torch.Tensor, inp: torch.Tensor, world_size: int) -> None:
    """``inp`` and ``out`` are W chunks along dim 0, of one shape (a chunk: what one rank sends another)."""
    check_split("all_to_all", inp, world_size)
    if out.shape != inp.shape:
        raise ValueError(f"all_to_all: out must have inp's shape {tuple(inp.shape)}; got {tuple(out.shape)}")
    piece = inp[: inp.shape[0] // world_size]
    check_chunks("all_to_all", inp, piece, "inp", "inp")
    check_chunks("all_to_all", out, piece, "out", "inp")
    check_disjoint(out, inp)


def check_src(src, world_size: int) -> None:
    """broadcast's source rank."""
    if isinstance(src, bool) or not isinstance(src, int):
        raise TypeError(f"src must be an int rank, got {src!r}")
    if not 0 <= src < world_size:
        raise ValueError(f"src rank {src} is out of range for world size {world_size}")
