"""``heap.lost_ranks()`` and ``heap.explain_failure``: a device failure after a peer's process ended
is raised as ``PeerLostError``, naming the peer (the GPU case itself: iris-ccl's dead-peer test)."""

import os
import pickle
import signal
import subprocess
import sys
import time

import pytest
from _ranks import new_heap

from iris.heap import PeerLostError
from iris.heap.heap import _process_ended, _started

ILLEGAL = RuntimeError("Triton Error [CUDA]: an illegal memory access was encountered")


def _ended_child() -> tuple[subprocess.Popen, int]:
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    os.kill(child.pid, signal.SIGKILL)
    return child, child.pid


def test_process_ended_tells_a_running_process_from_a_killed_one():
    me = (os.getpid(), _started(os.getpid()))
    assert not _process_ended(me)
    assert _process_ended((me[0], me[1] + 1)), "another process that got this one's id is not it"
    child, pid = _ended_child()
    try:
        deadline = time.monotonic() + 10
        while not _process_ended((pid, None)) and time.monotonic() < deadline:  # killed, not reaped: a zombie
            time.sleep(0.01)
        assert _process_ended((pid, None)), "a killed child that its parent has not reaped yet has ended"
    finally:
        child.wait()
    assert _process_ended((pid, None)), "a reaped child has ended"


def _every_peer_runs(rank, world_size):
    with new_heap() as heap:
        assert heap.lost_ranks() == []
        assert heap.explain_failure("all_reduce's launch", ILLEGAL) is None, "no peer lost: the error stays as it is"
        heap.barrier()


@pytest.mark.parametrize("world_size", [1, 2, 3])
def test_no_peer_is_lost_while_every_rank_runs(world, world_size):
    world.run(_every_peer_runs, world_size)


def _a_lost_peer_is_named(rank, world_size):
    with new_heap() as heap:
        child, pid = _ended_child()
        child.wait()
        device, host, _ = heap._processes[0]
        heap._processes.append((device, host, (pid, None)))  # a second rank on this device, whose process ended
        assert heap.lost_ranks() == [1]
        assert heap.explain_failure("x", ValueError("CUDA")) is None, "only a device failure (a RuntimeError)"
        assert heap.explain_failure("x", RuntimeError("shapes differ")) is None, "only a device failure"
        lost = heap.explain_failure("all_reduce's launch", ILLEGAL)
        assert isinstance(lost, PeerLostError) and isinstance(lost, RuntimeError)
        assert lost.ranks == [1]
        text = str(lost)
        for words in ("all_reduce's launch failed on rank 0", "illegal memory access", f"rank 1 (pid {pid})",
                      "MPS", "CUDA context is then lost", 'section "A dead peer"'):  # fmt: skip
            assert words in text, f"{words!r} not in {text!r}"
        again = pickle.loads(pickle.dumps(lost))
        assert type(again) is PeerLostError and again.ranks == [1] and str(again) == text
        heap._processes[1] = ("another device", host, (pid, None))
        assert "MPS" not in str(heap.explain_failure("all_reduce's launch", ILLEGAL)), "no GPU shared with it"
        heap._processes.pop()


def test_a_device_failure_after_a_peer_ended_names_the_peer(world):
    world.run(_a_lost_peer_is_named, 1)
