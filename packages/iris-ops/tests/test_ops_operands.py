"""How the kernels read their operands (``operand_modes``: TMA descriptors or pointers; the Gluon backend
takes both or neither), and the scratch that descriptors built on the device need at launch. No ranks:
host code alone."""

import pytest
import torch
from triton.backends.compiler import GPUTarget

from iris.ops import _triton_kernels as K
from iris.ops import operations
from iris.ops.config import Config

HOPPER = GPUTarget("cuda", 90, 32)
CFG = Config(block_m=128, block_n=256, block_k=64, group_m=8, num_warps=8, num_stages=3)


def _modes(a, b, target=HOPPER, cfg=CFG, row_step=128, kernels=K):
    m = kernels.operand_modes(target, cfg, a, b, row_step)
    return m["A_MODE"], m["B_MODE"]


def test_row_major_and_column_major_16bit_operands_take_descriptors():
    a = torch.empty(256, 512, dtype=torch.bfloat16)
    b = torch.empty(512, 384, dtype=torch.float16)
    assert _modes(a, b) == (1, 1)
    assert _modes(a.t().contiguous().t(), b.t().contiguous().t()) == (2, 2)  # column-major: their transposes
    assert _modes(a, b, target=None) == (1, 1)  # CPU ranks: the interpreter reads descriptors too


CANNOT = ["fp32", "unaligned base", "stride not 16 bytes", "neither dim contiguous", "box over 256",
          "rows not 16 bytes apart"]  # fmt: skip


@pytest.mark.parametrize("case", CANNOT)
def test_operands_tma_cannot_address_fall_back_to_pointers(case):
    a = torch.empty(256, 512, dtype=torch.bfloat16)
    b = torch.empty(512, 384, dtype=torch.bfloat16)
    cfg, row_step = CFG, 128
    if case == "fp32":
        a = a.float()
    elif case == "unaligned base":
        a = torch.empty(256 * 512 + 1, dtype=torch.bfloat16)[1:].view(256, 512)
    elif case == "stride not 16 bytes":
        a = torch.empty(256, 517, dtype=torch.bfloat16)[:, :512]
    elif case == "neither dim contiguous":
        a = torch.empty(512, 1024, dtype=torch.bfloat16)[::2, ::2]
    elif case == "box over 256":
        cfg = Config(block_m=512, block_n=256, block_k=64)
    elif case == "rows not 16 bytes apart":  # a column-major a whose tiles start at rows 8k + 4
        a, row_step = a.t().contiguous().t(), 4
    assert _modes(a, b, cfg=cfg, row_step=row_step)[0] == 0
    assert _modes(a, b, cfg=cfg, row_step=row_step)[1] == 1  # b is read by TMA all the same


@pytest.mark.parametrize("target", [GPUTarget("cuda", 80, 32), GPUTarget("hip", "gfx942", 64)])
def test_targets_without_tma_read_through_pointers(target):
    a = torch.empty(256, 512, dtype=torch.bfloat16)
    assert _modes(a, a.t(), target=target) == (0, 0)


def test_the_scratch_allocator_is_set_for_the_launch_alone():
    from triton.runtime import _allocation

    seen = []
    before = _allocation._allocator.get()
    operations._with_scratch(lambda: seen.append(_allocation._allocator.get()), True)
    assert seen == [operations._scratch]
    assert _allocation._allocator.get() is before  # the caller's allocator (here: none) untouched
    operations._with_scratch(lambda: seen.append(_allocation._allocator.get()), False)
    assert seen[-1] is before


def _gluon_modes(a, b, target=HOPPER, cfg=CFG):
    from iris.ops import _gluon_kernels as G

    return _modes(a, b, target, cfg, kernels=G)


def test_the_gluon_hopper_path_takes_both_operands_by_tma_or_neither():
    a = torch.empty(256, 512, dtype=torch.bfloat16)
    b = torch.empty(512, 384, dtype=torch.bfloat16)
    assert _gluon_modes(a, b) == (1, 1)
    assert _gluon_modes(a.t().contiguous().t(), b) == (2, 1)
    assert _gluon_modes(a, b, target=None) == (1, 1)  # CPU ranks answer as sm_90
    ragged = torch.empty(512, 389, dtype=torch.bfloat16)[:, :384]  # b's rows not 16 bytes apart
    assert _gluon_modes(a, ragged) == (0, 0)  # wgmma reads A from shared memory too: the portable path


@pytest.mark.parametrize(
    "case", ["fp32", "sm_80", "sm_100", "gfx942", "half a warpgroup of rows", "instruction over 256 columns"]
)
def test_the_gluon_portable_path_serves_the_rest(case):
    a = torch.empty(256, 512, dtype=torch.bfloat16)
    b = torch.empty(512, 384, dtype=torch.bfloat16)
    target, cfg = HOPPER, CFG
    if case == "fp32":
        a, b = a.float(), b.float()
    elif case == "sm_80":
        target = GPUTarget("cuda", 80, 32)
    elif case == "sm_100":
        target = GPUTarget("cuda", 100, 32)
    elif case == "gfx942":
        target = GPUTarget("hip", "gfx942", 64)
    elif case == "half a warpgroup of rows":
        cfg = Config(block_m=32, block_n=128, block_k=64, num_warps=4)
    elif case == "instruction over 256 columns":
        cfg = Config(block_m=64, block_n=512, block_k=64, num_warps=4)
    assert _gluon_modes(a, b, target=target, cfg=cfg) == (0, 0)
