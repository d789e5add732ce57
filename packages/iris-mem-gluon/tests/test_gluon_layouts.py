"""The host layout helper: the target's warp size (32 on NVIDIA, 64 on AMD), 16-byte vectors per thread."""

import pytest
import torch
import triton.language as tl
from triton.backends.compiler import GPUTarget

import iris.mem.gluon as img

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
