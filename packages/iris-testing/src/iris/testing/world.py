"""Multi-rank test runner: one spawned process per rank, a gloo process group set up in each.

``run(fn, world_size, *args)`` calls ``fn(rank, world_size, *args)`` on every rank and returns
the ranks' results in rank order. The first failure is re-raised in the caller with its type,
the rank it happened on, and the rank's traceback.

A :class:`World` keeps its processes (and their imported modules and process group) between
calls, so a test suite pays the few seconds of process start-up once per world size, not once
per test. A world whose call failed is torn down and started afresh on its next call, so a
rank stuck in a collective never leaks into the next test.

A rank that dies, times out or raises what cannot be sent back raises
:class:`iris.heap.RankFailedError`, the one failure type of every way Iris starts ranks (the
examples' launcher raises it too).

``IRIS_TEST_TIMEOUT`` (seconds, default 900) bounds a call whose ``timeout`` is not given; it is
read when a :class:`World` is made, so a bad value fails there, naming the variable.
``IRIS_TEST_MAX_RANKS`` (unset: no bound) bounds the rank processes a :class:`WorldPool` keeps
alive at once; it is read when the pool is made.

Test support, not runtime: ``import iris.heap`` loads none of this (multiprocessing, pickle);
each task's heaps are found through ``iris.heap.register_init_hook``.
"""

from __future__ import annotations

import logging
import multiprocessing as mp
import os
import pickle
import queue
import signal
import socket
import time
import traceback

from iris.heap.errors import RankFailedError, RankFailure

__all__ = ["run", "World", "WorldPool", "RankFailedError", "RankFailure", "RemoteTraceback", "default_timeout",
           "default_max_ranks"]  # fmt: skip

_TIMEOUT_VARIABLE = "IRIS_TEST_TIMEOUT"
_MAX_RANKS_VARIABLE = "IRIS_TEST_MAX_RANKS"
_DEFAULT_TIMEOUT = 900.0  # seconds
_GRACE = 5.0  # seconds the other ranks get to report once one rank has failed

_logger = logging.getLogger(__name__)  # test support: not an Iris layer's logger


class RemoteTraceback(Exception):
    """The traceback of a failure on another rank (attached as ``__cause__``)."""

    def __str__(self) -> str:
        return self.args[0]


def default_max_ranks() -> int | None:
    """The rank processes a :class:`WorldPool` keeps alive at once: ``IRIS_TEST_MAX_RANKS``, or None
    (no bound)."""
    return _from_environment(_MAX_RANKS_VARIABLE, int, lambda n: n >= 1,
                             "the bound is a positive whole number of rank processes")  # fmt: skip


def default_timeout() -> float:
    """Seconds a call may take when its ``timeout`` is not given: ``IRIS_TEST_TIMEOUT``, or 900."""
    seconds = _from_environment(_TIMEOUT_VARIABLE, float, lambda t: 0 < t < float("inf"),
                                "a test call's bound is a positive number of seconds")  # fmt: skip
    return _DEFAULT_TIMEOUT if seconds is None else seconds


def _from_environment(name: str, parse, valid, wants: str):
    """``parse`` of environment variable ``name`` (None where it is unset or blank); a value that does
    not parse or is not ``valid`` raises ValueError naming the variable and what it ``wants``."""
    text = os.environ.get(name)
    if text is None or not text.strip():
        return None
    try:
        value = parse(text)
    except ValueError:
        value = None
    if value is None or not valid(value):  # float("nan") is not valid either
        raise ValueError(f"{name}={text!r}: {wants}")
    return value


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
    from iris.heap import register_init_hook

    made = []
    with register_init_hook(made.append):
        value = fn(rank, world_size, *args)
    for h in made:
        h.close()  # idempotent: a heap the task closed itself is skipped
    return value


