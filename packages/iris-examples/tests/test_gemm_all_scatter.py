"""gemm-all-scatter: the fused GEMM + all-scatter kernels (Triton and Gluon) against torch.

The kernels run directly on 1-4 ranks (CPU ranks under Triton's interpreter without a GPU) on
shapes that are not multiples of the tiles, in fp32, fp16 and bf16 and both layouts of C; every
rank must hold all of ``A @ B``. Then: what the kernel refuses, how a mismatch is reported, the
two examples through the real CLI, and compile-only lowering for sm_90 and gfx942 (16-byte
remote stores, tensor cores where the target has them, default tiles within shared memory).
"""

import argparse
import csv
import re

import pytest
import torch
from _cli import run_cli

from iris.heap.testing import World, WorldPool

GPU = torch.cuda.is_available()
#: Without a GPU the ranks run kernels under Triton's interpreter (set before they import triton).
RANK_ENV = {} if GPU else {"TRITON_INTERPRET": "1", "IRIS_DEVICE": "cpu"}
DTYPES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}
#: Small tiles, so the shapes below have ragged edges in M, N and K and several tiles per rank.
TILES = {"block_m": 32, "block_n": 16, "block_k": 16, "group_m": 2, "num_warps": 4, "num_stages": 1}


@pytest.fixture(scope="module")
def ranks():
    pool = WorldPool(env=RANK_ENV)
    yield pool
    pool.close()


# -- rank bodies (module level: the spawned ranks import this file) -----------------------------------


def _inputs(m, n, k, dtype, device, seed=0):
    gen = torch.Generator(device=device).manual_seed(seed)
    a = torch.randn(m, k, generator=gen, device=device).to(dtype)
    b = (torch.randn(k, n, generator=gen, device=device) / k**0.5).to(dtype)
    return a, b


def fused_on_every_rank(rank, world_size, backend, cases):
    """Run the fused kernel for each (dtype, layout, M, N-per-rank, K, gluon_dot) case; the
    failures (rank, case, first bad element) as strings."""
    import iris.heap
    from iris.examples import gemm_all_scatter as gas

    heap = iris.heap.init(1 << 22)
    tiles = gas.Tiles(**TILES)
    failures = []
    for dtype_name, layout, m, cols, k, gluon_dot in cases:
        dtype = DTYPES[dtype_name]
        a, b = _inputs(m, cols * world_size, k, dtype, heap.device)
        mine = b[:, rank * cols : (rank + 1) * cols].contiguous()
        c = heap.full(
            (world_size, m, cols) if layout == "blocks" else (m, world_size * cols), float("nan"), dtype=dtype
        )
        heap.barrier()  # every rank's C exists and is NaN before anyone stores into it
        gas.gemm_all_scatter(a, mine, c, heap=heap, tiles=tiles, backend=backend, layout=layout,
                             gluon_dot=gluon_dot, programs=2)  # fmt: skip
        heap.barrier()  # every rank's stores have landed
        got = gas.as_matrix(c, layout).float()
        want = a.float() @ b.float()
        rtol, atol = gas.tolerance(dtype)
        bad = ~torch.isclose(got, want, rtol=rtol, atol=atol)
        if bad.any():
            i, j = (int(v) for v in bad.nonzero()[0])
            failures.append(f"rank {rank}, {dtype_name} {layout} {m}x{cols * world_size}x{k} ({gluon_dot}): "
                            f"{int(bad.sum())} bad, first C[{i}, {j}] = {got[i, j]} != {want[i, j]}")  # fmt: skip
        heap.free(c)
    return failures


