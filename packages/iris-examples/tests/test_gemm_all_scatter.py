"""gemm-all-scatter: the example's driver over ``iris.ops.matmul_all_gather``, against torch.

The driver runs on 1-4 ranks (CPU ranks under Triton's interpreter without a GPU), on both
backends and both layouts of C, on shapes that are not multiples of the (small) tiles; every
rank must hold all of ``A @ B`` with no barrier around the call. Then: what the driver refuses
before anything is launched, how a mismatch is reported, and the two examples through the real
CLI. The operation's kernels (their lowering per target, their protocol) are iris-ops' to test.
"""

import argparse
import csv
import re

import pytest
import torch
from _cli import run_cli

from iris.testing.world import WorldPool

GPU = torch.cuda.is_available()
#: Without a GPU the ranks run kernels under Triton's interpreter (set before they import triton).
RANK_ENV = {} if GPU else {"TRITON_INTERPRET": "1", "IRIS_DEVICE": "cpu"}
DTYPES = ("float32", "float16", "bfloat16")
#: Small tiles (iris.ops.Config fields), so the shapes below have ragged edges in M, N and K and
#: several tiles per rank.
TILES = {"block_m": 32, "block_n": 16, "block_k": 16, "group_m": 2, "num_warps": 4, "num_stages": 1}
#: M = 1.25 tile rows, N per rank = 1.25 tile columns, K = 1.5 steps.
M, COLS, K = 40, 20, 24


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


def every_rank_holds_a_times_b(rank, world_size, backend, cases):
    """Run the driver for each (dtype, layout) case, back to back with no barrier; the failures
    (rank, case, first bad element) as strings."""
    import iris.heap
    import iris.ops as ops
    from iris.examples import gemm_all_scatter as gas

    heap = iris.heap.init(1 << 22)
    config = ops.Config(backend=backend, **TILES)
    failures = []
    for dtype_name, layout in cases:
        dtype = getattr(torch, dtype_name)
        a, b = _inputs(M, COLS * world_size, K, dtype, heap.device)
        mine = b[:, rank * COLS : (rank + 1) * COLS].contiguous()
        c = heap.full((world_size, M, COLS) if layout == "blocks" else (M, world_size * COLS), float("nan"),
                      dtype=dtype)  # fmt: skip
        gas.gemm_all_scatter(a, mine, c, heap=heap, config=config, layout=layout)
        got = gas.as_matrix(c, layout).float()  # complete in stream order: the operation's exit waits for every rank
        want = a.float() @ b.float()
        rtol, atol = gas.tolerance(dtype)
        bad = ~torch.isclose(got, want, rtol=rtol, atol=atol)
        if bad.any():
            i, j = (int(v) for v in bad.nonzero()[0])
            failures.append(f"rank {rank}, {dtype_name} {layout} {M}x{COLS * world_size}x{K}: "
                            f"{int(bad.sum())} bad, first C[{i}, {j}] = {got[i, j]} != {want[i, j]}")  # fmt: skip
        heap.free(c)
    return failures


def refuses_then_runs(rank, world_size):
    """What the driver refuses, on every rank, before anything is launched: an unknown layout, C of
    the other layout's shape, off the heap or not contiguous, and the operation's own checks
    (shapes that do not chain, mixed dtypes; on a GPU, inputs on another device). The peers'
    protocol is left as it was: a valid call on every rank still completes."""
    import iris.heap
    from iris.examples import gemm_all_scatter as gas

    heap = iris.heap.init(1 << 22)
    dev, w = heap.device, world_size
    a, b = torch.ones(8, 16, device=dev), torch.ones(16, 4, device=dev)
    blocks = heap.full((w, 8, 4), float("nan"))
    cases = [
        ({"layout": "rows"}, a, b, blocks, ValueError, "unknown layout 'rows'"),
        ({"layout": "matrix"}, a, b, blocks, ValueError, f"c must have shape (8, {4 * w}) for layout 'matrix'"),
        ({}, a, b, heap.zeros(8, 4 * w), ValueError, f"c must have shape ({w}, 8, 4) for layout 'blocks'"),
        ({}, a, b, torch.zeros(w, 8, 4, device=dev), ValueError, "a tensor off the heap"),
        ({}, a, b, heap.zeros(w, 4, 8).transpose(1, 2), ValueError, "a non-contiguous heap tensor"),
        ({}, a, torch.ones(12, 4, device=dev), blocks, ValueError, "b must have a's 16 columns as rows"),
        ({}, a, b, heap.zeros(w, 8, 4, dtype=torch.float16), TypeError, "dtype"),
    ]
    if dev.type == "cuda":
        cases.append(({}, a.cpu(), b, blocks, ValueError, "heap"))
    for kw, a_, b_, c_, kind, words in cases:
        with pytest.raises(kind, match=re.escape(words)):
            gas.gemm_all_scatter(a_, b_, c_, heap=heap, **kw)
    assert blocks.isnan().all(), "a refused call wrote into C"
    gas.gemm_all_scatter(a, b, blocks, heap=heap)
    assert (blocks == 16).all()


# -- the driver on 1-4 ranks ------------------------------------------------------------------------------


