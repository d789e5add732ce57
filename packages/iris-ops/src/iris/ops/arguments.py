"""What the fused operations accept: every check of their arguments, before anything is launched.

A rejected call publishes nothing, so it leaves the peers' protocol untouched (they time out
waiting for it, as for any call a rank does not make).
"""

from __future__ import annotations

import torch

from iris.ccl.arguments import check_heap, check_op, check_strided

from .description import MAX_K, MAX_N, MAX_ROWS

__all__ = ["DTYPES", "check_heap", "check_op", "check_operands", "check_out", "check_result", "output_like"]

#: Input dtypes; fp16 and bf16 accumulate in fp32.
DTYPES = (torch.float16, torch.bfloat16, torch.float32)


def _check_matrix(t, name: str, heap, dims: int = 2) -> None:
    check_strided(t, name, heap, "the fused operations take strided tensors")
    if t.dim() != dims:
        what = "a matrix (2-D)" if dims == 2 else f"{dims}-D"
        raise ValueError(f"{name} must be {what}, got shape {tuple(t.shape)}")
    if t.dtype not in DTYPES:
        raise TypeError(f"{name} is {t.dtype}; the fused operations take {', '.join(map(str, DTYPES))}")


def check_operands(name: str, a, b, heap) -> None:
    """``a`` (rows x K) and ``b`` (K x N): matrices on the heap's device, of one supported dtype,
    whose shapes chain and fit a description."""
    _check_matrix(a, "a", heap)
    _check_matrix(b, "b", heap)
    if a.dtype != b.dtype:
        raise TypeError(f"{name}: a and b must have the same dtype, got a {a.dtype} and b {b.dtype}")
    if a.shape[1] != b.shape[0]:
        raise ValueError(
            f"{name}: a {tuple(a.shape)} and b {tuple(b.shape)} do not chain: b must have a's {a.shape[1]} columns as rows"
        )
    for what, value, limit in (("rows of a", a.shape[0], MAX_ROWS), ("inner dimension K", a.shape[1], MAX_K),
                               ("columns of b", b.shape[1], MAX_N)):  # fmt: skip
        if value > limit:
            raise ValueError(f"{name}: the {what} ({value}) exceed what a fused operation describes ({limit})")


def output_like(shape: tuple[int, int], a: torch.Tensor) -> torch.Tensor:
    """A new result of ``shape`` for inputs ``a`` (its dtype and device)."""
    return torch.empty(shape, dtype=a.dtype, device=a.device)


def check_out(name: str, out, shape: tuple[int, ...], a: torch.Tensor, heap, *inputs: torch.Tensor) -> torch.Tensor:
    """``out`` if given (checked: ``shape``, ``a``'s dtype, the heap's device, elements that do not
    overlap each other nor the inputs), else a new tensor."""
    if out is None:
        return output_like(shape, a)
    _check_matrix(out, "out", heap, len(shape))
    check_result(name, out, shape, a.dtype)
    if out.numel() and not _non_overlapping(out):
        raise ValueError(
            f"{name}: out's elements overlap in memory (shape {tuple(out.shape)}, strides {out.stride()}); "
            "pass a tensor whose every element has a place of its own"
        )
    for t, what in zip(inputs, ("a", "b")):
        if _overlap(out, t):
            raise ValueError(f"{name}: out and {what} overlap in memory; the result needs a tensor of its own")
    return out


def check_result(name: str, out: torch.Tensor, shape: tuple[int, ...], dtype: torch.dtype) -> None:
    """That ``out`` has the result's ``shape`` and ``dtype`` (the inputs')."""
    if tuple(out.shape) != shape:
        raise ValueError(f"{name}: out must have shape {shape}, got {tuple(out.shape)}")
    if out.dtype != dtype:
        raise TypeError(f"{name}: out must have the inputs' dtype {dtype}, got {out.dtype}")


def _non_overlapping(t: torch.Tensor) -> bool:
    dims = sorted((s, n) for s, n in zip(t.stride(), t.shape) if n > 1)
    span = 1
    for stride, size in dims:
        if stride < span:
            return False
        span = stride * size
    return True


def _overlap(x: torch.Tensor, y: torch.Tensor) -> bool:
    if not x.numel() or not y.numel():
        return False
    def extent(t):  # noqa: E306 - the bytes a strided tensor may touch
        last = sum((n - 1) * s for n, s in zip(t.shape, t.stride())) + 1
        return t.data_ptr(), t.data_ptr() + last * t.element_size()
    (a0, a1), (b0, b1) = extent(x), extent(y)
    return a0 < b1 and b0 < a1
