"""Device errors on the host: the error record, read without a device synchronization, and the watchdog.

Device code that fails (a bounded wait that ran out, a collective whose ranks disagree, a kernel
given a closed heap's context) wins a CAS on the context's ``EXT_ERROR_CODE`` word and then fills
the **error record** (``iris.heap.context``): on CUDA pinned host memory that the device reaches
through unified addressing, on CPU ranks ordinary memory. The host reads the record with plain
loads, so checking for an error never waits for the device, as NCCL's asynchronous error handling
reads its communicator's state.

Layers above the heap turn their own codes into their own exceptions with
``heap.add_error_translator`` (iris.ccl names the rank that did not arrive, and the field that
differed); the heap raises everything else itself.
"""

from __future__ import annotations

import os
import threading
from dataclasses import dataclass

import torch

from . import context as abi
from .log import fatal, get_logger

__all__ = ["DeviceError", "ErrorRecord", "Watchdog"]

_logger = get_logger(__name__)
_CODE, _NONE = abi.RECORD_CODE, abi.ERROR_NONE  # read on every collective: module globals, not attributes


@dataclass(frozen=True)
class DeviceError:
    """One device error, as the record holds it (see the ``ERROR_*`` codes in ``iris.heap.context``)."""

    code: int
    detail: int
    value: int
    peer: int
    aux: int

    @property
    def name(self) -> str:
        return abi.ERROR_NAMES.get(self.code, f"code {self.code}")


class ErrorRecord:
    """The host side of one heap's error record: ``ERROR_RECORD_WORDS`` int64 words the device can write."""

    def __init__(self, device: torch.device):
        pinned = device.type == "cuda"  # pinned memory is mapped into every device (unified addressing)
        self.words = torch.zeros(abi.ERROR_RECORD_WORDS, dtype=torch.int64, pin_memory=pinned)
        self.address = self.words.data_ptr()
        self._view = self.words.numpy()  # plain loads of the shared words, no torch dispatch
        self._code = memoryview(self._view)  # the same memory: one indexed load costs less than numpy's

    def pending(self) -> bool:
        """Whether the device recorded an error (one plain load)."""
        return self._code[_CODE] != _NONE

    def read(self) -> DeviceError | None:
        """The recorded error, or None. Never synchronizes with the device."""
        view = self._view
        code = int(view[abi.RECORD_CODE])  # written last by the device: the rest is complete
        if code == abi.ERROR_NONE:
            return None
        return DeviceError(
            code, int(view[abi.RECORD_DETAIL]), int(view[abi.RECORD_VALUE]), int(view[abi.RECORD_PEER]),
            int(view[abi.RECORD_AUX]),
        )  # fmt: skip

    def clear(self) -> None:
        self._view[:] = 0


class Watchdog:
    """A thread that polls a heap's error record every ``interval`` seconds (see ``SymmetricHeap.watchdog``)."""

    def __init__(self, heap, interval: float, on_error: str):
        self.heap, self.interval, self.on_error = heap, interval, on_error
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name=f"iris-watchdog-rank{heap.rank}", daemon=True)
        self._thread.start()
        _logger.debug("watchdog started: polling the error record every %g s, on_error=%r", interval, on_error)

    @property
    def running(self) -> bool:
        return self._thread.is_alive()

    def stop(self) -> None:
        """Stop polling (idempotent); returns once the thread has ended."""
        self._stop.set()
        if self._thread is not threading.current_thread():
            self._thread.join()

    def _loop(self) -> None:
        while not self._stop.wait(self.interval):
            error = self.heap._poll_device_error()
            if error is None:
                continue
            if self.on_error == "abort":
                fatal(_logger, "watchdog: device error, aborting the process (on_error='abort'): %s", error)
                os.abort()  # as NCCL's async error handling: the launcher sees the rank die
            _logger.error("watchdog: device error, the next Iris call on this rank raises it: %s", error)
            return  # "raise": the heap is marked failed
