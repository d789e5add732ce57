"""The collectives as ``torch.library`` custom ops (``torch.ops.iris.*``), for ``torch.compile``.

Eager calls never go through these ops: each public collective starts with ``if _compiling():``
(``torch.compiler.is_dynamo_compiling``, bound at module level: a function that returns False,
about 0.03 us a call on the development CPU, against 0.13 us for ``torch.compiler.is_compiling``,
which also reads torch.jit's state) and only while dynamo traces it (``torch.compile``, strict
``torch.export``) does it call the function of the same name and signature here instead, which
calls its op. Each op's implementation is the eager collective itself, run when the compiled graph
runs; its fake implementation has nothing to compute (the collectives write into tensors the
caller made), so a graph calling ``iris.ccl.all_reduce(x)`` traces with no graph break and runs
the very same kernels. Tracing without dynamo (non-strict ``torch.export``, ``make_fx``) would run
the eager code on fake tensors, which fails: call the ``torch.ops.iris`` ops there.

An op takes neither a heap nor a ``Config``:

- the heap is an int handle: 0 for ``heap=None`` (the default heap when the graph runs, as in
  eager code), else ``iris.ccl.heap_handles.handle(heap)``, run at trace time;
- the config is its fields, one argument each (``ConfigArgs``), rebuilt by the implementation:
  the graph shows them, and equal configs share a graph (dynamo guards on their values).

Ops that write a tensor declare it mutated (``Tensor(a!)``) and return nothing; the public
functions return the tensor as in eager code. Under functionalization (``aot_eager``) such an op
runs on a copy of the tensor that is then copied back: the same bits (the copy is off the heap, so
the collective stages it, as for any tensor off the heap). ``barrier`` writes nothing a graph can
see, so it is registered as having a side effect (``torch.fx.node.has_side_effect``), or graphs
would drop it. Every rank must call collectives in the same order: ``aot_eager`` keeps a graph's
calls in program order (tested on CPU ranks); inductor compiled and ran them on one rank, but
whether its scheduler may reorder two collectives of one graph is not tested. ``reset`` is host
code between collectives and has no op.

Importing this module (``import iris.ccl`` does) registers the ``iris::`` ops below, once, and
marks ``iris::barrier`` as side-effectful; it changes nothing else (``torch._dynamo`` stays
unimported: ``heap_handles`` is imported only while a traced call names a heap).
"""

from __future__ import annotations

import dataclasses
import functools

import torch

from . import collectives
from .config import DEFAULT, Config

__all__ = [
    "ConfigArgs",
    "all_gather",
    "all_reduce",
    "all_to_all",
    "barrier",
    "broadcast",
    "declare_op",
    "heap_handle",
    "heap_of",
    "reduce_scatter",
]

#: A config field's annotation -> its type in an op schema.
_SCHEMA_TYPES = {"str": "str", "bool": "bool", "int": "int", "int | None": "int?"}


# -- what an op takes instead of a heap and a config ------------------------------------------------


def heap_handle(heap) -> int:
    """The int that names ``heap`` in a graph (0: ``heap=None``, the default heap when the op runs)."""
    if heap is None:
        return 0
    from .heap_handles import handle  # imports torch._dynamo: only once a traced call names a heap

    return handle(heap)


def heap_of(h: int):
    """The heap named by handle ``h`` (None for 0)."""
    if h == 0:
        return None
    from .heap_handles import heap_of as lookup

    return lookup(h)


class ConfigArgs:
    """How a config class (a frozen dataclass) travels as op arguments: its fields, one argument each.

    ``schema``: the arguments in an op schema (``"str variant, int? block_size, ..."``);
    ``values(config)``: a config's (``None``: the default's), in field order, read while traced
    (dynamo guards on each, so equal configs share a graph); ``config(values)``: the config again.
    """

    def __init__(self, cls, default, name: str):
        self.cls, self.default, self.name = cls, default, name
        self.names = tuple(f.name for f in dataclasses.fields(cls))
        args = []
        for f in dataclasses.fields(cls):
            kind = _SCHEMA_TYPES.get(f.type) if isinstance(f.type, str) else None
            if kind is None:
                raise TypeError(f"{name}.{f.name} is annotated {f.type!r}; a config field as an op argument is "
                                f"one of {sorted(_SCHEMA_TYPES)}")  # fmt: skip
            args.append(f"{kind} {f.name}")
        self.schema = ", ".join(args)

    def values(self, config) -> tuple:
        if config is None:
            config = self.default
        elif not isinstance(config, self.cls):
            raise TypeError(f"config must be an {self.name}, got {type(config).__name__}")
        return tuple(getattr(config, n) for n in self.names)

    def config(self, values: tuple):
        return _config(self.cls, values)


