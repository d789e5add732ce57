"""Compile-only: every kernel of the suite lowers for NVIDIA (sm_90) and AMD (gfx942) without a
GPU, and translated accesses keep the vector width of a plain local copy."""

import _triton_compile
import pytest

from iris.heap.testing import World

TARGETS = ("cuda", "hip")


@pytest.fixture(scope="module")
def compiler():
    """Two compiled-mode processes (TRITON_INTERPRET=0): rank 0 compiles for cuda, rank 1 for hip."""
    world = World(2, env={"TRITON_INTERPRET": "0"})
    yield world
    world.close()


def _compile_all(rank, world_size):
    return _triton_compile.compile_all(rank, world_size, TARGETS[rank])


def _vector_accesses(rank, world_size, dtype):
    return _triton_compile.vector_accesses(rank, world_size, TARGETS[rank], dtype)


def test_every_kernel_compiles_for_cuda_and_hip(compiler):
    for target, (count, failures) in zip(TARGETS, compiler.run(_compile_all)):
        assert count > 100
        assert not failures, f"{len(failures)} of {count} kernels failed to compile for {target}:\n" + "\n".join(
            failures
        )


@pytest.mark.parametrize("dtype", ["fp32", "fp16", "i8"])
def test_translated_accesses_are_as_wide_as_local_ones(compiler, dtype):
    for target, accesses in zip(TARGETS, compiler.run(_vector_accesses, dtype)):
        local_loads, local_stores = accesses.pop("local")
        assert local_loads and local_stores
        for op, (loads, stores) in accesses.items():
            # the only extra access a translated one may have: the 64-bit loads of two heap bases
            extra_loads = set(loads) - set(local_loads) - {"ld.global.b64", "global_load_dwordx2"}
            assert not extra_loads and set(local_loads) <= set(loads), (
                f"{target} {dtype} {op}: loads {loads} vs local {local_loads}"
            )
            assert set(stores) == set(local_stores), f"{target} {dtype} {op}: stores {stores} vs local {local_stores}"
