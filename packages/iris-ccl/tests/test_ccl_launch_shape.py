"""iris.ccl.launch_shape: where ranks share a GPU, which reductions meet first, and how many
programs the others launch (compile-free: the GPU's size and the kernel's occupancy are given)."""

import types

import pytest
import torch

from iris.ccl import launch_shape
from iris.ccl.launch_shape import DEFAULT_BLOCK, MEET_FIRST_TILES, LaunchShape, meets_first

SMS = 132  # an H100's or H200's multiprocessors


def _kernel(name):
    return types.SimpleNamespace(__name__=name)


def _shape(monkeypatch, ranks_per_device, block_size=None, num_programs=None):
    monkeypatch.setattr(launch_shape, "_multiprocessors", lambda device: SMS)
    monkeypatch.setattr(launch_shape.occupancy, "resident_per_sm", lambda kernel, args, launch, device: 4)
    config = types.SimpleNamespace(block_size=block_size, num_warps=8, num_programs=num_programs)
    heap = types.SimpleNamespace(device=torch.device("cuda", 0), ranks_per_device=ranks_per_device)
    return LaunchShape(config, heap)


def _programs(shape, name, chunk, unmet):
    over = launch_shape.TILED_OVER[name]
    return shape.programs(_kernel(name), {over: chunk}, (), {}, unmet)


@pytest.mark.parametrize("ranks", [2, 3, 4, 8])
def test_a_reduction_meets_first_only_above_the_bound_and_only_where_ranks_share_a_gpu(ranks):
    bound = MEET_FIRST_TILES // ranks * DEFAULT_BLOCK  # elements a rank tiles over, at most, without a meeting
    assert meets_first("reduce_kernel", bound + 1, False, ranks)
    assert not meets_first("reduce_kernel", bound, False, ranks)
    assert not meets_first("reduce_kernel", bound + 1, True, ranks)  # staged: one program
    assert not meets_first("gather_kernel", 1 << 30, False, ranks)  # one program per multiprocessor already
    assert not meets_first("push_kernel", 1 << 30, False, ranks)
    assert not meets_first("barrier_kernel", None, False, ranks)  # not tiled
    assert not meets_first("reduce_kernel", 1 << 30, False, 1)  # no GPU runs two ranks


def test_two_shot_at_four_ranks_of_a_gpu_meets_above_2_mib_of_fp32_and_one_shot_above_512_kib():
    """The bound reads the elements each rank reduces: two_shot's chunk is a quarter of the call."""
    n = 1 << 19  # 2 MiB of fp32
    assert not meets_first("reduce_kernel", -(-n // 4), False, 4) and meets_first("reduce_kernel", -(-(n + 4) // 4),
                                                                                    False, 4)  # fmt: skip
    assert not meets_first("reduce_kernel", n // 4, False, 4) and meets_first("reduce_kernel", n // 4 + 1, False, 4)


@pytest.mark.parametrize("ranks", [2, 3, 4, 8])
def test_at_the_default_block_a_call_below_the_bound_launches_as_many_programs_as_without_the_cap(monkeypatch, ranks):
    """The cap for calls that hold no meeting costs the default launch nothing on an H100/H200:
    the largest launch without a meeting already fits it."""
    shape = _shape(monkeypatch, ranks)
    bound = MEET_FIRST_TILES // ranks * DEFAULT_BLOCK
    for chunk in (1, DEFAULT_BLOCK, bound // ranks, bound):
        assert _programs(shape, "reduce_kernel", chunk, True) == _programs(shape, "reduce_kernel", chunk, False)
    assert _programs(shape, "reduce_kernel", bound, True) <= SMS // ranks


def test_a_small_block_or_many_programs_below_the_bound_is_capped_at_one_program_per_multiprocessor(monkeypatch):
    """Without a meeting, every rank's programs together stay within one per multiprocessor, the
    launch that never timed out under MPS, whatever block or program count the config asks for."""
    bound = MEET_FIRST_TILES // 4 * DEFAULT_BLOCK
    small = _shape(monkeypatch, 4, block_size=16)
    assert _programs(small, "reduce_kernel", bound, False) == 4 * SMS // 4  # 4 per multiprocessor
    assert _programs(small, "reduce_kernel", bound, True) == SMS // 4
    many = _shape(monkeypatch, 4, num_programs=500)
    assert _programs(many, "reduce_kernel", 1 << 24, False) == 500  # a launch the ranks met before
    assert _programs(many, "reduce_kernel", 1 << 24, True) == SMS // 4
    assert _programs(many, "gather_kernel", 1 << 24, True) == SMS // 4
    assert _programs(_shape(monkeypatch, 200), "reduce_kernel", 1 << 24, True) == 1  # at least one


def test_the_environment_moves_the_bound_alike_for_every_rank_and_a_bad_value_says_which(monkeypatch):
    launch_shape._tiles_from_env.cache_clear()
    try:
        monkeypatch.setenv(launch_shape.MEET_FIRST_TILES_ENV, "1")  # every tiled reduction meets
        assert meets_first("reduce_kernel", 1, False, 2)
        launch_shape._tiles_from_env.cache_clear()
        monkeypatch.setenv(launch_shape.MEET_FIRST_TILES_ENV, "1000000")  # none does: the cap instead
        assert not meets_first("reduce_kernel", 1 << 28, False, 4)
        for bad in ("many", "0", "-3"):
            launch_shape._tiles_from_env.cache_clear()
            monkeypatch.setenv(launch_shape.MEET_FIRST_TILES_ENV, bad)
            with pytest.raises(ValueError, match=f"IRIS_CCL_MEET_FIRST_TILES must be a positive int.*{bad}"):
                meets_first("reduce_kernel", 1 << 20, False, 4)
    finally:
        monkeypatch.delenv(launch_shape.MEET_FIRST_TILES_ENV, raising=False)
        launch_shape._tiles_from_env.cache_clear()
