"""Compile-only: every collective kernel of the selected backend lowers for sm_90 and gfx942 with no GPU."""

import _ccl_compile
import pytest

from iris.testing.world import World

TARGETS = ("cuda", "hip")


@pytest.fixture(scope="module")
def compiler():
    world = World(2, env={"TRITON_INTERPRET": "0"})  # rank 0 compiles for cuda, rank 1 for hip
    yield world
    world.close()


def _compile(rank, world_size, backend):
    return _ccl_compile.compile_all(rank, world_size, TARGETS[rank], backend)


def test_every_kernel_compiles_for_cuda_and_hip(compiler, backend):
    for target, (count, failures) in zip(TARGETS, compiler.run(_compile, backend)):
        assert count >= 20
        assert not failures, f"{backend}: {len(failures)} of {count} kernels failed for {target}:\n" + "\n".join(
            failures
        )
