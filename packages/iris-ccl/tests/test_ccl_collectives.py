"""Every collective against torch, at world sizes 1-4, on heap and non-heap tensors."""

import _ccl_cases
import pytest
import torch
from conftest import WORLD_SIZES

from iris.ccl.launch_shape import DEFAULT_BLOCK, SHARED_GPU_TILE


@pytest.mark.parametrize("world_size", WORLD_SIZES)
@pytest.mark.parametrize("dtype", _ccl_cases.DTYPES, ids=str)
def test_every_collective_matches_torch_and_ranks_agree_bitwise(world, backend, world_size, dtype):
    digests = world.run(_ccl_cases.check_all, world_size, backend, dtype)
    assert len(set(digests)) == 1, "all_reduce results differ between ranks"


@pytest.mark.parametrize("world_size", [1, 2, 3])
def test_channels_last_tensors_match_torch(world, backend, world_size):
    """Dense tensors in another memory order (channels_last, channels_last_3d) are collected as
    torch's results say, on and off the heap; an out laid out unlike its inp is refused."""
    assert world.run(_ccl_cases.channels_last, world_size, backend) == [2] * world_size


@pytest.mark.parametrize("world_size", [2, 3])
def test_tensors_off_the_heap_are_staged_inside_the_kernel_or_around_it_alike(world, backend, world_size):
    assert world.run(_ccl_cases.staged_in_and_out_of_the_kernel, world_size, backend) == [36] * world_size


@pytest.mark.parametrize("world_size", [2, 3])
def test_pushes_into_peers_heap_tensors_write_those_tensors_and_nothing_else(world, backend, world_size):
    calls = (3 + world_size) * 6
    assert world.run(_ccl_cases.pushed_into_heap_tensors, world_size, backend) == [calls] * world_size


@pytest.mark.parametrize("world_size", [1, 3])
def test_collectives_of_no_elements_write_nothing_and_still_pair_up(world, backend, world_size):
    assert world.run(_ccl_cases.empty_inputs, world_size, backend) == [12] * world_size


def test_every_rank_launches_the_kernels_specialized_alike(world, backend):
    """Ranks of one world launch the same compiled kernels: a rank's offset into the data (rank x
    chunk, a multiple of 16 on some ranks and not on others) is passed as the rank's index, which
    no kernel is specialized on, so a GPU compiles one variant per launch, not one per rank."""
    if backend != "triton":  # host-side arguments; the Gluon kernels' parameters equal the Triton ones'
        pytest.skip("the launch arguments are the backends' same (test_ccl_internals compares the kernels' parameters)")
    keys = world.run(_ccl_cases.launch_specializations, 3, backend)
    assert len(keys[0]) >= 3 * 12 and all(len(k) == len(keys[0]) for k in keys), [len(k) for k in keys]
    for rank in (1, 2):
        differ = [(a[0], dict(a[1]).items() ^ dict(b[1]).items()) for a, b in zip(keys[0], keys[rank]) if a != b]
        assert not differ, f"rank {rank} launches kernels specialized unlike rank 0's: {differ[:3]}"


@pytest.mark.parametrize("world_size", [2, 4])
def test_200_back_to_back_collectives_need_no_host_barrier(world, backend, world_size):
    world.run(_ccl_cases.back_to_back, world_size, backend, 200)


@pytest.mark.parametrize("world_size", [1, 3])
def test_bad_input_is_rejected_before_any_kernel(world, backend, world_size):
    world.run(_ccl_cases.bad_inputs, world_size, backend)


@pytest.mark.parametrize("world_size", [2, 3])
def test_a_rank_that_skips_a_collective_times_out_the_others(world, backend, world_size):
    world.run(_ccl_cases.missing_rank, world_size, backend)


def test_an_unchecked_barrier_leaves_a_timeout_for_the_next_check(world, backend):
    world.run(_ccl_cases.unchecked_barrier, 2, backend)


@pytest.mark.gpu
@pytest.mark.parametrize("world_size", [2])
def test_direct_launch_matches_the_jit_and_respects_alignment(world, backend, world_size):
    assert world.run(_ccl_cases.direct_launch, world_size, backend) == [True] * world_size


@pytest.mark.parametrize("world_size", [2, 3])
def test_a_relaunch_with_the_same_arguments_synchronizes_as_a_new_collective(world, backend, world_size):
    world.run(_ccl_cases.relaunch, world_size, backend)


@pytest.mark.gpu
@pytest.mark.parametrize("world_size", [2, 4])
def test_collectives_replayed_from_a_cuda_graph_match_torch(world, backend, world_size):
    world.run(_ccl_cases.cuda_graph, world_size, backend)


@pytest.mark.gpu
@pytest.mark.parametrize("world_size", [2, 4])
def test_no_collective_synchronizes_the_host_with_the_device(world, backend, world_size):
    world.run(_ccl_cases.no_host_sync, world_size, backend)


@pytest.mark.parametrize("world_size", [2, 3])
def test_auto_runs_the_variant_its_table_names(world, backend, world_size):
    assert (
        world.run(_ccl_cases.auto_resolves_like_its_table, world_size, backend)
        == [["one_shot_push", "two_shot"]] * world_size
    )


@pytest.mark.parametrize("world_size", [2, 3])
def test_reductions_where_ranks_share_a_gpu_take_its_tile_above_a_bound_and_match_torch(world, backend, world_size):
    """On a GPU shared by ranks, launches stay within one program per multiprocessor over them, and
    the reductions whose chunk can give each program a ``SHARED_GPU_TILE`` take it (unless the
    config sets the tile)."""
    launches = world.run(_ccl_cases.shared_gpu_tile, world_size, backend)
    assert all(got == launches[0] for got in launches), "ranks tiled alike here"
    assert all(capped for *_, capped in launches[0]), launches[0]
    default = (DEFAULT_BLOCK, 8 if torch.cuda.is_available() else 4)
    fat = SHARED_GPU_TILE
    # below the bound, then at it on and off the heap (two_shot and reduce_scatter, twice each);
    # one_shot below and at it, then with the config's num_warps
    want = [default] * 4 + [fat] * 8 + [default, fat, (DEFAULT_BLOCK, 4)]
    assert [(block, warps) for _, block, warps, _ in launches[0]] == want, launches[0]
    assert {name for name, *_ in launches[0]} == {"reduce_kernel"}
