"""Compile-only: every fused-operation kernel of the selected backend lowers for sm_90 and gfx942 with no GPU."""

import _ops_compile


def _compile(rank, world_size, backend):
    from iris.testing import COMPILE_TARGETS

    return _ops_compile.compile_all(rank, world_size, COMPILE_TARGETS[rank], backend)


def test_every_kernel_compiles_for_cuda_and_hip(compiler, backend):
    from iris.testing import COMPILE_TARGETS

    for target, (count, failures) in zip(COMPILE_TARGETS, compiler.run(_compile, backend)):
        assert count >= 10
        assert not failures, f"{backend}: {len(failures)} of {count} kernels failed for {target}:\n" + "\n".join(failures)
