"""``aggregate``: Triton's aggregate decorator, made to work on triton 3.6 and newer, compiled and interpreted.

Two traps (see the project's PLATFORM.md):

* ``__init__`` must be callable by the code generator (triton 3.6): ``iris.mem.common.aggregate``
  marks it, for both device layers.
* Under ``TRITON_INTERPRET=1`` ``@triton.jit`` methods are ``InterpretedFunction`` objects, which
  Triton's ``_aggregate`` does not copy onto the aggregate class and which do not bind ``self``;
  they are re-attached here (static methods as static methods, the others as bound methods).
"""

from __future__ import annotations

import functools

from iris.mem import common as _common

from ._interpreter import INTERPRETED

__all__ = ["aggregate"]


def aggregate(cls):
    """Make ``cls`` (annotated fields, a plain ``__init__``, ``@triton.jit`` methods) a Triton aggregate."""
    agg = _common.aggregate(cls)
    if INTERPRETED:
        for name, member in cls.__dict__.items():
            if name.startswith("__"):
                continue
            if isinstance(member, staticmethod) and _is_interpreted(member.__func__):
                setattr(agg, name, staticmethod(member.__func__))
            elif _is_interpreted(member):
                setattr(agg, name, _method(member))
    return agg


def _is_interpreted(fn) -> bool:
    return type(fn).__name__ == "InterpretedFunction"


def _method(fn):
    @functools.wraps(fn.fn)
    def method(self, *args, **kwargs):
        return fn(self, *args, **kwargs)

    return method
