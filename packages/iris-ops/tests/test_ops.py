"""The fused operations against torch, their usage errors and their faults, at world sizes 1-4 on CPU ranks.

Each test runs one body of ``_ops_cases`` on every rank of a spawned world; the bodies check
several calls each, so that a world's start (seconds on CPU ranks) serves many checks.
"""

import signal

import _ops_cases
import pytest
import torch
from conftest import WORLD_SIZES

from iris.testing import processes

#: A bound that a rank's missing call must reach (seconds of the device clock).
TIMEOUT = 1.0


#: Every world size and every dtype, without their whole product (CI's time).
_MATRIX = [(1, torch.float32), (2, torch.bfloat16), (3, torch.float16), (3, torch.float32), (4, torch.bfloat16)]
assert {w for w, _ in _MATRIX} == set(WORLD_SIZES) and {d for _, d in _MATRIX} == set(_ops_cases.DTYPES)


@pytest.mark.parametrize("world_size,dtype", _MATRIX, ids=[f"{w}-{str(d)[6:]}" for w, d in _MATRIX])
def test_every_op_matches_torch_and_all_reduce_agrees_bitwise(world, backend, world_size, dtype):
    assert world.run(_ops_cases.every_op, world_size, backend, dtype) == [True] * world_size


@pytest.mark.parametrize("world_size,dtype", [(2, torch.bfloat16), (3, torch.float32)], ids=["2-bfloat16", "3-float32"])
def test_the_unfused_variant_matches_torch(world, backend, world_size, dtype):
    assert world.run(_ops_cases.every_op, world_size, backend, dtype, "unfused") == [True] * world_size


@pytest.mark.parametrize("world_size,dtype", [(1, torch.float32), (2, torch.bfloat16), (3, torch.float16)],
                         ids=["1-float32", "2-bfloat16", "3-float16"])  # fmt: skip
def test_the_chunked_variant_matches_torch_and_writes_only_its_tensors(world, backend, world_size, dtype):
    assert world.run(_ops_cases.chunked_variant, world_size, backend, dtype) == [True] * world_size


def test_auto_runs_unfused_only_where_the_table_says(monkeypatch):
    from iris.ops import config as ops_config

    cuda = torch.device("cuda", 0)
    monkeypatch.setitem(ops_config._CAPABILITIES, cuda, (9, 0))
    for backend in ops_config.BACKENDS:
        auto = ops_config.Config(backend=backend)
        assert ops_config.variant_of(auto, "matmul_reduce_scatter", cuda) == "unfused"
        assert ops_config.variant_of(auto, "matmul_all_reduce", cuda) == "unfused"
        assert ops_config.variant_of(auto, "all_gather_matmul", cuda) == "fused"
        assert ops_config.variant_of(auto, "matmul_all_gather", cuda) == "fused"
        assert ops_config.variant_of(ops_config.Config(backend=backend, variant="fused"), "matmul_all_reduce", cuda) == "fused"
        assert ops_config.variant_of(ops_config.Config(variant="unfused"), "all_gather_matmul", cuda) == "unfused"
        assert ops_config.variant_of(auto, "matmul_all_reduce", torch.device("cpu")) == "fused"
    monkeypatch.setitem(ops_config._CAPABILITIES, cuda, (8, 0))  # no measurement there: fused
    assert ops_config.variant_of(None, "matmul_all_reduce", cuda) == "fused"
    with pytest.raises(ValueError, match="unknown variant"):
        ops_config.Config(variant="streamed")
    with pytest.raises(ValueError, match="chunks must be an int in"):
        ops_config.Config(variant="chunked", chunks=0)
    assert ops_config.variant_of(ops_config.Config(variant="chunked"), "all_gather_matmul", cuda) == "chunked"
    with pytest.raises(TypeError, match="iris.ops.Config"):
        ops_config.variant_of(object(), "matmul_all_reduce", cuda)


@pytest.mark.parametrize("world_size", [1, 2, 3, 4])
def test_a_pipeline_deeper_than_its_ring_and_persistent_over_tiles_matches_torch(world, backend, world_size):
    assert world.run(_ops_cases.pipelined, world_size, backend) == [True] * world_size


