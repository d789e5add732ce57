"""Compile-only: every collective kernel of the selected backend lowers for sm_90 and gfx942 with no GPU.

The cases are compiled in ``PARTS`` tests (every PARTS-th case each): one kernel takes about a
second to compile, and the parallel GPU test run (tools/parallel-tests.py) spreads tests, not the
compiles inside one, over its jobs."""

import _ccl_compile
import pytest

from iris.testing.world import World

TARGETS = ("cuda", "hip")
PARTS = 4


@pytest.fixture(scope="module")
def compiler():
    world = World(2, env={"TRITON_INTERPRET": "0"})  # rank 0 compiles for cuda, rank 1 for hip
    yield world
    world.close()


def _compile(rank, world_size, backend, part):
    return _ccl_compile.compile_all(rank, world_size, TARGETS[rank], backend, part, PARTS)


@pytest.mark.parametrize("part", range(PARTS))
def test_every_kernel_compiles_for_cuda_and_hip(compiler, backend, part):
    for target, (count, failures) in zip(TARGETS, compiler.run(_compile, backend, part)):
        assert count >= 10, count  # 45 cases in all, the same for both backends
        assert not failures, f"{backend}: {len(failures)} of {count} kernels failed for {target}:\n" + "\n".join(
            failures
        )
