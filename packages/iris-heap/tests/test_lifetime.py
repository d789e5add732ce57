"""Heap lifetime: nothing outlives the ranks, whatever kills them; failures come back with their rank."""

import gc
import json
import multiprocessing as mp
import os
import random
import resource
import signal
import socket
import subprocess
import sys
import threading
import time

import pytest
import torch

import iris.heap
from iris.heap import RankFailedError
from iris.heap.transport import fds, shm
from iris.heap.transport.shm import ShmTransport
from iris.testing.world import World, run

pytestmark = pytest.mark.skipif(torch.cuda.is_available(), reason="shared-memory transport is the CPU path")

SURVIVOR_BOUND = 60.0  # seconds within which the ranks that outlive a killed one must have raised


def shm_entries() -> set[str]:
    """What in /dev/shm looks like a heap segment (other processes may make files there too)."""
    return {name for name in os.listdir("/dev/shm") if name.startswith("iris")} if os.path.isdir("/dev/shm") else set()


def _descriptors() -> dict[str, int]:
    """This process's open descriptors by kind: heap memory files and sockets."""
    kinds = {"heap": 0, "socket": 0}
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:  # the listing's own descriptor, closed by now
            continue
        kinds["heap"] += target.startswith("/memfd:iris-heap")
        kinds["socket"] += target.startswith("socket:")
    return kinds


# -- a clean run ---------------------------------------------------------------------------------


def _mappings_without_names(rank, world_size):
    with iris.heap.init(1 << 20) as heap:
        lines = open("/proc/self/maps").read().splitlines()
        starts = {int(line.split("-", 1)[0], 16): line for line in lines}
        for r, base in enumerate(heap.heap_bases.tolist()):
            line = starts[base]
            assert line.endswith(f"/memfd:iris-heap-rank{r} (deleted)"), line
            assert " rw-s " in line, f"rank {r}'s heap must be a shared, writable mapping: {line}"


def _close_leaves_no_descriptor(rank, world_size):
    gc.collect()  # heaps of earlier tasks that only a reference cycle kept
    before = _descriptors()
    heap = iris.heap.init(1 << 20)
    x = heap.ones(10)
    opened = {kind: n - before[kind] for kind, n in _descriptors().items()}
    assert opened == {"heap": world_size, "socket": 0}, f"one mapping per rank, no socket left open: {opened}"
    heap.close()
    del x, heap
    gc.collect()
    assert _descriptors() == before, "nothing of a closed heap stays open once its tensors are gone"


@pytest.mark.parametrize("world_size", [1, 3])
def test_heap_memory_has_no_name(world, world_size):
    before = shm_entries()
    world.run(_mappings_without_names, world_size)
    assert shm_entries() - before == set()


@pytest.mark.parametrize("world_size", [1, 3])
def test_close_leaves_no_descriptor_or_socket(world, world_size):
    world.run(_close_leaves_no_descriptor, world_size)


# -- a rank killed during init -------------------------------------------------------------------

STAGES = ["created", "exchanging", "mapped", "random"]


def _die(sig):
    os.kill(os.getpid(), sig)
    time.sleep(SURVIVOR_BOUND)  # the signal is on its way; never go on


def _die_at(stage: str, sig, world_size: int, seed: int) -> None:
    """Make this process kill itself with ``sig`` at ``stage`` of iris.heap.init (process-local patches)."""
    if stage == "created":  # its memory file exists, full size, before any peer knows of it
        create = ShmTransport._create
        ShmTransport._create = staticmethod(lambda *a: (create(*a), _die(sig)))
    elif stage == "exchanging":  # one peer has its descriptor, the others do not
        serve = fds._Exchange._serve
        fds._Exchange._serve = lambda *a: (serve(*a), _die(sig))
    elif stage == "mapped":  # it has mapped every peer's heap; the others wait for its status
        mapped = []
        map_ = ShmTransport._map

        def map_then_die(fd, size):
            mapped.append(map_(fd, size))
            if len(mapped) == world_size:
                _die(sig)
            return mapped[-1]

        ShmTransport._map = staticmethod(map_then_die)
    else:  # anywhere in init or the barrier after it, from another thread
        delay = random.Random(seed).uniform(0.0, 0.05)
        threading.Timer(delay, os.kill, (os.getpid(), sig)).start()