def local_only(rank, world_size, backend):
    """scatter=False: this rank's block lands in its own C only; the peers' blocks stay untouched."""
    import iris.heap
    from iris.examples import gemm_all_scatter as gas

    heap = iris.heap.init(1 << 22)
    m, cols, k = 24, 20, 24
    a, b = _inputs(m, cols * world_size, k, torch.float32, heap.device)
    c = heap.full((world_size, m, cols), float("nan"))
    heap.barrier()
    gas.gemm_all_scatter(a, b[:, rank * cols : (rank + 1) * cols].contiguous(), c, heap=heap, tiles=gas.Tiles(**TILES),
                         backend=backend, scatter=False, programs=2)  # fmt: skip
    heap.barrier()
    want = (a @ b[:, rank * cols : (rank + 1) * cols]).cpu()
    rtol, atol = gas.tolerance(torch.float32)  # TF32 on GPU tensor cores
    assert torch.allclose(c[rank].cpu(), want, rtol=rtol, atol=atol)
    others = [r for r in range(world_size) if r != rank]
    assert all(c[r].isnan().all() for r in others), "a local-only GEMM wrote into another rank's block"


def rejects(rank, world_size):
    """What the launcher refuses, before any kernel runs: mismatched shapes, C of the wrong shape or
    off the heap, mixed dtypes (and, on a GPU, inputs on another device)."""
    import iris.heap
    from iris.examples import gemm_all_scatter as gas

    heap = iris.heap.init(1 << 20)
    tiles = gas.Tiles(**TILES)
    dev = heap.device
    a, b, c = torch.zeros(8, 16, device=dev), torch.zeros(16, 4, device=dev), heap.zeros(1, 8, 4)
    cases = [
        (a, b[:12], c, ValueError, "b must have a's 16 columns as rows"),
        (a, b, heap.zeros(8, 4), ValueError, "(1, 8, 4)"),
        (a, b, torch.zeros(1, 8, 4, device=dev), ValueError, "symmetric heap"),
        (a, b, heap.zeros(1, 8, 4, dtype=torch.float16), TypeError, "one dtype"),
    ]
    if dev.type == "cuda":
        cases.append((a.cpu(), b, c, ValueError, "heap's device"))
    for a_, b_, c_, kind, words in cases:
        with pytest.raises(kind, match=re.escape(words)):
            gas.gemm_all_scatter(a_, b_, c_, heap=heap, tiles=tiles)


# -- the kernels on 1-4 ranks ---------------------------------------------------------------------------


def _cases(backend):
    """Ragged shapes (M = 1.5 tiles, N per rank = 1.25 tiles, K = 2.5 steps), every dtype, both layouts."""
    dots = ("auto",) if backend == "triton" else ("mma_v2", "fma")
    out = [(dt, layout, 48, 20, 40, dot) for dt in DTYPES for layout in ("blocks", "matrix") for dot in dots[:1]]
    out += [("bfloat16", "blocks", 48, 20, 40, dot) for dot in dots[1:]]  # the Gluon FMA path too
    return out


@pytest.mark.parametrize("world_size", [1, 2, 3, 4])
@pytest.mark.parametrize("backend", ["triton", "gluon"])
def test_every_rank_holds_all_of_a_times_b(ranks, backend, world_size):
    failures = [
        f for per_rank in ranks.run(fused_on_every_rank, world_size, backend, _cases(backend)) for f in per_rank
    ]
    assert not failures, "\n".join(failures)


@pytest.mark.parametrize("backend", ["triton", "gluon"])
def test_without_scatter_only_the_own_block_is_written(ranks, backend):
    ranks.run(local_only, 2, backend)


def test_bad_arguments_are_refused_before_launch(ranks):
    ranks.run(rejects, 1)


# -- host side: usage errors and mismatch reports ------------------------------------------------------


def _args(**kw):
    base = {"ranks": 4, "sizes": [(64, 96, 32)], "dtype": "bfloat16", "backend": "triton", "gpu": False,
            "iters": 1, "warmup": 1, "block_m": None, "block_n": None, "block_k": None, "group_m": None,
            "num_warps": None, "num_stages": None, "programs": None, "gluon_dot": "auto"}  # fmt: skip
    return argparse.Namespace(**{**base, **kw})


