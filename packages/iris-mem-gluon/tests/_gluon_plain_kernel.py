"""A Gluon kernel module that knows nothing of Iris (imported before iris.mem.gluon in a test)."""

from triton.experimental import gluon
from triton.experimental.gluon import language as gl


@gluon.jit
def axpy_kernel(x_ptr, y_ptr, a, n, BLOCK: gl.constexpr, L: gl.constexpr):
    offs = gl.program_id(0) * BLOCK + gl.arange(0, BLOCK, layout=L)
    mask = offs < n
    x = gl.load(x_ptr + offs, mask=mask)
    y = gl.load(y_ptr + offs, mask=mask)
    gl.store(y_ptr + offs, a * x + y, mask=mask)


if __name__ == "__main__":
    import torch

    import iris.mem.gluon as img  # after the kernel was decorated: CPU execution still applies in its scope

    x, y = torch.arange(100.0), torch.ones(100)
    with img.interpret():
        axpy_kernel[(2,)](x, y, 2.0, 100, BLOCK=64, L=img.blocked_layout(64, 4))
    assert torch.equal(y, 2 * torch.arange(100.0) + 1), y
    print("ok")
