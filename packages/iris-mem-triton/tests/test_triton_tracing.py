"""iris.mem.triton's ``Tracing`` against the tracing suite (iris.testing.mem.tracing), the one
iris-mem-gluon runs too: complete events on world sizes 1-4 through both APIs, exact overflow
with canaries, nothing recorded when off, the disabled kernel equal to its untraced twin on NVIDIA
and AMD, and on a GPU the clock alignment. The kernels are _tracing_kernels."""

from iris.testing.mem import Backend
from iris.testing.mem.tracing import TracingConformance


class TestTritonTracing(TracingConformance):
    backend = Backend("triton", package="iris.mem.triton", kernels="_tracing_kernels")