def test_columns_not_divisible_by_the_world_size_are_a_usage_error():
    from iris.examples import gemm_all_scatter as gas

    gas.check_arguments(_args())
    with pytest.raises(ValueError, match=r"split evenly over the 4 ranks.*64x90x32.*divisible by 4"):
        gas.check_arguments(_args(sizes=[(64, 96, 32), (64, 90, 32)]))
    with pytest.raises(ValueError, match="block_n must be a power of two"):
        gas.check_arguments(_args(block_n=24))


def test_sizes_parse_as_m_by_n_by_k():
    from iris.examples import gemm_all_scatter as gas

    assert gas.parse_shape("8192x4096x512") == (8192, 4096, 512)
    assert gas.parse_shape(" 64 X 96 x 32 ") == (64, 96, 32)
    for text in ("8192x4096", "0x8x8", "axbxc"):
        with pytest.raises(ValueError, match="write MxNxK"):
            gas.parse_shape(text)


def test_a_mismatch_names_the_rank_the_element_and_the_tile_that_wrote_it():
    from iris.examples import gemm_all_scatter as gas

    tiles = gas.Tiles(**TILES)
    want = torch.randn(48, 80)
    got = want.to(torch.bfloat16)
    assert gas.find_mismatch(got, want, rank=1, what="fused C", tiles=tiles, cols=20) is None
    got[37, 45] += 1.0  # column 45 is rank 2's column 5 (20 per rank): its tile (1, 0)
    found = gas.find_mismatch(got, want, rank=1, what="fused C", tiles=tiles, cols=20)
    assert found is not None and found.rank == 1 and found.index == (37, 45) and found.count == 1
    assert "element (37, 45) comes from rank 2's tile (1, 0) of 32x16" in str(found)
    got[0, 0] = float("nan")  # never written
    assert gas.find_mismatch(got, want, rank=1, what="fused C", tiles=tiles, cols=20).index == (0, 0)


# -- the examples through the CLI ------------------------------------------------------------------------

SMALL = ["--sizes", "40x48x24", "--iters", "1", "--warmup", "0"] if GPU else []


def test_cli_gemm_all_scatter_2_ranks():
    done = run_cli("gemm-all-scatter", "--ranks", "2", *SMALL)
    assert done.returncode == 0, f"stdout:\n{done.stdout}\nstderr:\n{done.stderr}"
    assert "MISMATCH" not in done.stdout and "gemm-all-scatter, 2 ranks, triton" in done.stdout
    assert " ok " in done.stdout and "speedup" in done.stdout


def test_cli_gemm_all_scatter_gluon_matrix_layout_writes_csv(tmp_path):
    table = tmp_path / "gemm.csv"
    done = run_cli("gemm-all-scatter-gluon", "--ranks", "2", "--layout", "matrix", "--csv", str(table), *SMALL)
    assert done.returncode == 0, f"stdout:\n{done.stdout}\nstderr:\n{done.stderr}"
    assert "gemm-all-scatter, 2 ranks, gluon" in done.stdout
    with open(table) as f:
        rows = list(csv.DictReader(f))
    assert rows and all(r["check"] == "ok" and r["backend"] == "gluon" and r["layout"] == "matrix" for r in rows)
    assert all(float(r[key]) > 0 for r in rows for key in ("fused_ms", "matmul_ms", "all_gather_ms", "permute_ms"))


# -- compile-only for sm_90 and gfx942 (no GPU needed) ----------------------------------------------------

TARGETS = ("cuda", "hip")
#: Per target: (its GPUTarget args, 16-byte global stores, tensor-core instructions per backend).
_ASM = {
    "cuda": {"stores": r"st\.global\.v4\.b32", "triton": r"wgmma", "gluon": r"mma\.sync"},
    "hip": {"stores": r"global_store_dwordx4", "triton": r"v_mfma", "gluon": None},
}
SM90_SHARED_BYTES = 232448  # 227 KiB per block on sm_90


