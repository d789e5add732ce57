"""The host layout helper: the target's warp size (32 on NVIDIA, 64 on AMD), 16-byte vectors per
thread, and a kernel compiled with its layout runs the target's warp size."""

import re

import pytest
import torch
import triton.language as tl
from triton.backends.compiler import GPUTarget

import iris.mem.gluon as img
from iris.testing import COMPILE_TARGETS

CUDA, HIP = GPUTarget("cuda", 90, 32), GPUTarget("hip", "gfx942", 64)


@pytest.mark.parametrize("target, warp", [(CUDA, 32), (HIP, 64), (GPUTarget("hip", "gfx1100", 32), 32)])
def test_warp_size_is_the_targets(target, warp):
    assert img.warp_size(target) == warp
    layout = img.blocked_layout(4096, 8, target)
    assert layout.threads_per_warp == [warp] and layout.warps_per_cta == [8] and layout.order == [0]


@pytest.mark.parametrize(
    "dtype, per_thread",
    [(None, 4), (torch.float32, 4), (torch.bfloat16, 8), (torch.int8, 16), (torch.float64, 2), (tl.float16, 8), (2, 8)],
)
def test_each_thread_holds_one_16_byte_vector(dtype, per_thread):
    assert img.blocked_layout(1 << 16, 4, CUDA, dtype=dtype).size_per_thread == [per_thread]


def test_small_blocks_get_one_element_per_thread():
    assert img.blocked_layout(64, 4, HIP).size_per_thread == [1]
    assert img.blocked_layout(256, 4, CUDA).size_per_thread == [2]


def test_without_a_gpu_the_default_target_is_none_and_any_warp_size_serves():
    if torch.cuda.is_available():
        assert img.current_target() is not None
        assert img.warp_size() == img.current_target().warp_size
    else:
        assert img.current_target() is None
        assert img.warp_size() == 32


@pytest.mark.parametrize("block, warps", [(100, 4), (0, 4), (64, 3), (True, 4)])
def test_bad_shapes_are_refused(block, warps):
    with pytest.raises(ValueError, match="power of two"):
        img.blocked_layout(block, warps, CUDA)


def test_a_target_must_be_a_gpu_target():
    with pytest.raises(TypeError, match="GPUTarget"):
        img.warp_size("cuda")


def _warp_sizes_in_ir(rank, world_size):
    """(threads per warp of the compiled module, of its layout) for the stream copy, built with the
    layout for this rank's compile target (a compiled-mode rank of the ``compiler`` fixture)."""
    import _gluon_kernels as K

    from iris.testing.mem.lowering import TARGETS, compile_one

    target = TARGETS[COMPILE_TARGETS[rank]]
    _, fn, signature, constexprs = K.stream_cases("fp32", 1024, target)[1]
    ttgir = compile_one(K, fn, signature, constexprs, target).asm["ttgir"]
    return int(re.search(r'"ttg.threads-per-warp" = (\d+)', ttgir).group(1)), constexprs["L"].threads_per_warp[0]


def test_layouts_carry_the_targets_warp_size(compiler):
    for target, (module_warp, layout_warp) in zip(COMPILE_TARGETS, compiler.run(_warp_sizes_in_ir)):
        assert module_warp == layout_warp == {"cuda": 32, "hip": 64}[target], target