def _rank_killed_during_init(rank, world_size, port, victim, stage, sig, seed, out):
    """One rank of a world whose ``victim`` dies at ``stage``; the others record what init did."""
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), OMP_NUM_THREADS="1")
    import torch.distributed as dist

    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world_size)
    # Every rank has joined before any can die: init_process_group returns on rank 0 (the store's
    # host) while peers may still be connecting through its store, and a peer left connecting to a
    # dead store waits for torch's own 30-minute timeout, not for anything of Iris. One CI run in
    # many saw exactly that (a survivor still running after 60 s at stage 'random').
    dist.barrier()
    if rank == victim:
        _die_at(stage, sig, world_size, seed)
    start = time.monotonic()
    try:
        heap = iris.heap.init(1 << 20)
        if rank == victim:  # its random moment came after init: it waits for it
            time.sleep(SURVIVOR_BOUND)
        heap.barrier()
        outcome = "returned"
    except Exception as e:  # noqa: BLE001 - what the survivor raised is the result
        outcome = f"{type(e).__name__}: {e}"
    with open(os.path.join(out, f"rank{rank}.json"), "w") as f:
        json.dump({"outcome": outcome, "seconds": time.monotonic() - start}, f)
    os._exit(0)  # a survivor that exits closes its connections, as a torchrun worker that raised does


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def preloaded():
    """A multiprocessing context whose children start with torch already imported (milliseconds, not seconds)."""
    ctx = mp.get_context("forkserver")
    ctx.set_forkserver_preload(["torch", "torch.distributed", "iris.heap", __name__])
    return ctx


@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGTERM], ids=["SIGKILL", "SIGTERM"])
@pytest.mark.parametrize("stage", STAGES)
@pytest.mark.parametrize("world_size", [2, 3])
def test_a_rank_killed_during_init_leaves_nothing_and_the_others_raise(preloaded, tmp_path, world_size, stage, sig):
    seed = 100 * world_size + 10 * STAGES.index(stage) + int(sig)
    victim = STAGES.index(stage) % world_size  # rank 0 (the store's host) and the others in turn
    before = shm_entries()
    port = _free_port()
    procs = [
        preloaded.Process(
            target=_rank_killed_during_init, args=(r, world_size, port, victim, stage, sig, seed, str(tmp_path))
        )
        for r in range(world_size)
    ]
    for p in procs:
        p.start()
    deadline = time.monotonic() + SURVIVOR_BOUND
    for p in procs:
        p.join(timeout=max(deadline - time.monotonic(), 0.1))
    hung = [r for r, p in enumerate(procs) if p.is_alive()]
    for p in procs:
        if p.is_alive():
            p.kill()
            p.join()
    assert not hung, f"ranks {hung} still ran {SURVIVOR_BOUND:g} s after rank {victim} was killed at {stage!r}"
    assert procs[victim].exitcode == -sig, f"rank {victim} should have died of {sig.name}"
    for r in range(world_size):
        if r == victim:
            continue
        with open(tmp_path / f"rank{r}.json") as f:
            survivor = json.load(f)
        assert survivor["outcome"] != "returned", f"rank {r} went on as if rank {victim} were alive"
        assert survivor["seconds"] < SURVIVOR_BOUND, survivor
    assert shm_entries() - before == set(), "a killed rank's heap must not outlive it"


def _stuck_peer(rank, world_size):
    """Rank 1 stalls before its exchange; rank 0, with a short bound, gives up: both report what they raised."""
    timeout, exchange = fds.EXCHANGE_TIMEOUT, fds.exchange
    if rank == 0:
        fds.EXCHANGE_TIMEOUT = 1.0
    else:
        fds.exchange = lambda *a, **k: (time.sleep(3.0), exchange(*a, **k))[1]
    start = time.monotonic()
    try:
        iris.heap.init(1 << 20)
    except iris.heap.HeapError as e:
        return str(e), time.monotonic() - start
    finally:
        fds.EXCHANGE_TIMEOUT, fds.exchange = timeout, exchange
    return "returned", time.monotonic() - start


