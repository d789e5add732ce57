"""iris.mem.gluon's ``Tracing`` against the tracing suite (iris.testing.mem.tracing), the one
iris-mem-triton runs too: complete events on world sizes 1-4 through both APIs, exact overflow
with canaries, nothing recorded when off, the disabled kernel equal to its untraced twin on NVIDIA
and AMD, and on a GPU the clock alignment. The kernels are _gluon_tracing_kernels."""

from iris.testing.mem import Backend
from iris.testing.mem.tracing import TracingConformance


class TestGluonTracing(TracingConformance):
    backend = Backend("gluon", package="iris.mem.gluon", kernels="_gluon_tracing_kernels")
