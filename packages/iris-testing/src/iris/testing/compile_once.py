"""One compile per kernel specialization across the processes of a test run.

The ranks of a test world launch the same kernels at the same moment: each misses Triton's disk
cache and compiles the same specialization itself, so a GPU test run with W ranks per test spends
W times the CPU its compiles need, and a layer's GPU run is bound by compiling. With
``TRITON_CACHE_MANAGER=iris.testing.compile_once:CompileOnce`` in the environment
(``tools/gpu-tests.sh`` sets it), the first process to miss a key compiles it, holding a file lock
next to the cache entry; the others wait for the lock and then read the kernel from the cache.

Failure cases: a process that dies while compiling drops its lock with its descriptors; one whose
compile raised keeps the lock until it starts its next compile (a process compiles one kernel at
a time, so a lock it still holds then is a compile that ended without a result) or exits; a
waiter gives up after ``WAIT`` seconds and compiles the kernel itself. A holder never waits for
another lock, so no two processes wait for each other.

With ``IRIS_COMPILE_LOG=FILE`` as well, every process appends a line to FILE for each compile it
did (``compile``) and each wait for another's (``wait``): the wall-clock start, the seconds, the
process id and the cache entry (the kernel's name), tab-separated, so that a GPU test run can
say how much of its time was compiling.
"""

from __future__ import annotations

import fcntl
import os
import time

from triton.runtime.cache import FileCacheManager

__all__ = ["WAIT", "CompileOnce", "compiled_here"]

#: Seconds a process waits for another process's compile of the same kernel before compiling it
#: itself (environment variable ``IRIS_COMPILE_WAIT``).
WAIT = float(os.environ.get("IRIS_COMPILE_WAIT", "600"))
_POLL = 0.02  # seconds between tries of a held lock
_LOG = os.environ.get("IRIS_COMPILE_LOG")

_held: dict[str, int] = {}  # lock path -> descriptor: the compile this process is doing
_compiled: list[str] = []  # the cache keys this process compiled (for tests and logs)
_started: dict[str, float] = {}  # lock path -> time.time() its compile began (for IRIS_COMPILE_LOG)


def compiled_here() -> list[str]:
    """The cache keys whose kernels this process compiled (the others it read from the cache)."""
    return list(_compiled)


class CompileOnce(FileCacheManager):
    """Triton's file cache, with a cache miss compiled by one process while the others wait."""

    def __init__(self, key, override=False, dump=False):
        super().__init__(key, override=override, dump=dump)
        self._locks = not (override or dump)  # the override and dump folders hold no compiled kernels

    def get_group(self, filename: str):
        group = super().get_group(filename)
        if group is not None or not self._locks:
            return group
        path = os.path.join(self.cache_dir, f"{filename}.compiling")
        _release_all_but(path)
        if path in _held:  # this process's earlier compile of it ended without a result: again
            return self._compiling(path, None)
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        except OSError:  # no lock file here (a read-only cache): compile, as Triton's own manager would
            return self._compiling(path, None)
        began = time.time()
        locked = _lock(fd, time.monotonic() + WAIT)
        if time.time() - began > 2 * _POLL:
            _note("wait", began, filename)
        if not locked:
            os.close(fd)  # the holder took too long: compile it here as well
            return self._compiling(path, None)
        group = super().get_group(filename)  # the holder's result, if it had one
        if group is not None:
            _unlock(fd)
            return group
        return self._compiling(path, fd)

    def put_group(self, filename: str, group):
        try:
            return super().put_group(filename, group)
        finally:
            path = os.path.join(self.cache_dir, f"{filename}.compiling")
            fd = _held.pop(path, None)
            if fd is not None:
                _unlock(fd)
            if path in _started:
                _note("compile", _started.pop(path), filename)

    def _compiling(self, path: str, fd: int | None):
        """None (a miss: the caller compiles), noting the compile and the lock held for it."""
        if fd is not None:
            _held[path] = fd
        _compiled.append(self.key)
        _started[path] = time.time()
        return None


def _note(what: str, began: float, filename: str) -> None:
    """One line of ``IRIS_COMPILE_LOG`` (nothing without it; a log that cannot be written is skipped)."""
    if not _LOG:
        return
    line = f"{what}\t{began:.3f}\t{time.time() - began:.3f}\t{os.getpid()}\t{filename}\n"
    try:
        with open(_LOG, "a") as f:
            f.write(line)
    except OSError:
        pass


def _lock(fd: int, deadline: float) -> bool:
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return True
        except BlockingIOError:
            if time.monotonic() > deadline:
                return False
            time.sleep(_POLL)


def _unlock(fd: int) -> None:
    try:
        fcntl.flock(fd, fcntl.LOCK_UN)
    finally:
        os.close(fd)


def _release_all_but(path: str) -> None:
    """Drop the locks of compiles that ended without a result (see the module's docstring)."""
    for other in [p for p in _held if p != path]:
        _unlock(_held.pop(other))