@pytest.mark.parametrize("world_size", [1, 2, 3, 4])
@pytest.mark.parametrize("backend", ["triton", "gluon"])
def test_every_rank_holds_all_of_a_times_b(ranks, backend, world_size):
    # both layouts per run; the dtypes rotate with the world size, so the suite covers each of them
    # in each layout on each backend
    cases = [(DTYPES[world_size % 3], "blocks"), (DTYPES[(world_size + 1) % 3], "matrix")]
    failures = [f for per_rank in ranks.run(every_rank_holds_a_times_b, world_size, backend, cases) for f in per_rank]
    assert not failures, "\n".join(failures)


def test_bad_arguments_are_refused_before_launch(ranks):
    ranks.run(refuses_then_runs, 2)


# -- host side: usage errors, the Config and mismatch reports ----------------------------------------------


def _args(**kw):
    base = {"ranks": 4, "sizes": [(64, 96, 32)], "dtype": "bfloat16", "backend": "triton", "gpu": False,
            "iters": 1, "warmup": 1, "block_m": None, "block_n": None, "block_k": None, "group_m": None,
            "num_warps": None, "num_stages": None, "programs": None}  # fmt: skip
    return argparse.Namespace(**{**base, **kw})


def test_columns_not_divisible_by_the_world_size_are_a_usage_error():
    from iris.examples import gemm_all_scatter as gas

    gas.check_arguments(_args())
    with pytest.raises(ValueError, match=r"split evenly over the 4 ranks.*64x90x32.*divisible by 4"):
        gas.check_arguments(_args(sizes=[(64, 96, 32), (64, 90, 32)]))
    with pytest.raises(ValueError, match="block_n must be a power of two"):
        gas.check_arguments(_args(block_n=24))


def test_tile_options_become_the_ops_config():
    import iris.ops as ops
    from iris.examples import gemm_all_scatter as gas

    assert gas.ops_config(_args()) == ops.Config(variant="fused")  # the example is the fused kernel
    chosen = gas.ops_config(_args(backend="gluon", block_m=64, num_warps=4, programs=3), trace=True)
    assert chosen == ops.Config(backend="gluon", block_m=64, num_warps=4, num_programs=3, trace=True, variant="fused")


def test_sizes_parse_as_m_by_n_by_k():
    from iris.examples import gemm_all_scatter as gas

    assert gas.parse_shape("8192x4096x512") == (8192, 4096, 512)
    assert gas.parse_shape(" 64 X 96 x 32 ") == (64, 96, 32)
    for text in ("8192x4096", "0x8x8", "axbxc"):
        with pytest.raises(ValueError, match="write MxNxK"):
            gas.parse_shape(text)


def test_a_mismatch_names_the_rank_the_element_and_the_tile_that_wrote_it():
    from iris.examples import gemm_all_scatter as gas

    tile = (TILES["block_m"], TILES["block_n"])
    want = torch.randn(48, 80)
    got = want.to(torch.bfloat16)
    assert gas.find_mismatch(got, want, rank=1, what="fused C", tile=tile, cols=20) is None
    got[37, 45] += 1.0  # column 45 is rank 2's column 5 (20 per rank): its tile (1, 0)
    found = gas.find_mismatch(got, want, rank=1, what="fused C", tile=tile, cols=20)
    assert found is not None and found.rank == 1 and found.index == (37, 45) and found.count == 1
    assert "element (37, 45) comes from rank 2's tile (1, 0) of 32x16" in str(found)
    got[0, 0] = float("nan")  # never written
    assert gas.find_mismatch(got, want, rank=1, what="fused C", tile=tile, cols=20).index == (0, 0)


# -- the examples through the CLI ------------------------------------------------------------------------

SMALL = ["--sizes", "40x48x24", "--iters", "1", "--warmup", "0"]


def test_cli_gemm_all_scatter_2_ranks():
    done = run_cli("gemm-all-scatter", "--ranks", "2", *SMALL)
    assert done.returncode == 0, f"stdout:\n{done.stdout}\nstderr:\n{done.stderr}"
    assert "MISMATCH" not in done.stdout and "gemm-all-scatter, 2 ranks, triton" in done.stdout
    assert " ok " in done.stdout and "speedup" in done.stdout and "GEMM only" in done.stdout


def test_cli_gemm_all_scatter_gluon_matrix_layout_writes_csv(tmp_path):
    table = tmp_path / "gemm.csv"
    done = run_cli("gemm-all-scatter-gluon", "--ranks", "2", "--layout", "matrix", "--block-n", "16",
                   "--csv", str(table), *SMALL)  # fmt: skip
    assert done.returncode == 0, f"stdout:\n{done.stdout}\nstderr:\n{done.stderr}"
    assert "gemm-all-scatter, 2 ranks, gluon" in done.stdout
    with open(table) as f:
        rows = list(csv.DictReader(f))
    assert rows and all(r["check"] == "ok" and r["backend"] == "gluon" and r["layout"] == "matrix" for r in rows)
    assert all(r["block_n"] == "16" for r in rows)  # the tile that ran, the option's
    keys = ("fused_ms", "matmul_ms", "all_gather_ms", "permute_ms", "local_gemm_ms")
    assert all(float(r[key]) > 0 for r in rows for key in keys)
