"""iris.mem.triton against the mem conformance suite (iris.testing.mem): every operation, local and
remote, on world sizes 1-4, both APIs, every atomic, the bounded wait and device errors, the
package's surface, and the kernels lowered for NVIDIA and AMD. The kernels are _triton_kernels."""

from iris.testing.mem import Backend, Conformance


class TestTriton(Conformance):
    backend = Backend("triton", package="iris.mem.triton", kernels="_triton_kernels")
