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

_held: dict[str, int] = {}  # lock path -> descriptor: the compile this process is doing
_compiled: list[str] = []  # the cache keys this process compiled (for tests and logs)


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
        if not _lock(fd, time.monotonic() + WAIT):
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
            fd = _held.pop(os.path.join(self.cache_dir, f"{filename}.compiling"), None)
            if fd is not None:
                _unlock(fd)

    def _compiling(self, path: str, fd: int | None):
        """None (a miss: the caller compiles), noting the compile and the lock held for it."""
        if fd is not None:
            _held[path] = fd
        _compiled.append(self.key)
        return None


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
