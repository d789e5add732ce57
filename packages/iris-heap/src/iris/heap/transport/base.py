"""What a transport provides: one local heap region per rank, mapped into every rank's process."""

from __future__ import annotations

import warnings
from abc import ABC, abstractmethod
from typing import ClassVar

import torch

from ..log import get_logger

__all__ = ["Transport", "exchange_or_raise"]

_logger = get_logger(__name__)


class Transport(ABC):
    """Creates this rank's heap region and maps every peer's region (a collective constructor).

    Subclasses set ``name`` (what ``iris.heap.init(transport=...)`` accepts) and ``device_types``
    (the torch device types it serves; the first registered transport serving a type is its
    ``"auto"`` choice). Device waits are bounded by the device's clock, so a transport says
    nothing about how fast they spin.
    """

    name: ClassVar[str]
    device_types: ClassVar[tuple[str, ...]]

    def __init__(self, size: int, device: torch.device, control) -> None:
        self.size = size
        self.device = device
        self.control = control
        #: ``bases[r]``: the address at which rank r's region is mapped in this process.
        self.bases: list[int] = []
        #: Bytes actually allocated per rank (at least ``size``; a transport may round up).
        self.mapped_size = size

    def __str__(self) -> str:
        return self.name

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.name!r} on {self.device}, {self.mapped_size} bytes mapped per rank>"

    def __eq__(self, other):
        # ``heap.transport`` was the name until iris-heap 0.2: ``heap.transport == "shm"`` keeps
        # working for one release, with a warning.
        if isinstance(other, str):
            warnings.warn(
                "heap.transport is the transport object; compare heap.transport_name with a name "
                "(comparing the object with a str stops working in iris-heap 0.3)",
                DeprecationWarning,
                stacklevel=2,
            )
            return self.name == other
        return NotImplemented

    __hash__ = object.__hash__

    @abstractmethod
    def view(
        self, rank: int, offset: int, nbytes: int, dtype: torch.dtype, shape: tuple[int, ...] | None = None
    ) -> tuple[torch.Tensor, object]:
        """A ``dtype`` tensor over bytes ``[offset, offset + nbytes)`` of rank's region.

        Contiguous, of ``shape`` (1-D when ``None``). The tensor gets a storage of its own, kept
        alive by the returned owner object (which supports weak references): the owner dies
        exactly when the last tensor sharing that storage does. ``nbytes`` is a positive multiple
        of the dtype's size and, with ``shape``, exactly the bytes of that shape.
        """

    @abstractmethod
    def close(self) -> None:
        """Drop this transport's references to the regions; memory goes once no tensor uses it."""


def exchange_or_raise(control, payload, error: BaseException | None, what: str) -> list:
    """All-gather ``payload`` (or this rank's failure) so that every rank fails together.

    Without this, one rank failing to allocate would leave the others waiting forever in the
    next exchange. Returns every rank's payload when none failed; otherwise raises on every
    rank, naming the ranks that failed and why. A rank whose own step failed raises its own error
    even when the exchange breaks too (a peer died): that error says more than a closed connection.
    """
    mine = ("error", f"{type(error).__name__}: {error}") if error is not None else ("ok", payload)
    _logger.debug("%s: waiting for every rank's status (this rank: %s)", what, mine[0])
    try:
        everyone = control.all_gather_object(mine)
    except Exception as broken:
        _logger.debug("%s: the exchange broke (%s: %s)", what, type(broken).__name__, broken)
        if error is not None:
            raise error from broken
        raise
    failed = [(r, msg) for r, (status, msg) in enumerate(everyone) if status == "error"]
    if failed:
        _logger.debug("%s: failed on ranks %s", what, [r for r, _ in failed])
        if error is not None:
            raise error
        detail = "; ".join(f"rank {r}: {msg}" for r, msg in failed)
        from ..errors import HeapError

        raise HeapError(f"{what} failed on another rank ({detail})")
    return [p for _, p in everyone]