@pytest.mark.parametrize("world_size", [1, 3])
def test_empty_calls_pair_up_and_an_empty_inner_dim_gives_zeros(world, backend, world_size):
    assert world.run(_ops_cases.empty_and_degenerate, world_size, backend) == [True] * world_size


@pytest.mark.parametrize("world_size", [1, 2])
def test_bad_input_is_rejected_before_any_kernel(world, backend, world_size):
    assert world.run(_ops_cases.bad_inputs, world_size, backend) == [True] * world_size


@pytest.mark.parametrize("world_size", [2, 4])
def test_back_to_back_operations_and_collectives_need_no_host_barrier(world, backend, world_size):
    assert world.run(_ops_cases.back_to_back, world_size, backend, 6) == [True] * world_size


@pytest.mark.parametrize("field", ["collective", "variant", "dtype", "inner dim and columns", "tiling", "fused and unfused",
                                   "fused and chunked", "chunks"])  # fmt: skip
def test_a_mismatched_call_raises_on_every_rank_and_touches_nothing(world, backend, field):
    assert world.run(_ops_cases.mismatch, 2, backend, field) == [True, True]


@pytest.mark.parametrize("world_size,variant", [(2, "fused"), (3, "fused"), (2, "chunked")])
def test_a_rank_that_never_arrives_times_out_the_others(world, backend, world_size, variant):
    assert world.run(_ops_cases.missing_rank, world_size, backend, TIMEOUT, variant) == [True] * world_size


@pytest.mark.cpu_ranks
def test_a_rank_that_never_hands_over_its_tiles_stops_every_rank(world, backend):
    assert world.run(_ops_cases.lost_tile, 2, backend, TIMEOUT) == [True, True]


@pytest.mark.cpu_ranks  # a GPU kernel outlives its killed process for a while: the moment cannot be arranged
@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGTERM], ids=["SIGKILL", "SIGTERM"])
def test_a_rank_killed_inside_an_operation_makes_the_survivors_raise_and_leaves_nothing(backend, sig):
    """Rank 1 of 2 dies while both compute and hand over tiles: the survivor raises within the bound
    a timeout naming it (it waited for rank 1's partial tiles, or at the exit), or the give-up of a
    rank that made the call, and nothing is left in /dev/shm."""
    victim = 1
    before = processes.shm_entries()
    outcome = processes.spawn(_ops_cases.killed, 2, backend, victim, int(sig), TIMEOUT)
    left = processes.shm_entries() - before
    assert outcome["exitcodes"] == [0, -sig], outcome
    res = outcome["reports"][0].get("result")
    assert isinstance(res, dict), outcome["reports"][0]
    assert res["type"] in ("CollectiveTimeoutError", "CollectiveAbandonedError"), res
    assert res["missing_rank"] == victim and res["abandoned_by"] != victim, res
    # It gives up after the bound (less the start skew when a peer gave up first), and no later than
    # its own computation before the wait (at most a whole call) plus 1.5x the bound and the
    # interpreter's allowance (iris-ccl's fault suite: 0.5 s).
    assert TIMEOUT - 0.1 <= res["elapsed"] <= res["call"] + 1.5 * TIMEOUT + 0.5, res
    assert not left, f"left in /dev/shm: {sorted(left)}"


def test_traced_operations_record_their_phases(world, backend):
    assert world.run(_ops_cases.traced, 2, backend) == [True, True]


@pytest.mark.gpu
@pytest.mark.parametrize("world_size,variant", [(2, "fused"), (4, "fused"), (2, "chunked"), (4, "chunked")])
def test_operations_replayed_from_a_cuda_graph_match_torch(world, backend, world_size, variant):
    assert world.run(_ops_cases.cuda_graph, world_size, backend, variant) == [True] * world_size


def test_the_context_layout_and_the_errors_are_the_collectives():
    """iris.ops declares its layout as a literal (tools/check_abi.py reads it from the source) and
    re-exports the collectives' errors: both must stay iris.ccl's."""
    import iris.ccl as ccl
    import iris.ops as ops

    assert ops.CONTEXT_ABI_VERSION == ccl.CONTEXT_ABI_VERSION
    for name in ccl.errors.__all__:
        assert name in ops.__all__ and getattr(ops, name) is getattr(ccl.errors, name), name
