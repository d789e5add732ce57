"""Multi-rank test runner: one spawned process per rank, a gloo process group set up in each.

``run(fn, world_size, *args)`` calls ``fn(rank, world_size, *args)`` on every rank and returns
the ranks' results in rank order. The first failure is re-raised in the caller with its type,
the rank it happened on, and the rank's traceback.

A :class:`World` keeps its processes (and their imported modules and process group) between
calls, so a test suite pays the few seconds of process start-up once per world size, not once
per test. A world whose call failed is torn down and started afresh on its next call, so a
rank stuck in a collective never leaks into the next test.

:func:`time_launches` is the one timer the layers' benchmarks share: the device time of kernel
launches queued back to back, without the host's launch path in the figure.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import pickle
import queue
import signal
import socket
import statistics
import time
import traceback

__all__ = ["run", "World", "WorldPool", "RankFailedError", "RemoteTraceback", "time_launches"]

DEFAULT_TIMEOUT = float(os.environ.get("IRIS_TEST_TIMEOUT", 900))
_GRACE = 5.0  # seconds the other ranks get to report once one rank has failed


class RankFailedError(RuntimeError):
    """A rank failed with an exception that could not be sent back, died, or timed out."""


class RemoteTraceback(Exception):
    """The traceback of a failure on another rank (attached as ``__cause__``)."""

    def __str__(self) -> str:
        return self.args[0]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _worker(rank: int, world_size: int, port: int, env: dict, tasks, results) -> None:
    os.environ.update(env)
    os.environ.update(
        RANK=str(rank), LOCAL_RANK=str(rank), WORLD_SIZE=str(world_size),
        LOCAL_WORLD_SIZE=str(world_size), MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port),
    )  # fmt: skip
    import torch
    import torch.distributed as dist

    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world_size)
    while True:
        task = tasks.get()
        if task is None:
            break
        task_id, payload = task
        try:
            fn, args = pickle.loads(payload)
            value = _run_task(fn, rank, world_size, args)
            results.put((task_id, rank, "ok", pickle.dumps(value)))
        except BaseException as e:  # noqa: BLE001 - everything goes back to the caller
            tb = traceback.format_exc()
            try:
                blob = pickle.dumps(e)
                pickle.loads(blob)
            except Exception:
                blob = None
            results.put((task_id, rank, "error", (blob, tb)))
    dist.destroy_process_group()


def _run_task(fn, rank: int, world_size: int, args):
    """``fn(rank, world_size, *args)``, then close every heap it made that is still open.

    Closing is collective, so it must close the same heaps on every rank: the ones the task made
    (tracked with strong references while it runs), not the ones that happen to be alive, since a
    heap kept alive by one rank's traceback may already be gone on another.
    """
    from . import heap

    heap._made = made = []
    try:
        value = fn(rank, world_size, *args)
    finally:
        heap._made = None
    for h in made:
        h.close()  # idempotent: a heap the task closed itself is skipped
    return value


class World:
    """``world_size`` ranks in spawned processes, reused across :meth:`run` calls."""

    def __init__(self, world_size: int, env: dict | None = None):
        if isinstance(world_size, bool) or not isinstance(world_size, int) or world_size < 1:
            raise ValueError(f"world_size must be a positive int, got {world_size!r}")
        self.world_size = world_size
        self.env = {"OMP_NUM_THREADS": "1", **(env or {})}
        self._procs: list = []
        self._task = 0

    def _start(self) -> None:
        ctx = mp.get_context("spawn")
        port = _free_port()
        self._results = ctx.Queue()
        self._tasks = [ctx.Queue() for _ in range(self.world_size)]
        self._procs = [
            ctx.Process(
                target=_worker,
                args=(r, self.world_size, port, self.env, self._tasks[r], self._results),
                name=f"iris-rank-{r}",
                daemon=True,
            )
            for r in range(self.world_size)
        ]
        for p in self._procs:
            p.start()

    def run(self, fn, *args, timeout: float | None = None) -> list:
        """Call ``fn(rank, world_size, *args)`` on every rank; the results in rank order."""
        if not self._procs:
            self._start()
        self._task += 1
        payload = pickle.dumps((fn, args))
        for q in self._tasks:
            q.put((self._task, payload))
        deadline = time.monotonic() + (timeout or DEFAULT_TIMEOUT)
        results: dict[int, object] = {}
        failure = None  # (rank, exception)
        while len(results) < self.world_size:
            now = time.monotonic()
            if now > deadline:
                missing = sorted(set(range(self.world_size)) - set(results))
                if failure is None:
                    failure = (missing[0], RankFailedError(
                        f"ranks {missing} of {self.world_size} did not finish {_name(fn)} within "
                        f"{timeout or DEFAULT_TIMEOUT:g} s"))  # fmt: skip
                break
            try:
                task_id, rank, status, body = self._results.get(timeout=0.05)
            except queue.Empty:
                for r, p in enumerate(self._procs):
                    if r not in results and p.exitcode is not None:
                        results[r] = None
                        if failure is None:
                            failure = (r, RankFailedError(_death(r, p.exitcode, fn)))
                            deadline = min(deadline, now + _GRACE)
                continue
            if task_id != self._task:
                continue
            if status == "ok":
                results[rank] = pickle.loads(body)
            else:
                results[rank] = None
                if failure is None:
                    failure = (rank, _rebuild(rank, self.world_size, *body))
                    deadline = min(deadline, time.monotonic() + _GRACE)
        if failure is not None:
            # A rank that died is the root cause of its peers' "connection closed" errors.
            dead = [r for r, p in enumerate(self._procs) if p.exitcode is not None and p.exitcode != 0]
            if dead and not isinstance(failure[1], RankFailedError):
                cause = failure
                failure = (dead[0], RankFailedError(_death(dead[0], self._procs[dead[0]].exitcode, fn)))
                failure[1].add_note(f"rank {cause[0]} then failed with {type(cause[1]).__name__}: {cause[1]}")
            self.close(force=True)
            raise failure[1]
        return [results[r] for r in range(self.world_size)]

    def close(self, force: bool = False) -> None:
        """Stop the ranks (politely unless ``force``)."""
        if not force:
            for q in self._tasks if self._procs else ():
                q.put(None)
            for p in self._procs:
                p.join(timeout=10)
        for p in self._procs:
            if p.is_alive():
                p.kill()
                p.join(timeout=10)
        self._procs = []

    def __enter__(self) -> World:
        return self

    def __exit__(self, exc_type, *exc) -> None:
        self.close(force=exc_type is not None)


class WorldPool:
    """One :class:`World` per world size, started on first use (what a test session keeps)."""

    def __init__(self, env: dict | None = None):
        self.env = env
        self._worlds: dict[int, World] = {}

    def run(self, fn, world_size: int, *args, timeout: float | None = None) -> list:
        world = self._worlds.get(world_size)
        if world is None:
            world = self._worlds[world_size] = World(world_size, env=self.env)
        return world.run(fn, *args, timeout=timeout)

    def close(self) -> None:
        for world in self._worlds.values():
            world.close()
        self._worlds.clear()


def run(fn, world_size: int, *args, timeout: float | None = None, env: dict | None = None) -> list:
    """Run ``fn(rank, world_size, *args)`` in ``world_size`` fresh processes; results in rank order.

    ``fn`` must be importable by name (a module-level function). A failure on any rank is
    re-raised here with its type, a note naming the rank, and the rank's traceback as cause.
    """
    with World(world_size, env=env) as world:
        return world.run(fn, *args, timeout=timeout)


def _name(fn) -> str:
    return getattr(fn, "__qualname__", repr(fn))


def _death(rank: int, exitcode: int, fn) -> str:
    how = f"was killed by signal {signal.Signals(-exitcode).name}" if exitcode < 0 else f"exited with code {exitcode}"
    return f"rank {rank} {how} while running {_name(fn)}"


def _rebuild(rank: int, world_size: int, blob, tb: str) -> BaseException:
    where = f"raised on rank {rank} of {world_size}"
    if blob is not None:
        exc = pickle.loads(blob)
        exc.__cause__ = RemoteTraceback(f"\n\nrank {rank}'s traceback:\n{tb}")
        if hasattr(exc, "add_note"):
            exc.add_note(where)
        return exc
    return RankFailedError(f"{where}:\n{tb}")


# -- timing ------------------------------------------------------------------------------------------

_spin_cycles_per_s: dict = {}


def _spin_rate(torch, device) -> float:
    """Cycles per second of ``torch.cuda._sleep`` on ``device`` (measured once per process)."""
    if device not in _spin_cycles_per_s:
        cycles = 2_000_000
        torch.cuda._sleep(cycles)  # first launch loads the kernel
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        torch.cuda._sleep(cycles)
        end.record()
        end.synchronize()
        _spin_cycles_per_s[device] = cycles / (start.elapsed_time(end) * 1e-3)
    return _spin_cycles_per_s[device]


def time_launches(fn, *, reps: int = 5, iters: int = 10, warmup: int = 1, device=None, agree=None) -> float:
    """Median seconds per call of ``fn()``: device time of ``reps`` calls queued back to back.

    On a CUDA device each of the ``iters`` samples first queues a spinning kernel long enough for
    the host to enqueue all ``reps`` calls behind it, then times those calls with CUDA events: the
    GPU runs them back to back, so the figure is what the kernels take, not how fast the host can
    launch them (a Triton launch costs tens of microseconds of host time, more than a 64 MiB copy
    takes on an H200). A sample whose spin ran out before the last call was queued is dropped and
    the spin doubled. The calls must not synchronize with the host. ``device`` picks the clock
    (CUDA events or ``perf_counter``); left out, CUDA when this process has initialized CUDA. On
    CPU each sample is the wall time of ``reps`` calls.

    ``fn`` may be a collective that every rank times at once: pass ``agree``, a callable that
    every rank calls with a float and that returns the largest of the ranks' values (a host
    all-reduce of max, e.g. over a gloo group). The ranks then start every sample together with
    the same spin and drop or keep each sample together, so all of them make the same calls.
    Each sample then also makes one untimed call of ``fn`` between the spin and the timed calls:
    the ranks' spins end at different times (they start when each host launches them), and a
    collective's first call waits for the last rank, so that wait would be spread over the timed
    calls. After the untimed call the ranks' streams are lined up by its own synchronization, and
    the samples time what a steady stream of the collective takes.
    """
    import torch

    for name, value, least in (("reps", reps, 1), ("iters", iters, 1), ("warmup", warmup, 0)):
        if isinstance(value, bool) or not isinstance(value, int) or value < least:
            raise ValueError(f"{name} must be an int >= {least}, got {value!r}")
    if agree is not None and not callable(agree):
        raise TypeError(f"agree must be a callable (a max over the ranks) or None, got {agree!r}")
    if device is None:
        cuda = torch.cuda.is_available() and torch.cuda.is_initialized()
        device = torch.device("cuda", torch.cuda.current_device()) if cuda else torch.device("cpu")
    device = torch.device(device)
    if device.type == "cuda" and device.index is None:
        device = torch.device("cuda", torch.cuda.current_device())
    for _ in range(warmup):
        fn()
    samples = []
    if device.type != "cuda":
        for _ in range(iters):
            t0 = time.perf_counter()
            for _ in range(reps):
                fn()
            samples.append((time.perf_counter() - t0) / reps)
        return statistics.median(samples)
    with torch.cuda.device(device):
        torch.cuda.synchronize()
        rate = _spin_rate(torch, device)
        t0 = time.perf_counter()
        for _ in range(reps):
            fn()
        spin = 2 * (time.perf_counter() - t0) + 1e-4  # seconds: twice what queueing took, and then some
        torch.cuda.synchronize()
        while len(samples) < iters:
            if agree is not None:
                spin = float(agree(spin))  # also lines the ranks up for this sample
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            torch.cuda._sleep(int(spin * rate))
            if agree is not None:
                fn()  # lines the ranks' streams up (see above); not timed
            start.record()
            for _ in range(reps):
                fn()
            end.record()
            covered = not start.query()  # the spin still runs: every call was queued before any ran
            end.synchronize()
            if agree is not None:
                covered = float(agree(0.0 if covered else 1.0)) == 0.0  # kept only if every rank's was
            if covered:
                samples.append(start.elapsed_time(end) * 1e-3 / reps)
                continue
            if spin > 1.0:
                raise RuntimeError(
                    f"time_launches: the host could not queue {reps} calls within a {spin:.1f} s spin "
                    "(does fn synchronize with the host?)"
                )
            spin *= 2
    return statistics.median(samples)
