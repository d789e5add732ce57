"""Errors of the collectives.

Every one of them leaves the collectives' state on this heap poisoned: the rank stops touching
peers until ``iris.ccl.reset()`` has run on every rank (as an NCCL communicator must be aborted
and made again after an asynchronous error).
"""

from __future__ import annotations

from iris.heap import HeapError, WaitTimeoutError

__all__ = ["CollectiveError", "CollectiveTimeoutError", "CollectiveAbandonedError", "CollectiveMismatchError"]


class CollectiveError(HeapError, RuntimeError):
    """Base of the collectives' errors: ``collective`` (its name, when known) and ``rank`` (where raised)."""

    def __init__(self, message, *, collective="", rank=-1):
        super().__init__(message)
        self.collective, self.rank = collective, rank

    def __reduce__(self):  # keep the fields across process boundaries (iris.testing.world.run)
        return (_rebuild, (type(self), str(self), dict(self.__dict__)))


def _rebuild(cls, message, fields):
    exc = cls.__new__(cls)
    Exception.__init__(exc, message)
    exc.__dict__.update(fields)
    return exc


class CollectiveTimeoutError(CollectiveError, WaitTimeoutError):
    """A collective gave up waiting for a rank: ``missing_rank`` never reached it (or never left it).

    ``offset`` and ``value`` are the heap offset of the flag it waited on and the epoch.
    """

    def __init__(self, message, *, collective="", missing_rank=-1, rank=-1, offset=-1, value=0):
        CollectiveError.__init__(self, message, collective=collective, rank=rank)
        self.missing_rank, self.offset, self.value = missing_rank, offset, value


class CollectiveAbandonedError(CollectiveTimeoutError):
    """A peer (``abandoned_by``) gave up on the collective this rank was in, so this rank stopped too.

    A timeout seen from afar: ``missing_rank`` is the first rank this rank itself still waited
    for (-1 when it had seen every rank arrive, as a rank that came late has).
    """

    def __init__(self, message, *, collective="", abandoned_by=-1, missing_rank=-1, rank=-1, offset=-1, value=0):
        super().__init__(
            message, collective=collective, missing_rank=missing_rank, rank=rank, offset=offset, value=value
        )
        self.abandoned_by = abandoned_by


class CollectiveMismatchError(CollectiveError, ValueError):
    """Ranks called different collectives (or the same one differently): nobody touched a peer.

    ``field`` names what differs; ``values`` maps ranks to their value of it (this rank's and the
    first rank found to differ).
    """

    def __init__(self, message, *, collective="", field="", values=None, rank=-1):
        super().__init__(message, collective=collective, rank=rank)
        self.field, self.values = field, dict(values or {})
