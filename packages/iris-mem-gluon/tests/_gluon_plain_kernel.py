"""A Gluon kernel module that knows nothing of Iris (imported before iris.mem.gluon in a test, and
run by the noxfile's install check with only the installed wheel: so it imports nothing of the
tests or of iris-testing)."""

from triton.experimental import gluon
from triton.experimental.gluon import language as gl


@gluon.jit
def clamp_kernel(x_ptr, out_ptr, lo, hi, n, BLOCK: gl.constexpr, L: gl.constexpr):
    """out = x clamped to [lo, hi], NaN kept (a select, a min and a max)."""
    offs = gl.program_id(0) * BLOCK + gl.arange(0, BLOCK, layout=L)
    mask = offs < n
    x = gl.load(x_ptr + offs, mask=mask)
    gl.store(out_ptr + offs, gl.where(x != x, x, gl.minimum(gl.maximum(x, lo), hi)), mask=mask)


if __name__ == "__main__":
    import torch

    import iris.mem.gluon as img  # after the kernel was decorated: CPU execution still applies in its scope

    x = torch.linspace(-3, 3, 100)
    x[7] = float("nan")
    out = torch.empty_like(x)
    with img.interpret():
        clamp_kernel[(2,)](x, out, -1.0, 2.0, 100, BLOCK=64, L=img.blocked_layout(64, 4))
    assert torch.allclose(out, x.clamp(-1.0, 2.0), rtol=0, atol=0, equal_nan=True), out
    print("ok")
