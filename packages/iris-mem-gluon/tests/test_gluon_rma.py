"""Gluon kernels: load, store, get, put, copy and translate, local (rank == target) and remote, on every dtype,
with masks and ``other``, through the Context methods and the free functions."""

import _gluon_ranks as ranks
import pytest
from conftest import WORLD_SIZES

API = pytest.mark.parametrize("free", [False, True], ids=["context", "free"])


@API
@pytest.mark.parametrize("world_size", WORLD_SIZES)
def test_load_reads_every_ranks_copy_with_mask_and_other(world, world_size, free):
    world.run(ranks.check_load, world_size, free)


@API
@pytest.mark.parametrize("world_size", WORLD_SIZES)
def test_store_writes_every_ranks_copy_under_the_mask(world, world_size, free):
    world.run(ranks.check_store, world_size, free)


@API
@pytest.mark.parametrize("world_size", WORLD_SIZES)
def test_get_copies_a_ranks_block_into_the_local_heap(world, world_size, free):
    world.run(ranks.check_get, world_size, free)


@API
@pytest.mark.parametrize("world_size", WORLD_SIZES)
def test_put_copies_the_local_block_into_a_ranks_heap(world, world_size, free):
    world.run(ranks.check_put, world_size, free)


@API
@pytest.mark.parametrize("world_size", WORLD_SIZES)
def test_copy_moves_blocks_between_any_two_ranks(world, world_size, free):
    world.run(ranks.check_copy, world_size, free)


@API
@pytest.mark.parametrize("world_size", [1, 3])
def test_translate_gives_the_peer_mapping_of_the_same_offset(world, world_size, free):
    world.run(ranks.check_translate, world_size, free)


@API
def test_scalar_pointers_and_2d_blocks(world, free):
    world.run(ranks.check_shapes, 2, free)


def test_hinted_translation_gives_the_same_data(world):
    world.run(ranks.check_get, 2, False, 16)
    world.run(ranks.check_put, 2, True, 16)


@API
@pytest.mark.parametrize("world_size", [1, 2])
def test_scalar_values_are_broadcast_into_the_pointers_layout(world, world_size, free):
    world.run(ranks.check_broadcast, world_size, free)
