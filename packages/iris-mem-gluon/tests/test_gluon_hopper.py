"""Hopper's Gluon primitives (TMA copies into shared memory, mbarriers, wgmma) in a pipelined GEMM:
run on CPU ranks through their CPU meanings, compiled for sm_90, and run on a Hopper GPU."""

import _gluon_hopper as hopper
import pytest
import torch


@pytest.mark.cpu_ranks
def test_a_tma_and_wgmma_pipeline_runs_on_cpu_ranks(world):
    world.run(hopper.check_hopper_matmul, 1)


@pytest.mark.cpu_ranks
def test_a_wait_that_would_hang_or_a_slot_refilled_under_an_mma_raises_on_cpu_ranks(world):
    world.run(hopper.check_faults_raise_on_cpu, 1)


def test_the_pipeline_compiles_to_tma_wgmma_and_mbarriers_for_sm_90(compiler):
    cuda = [r for r in compiler.run(hopper.compile_hopper_matmul) if r is not None]
    assert cuda, "no rank compiled for cuda"
    for missing in cuda:
        assert not any(missing.values()), f"sm_90 PTX lacks {missing}"


@pytest.mark.skipif(
    not torch.cuda.is_available() or torch.cuda.get_device_capability() < (9, 0), reason="needs a Hopper GPU"
)
def test_the_pipeline_matches_torch_on_a_hopper_gpu(world):
    world.run(hopper.check_hopper_matmul, 1, "cuda")
