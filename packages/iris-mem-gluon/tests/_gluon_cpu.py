"""Kernels and rank bodies for the checks of CPU execution itself (iris.mem.gluon.interpret).

Imported only inside rank processes (TRITON_INTERPRET is set there before triton is).
"""

import torch
from triton.experimental import gluon
from triton.experimental.gluon import language as gl

import iris.mem.gluon as img

ROWS, COLS = 8, 16


@gluon.jit
def _twice(x):
    return x * 2


@img.interpret()
@gluon.jit
def language_kernel(x_ptr, out_ptr, stats_ptr, ROWS: gl.constexpr, COLS: gl.constexpr, L2: gl.constexpr):
    """A layout-heavy kernel: out = f(x) over a ROWS x COLS tile per program, stats = reductions."""
    pid = gl.program_id(0)
    rows = gl.arange(0, ROWS, layout=gl.SliceLayout(1, L2))
    cols = gl.arange(0, COLS, layout=gl.SliceLayout(0, L2))
    offs = pid * ROWS * COLS + gl.expand_dims(rows, 1) * COLS + gl.expand_dims(cols, 0)
    x = gl.load(x_ptr + offs)
    x = gl.convert_layout(x, L2)
    acc = gl.zeros([ROWS, COLS], gl.float32, layout=L2)
    for i in gl.static_range(3):
        acc += x * (i + 1)  # 6 x
    k = 0
    while k < 2:
        acc = acc + gl.full_like(acc, 1.0)
        k += 1
    acc = gl.where(x > 0, acc, gl.zeros_like(acc))
    acc = gl.maximum(acc, gl.full([ROWS, COLS], -1.0, gl.float32, L2))
    acc = _twice(gl.abs(acc))
    img.barrier()
    gl.store(out_ptr + offs, acc)
    row_sum = gl.sum(acc, axis=1)
    total = gl.sum(row_sum, axis=0)
    biggest = gl.max(gl.max(acc, axis=1), axis=0)
    gl.store(stats_ptr + pid * 4 + 0, total)
    gl.store(stats_ptr + pid * 4 + 1, biggest)
    gl.store(stats_ptr + pid * 4 + 2, (gl.num_warps() + 0 * pid).to(gl.float32))
    gl.store(stats_ptr + pid * 4 + 3, gl.num_programs(0).to(gl.float32))


def check_language(rank, world_size):
    """The forwarded Gluon language computes what torch does."""
    import _gluon_kernels as K

    programs = 2
    x = torch.randn(programs * ROWS * COLS, generator=torch.Generator().manual_seed(0))
    out = torch.zeros_like(x)
    stats = torch.zeros(programs * 4)
    language_kernel[(programs,)](x, out, stats, ROWS=ROWS, COLS=COLS, L2=K.layout_2d(COLS), num_warps=2)
    want = torch.where(x > 0, 6 * x + 2, torch.zeros_like(x)).clamp(min=-1).abs() * 2
    assert torch.allclose(out, want), (out, want)
    tiles = want.reshape(programs, -1)
    assert torch.allclose(stats[0::4], tiles.sum(1)), stats
    assert torch.equal(stats[1::4], tiles.max(1).values), stats
    assert stats[2::4].tolist() == [2.0] * programs, "gl.num_warps() is the launch's num_warps"
    assert stats[3::4].tolist() == [float(programs)] * programs


@gluon.jit
def _load_operands(a_ptr, b_ptr, M: gl.constexpr, N: gl.constexpr, K: gl.constexpr, L2: gl.constexpr,
                   DOT_A: gl.constexpr, DOT_B: gl.constexpr):  # fmt: skip
    """a (M x K) and b (K x N), row-major, loaded in L2 and converted to the dot operand layouts."""
    rows = gl.arange(0, M, layout=gl.SliceLayout(1, L2))
    ks = gl.arange(0, K, layout=gl.SliceLayout(0, L2))
    k_rows = gl.arange(0, K, layout=gl.SliceLayout(1, L2))
    cols = gl.arange(0, N, layout=gl.SliceLayout(0, L2))
    a = gl.convert_layout(gl.load(a_ptr + rows[:, None] * K + ks[None, :]), DOT_A)
    b = gl.convert_layout(gl.load(b_ptr + k_rows[:, None] * N + cols[None, :]), DOT_B)
    return a, b


@gluon.jit
def _store_tile(c_ptr, acc, M: gl.constexpr, N: gl.constexpr, LAYOUT: gl.constexpr):
    """Store the M x N tile ``acc`` (in LAYOUT) row-major at c_ptr."""
    rows = gl.arange(0, M, layout=gl.SliceLayout(1, LAYOUT))
    cols = gl.arange(0, N, layout=gl.SliceLayout(0, LAYOUT))
    gl.store(c_ptr + rows[:, None] * N + cols[None, :], acc)


@img.interpret()
@gluon.jit
def mma_v2_kernel(a_ptr, b_ptr, c_ptr, M: gl.constexpr, N: gl.constexpr, K: gl.constexpr,
                  L2: gl.constexpr, MMA: gl.constexpr, DOT_A: gl.constexpr, DOT_B: gl.constexpr):  # fmt: skip
    """c = 1 + a @ b on tensor cores from register operands (a: M x K, b: K x N, row-major)."""
    a, b = _load_operands(a_ptr, b_ptr, M, N, K, L2, DOT_A, DOT_B)
    acc = gl.nvidia.ampere.mma_v2(a, b, gl.full([M, N], 1.0, gl.float32, MMA))
    _store_tile(c_ptr, acc, M, N, MMA)


