"""iris.testing.mem: the conformance suite of the device API both mem layers implement.

The suite (:class:`Conformance`) and its rank bodies are written once; each layer keeps only its
device kernels (``tests/_<name>_kernels.py``, Triton or Gluon) and a test module that names its
:class:`Backend`::

    from iris.testing.mem import Backend, Conformance

    class TestTriton(Conformance):
        backend = Backend("triton", package="iris.mem.triton", kernels="_triton_kernels")

A behaviour in which one backend departs from the suite is declared once, with its reason, in
:data:`DIFFERENCES`.
"""

from .backend import DIFFERENCES, FLOAT_XCHG_ON_CPU_RANKS, Backend, Difference
from .suite import Conformance

__all__ = ["DIFFERENCES", "FLOAT_XCHG_ON_CPU_RANKS", "Backend", "Conformance", "Difference"]