@functools.lru_cache(maxsize=64)
def _config(cls, values: tuple):
    return cls(*values)


_ARGS = ConfigArgs(Config, DEFAULT, "iris.ccl.Config")
_values = _ARGS.values


# -- the ops ------------------------------------------------------------------------------------------


def declare_op(name: str, params: str, config_args: ConfigArgs, eager, fake, returns: str = "()"):
    """Register ``iris::<name>(<params>, int heap, <config_args.schema>) -> <returns>``; its implementation
    calls the eager ``eager.<name>`` (looked up when the op runs: that module imports the one declaring
    the op) with the ``params`` by name, ``heap=`` the handle's heap and ``config=`` the fields' config.

    A ``Tensor(a!)`` parameter is declared mutated. ``returns``: ``"()"`` (the eager call's result is the
    tensor it wrote: dropped), ``"Tensor"``, or ``"Tensor[]"`` (its tuple, or its one tensor, as a list).
    ``fake``: the fake implementation, given the op's arguments. Used by iris.ops' fused operations too.
    """
    typed = [p.split() for p in params.split(",") if p.strip()]  # [type, name] each
    names = [n for _, n in typed]
    mutated = tuple(n for t, n in typed if t.endswith("(a!)"))
    k = len(names)

    def implementation(*args):
        result = getattr(eager, name)(**dict(zip(names, args)), heap=heap_of(args[k]),
                                      config=config_args.config(args[k + 1:]))  # fmt: skip
        if returns == "()":
            return None
        if returns == "Tensor[]":
            return list(result) if isinstance(result, tuple) else [result]
        return result

    schema = f"({params}{', ' if params else ''}int heap, {config_args.schema}) -> {returns}"
    op = torch.library.custom_op(f"iris::{name}", implementation, mutates_args=mutated, schema=schema)
    op.register_fake(fake)
    return op


def _writes_in_place(*args) -> None:
    """The fake implementation of every collective: the tensors it writes exist already."""


#: Each collective's op: the parameters before ``int heap`` and the config's fields, named as the
#: eager function's; ``Tensor(a!)``: the tensor it writes.
_COLLECTIVES = {
    "all_reduce": "Tensor(a!) tensor, str op",
    "all_gather": "Tensor(a!) out, Tensor inp",
    "reduce_scatter": "Tensor(a!) out, Tensor inp, str op",
    "all_to_all": "Tensor(a!) out, Tensor inp",
    "broadcast": "Tensor(a!) tensor, int src",
    "barrier": "",
}

for _name, _params in _COLLECTIVES.items():
    declare_op(_name, _params, _ARGS, collectives, _writes_in_place)
_OPS = torch.ops.iris
torch.fx.node.has_side_effect(torch.ops.iris.barrier.default)  # no tensor shows its effect: keep it in graphs


# -- what the public functions call while traced ------------------------------------------------------


def all_reduce(tensor, op="sum", *, heap=None, config=None):
    """``iris.ccl.all_reduce`` as the op ``iris::all_reduce``."""
    _OPS.all_reduce(tensor, op, heap_handle(heap), *_values(config))
    return tensor


def all_gather(out, inp, *, heap=None, config=None):
    """``iris.ccl.all_gather`` as the op ``iris::all_gather``."""
    _OPS.all_gather(out, inp, heap_handle(heap), *_values(config))
    return out


def reduce_scatter(out, inp, op="sum", *, heap=None, config=None):
    """``iris.ccl.reduce_scatter`` as the op ``iris::reduce_scatter``."""
    _OPS.reduce_scatter(out, inp, op, heap_handle(heap), *_values(config))
    return out


def all_to_all(out, inp, *, heap=None, config=None):
    """``iris.ccl.all_to_all`` as the op ``iris::all_to_all``."""
    _OPS.all_to_all(out, inp, heap_handle(heap), *_values(config))
    return out


def broadcast(tensor, src, *, heap=None, config=None):
    """``iris.ccl.broadcast`` as the op ``iris::broadcast``."""
    _OPS.broadcast(tensor, src, heap_handle(heap), *_values(config))
    return tensor


def barrier(*, heap=None, config=None):
    """``iris.ccl.barrier`` as the op ``iris::barrier``."""
    _OPS.barrier(heap_handle(heap), *_values(config))