def check_mma_v2(rank, world_size):
    """gl.nvidia.ampere.mma_v2 runs on CPU as acc + a @ b in fp32, for fp16, bf16 and fp32 operands."""
    import _gluon_kernels as kernels

    M, N, K = 32, 16, 64
    mma = gl.NVMMADistributedLayout(version=[2, 0], warps_per_cta=[4, 1], instr_shape=[16, 8])
    g = torch.Generator().manual_seed(0)
    for dtype, k_width in [(torch.float16, 2), (torch.bfloat16, 2), (torch.float32, 1)]:
        a = torch.randn(M, K, generator=g).to(dtype)
        b = torch.randn(K, N, generator=g).to(dtype)
        c = torch.zeros(M, N)
        dot_a = gl.DotOperandLayout(operand_index=0, parent=mma, k_width=k_width)
        dot_b = gl.DotOperandLayout(operand_index=1, parent=mma, k_width=k_width)
        mma_v2_kernel[(1,)](a, b, c, M=M, N=N, K=K, L2=kernels.layout_2d(16), MMA=mma, DOT_A=dot_a, DOT_B=dot_b)
        want = 1 + a.double() @ b.double()
        assert torch.allclose(c.double(), want, atol=1e-4, rtol=1e-5), f"{dtype}: max error {(c - want).abs().max()}"


@img.interpret()
@gluon.jit
def dot_fma_kernel(a_ptr, b_ptr, c_ptr, M: gl.constexpr, N: gl.constexpr, K: gl.constexpr,
                   L2: gl.constexpr, DOT_A: gl.constexpr, DOT_B: gl.constexpr):  # fmt: skip
    """c = 1 + a @ b by FMA from register operands (a: M x K, b: K x N, row-major)."""
    a, b = _load_operands(a_ptr, b_ptr, M, N, K, L2, DOT_A, DOT_B)
    acc = gl.dot_fma(a, b, gl.full([M, N], 1.0, gl.float32, L2))
    _store_tile(c_ptr, acc, M, N, L2)


def check_dot_fma(rank, world_size):
    """gl.dot_fma runs on CPU as acc + a @ b in fp32, for fp16, bf16 and fp32 operands."""
    import _gluon_kernels as kernels

    M, N, K = 32, 16, 64
    layout = kernels.layout_2d(16)
    g = torch.Generator().manual_seed(1)
    for dtype in (torch.float16, torch.bfloat16, torch.float32):
        a = torch.randn(M, K, generator=g).to(dtype)
        b = torch.randn(K, N, generator=g).to(dtype)
        c = torch.zeros(M, N)
        dot_a = gl.DotOperandLayout(operand_index=0, parent=layout, k_width=0)
        dot_b = gl.DotOperandLayout(operand_index=1, parent=layout, k_width=0)
        dot_fma_kernel[(1,)](a, b, c, M=M, N=N, K=K, L2=layout, DOT_A=dot_a, DOT_B=dot_b)
        want = 1 + a.double() @ b.double()
        assert torch.allclose(c.double(), want, atol=1e-4, rtol=1e-5), f"{dtype}: max error {(c - want).abs().max()}"


@gluon.jit
def _worker(x_ptr):
    pass


@img.interpret()
@gluon.jit
def warp_specialize_kernel(x_ptr, N: gl.constexpr):
    gl.warp_specialize([(_worker, (x_ptr,)), (_worker, (x_ptr,))], [4])


@img.interpret()
@gluon.jit
def tcgen05_kernel(x_ptr, N: gl.constexpr):
    gl.nvidia.blackwell.tcgen05_mma(x_ptr, x_ptr, x_ptr)


@img.interpret()
@gluon.jit
def mfma_kernel(x_ptr, N: gl.constexpr):
    gl.amd.cdna3.mfma(x_ptr, x_ptr, x_ptr)


@img.interpret()
@gluon.jit
def async_copy_kernel(x_ptr, N: gl.constexpr):
    gl.nvidia.ampere.async_copy.async_copy_global_to_shared(x_ptr, x_ptr)


UNSUPPORTED = {
    "warp_specialize_kernel": ("gl.warp_specialize", "warp specialization"),
    "tcgen05_kernel": ("gl.nvidia.blackwell.tcgen05_mma", "MMA (tcgen05)"),
    "mfma_kernel": ("gl.amd.cdna3.mfma", "MMA (MFMA)"),
    "async_copy_kernel": ("gl.nvidia.ampere.async_copy.async_copy_global_to_shared", "async copies"),
}


def check_unsupported(rank, world_size):
    """Each construct the CPU cannot model raises UnsupportedOnCPUError naming it, before any work."""
    x = torch.zeros(64)
    for name, (construct, what) in UNSUPPORTED.items():
        kernel = globals()[name]
        try:
            kernel[(1,)](x, N=64)
        except img.UnsupportedOnCPUError as e:
            text = str(e)
            assert construct in text and f"({what})" in text and "Run this kernel on a GPU" in text, text
        else:
            raise AssertionError(f"{name} ran on CPU without an error")


def check_language_restored(rank, world_size):
    """After a CPU launch the Gluon language is Gluon again: a kernel compiles for a GPU target
    in the same (interpreting) process, and calling a device function outside a kernel fails."""
    import _gluon_kernels as K

    from iris.testing.mem.lowering import TARGETS, compile_one

    check_language(rank, world_size)
    assert not img.interpret.active()
    assert getattr(gl.arange, "__triton_builtin__", False), "gl.arange was not restored"
    for target in TARGETS.values():
        _, fn, sig, consts = K.stream_cases("fp32", 1024, target)[1]
        compile_one(K, fn, sig, consts, target)
    try:
        _twice(1.0)
    except RuntimeError as e:
        assert "outside of the scope of a kernel" in str(e), str(e)
    else:
        raise AssertionError("a @gluon.jit function ran on the host outside a kernel")

