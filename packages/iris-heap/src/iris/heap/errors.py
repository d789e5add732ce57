"""Exceptions raised by the symmetric heap, and the one failure type of every way Iris starts ranks.

Every heap error derives from :class:`HeapError`; several also derive from the builtin that a
torch user would expect (``MemoryError``, ``ValueError``, ``TimeoutError``) so existing
``except`` clauses keep working. :class:`RankFailedError` is not a heap error: the test runner
(``iris.testing.world``) and the examples' launcher raise it when a rank dies, times out or
raises what cannot be sent back. It lives here, in the lowest layer, so that both raise one type.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

__all__ = [
    "HeapError",
    "HeapExhaustedError",
    "NotOnHeapError",
    "AsymmetricHeapError",
    "DoubleFreeError",
    "HeapClosedError",
    "WaitTimeoutError",
    "PeerLostError",
    "RankFailedError",
    "RankFailure",
]


class HeapError(Exception):
    """Base class of every error raised by ``iris.heap``."""


class HeapExhaustedError(HeapError, MemoryError):
    """An allocation (or the heap itself) does not fit in the memory that is left."""

    def __init__(self, message: str, *, requested: int = 0, free: int = 0, largest_free_block: int = 0):
        super().__init__(message)
        self.requested = requested
        self.free = free
        self.largest_free_block = largest_free_block

    def __reduce__(self):  # keep the fields across process boundaries (iris.testing.world.run)
        return (
            _rebuild_exhausted,
            (str(self), self.requested, self.free, self.largest_free_block),
        )


def _rebuild_exhausted(message, requested, free, largest):
    return HeapExhaustedError(message, requested=requested, free=free, largest_free_block=largest)


class NotOnHeapError(HeapError, ValueError):
    """A tensor that must live in this heap does not."""


class AsymmetricHeapError(HeapError):
    """Ranks' allocation tables differ: some rank ran a different sequence of allocations."""


class DoubleFreeError(HeapError, ValueError):
    """``free`` was given a tensor whose block is no longer allocated."""


class HeapClosedError(HeapError, RuntimeError):
    """The heap was used after ``close()``."""


class WaitTimeoutError(HeapError, TimeoutError):
    """A bounded device-side wait gave up: the rank it waited for never signalled.

    ``rank`` is the rank that waited, ``offset`` the local heap offset of the flag it waited
    on, ``value`` what the flag held when the wait gave up.
    """

    def __init__(self, message: str, *, rank: int = -1, offset: int = -1, value: int = 0):
        super().__init__(message)
        self.rank, self.offset, self.value = rank, offset, value

    def __reduce__(self):
        return (_rebuild_timeout, (type(self), str(self), self.rank, self.offset, self.value))


def _rebuild_timeout(cls, message, rank, offset, value):
    return cls(message, rank=rank, offset=offset, value=value)


class PeerLostError(HeapError, RuntimeError):
    """This process's device work failed while peers' processes had ended.

    ``ranks`` are the peers found gone (``heap.lost_ranks()``); the original failure is the
    exception's ``__cause__``. Under MPS a process that dies with work on the GPU takes down the
    CUDA context of every process sharing it: this one's is then lost, and only a new process can
    use the GPU (``docs/architecture.md``, "A dead peer").
    """

    def __init__(self, message: str, *, ranks: Sequence[int] = ()):
        super().__init__(message)
        self.ranks = list(ranks)

    def __reduce__(self):
        return (_rebuild_peer_lost, (type(self), str(self), self.ranks))


def _rebuild_peer_lost(cls, message, ranks):
    return cls(message, ranks=ranks)


@dataclass(frozen=True)
class RankFailure:
    """One failed rank: its global ``rank``, ``exitcode`` (None while the process still ran: it
    raised, or did not finish in time) and what it reported (``message``, ``traceback``)."""

    rank: int
    exitcode: int | None
    message: str
    traceback: str = ""


class RankFailedError(RuntimeError):
    """One or more ranks failed: died, timed out, or raised what could not be sent back.

    ``failures`` lists the failed ranks (:class:`RankFailure`), the first to fail first. Left
    out, the message says how the first of them failed.
    """

    def __init__(self, message: str | None = None, failures: Sequence[RankFailure] = ()):
        self.failures = list(failures)
        if message is None and self.failures:
            first = self.failures[0]
            message = f"rank {first.rank} failed (exit code {first.exitcode}): {first.message}"
        elif message is None:
            message = "a rank failed"
        super().__init__(message)

    def __reduce__(self):  # keeps ``failures`` (and notes) across pickling
        return type(self), (self.args[0], self.failures), self.__dict__
