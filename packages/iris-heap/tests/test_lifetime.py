"""Shared-memory hygiene and the test runner: nothing lingers, failures come back with their rank."""

import os
import signal
import stat
import time

import pytest
import torch

import iris.heap
from iris.heap.testing import RankFailedError, World, run
from iris.heap.transport.shm import ShmTransport

pytestmark = pytest.mark.skipif(torch.cuda.is_available(), reason="shared-memory transport is the CPU path")


@pytest.fixture
def shm_dir(tmp_path_factory):
    base = "/dev/shm" if os.path.isdir("/dev/shm") else str(tmp_path_factory.getbasetemp())
    d = os.path.join(base, f"iris-test-{os.getpid()}-{time.monotonic_ns()}")
    os.mkdir(d, 0o700)
    yield d
    leftover = os.listdir(d)
    os.rmdir(d) if not leftover else None
    assert not leftover, f"shared-memory files left behind: {leftover}"


def _init_and_close(rank, world_size):
    with iris.heap.init(1 << 20) as heap:
        heap.ones(100)
        assert os.listdir(os.environ["IRIS_SHM_DIR"]) == [] or world_size > 1
        heap.barrier()
        assert os.listdir(os.environ["IRIS_SHM_DIR"]) == [], "files must be unlinked once every rank mapped them"


def _killed_mid_run(rank, world_size):
    heap = iris.heap.init(1 << 20)
    x = heap.ones(1000)
    heap.barrier()
    if rank == world_size - 1:
        os.kill(os.getpid(), signal.SIGKILL)
    heap.peer(x, 0).sum()
    heap.barrier()  # the others block here until the runner tears the world down


def test_segment_is_private_and_unguessable(tmp_path):
    path = str(tmp_path / "seg")
    ShmTransport._create(path, 4096)
    mode = stat.S_IMODE(os.stat(path).st_mode)
    assert mode == 0o600, oct(mode)
    os.unlink(path)


@pytest.mark.parametrize("world_size", [1, 4])
def test_nothing_left_after_close(shm_dir, world_size):
    run(_init_and_close, world_size, env={"IRIS_SHM_DIR": shm_dir})


def test_nothing_left_after_a_rank_is_killed(shm_dir):
    with pytest.raises(RankFailedError, match="rank 2 was killed by signal SIGKILL"):
        run(_killed_mid_run, 3, env={"IRIS_SHM_DIR": shm_dir}, timeout=120)


def test_full_shared_memory_is_a_clear_error(shm_dir):
    st = os.statvfs(shm_dir)
    too_big = st.f_bavail * st.f_frsize + (1 << 30)
    with pytest.raises(iris.heap.HeapExhaustedError, match="cannot reserve"):
        ShmTransport._create(os.path.join(shm_dir, "big"), too_big)
    os.unlink(os.path.join(shm_dir, "big"))


def _fails_on_rank_one(rank, world_size):
    if rank == 1:
        raise KeyError("boom on one")
    return rank * 10


def _returns(rank, world_size, base):
    return base + rank


def test_runner_reraises_the_failing_rank_with_its_type_and_traceback():
    with pytest.raises(KeyError, match="boom on one") as info:
        run(_fails_on_rank_one, 2)
    assert "raised on rank 1 of 2" in getattr(info.value, "__notes__", [""])[0]
    assert "_fails_on_rank_one" in str(info.value.__cause__)


def test_world_returns_results_in_rank_order_and_recovers_after_failure():
    with World(3) as w:
        assert w.run(_returns, 100) == [100, 101, 102]
        with pytest.raises(KeyError):
            w.run(_fails_on_rank_one)
        assert w.run(_returns, 7) == [7, 8, 9]