class World:
    """``world_size`` ranks in spawned processes, reused across :meth:`run` calls.

    ``timeout``: seconds a :meth:`run` call may take when it does not say (default
    :func:`default_timeout`, read here)."""

    def __init__(self, world_size: int, env: dict | None = None, timeout: float | None = None):
        if isinstance(world_size, bool) or not isinstance(world_size, int) or world_size < 1:
            raise ValueError(f"world_size must be a positive int, got {world_size!r}")
        self.timeout = default_timeout() if timeout is None else timeout
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
        _logger.debug("started %d rank processes (gloo over 127.0.0.1:%d)", self.world_size, port)

    def run(self, fn, *args, timeout: float | None = None) -> list:
        """Call ``fn(rank, world_size, *args)`` on every rank; the results in rank order."""
        if not self._procs:
            self._start()
        self._task += 1
        payload = pickle.dumps((fn, args))
        for q in self._tasks:
            q.put((self._task, payload))
        timeout = timeout or self.timeout
        deadline = time.monotonic() + timeout
        results: dict[int, object] = {}
        failure = None  # (rank, exception)
        while len(results) < self.world_size:
            now = time.monotonic()
            if now > deadline:
                missing = sorted(set(range(self.world_size)) - set(results))
                if failure is None:
                    failure = (missing[0], _timed_out(missing, self.world_size, fn, timeout))
                break
            try:
                task_id, rank, status, body = self._results.get(timeout=0.05)
            except queue.Empty:
                for r, p in enumerate(self._procs):
                    if r not in results and p.exitcode is not None:
                        results[r] = None
                        if failure is None:
                            failure = (r, _died(r, p.exitcode, fn))
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
            _logger.debug("%s failed on rank %d; stopping all %d ranks", _name(fn), failure[0], self.world_size)
            # A rank that died is the root cause of its peers' "connection closed" errors.
            dead = [r for r, p in enumerate(self._procs) if p.exitcode is not None and p.exitcode != 0]
            if dead and not isinstance(failure[1], RankFailedError):
                cause = failure
                failure = (dead[0], _died(dead[0], self._procs[dead[0]].exitcode, fn))
                failure[1].add_note(f"rank {cause[0]} then failed with {type(cause[1]).__name__}: {cause[1]}")
            self.close(force=True)
            raise failure[1]
        return [results[r] for r in range(self.world_size)]

    @property
    def running(self) -> bool:
        """Whether the ranks' processes are up (a closed world starts them again on its next run)."""
        return bool(self._procs)

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
    """One :class:`World` per world size, started on first use (what a test session keeps).

    ``max_ranks`` (default :func:`default_max_ranks`): at most that many rank processes alive at
    once. Starting a world that would pass it first stops the worlds used least recently (each
    starts again when next used), so a session that needs worlds of 1 to 4 ranks keeps 4
    processes, not 10: what lets more test sessions share one GPU under MPS, whose server takes
    48 clients a GPU. A world larger than the bound still runs, alone. Sessions that bound their
    worlds run their tests in world-size order (``iris.testing.plugin``), so they switch worlds a
    few times, not at every test.
    """

    def __init__(self, env: dict | None = None, max_ranks: int | None = None):
        self.env = env
        self.max_ranks = default_max_ranks() if max_ranks is None else max_ranks
        if self.max_ranks is not None and (isinstance(self.max_ranks, bool) or self.max_ranks < 1):
            raise ValueError(f"max_ranks must be a positive int or None, got {max_ranks!r}")
        self._worlds: dict[int, World] = {}  # least recently used first

    def run(self, fn, world_size: int, *args, timeout: float | None = None) -> list:
        world = self._worlds.pop(world_size, None)
        if world is None:
            world = World(world_size, env=self.env)
        self._worlds[world_size] = world  # now the most recently used
        if not world.running:
            self._make_room(world)
        return world.run(fn, *args, timeout=timeout)

    def running_ranks(self) -> int:
        """The rank processes alive in this pool's worlds."""
        return sum(w.world_size for w in self._worlds.values() if w.running)

    def _make_room(self, starting: World) -> None:
        if self.max_ranks is None:
            return
        for world in list(self._worlds.values()):  # least recently used first
            if self.running_ranks() + starting.world_size <= self.max_ranks:
                return
            if world is not starting and world.running:
                _logger.debug("stopping the world of %d ranks: IRIS_TEST_MAX_RANKS=%d", world.world_size,
                              self.max_ranks)  # fmt: skip
                world.close()

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


def _timed_out(missing: list[int], world_size: int, fn, seconds: float) -> RankFailedError:
    message = f"ranks {missing} of {world_size} did not finish {_name(fn)} within {seconds:g} s"
    return RankFailedError(message, [RankFailure(r, None, message) for r in missing])


def _died(rank: int, exitcode: int, fn) -> RankFailedError:
    how = f"was killed by signal {signal.Signals(-exitcode).name}" if exitcode < 0 else f"exited with code {exitcode}"
    message = f"rank {rank} {how} while running {_name(fn)}"
    return RankFailedError(message, [RankFailure(rank, exitcode, message)])


def _rebuild(rank: int, world_size: int, blob, tb: str) -> BaseException:
    where = f"raised on rank {rank} of {world_size}"
    if blob is not None:
        exc = pickle.loads(blob)
        exc.__cause__ = RemoteTraceback(f"\n\nrank {rank}'s traceback:\n{tb}")
        if hasattr(exc, "add_note"):
            exc.add_note(where)
        return exc
    return RankFailedError(f"{where}:\n{tb}", [RankFailure(rank, None, where, tb.strip())])
