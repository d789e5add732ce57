"""A pipelined Hopper GEMM (TMA into a ring of shared-memory slots, mbarriers, wgmma) for the checks
of Hopper's primitives: on CPU ranks through their CPU meanings, compiled for sm_90, and on a
Hopper GPU. Imported only inside rank processes (TRITON_INTERPRET is set there before triton is).
"""

import re

import torch
from triton.experimental import gluon
from triton.experimental.gluon import language as gl

import iris.mem.gluon as img
from iris.mem.gluon import hopper as hp

hopper = gl.nvidia.hopper
tma = hopper.tma
mbarrier = hopper.mbarrier


@img.interpret()
@gluon.jit
def hopper_matmul_kernel(
    a_ptr, b_ptr, c_ptr, M, N, K, stride_am, stride_bk, stride_bn, stride_cm,
    BLOCK_M: gl.constexpr, BLOCK_N: gl.constexpr, BLOCK_K: gl.constexpr, STAGES: gl.constexpr,
    B_TRANSPOSED: gl.constexpr, ACC: gl.constexpr, STORE: gl.constexpr,
):  # fmt: skip
    """c = a @ b, one BLOCK_M x BLOCK_N tile a program: TMA brings the A and B tiles into a ring of
    STAGES shared-memory slots (an mbarrier each), wgmma multiplies one slot while the next are
    loaded. B_TRANSPOSED: b is given as its N x K transpose (its rows contiguous), read by TMA as
    such and handed to wgmma through a permuted view."""
    dtype: gl.constexpr = a_ptr.dtype.element_ty
    a_layout: gl.constexpr = gl.NVMMASharedLayout.get_default_for([BLOCK_M, BLOCK_K], dtype)
    off_m = gl.program_id(0) * BLOCK_M
    off_n = gl.program_id(1) * BLOCK_N
    a_desc = tma.make_tensor_descriptor(a_ptr, [M, K], [stride_am, 1], [BLOCK_M, BLOCK_K], a_layout)
    a_bufs = gl.allocate_shared_memory(dtype, [STAGES, BLOCK_M, BLOCK_K], a_layout)
    if B_TRANSPOSED:
        b_layout: gl.constexpr = gl.NVMMASharedLayout.get_default_for([BLOCK_N, BLOCK_K], dtype)
        b_desc = tma.make_tensor_descriptor(b_ptr, [N, K], [stride_bn, 1], [BLOCK_N, BLOCK_K], b_layout)
        b_bufs = gl.allocate_shared_memory(dtype, [STAGES, BLOCK_N, BLOCK_K], b_layout)
    else:
        b_layout: gl.constexpr = gl.NVMMASharedLayout.get_default_for([BLOCK_K, BLOCK_N], dtype)
        b_desc = tma.make_tensor_descriptor(b_ptr, [K, N], [stride_bk, 1], [BLOCK_K, BLOCK_N], b_layout)
        b_bufs = gl.allocate_shared_memory(dtype, [STAGES, BLOCK_K, BLOCK_N], b_layout)
    bars = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    for i in gl.static_range(STAGES):
        mbarrier.init(bars.index(i), count=1)
    TILE_BYTES: gl.constexpr = (BLOCK_M + BLOCK_N) * BLOCK_K * dtype.primitive_bitwidth // 8
    k_tiles = gl.cdiv(K, BLOCK_K)
    for i in gl.static_range(STAGES - 1):  # the ring's first slots
        _load_stage(a_desc, b_desc, a_bufs, b_bufs, bars, i, off_m, off_n, i < k_tiles, BLOCK_K, TILE_BYTES,
                    B_TRANSPOSED)  # fmt: skip
    acc = gl.zeros([BLOCK_M, BLOCK_N], gl.float32, ACC)
    for k in range(k_tiles):
        slot = k % STAGES
        mbarrier.wait(bars.index(slot), (k // STAGES) & 1)
        b = b_bufs.index(slot)
        if B_TRANSPOSED:
            b = b.permute((1, 0))
        acc = hopper.warpgroup_mma(a_bufs.index(slot), b, acc, is_async=True)
        acc = hopper.warpgroup_mma_wait(1, deps=[acc])  # the previous product is done: its slot is free
        nxt = k + STAGES - 1
        _load_stage(a_desc, b_desc, a_bufs, b_bufs, bars, nxt % STAGES, off_m, off_n, nxt < k_tiles, BLOCK_K,
                    TILE_BYTES, B_TRANSPOSED, nxt)  # fmt: skip
    acc = hopper.warpgroup_mma_wait(0, deps=[acc])
    for i in gl.static_range(STAGES):
        mbarrier.invalidate(bars.index(i))
    rows = off_m + gl.arange(0, BLOCK_M, layout=gl.SliceLayout(1, STORE))
    cols = off_n + gl.arange(0, BLOCK_N, layout=gl.SliceLayout(0, STORE))
    c = gl.convert_layout(acc, STORE)
    mask = (gl.expand_dims(rows, 1) < M) & (gl.expand_dims(cols, 0) < N)
    gl.store(c_ptr + gl.expand_dims(rows, 1) * stride_cm + gl.expand_dims(cols, 0), c, mask=mask)


@gluon.jit
def _load_stage(a_desc, b_desc, a_bufs, b_bufs, bars, slot, off_m, off_n, pred, BLOCK_K: gl.constexpr,
                TILE_BYTES: gl.constexpr, B_TRANSPOSED: gl.constexpr, k=None):  # fmt: skip
    """K tile ``k`` (default: ``slot``) of A and B into ring slot ``slot``, where ``pred``."""
    if k is None:
        k = slot
    bar = bars.index(slot)
    mbarrier.expect(bar, TILE_BYTES, pred)
    hp.tma_load(a_desc, [off_m, k * BLOCK_K], bar, a_bufs.index(slot), pred)
    if B_TRANSPOSED:
        hp.tma_load(b_desc, [off_n, k * BLOCK_K], bar, b_bufs.index(slot), pred)
    else:
        hp.tma_load(b_desc, [k * BLOCK_K, off_n], bar, b_bufs.index(slot), pred)


def hopper_layouts(block_n: int, num_warps: int = 4):
    """(ACC, STORE): the wgmma accumulator layout for ``num_warps`` warps and a store layout."""
    acc = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[num_warps, 1], instr_shape=[16, block_n, 16])
    store = gl.BlockedLayout([1, 8], [4, 8], [num_warps, 1], [1, 0])
    return acc, store


HOPPER_TILES = dict(BLOCK_M=64, BLOCK_N=32, BLOCK_K=16, STAGES=3)


def check_hopper_matmul(rank, world_size, device="cpu"):
    """The pipelined TMA + wgmma kernel computes torch's product (on CPU ranks, or on ``device``):
    ragged M, N and K (TMA's zero fill past the edges), more K tiles than ring slots (slots
    reused), B in both layouts."""
    if device != "cpu":  # the descriptors built on the device need global scratch at launch
        import triton

        triton.set_allocator(lambda size, align, stream: torch.empty(size, dtype=torch.int8, device=device))
    acc, store = hopper_layouts(HOPPER_TILES["BLOCK_N"])
    g = torch.Generator().manual_seed(3)
    for dtype in (torch.float16, torch.bfloat16):
        for transposed in (False, True):
            M, N, K = 100, 56, 88  # 6 K tiles through 3 slots; edges in every dimension
            a = torch.randn(M, K, generator=g).to(dtype).to(device)
            b = torch.randn(K, N, generator=g).to(dtype).to(device)
            b_arg = b.t().contiguous() if transposed else b
            c = torch.full((M, N), float("nan"), device=device)
            grid = (-(-M // HOPPER_TILES["BLOCK_M"]), -(-N // HOPPER_TILES["BLOCK_N"]))
            stride_bk, stride_bn = (0, b_arg.stride(0)) if transposed else (b_arg.stride(0), 0)
            hopper_matmul_kernel[grid](a, b_arg, c, M, N, K, a.stride(0), stride_bk, stride_bn, c.stride(0),
                                       B_TRANSPOSED=transposed, ACC=acc, STORE=store, **HOPPER_TILES)  # fmt: skip
            want = (a.double() @ b.double()).to(c.device)
            assert torch.allclose(c.double(), want, atol=1e-3, rtol=1e-4), (
                f"{dtype}, b transposed {transposed}: max error {(c.double() - want).abs().max()}"
            )


#: PTX a Hopper build of the kernel must contain: TMA copies, wgmma, mbarrier waits.
HOPPER_PTX = {"TMA": r"cp\.async\.bulk\.tensor", "wgmma": r"wgmma\.mma_async", "mbarrier": r"mbarrier\.try_wait"}


def compile_hopper_matmul(rank, world_size):
    """{case: the HOPPER_PTX instructions missing from its sm_90 PTX} for fp16 and bf16, B in both
    layouts (on the cuda rank of the ``compiler`` fixture; None on the others)."""
    from iris.testing import COMPILE_TARGETS
    from iris.testing.mem.lowering import TARGETS

    import triton

    if COMPILE_TARGETS[rank] != "cuda":
        return None
    target = TARGETS["cuda"]
    acc, store = hopper_layouts(HOPPER_TILES["BLOCK_N"])
    names = ["a_ptr", "b_ptr", "c_ptr", "M", "N", "K", "stride_am", "stride_bk", "stride_bn", "stride_cm"]
    missing = {}
    for ty in ("fp16", "bf16"):
        for transposed in (False, True):
            signature = {n: (f"*{ty}" if i < 2 else "*fp32" if i == 2 else "i32") for i, n in enumerate(names)}
            constexprs = dict(HOPPER_TILES, B_TRANSPOSED=transposed, ACC=acc, STORE=store)
            signature.update({k: "constexpr" for k in constexprs})
            attrs = {(i,): [["tt.divisibility", 16]] for i in range(len(names))}
            source = img.GluonASTSource(hopper_matmul_kernel, signature, constexprs, attrs=attrs)
            ptx = triton.compile(source, target=target, options={"num_warps": 4}).asm["ptx"]
            missing[f"{ty}, b transposed {transposed}"] = [k for k, p in HOPPER_PTX.items() if not re.search(p, ptx)]
    return missing


#: Faults of ``fault_kernel``, each with words of the error the CPU raises where the GPU would hang
#: or race (0: none, the kernel is correct).
FAULTS = {
    1: "would never return",  # waits for the phase after the one its copy completed
    2: "mbarrier.expect must cover",  # expects fewer bytes than the copy brings
    3: "still reads",  # refills the slot an asynchronous MMA reads before waiting for it
    4: "has not initialized",  # waits on a barrier never initialized
    5: "mbarrier.expect must cover",  # copies without expecting (the GPU would miss the arrival: a hang)
}


@img.interpret()
@gluon.jit
def fault_kernel(a_ptr, c_ptr, FAULT: gl.constexpr, ACC: gl.constexpr, STORE: gl.constexpr):
    """c = a @ a for one 64 x 64 fp16 tile through two ring slots, with the synchronization fault
    ``FAULT`` (``FAULTS``) or none."""
    layout: gl.constexpr = gl.NVMMASharedLayout.get_default_for([64, 64], gl.float16)
    desc = tma.make_tensor_descriptor(a_ptr, [64, 64], [64, 1], [64, 64], layout)
    bufs = gl.allocate_shared_memory(gl.float16, [2, 64, 64], layout)
    bars = gl.allocate_shared_memory(gl.int64, [2, 1], mbarrier.MBarrierLayout())
    if FAULT != 4:
        mbarrier.init(bars.index(0), count=1)
    mbarrier.init(bars.index(1), count=1)
    BYTES: gl.constexpr = 64 * 64 * 2
    if FAULT != 5:
        mbarrier.expect(bars.index(0), BYTES // 2 if FAULT == 2 else BYTES)
    hp.tma_load(desc, [0, 0], bars.index(0), bufs.index(0))
    mbarrier.wait(bars.index(0), 1 if FAULT == 1 else 0)
    acc = gl.zeros([64, 64], gl.float32, ACC)
    acc = hopper.warpgroup_mma(bufs.index(0), bufs.index(0), acc, is_async=True)
    if FAULT != 3:
        acc = hopper.warpgroup_mma_wait(0, deps=[acc])
    mbarrier.expect(bars.index(1), BYTES)
    hp.tma_load(desc, [0, 0], bars.index(1), bufs.index(1 if FAULT != 3 else 0))
    mbarrier.wait(bars.index(1), 0)
    acc = hopper.warpgroup_mma_wait(0, deps=[acc])
    rows = gl.arange(0, 64, layout=gl.SliceLayout(1, STORE))
    cols = gl.arange(0, 64, layout=gl.SliceLayout(0, STORE))
    gl.store(c_ptr + rows[:, None] * 64 + cols[None, :], gl.convert_layout(acc, STORE))


def check_faults_raise_on_cpu(rank, world_size):
    """The correct kernel matches torch; each fault raises with its words instead of hanging."""
    acc, store = hopper_layouts(64)
    a = torch.randn(64, 64, generator=torch.Generator().manual_seed(5)).half()
    c = torch.zeros(64, 64)
    fault_kernel[(1,)](a, c, 0, ACC=acc, STORE=store)
    assert torch.allclose(c.double(), a.double() @ a.double(), atol=1e-2), "the correct kernel is wrong"
    got = {}
    for fault in FAULTS:
        try:
            fault_kernel[(1,)](a, c, fault, ACC=acc, STORE=store)
            got[fault] = None
        except Exception as e:  # noqa: BLE001 - the exception is the observation
            got[fault] = f"{type(e).__name__}: {e}"
    bad = {f: g for f, g in got.items() if g is None or FAULTS[f] not in g}
    assert not bad, f"faults that did not raise as expected: {bad}"
