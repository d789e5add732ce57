"""A peer killed during an all_reduce over a cuda-vmm heap (GPU only; skipped without CUDA).

The cuda-vmm transport exists for this table: with a cudaMalloc heap shared by CUDA IPC, under MPS,
a survivor whose kernel touched a SIGKILLed peer's memory got "illegal memory access" and lost its
CUDA context. With cuda-vmm every rank maps every heap itself, so a peer's death frees nothing the
survivor reaches: rank 0's call must end as a clean timeout within the bound, its CUDA context
must still work, and a fresh process must still have the GPU.
"""

import os
import signal
import subprocess
import sys
import time

import pytest
import torch
import torch.distributed as dist

import iris.ccl as ccl
import iris.heap
from iris.testing.processes import report, spawn

pytestmark = pytest.mark.gpu

HEAP_SIZE = 1 << 22
TIMEOUT = 2.0  # heap.wait_timeout while rank 1 dies
QUIET = 30.0  # heap.wait_timeout while nothing is meant to fail
ALLOWANCE = 0.5  # seconds past 1.5x the bound for the launch and the host's view of the kernel's end


def _killed(rank, world_size, moment: str):
    """Rank 1 is SIGKILLed ``"before entering"`` an all_reduce that rank 0 waits in, or ``"while
    waiting"`` in one (rank 0 sends the signal, then makes the call). Rank 0 reports what its call
    raised, how long it took, and what a torch op on its device gave afterwards."""
    heap = iris.heap.init(HEAP_SIZE, transport="cuda-vmm")
    heap.wait_timeout = QUIET
    config = ccl.Config(blocking=True)
    x = heap.full((1024,), float(rank + 1))
    ccl.all_reduce(x, config=config)  # compiled and warm on every rank
    assert torch.equal(x, torch.full_like(x, float(sum(range(1, world_size + 1))))), f"rank {rank}: wrong sum"
    pids = [None] * world_size
    dist.all_gather_object(pids, os.getpid())
    heap.wait_timeout = TIMEOUT
    dist.barrier()
    if rank == 1:
        if moment == "before entering":
            time.sleep(0.2)
            os.kill(os.getpid(), signal.SIGKILL)
        else:
            ccl.all_reduce(x, config=config)
        time.sleep(60)  # the signal ends this process before
        return "survived the signal"
    if moment == "while waiting":
        time.sleep(0.3)
        os.kill(pids[1], signal.SIGKILL)
    report("start", time.monotonic())
    start = time.monotonic()
    try:
        ccl.all_reduce(x, config=config)
        error = None
    except Exception as e:  # noqa: BLE001 - what the call raised is the observation
        error = {"type": type(e).__name__, "message": str(e), "missing_rank": getattr(e, "missing_rank", None)}
    elapsed = time.monotonic() - start
    after = torch.arange(1, 5, device=heap.device, dtype=torch.float32).sum().item()  # the context still works
    torch.cuda.synchronize(heap.device)
    return {"error": error, "elapsed": elapsed, "after": after}


@pytest.mark.parametrize("moment", ["before entering", "while waiting"], ids=lambda m: m.replace(" ", "-"))
def test_a_peer_killed_in_an_all_reduce_leaves_the_survivor_a_timeout_and_a_working_context(moment):
    outcome = spawn(_killed, 2, moment, timeout=120.0)
    assert outcome["exitcodes"][1] == -signal.SIGKILL, outcome
    assert outcome["exitcodes"][0] == 0, outcome
    res = outcome["reports"][0].get("result")
    assert isinstance(res, dict), f"rank 0: {outcome['reports'][0]}"
    err = res["error"]
    if moment == "before entering" or err is not None:
        # "while waiting": a killed process's kernel runs on until the driver tears its context
        # down, so rank 1's kernel may still meet rank 0's and the call may return correctly.
        assert err is not None and err["type"] == "CollectiveTimeoutError", f"rank 0: {err}"
        assert err["missing_rank"] == 1, f"rank 0: {err}"
        assert TIMEOUT - 0.1 <= res["elapsed"] <= 1.5 * TIMEOUT + ALLOWANCE, f"gave up after {res['elapsed']:.3f} s"
    assert res["after"] == 10.0, f"rank 0's CUDA context after the peer's death: {res}"
    fresh = subprocess.run(
        [sys.executable, "-c", "import torch; print(torch.ones(4, device='cuda').sum().item())"],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert fresh.returncode == 0 and fresh.stdout.strip() == "4.0", f"a fresh process on the GPU: {fresh}"
