"""Ranks as plain processes, for tests in which a rank may die: ``spawn`` runs a function on fresh
ranks (a gloo group, torchrun's environment variables) and collects what each reported, its exit
code and when it exited, without waiting for a dead rank (``iris.testing.world.World`` raises when
a rank dies; this harness is how a test watches the others survive it).

A spawned function sends values to the parent as it goes (``report``), so a rank that is killed
later has still said what it did; ``shm_entries`` lists /dev/shm, for tests that nothing leaks.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import queue
import socket
import time
import traceback

import torch
import torch.distributed as dist

__all__ = ["report", "shm_entries", "spawn"]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


_reports = None  # the spawned rank's queue (report())


def report(key: str, value) -> None:
    """From a rank started by :func:`spawn`: send ``value`` to the parent at once."""
    _reports.put((int(os.environ["RANK"]), key, value))


def _spawned(fn, rank, world_size, port, args, results) -> None:
    global _reports
    _reports = results
    os.environ.update(RANK=str(rank), LOCAL_RANK=str(rank), WORLD_SIZE=str(world_size),
                      LOCAL_WORLD_SIZE=str(world_size), MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))  # fmt: skip
    import resource

    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))  # an aborted rank writes no core file
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world_size)
    try:
        report("result", fn(rank, world_size, *args))
    except BaseException as e:  # noqa: BLE001
        report("error", f"{type(e).__name__}: {e}\n{traceback.format_exc()}")
    results.close()
    results.join_thread()  # the reports are in the pipe
    os._exit(0)  # no teardown: gloo's would wait for a peer that is dead


def spawn(fn, world_size: int, *args, timeout: float = 120.0) -> dict:
    """Run ``fn(rank, world_size, *args)`` in fresh processes (no World: a rank may die here).

    Returns ``{"exitcodes": [...], "died_at": [monotonic time each exit was seen], "reports":
    {rank: {key: value}}}``; processes still alive at ``timeout`` are killed (exit code None)."""
    ctx = mp.get_context("spawn")
    # A queue per rank: a rank killed while it writes to a shared queue would leave the queue's
    # write lock held, and every other rank's report would then wait for it forever.
    queues = [ctx.Queue() for _ in range(world_size)]
    port = _free_port()
    procs = [ctx.Process(target=_spawned, args=(fn, r, world_size, port, args, queues[r]), daemon=True)
             for r in range(world_size)]  # fmt: skip
    for p in procs:
        p.start()
    reports: dict[int, dict] = {r: {} for r in range(world_size)}
    died_at: list[float | None] = [None] * world_size

    def drain(wait: float) -> None:
        for q in queues:
            try:
                while True:
                    rank, key, value = q.get(timeout=wait)
                    reports[rank][key] = value
            except queue.Empty:
                pass

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and any(t is None for t in died_at):
        drain(0.01)
        for r, p in enumerate(procs):
            if died_at[r] is None and p.exitcode is not None:
                died_at[r] = time.monotonic()
    drain(0.2)  # what was sent before the exits
    exitcodes = []
    for p in procs:
        if p.exitcode is None:
            p.kill()
            p.join(5)
            exitcodes.append(None)
        else:
            p.join(5)
            exitcodes.append(p.exitcode)
    return {"exitcodes": exitcodes, "died_at": died_at, "reports": reports}


def shm_entries() -> set[str]:
    """What /dev/shm holds, less POSIX semaphores (``sem.*``: multiprocessing's locks, this harness's
    and other processes', never heap memory)."""
    try:
        return {name for name in os.listdir("/dev/shm") if not name.startswith("sem.")}
    except FileNotFoundError:
        return set()