def test_a_stuck_peer_is_a_clear_error_after_the_exchange_timeout(world):
    (waited, seconds), (stalled, _) = world.run(_stuck_peer, 2)
    assert "rank 0 gave up exchanging shared-memory heaps after 1 s, still waiting for heaps from ranks [1]" in waited
    assert seconds < 10
    assert "could not connect to rank 0's socket" in stalled


# -- memory that cannot be had -------------------------------------------------------------------


def test_a_heap_larger_than_memory_is_refused_at_once():
    room, _ = shm._memory_room()
    start = time.monotonic()
    with pytest.raises(iris.heap.HeapExhaustedError, match="cannot reserve a .*-byte heap in shared memory") as info:
        ShmTransport._create(room + (1 << 30), 0)
    assert time.monotonic() - start < 5
    # The room the refusal reports is read again inside the call: other processes may have freed
    # memory in between (a CI run saw 8 MB more), but never the 1 GiB margin.
    assert info.value.requested == room + (1 << 30) and info.value.free < room + (1 << 29)


def _allocation_fails(rank, world_size):
    soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    resource.setrlimit(resource.RLIMIT_FSIZE, (1 << 20, hard))
    try:
        with pytest.raises(iris.heap.HeapExhaustedError, match="posix_fallocate failed with 'File too large'"):
            iris.heap.init(2 << 20)
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))


def test_a_failed_allocation_is_a_clear_error(world):
    world.run(_allocation_fails, 1)


# -- the test runner -----------------------------------------------------------------------------


def _killed_mid_run(rank, world_size):
    heap = iris.heap.init(1 << 20)
    x = heap.ones(1000)
    heap.barrier()
    if rank == world_size - 1:
        os.kill(os.getpid(), signal.SIGKILL)
    heap.peer(x, 0).sum()
    heap.barrier()  # the others block here until the runner tears the world down


def test_runner_reports_a_rank_killed_by_a_signal():
    before = shm_entries()
    with pytest.raises(RankFailedError, match="rank 2 was killed by signal SIGKILL"):
        run(_killed_mid_run, 3, timeout=120)
    assert shm_entries() - before == set()


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


def test_importing_the_heap_loads_no_test_runner_and_ignores_its_variable():
    code = (
        "import sys, warnings\n"
        "import iris.heap\n"
        "assert 'iris.testing.world' not in sys.modules and 'iris.heap.testing' not in sys.modules\n"
        "with warnings.catch_warnings(record=True) as caught:\n"
        "    warnings.simplefilter('always')\n"
        "    from iris.heap.testing import World\n"
        "import iris.testing.world\n"
        "assert World is iris.testing.world.World, World\n"
        "assert [w.category for w in caught] == [DeprecationWarning], caught\n"
        "assert 'iris.testing.world.World' in str(caught[0].message)\n"
        "try:\n"
        "    World(1)\n"
        "except ValueError as e:\n"
        "    print(e)\n"
    )
    env = {**os.environ, "IRIS_TEST_TIMEOUT": "soon"}
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "IRIS_TEST_TIMEOUT='soon': a test call's bound is a positive number of seconds"


def _init_hooks(rank, world_size):
    seen = []
    handle = iris.heap.register_init_hook(seen.append)
    with iris.heap.register_init_hook(lambda h: seen.append(("second", h.serial))):
        first = iris.heap.init(1 << 20)
    handle.remove()
    handle.remove()  # idempotent
    second = iris.heap.init(1 << 20)
    assert seen == [first, ("second", first.serial)], seen
    with pytest.raises(TypeError, match="takes a callable, got int"):
        iris.heap.register_init_hook(3)
    second.close()
    first.close()


def test_init_hooks_see_each_new_heap_until_removed(world):
    world.run(_init_hooks, 2)
