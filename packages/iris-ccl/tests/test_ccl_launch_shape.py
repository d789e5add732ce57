"""iris.ccl.launch_shape: how many programs of which tile a collective's kernel launches, on a GPU
of one rank and where ranks share a GPU (compile-free: the GPU's size and the kernel's occupancy
are given)."""

import types

import pytest
import torch

from iris.ccl import launch_shape
from iris.ccl.launch_shape import DEFAULT_BLOCK, PROGRAMS_PER_SM, SHARED_GPU_TILE, LaunchShape

SMS = 132  # an H100's or H200's multiprocessors
FAT, FAT_WARPS = SHARED_GPU_TILE


def _kernel(name):
    return types.SimpleNamespace(__name__=name)


def _shape(monkeypatch, ranks_per_device, block_size=None, num_programs=None, num_warps=None, device="cuda"):
    monkeypatch.setattr(launch_shape, "_multiprocessors", lambda device: SMS)
    monkeypatch.setattr(launch_shape.occupancy, "resident_per_sm", lambda kernel, args, launch, device: 4)
    config = types.SimpleNamespace(block_size=block_size, num_warps=num_warps, num_programs=num_programs)
    heap = types.SimpleNamespace(device=torch.device(device, 0), ranks_per_device=ranks_per_device)
    return LaunchShape(config, heap)


def _launch(shape, name, elements, staged=0):
    """``(BLOCK, warps, programs)`` of a launch of ``name`` over ``elements`` a rank."""
    arguments = {launch_shape.TILED_OVER[name]: elements, "staged": staged}
    block, warps = shape.tile(_kernel(name), arguments)
    return block, warps, shape.programs(_kernel(name), arguments, (), {"BLOCK": block}, warps)


def test_a_gpu_of_one_rank_runs_the_default_tile_at_the_kernels_programs_per_multiprocessor(monkeypatch):
    shape = _shape(monkeypatch, 1)
    assert _launch(shape, "reduce_kernel", 1 << 28) == (DEFAULT_BLOCK, 8, PROGRAMS_PER_SM["reduce_kernel"] * SMS)
    assert _launch(shape, "gather_kernel", 1 << 28) == (DEFAULT_BLOCK, 8, SMS)
    assert _launch(shape, "reduce_kernel", 3 * DEFAULT_BLOCK - 1) == (DEFAULT_BLOCK, 8, 3)  # one per tile
    assert _launch(shape, "reduce_kernel", 1 << 28, staged=1)[2] == 1  # a staged kernel: one program
    assert _launch(_shape(monkeypatch, 1, num_programs=500), "reduce_kernel", 1 << 28)[2] == 500
    assert _shape(monkeypatch, 1).tile(_kernel("barrier_kernel"), {}) == (None, 8)  # not tiled


@pytest.mark.parametrize("ranks", [2, 3, 4, 8])
def test_where_ranks_share_a_gpu_every_tiled_launch_runs_one_program_per_multiprocessor_over_them(monkeypatch, ranks):
    """Every rank's programs together stay within one per multiprocessor, the launch that never
    timed out under MPS, whatever block or program count the config asks for."""
    cap = SMS // ranks
    for name in launch_shape.TILED_OVER:
        assert _launch(_shape(monkeypatch, ranks), name, 1 << 28)[2] == cap
        assert _launch(_shape(monkeypatch, ranks, block_size=16), name, 1 << 20)[2] == cap
        assert _launch(_shape(monkeypatch, ranks, num_programs=500), name, 1 << 28)[2] == cap
        assert _launch(_shape(monkeypatch, ranks, num_programs=5), name, 1 << 28)[2] == 5
        assert _launch(_shape(monkeypatch, ranks), name, DEFAULT_BLOCK + 1)[2] == 2  # one per tile
    assert _launch(_shape(monkeypatch, 200), "reduce_kernel", 1 << 28)[2] == 1  # at least one


@pytest.mark.parametrize("ranks", [2, 3, 4, 8])
def test_a_reduction_on_a_shared_gpu_takes_its_tile_once_every_program_gets_one(monkeypatch, ranks):
    shape = _shape(monkeypatch, ranks)
    bound = SMS // ranks * FAT  # the chunk at which every program has a tile of FAT elements
    assert _launch(shape, "reduce_kernel", bound - 1) == (DEFAULT_BLOCK, 8, SMS // ranks)
    assert _launch(shape, "reduce_kernel", bound) == (FAT, FAT_WARPS, SMS // ranks)
    assert _launch(shape, "reduce_kernel", 1 << 30) == (FAT, FAT_WARPS, SMS // ranks)
    assert _launch(shape, "reduce_kernel", 1 << 30, staged=1) == (DEFAULT_BLOCK, 8, 1)
    for name in ("gather_kernel", "push_kernel"):  # one program per multiprocessor at the default tile already
        assert _launch(shape, name, 1 << 30)[:2] == (DEFAULT_BLOCK, 8)
    assert _launch(_shape(monkeypatch, 1), "reduce_kernel", 1 << 30)[:2] == (DEFAULT_BLOCK, 8)  # a GPU of its own
    assert _launch(_shape(monkeypatch, ranks, device="cpu"), "reduce_kernel", 1 << 30)[:2] == (DEFAULT_BLOCK, 4)
    # fewer programs than the cap: the bound is theirs
    assert _launch(_shape(monkeypatch, ranks, num_programs=2), "reduce_kernel", 2 * FAT) == (FAT, FAT_WARPS, 2)


def test_a_tile_the_config_sets_is_the_configs_on_a_shared_gpu_too(monkeypatch):
    assert _launch(_shape(monkeypatch, 4, num_warps=4), "reduce_kernel", 1 << 30)[:2] == (DEFAULT_BLOCK, 4)
    assert _launch(_shape(monkeypatch, 4, block_size=1024), "reduce_kernel", 1 << 30)[:2] == (1024, 8)
    assert _launch(_shape(monkeypatch, 4, block_size=FAT, num_warps=32), "reduce_kernel", 1 << 30)[:2] == (FAT, 32)


def test_two_shot_at_four_ranks_of_an_h100_takes_the_shared_tile_from_8_mib_of_fp32(monkeypatch):
    """two_shot's chunk is a quarter of the call: 33 programs x 16384 elements = 528 K elements a
    chunk, a call of 2 M elements (8.25 MiB of fp32) a rank."""
    shape = _shape(monkeypatch, 4)
    n = 4 * 33 * FAT
    assert _launch(shape, "reduce_kernel", -(-(n - 4) // 4))[0] == DEFAULT_BLOCK
    assert _launch(shape, "reduce_kernel", -(-n // 4))[0] == FAT
