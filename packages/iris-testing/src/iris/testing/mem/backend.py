"""The adapter between the mem conformance suite and one backend, and where the backends differ."""

from __future__ import annotations

import importlib
from dataclasses import dataclass

__all__ = ["DIFFERENCES", "FLOAT_XCHG_ON_CPU_RANKS", "SCALAR_CAS_OVER_A_BLOCK", "Backend", "Difference"]


@dataclass(frozen=True)
class Backend:
    """A mem layer under the suite: its name, its package and the module of its test kernels.

    ``kernels`` is the layer's own device code for the suite (``tests/_<name>_kernels.py``, the one
    file each layer writes in its language), importable in the spawned ranks. Besides the kernels
    the suite launches, it defines:

    - ``NUM_WARPS``, and ``launch_options(block=None, cols=None)``: the keywords of a launch over a
      block of ``block`` elements (or of rows ``cols`` wide): the layouts Gluon takes as
      constexprs, and the warps;
    - ``SOURCE``: the AST source class of its compile-only builds;
    - ``compile_cases(target)``, ``stream_cases(dtype, block, target)``, ``clock_cases()``: the
      kernels the compile-only checks lower, as ``(label, kernel, signature, constexprs)``.

    A backend is pickled by value into every rank; it holds names only.
    """

    name: str  # "triton" or "gluon": the name DIFFERENCES use
    package: str  # the import it tests: "iris.mem.triton"
    kernels: str  # "_triton_kernels"

    def load(self):
        """The kernels module (import it only once TRITON_INTERPRET is settled: in a rank)."""
        return importlib.import_module(self.kernels)

    def differs(self, behaviour: str) -> bool:
        """Whether this backend departs from the suite in ``behaviour`` (one of DIFFERENCES)."""
        return any(d.backend == self.name and d.behaviour == behaviour for d in DIFFERENCES)


@dataclass(frozen=True)
class Difference:
    """A behaviour one backend does not share, and why: declared once, here."""

    backend: str
    behaviour: str
    reason: str


FLOAT_XCHG_ON_CPU_RANKS = "atomic_xchg on fp32/fp64 elements on CPU ranks"
SCALAR_CAS_OVER_A_BLOCK = "atomic_cas with scalar cmp and val over a block of pointers"

#: Every behaviour in which the backends differ. A test that depends on one asks ``differs``.
DIFFERENCES = (
    Difference(
        "gluon",
        FLOAT_XCHG_ON_CPU_RANKS,
        "Triton's interpreter has no float atomic_xchg. iris.mem.triton exchanges the bits as a "
        "same-width integer, which the interpreter runs as a cross-process atomic; iris.mem.gluon "
        "passes the float on and refuses it up front (InterpreterAtomicError). Compiled on a GPU both "
        "exchange floats.",
    ),
    Difference(
        "triton",
        SCALAR_CAS_OVER_A_BLOCK,
        "iris.mem.gluon spreads scalar values over the pointers' layout (Gluon needs it for every "
        "operation); iris.mem.triton leaves that to tl, whose atomic_cas, unlike its store and other "
        "atomics, does not broadcast: on CPU ranks the interpreter reads past the scalars and writes "
        "garbage to every element but the first. Give atomic_cas blocks of cmp and val there.",
    ),
)
