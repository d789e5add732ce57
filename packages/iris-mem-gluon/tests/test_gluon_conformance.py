"""iris.mem.gluon against the mem conformance suite (iris.testing.mem): every operation, local and
remote, on world sizes 1-4, both APIs, every atomic, the bounded wait and device errors, the
package's surface, and the kernels lowered for NVIDIA and AMD. The kernels are _gluon_kernels."""

from iris.testing.mem import Backend, Conformance


class TestGluon(Conformance):
    backend = Backend("gluon", package="iris.mem.gluon", kernels="_gluon_kernels")
