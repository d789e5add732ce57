"""Errors of the collectives."""

from __future__ import annotations

from iris.heap import WaitTimeoutError

__all__ = ["CollectiveTimeoutError"]


class CollectiveTimeoutError(WaitTimeoutError):
    """A collective gave up waiting for a rank: ``missing_rank`` never reached it (or left it).

    After this error the ranks disagree about how many collectives ran; call ``iris.ccl.reset()``
    on every rank before the next collective.
    """

    def __init__(self, message, *, collective="", missing_rank=-1, rank=-1, offset=-1, value=0):
        super().__init__(message, rank=rank, offset=offset, value=value)
        self.collective, self.missing_rank = collective, missing_rank

    def __reduce__(self):
        return (_rebuild, (str(self), self.collective, self.missing_rank, self.rank, self.offset, self.value))


def _rebuild(message, collective, missing_rank, rank, offset, value):
    return CollectiveTimeoutError(
        message, collective=collective, missing_rank=missing_rank, rank=rank, offset=offset, value=value
    )