def compile_kernels(rank, world_size):
    """Lower both kernels with the GPU default tiles for every dtype; what each produced."""
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    import iris.mem.gluon as img
    from iris.examples import _gemm_gluon, _gemm_triton
    from iris.examples import gemm_all_scatter as gas

    name = TARGETS[rank]
    target = GPUTarget("cuda", 90, 32) if name == "cuda" else GPUTarget("hip", "gfx942", 64)
    out = []
    for backend, module, source in (("triton", _gemm_triton, ASTSource), ("gluon", _gemm_gluon, img.GluonASTSource)):
        for dtype_name, dtype in DTYPES.items():
            mma = backend == "gluon" and _gemm_gluon.uses_mma_v2(target)
            tiles = gas.default_tiles(backend, dtype, gpu=True, mma=mma)
            options = module.launch_options(tiles, dtype, target)
            launch = {k: options.pop(k) for k in ("num_warps", "num_stages") if k in options}
            ty = {"float32": "fp32", "float16": "fp16", "bfloat16": "bf16"}[dtype_name]
            sig = {"a_ptr": f"*{ty}", "b_ptr": f"*{ty}", "c_ptr": f"*{ty}", "context_ptr": "*i64"}
            sig.update({k: "i32" for k in ("M", "N", "K", "stride_am", "stride_ak", "stride_bk", "stride_bn", "stride_cm", "rank_stride")})  # fmt: skip
            consts = {"BLOCK_M": tiles.block_m, "BLOCK_N": tiles.block_n, "BLOCK_K": tiles.block_k,
                      "GROUP_M": tiles.group_m, "SCATTER": True, "TRACE": False, **options}  # fmt: skip
            # as a launch specialises them: unit strides of contiguous A and B, sizes divisible by 16
            consts.update(stride_ak=1, stride_bn=1)
            sig.update({k: "constexpr" for k in consts})
            attrs = {
                (i,): [["tt.divisibility", 16]] for i, t in enumerate(sig.values()) if t.startswith("*") or t == "i32"
            }
            compiled = triton.compile(source(module.gemm_all_scatter_kernel, sig, consts, attrs=attrs), target=target,
                                      options=launch)  # fmt: skip
            asm = compiled.asm["ptx" if name == "cuda" else "amdgcn"]
            out.append({"backend": backend, "dtype": dtype_name, "tiles": tiles, "shared": compiled.metadata.shared,
                        "stores": len(re.findall(_ASM[name]["stores"], asm)), "mma": mma,
                        "tensor_cores": len(re.findall(_ASM[name][backend], asm)) if _ASM[name][backend] else 0})  # fmt: skip
    return out


@pytest.fixture(scope="module")
def compiled():
    world = World(2, env={"TRITON_INTERPRET": "0"})  # rank 0 compiles for cuda, rank 1 for hip
    try:
        yield dict(zip(TARGETS, world.run(compile_kernels)))
    finally:
        world.close()


def test_both_kernels_compile_for_sm90_and_gfx942_with_16_byte_remote_stores(compiled):
    for target, cases in compiled.items():
        assert len(cases) == 6
        for case in cases:
            label = f"{target} {case['backend']} {case['dtype']}"
            if target == "hip" and case["backend"] == "triton" and case["dtype"] != "float32":
                continue  # Triton stores 16-bit MFMA results 8 bytes at a time on gfx942 (its layout, not ours)
            assert case["stores"] > 0, f"{label}: no 16-byte global stores in the epilogue"


def test_nvidia_multiplies_on_tensor_cores_and_amd_gluon_on_fma(compiled):
    for case in compiled["cuda"]:
        assert case["tensor_cores"] > 0, f"cuda {case['backend']} {case['dtype']}: no wgmma / mma.sync"
    assert all(c["mma"] for c in compiled["cuda"] if c["backend"] == "gluon")
    assert not any(c["mma"] for c in compiled["hip"] if c["backend"] == "gluon")
    assert all(c["tensor_cores"] > 0 for c in compiled["hip"] if c["backend"] == "triton"), "triton: no v_mfma"


def test_default_gpu_tiles_fit_sm90_shared_memory(compiled):
    for case in compiled["cuda"]:
        assert case["shared"] <= SM90_SHARED_BYTES, (
            f"{case['backend']} {case['dtype']} {case['tiles']}: {case['shared']} B"
        )
