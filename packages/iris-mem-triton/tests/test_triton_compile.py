"""Compile-only: every kernel of the suite lowers for NVIDIA (sm_90) and AMD (gfx942) without a
GPU, translated accesses keep the vector width of a plain local copy, and the device clock is
each target's timer."""

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


def _clock_reads(rank, world_size):
    return _triton_compile.clock_reads(rank, world_size, TARGETS[rank])


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


def test_the_device_clock_is_the_targets_timer(compiler):
    """clock_ns (and the bounded wait, which reads it every poll) read %globaltimer on NVIDIA and
    s_memrealtime on AMD, told apart by the compile target, not by a driver (there is none here)."""
    for target, reads in zip(TARGETS, compiler.run(_clock_reads)):
        word = {"cuda": "%globaltimer", "hip": "s_memrealtime"}[target]
        assert reads["clock[free=False]"] >= 1 and reads["clock[free=True]"] >= 1, f"{target}: {reads}"
        # record_error_kernel: the wait's start and its poll loop, and the two aux readings
        for case in ("record_error[free=False]", "record_error[free=True]"):
            assert reads[case] >= 3, f"{target} {case}: {word} appears {reads[case]} times"
