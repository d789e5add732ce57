"""The fused operations as ``torch.library`` custom ops (``torch.ops.iris.*``), for ``torch.compile``.

The collectives' scheme (``iris.ccl.custom_ops``), for the operations: each public operation
starts with ``if _compiling():`` and, only while ``torch.compile`` or ``torch.export`` traces it,
calls the function of the same name and signature here, which calls its op; the op's
implementation is the eager operation, run when the graph runs. The heap travels as an int
handle, an ``iris.ops.Config`` as its fields (``iris.ccl.custom_ops.ConfigArgs``).

Each op returns a new tensor (``iris::all_gather_matmul`` a list: ``[c]``, or ``[gathered, c]``
with ``return_gathered``). Its fake implementation makes the result's shape from the operands and
the heap's world size, after the operation's own checks of them (dtype, shape, ``op``), so a bad
call fails at trace time with the eager call's message.

``out=`` while traced: the functional op, then ``out.copy_(result)`` (``out`` checked for the
result's shape, dtype and device first, as eager code checks it; that it overlaps no operand is
not checked, since the result is a tensor of its own until the copy). One op per operation, and
no mutable overload to functionalize; the cost is the copy (under inductor too), where an eager
call with a row-major heap ``out`` writes into it directly.

Importing this module (``import iris.ops`` does) registers the four ``iris::`` ops below, once,
and changes nothing else.
"""

from __future__ import annotations

import torch

from iris.ccl.arguments import check_heap
from iris.ccl.custom_ops import ConfigArgs, declare_op, heap_handle, heap_of

from . import operations
from .arguments import check_op, check_operands, check_result, output_like
from .config import DEFAULT, Config

__all__ = ["all_gather_matmul", "matmul_all_gather", "matmul_all_reduce", "matmul_reduce_scatter"]

_ARGS = ConfigArgs(Config, DEFAULT, "iris.ops.Config")
_values = _ARGS.values


# -- the ops' fake implementations: the result's shape, after the operation's own checks ------------


def _all_gather_matmul_fake(a, b, return_gathered, heap, *config):
    w = _world_size("all_gather_matmul", a, b, heap)
    c = output_like((w * a.shape[0], b.shape[1]), a)
    return [output_like((w * a.shape[0], a.shape[1]), a), c] if return_gathered else [c]


def _matmul_all_gather_fake(a, b, heap, *config):
    return output_like((a.shape[0], _world_size("matmul_all_gather", a, b, heap) * b.shape[1]), a)


def _matmul_reduce_scatter_fake(a, b, op, heap, *config):
    name = "matmul_reduce_scatter"
    w = _world_size(name, a, b, heap)
    check_op(op, a.dtype)
    if a.shape[0] % w:
        raise ValueError(
            f"{name}: a's rows ({a.shape[0]}) must split evenly over the world size {w} (each rank gets M/W)"
        )
    return output_like((a.shape[0] // w, b.shape[1]), a)


def _matmul_all_reduce_fake(a, b, op, heap, *config):
    _world_size("matmul_all_reduce", a, b, heap)
    check_op(op, a.dtype)
    return output_like((a.shape[0], b.shape[1]), a)


def _world_size(name: str, a, b, handle: int) -> int:
    """The world size of the heap of ``handle``, once ``a`` and ``b`` pass the operation's checks."""
    heap = check_heap(heap_of(handle))
    check_operands(name, a, b, heap)
    return heap.world_size


# -- the ops ------------------------------------------------------------------------------------------

#: Each operation's op: the parameters before ``int heap`` and the config's fields (named as the
#: eager function's), what it returns, its fake implementation.
_OPERATIONS = {
    "all_gather_matmul": ("Tensor a, Tensor b, bool return_gathered", "Tensor[]", _all_gather_matmul_fake),
    "matmul_all_gather": ("Tensor a, Tensor b", "Tensor", _matmul_all_gather_fake),
    "matmul_reduce_scatter": ("Tensor a, Tensor b, str op", "Tensor", _matmul_reduce_scatter_fake),
    "matmul_all_reduce": ("Tensor a, Tensor b, str op", "Tensor", _matmul_all_reduce_fake),
}

for _name, (_params, _returns, _fake) in _OPERATIONS.items():
    declare_op(_name, _params, _ARGS, operations, _fake, _returns)
_OPS = torch.ops.iris


# -- what the public functions call while traced ------------------------------------------------------


def all_gather_matmul(a, b, *, out=None, return_gathered=False, heap=None, config=None):
    """``iris.ops.all_gather_matmul`` as the op ``iris::all_gather_matmul``."""
    if not isinstance(return_gathered, bool):
        raise TypeError(f"return_gathered must be True or False, got {return_gathered!r}")
    result = _OPS.all_gather_matmul(a, b, return_gathered, heap_handle(heap), *_values(config))
    c = result[-1] if out is None else _into("all_gather_matmul", out, result[-1])
    return (result[0], c) if return_gathered else c


def matmul_all_gather(a, b, *, out=None, heap=None, config=None):
    """``iris.ops.matmul_all_gather`` as the op ``iris::matmul_all_gather``."""
    c = _OPS.matmul_all_gather(a, b, heap_handle(heap), *_values(config))
    if isinstance(out, torch.Tensor) and out.dim() == 3:  # the products stacked: a view of the M x W*n result
        c = c.view(c.shape[0], out.shape[0], -1).permute(1, 0, 2)
    return c if out is None else _into("matmul_all_gather", out, c)


def matmul_reduce_scatter(a, b, op="sum", *, out=None, heap=None, config=None):
    """``iris.ops.matmul_reduce_scatter`` as the op ``iris::matmul_reduce_scatter``."""
    c = _OPS.matmul_reduce_scatter(a, b, op, heap_handle(heap), *_values(config))
    return c if out is None else _into("matmul_reduce_scatter", out, c)


def matmul_all_reduce(a, b, op="sum", *, out=None, heap=None, config=None):
    """``iris.ops.matmul_all_reduce`` as the op ``iris::matmul_all_reduce``."""
    c = _OPS.matmul_all_reduce(a, b, op, heap_handle(heap), *_values(config))
    return c if out is None else _into("matmul_all_reduce", out, c)


def _into(name: str, out, result):
    """``out``, holding ``result`` (checked as eager code checks ``out``)."""
    if not isinstance(out, torch.Tensor):
        raise TypeError(f"out must be a torch.Tensor, got {type(out).__name__}")
    check_result(name, out, tuple(result.shape), result.dtype)
    if out.device != result.device:
        raise ValueError(f"out is on {out.device}, but the operands are on {result.device}")
    return out.copy_(result)
