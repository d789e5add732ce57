"""POSIX shared memory transport, for CPU ranks (Triton's interpreter runs kernels on them).

Each rank creates a file in ``/dev/shm`` (``IRIS_SHM_DIR`` overrides) with an unguessable name,
mode 0600, and its full size reserved up front (``posix_fallocate``: a full tmpfs fails here,
not with SIGBUS in a kernel later). Names are exchanged over the control group, every rank maps
every file, and each file is unlinked as soon as every rank has mapped it: after that the
memory lives only as long as the mappings, so nothing lingers after a crash.
"""

from __future__ import annotations

import ctypes
import mmap
import os
import secrets

import torch

from ..errors import HeapExhaustedError
from .base import Transport, exchange_or_raise

__all__ = ["ShmTransport"]


def _address(mm: mmap.mmap) -> int:
    anchor = ctypes.c_char.from_buffer(mm)
    try:
        return ctypes.addressof(anchor)
    finally:
        del anchor


class ShmTransport(Transport):
    name = "shm"
    device_types = ("cpu",)
    spins_per_second = 20_000.0  # an interpreted spin iteration costs tens of microseconds

    def __init__(self, size: int, device: torch.device, control) -> None:
        super().__init__(size, device, control)
        directory = os.environ.get("IRIS_SHM_DIR", "/dev/shm")
        path = os.path.join(directory, f"iris-{secrets.token_hex(16)}")
        local, error = None, None
        try:
            local = self._create(path, size)
        except BaseException as e:  # reported to every rank below
            error = e
        try:
            paths = exchange_or_raise(control, path, error, "creating the shared-memory heap")
            maps, error = [], None
            try:
                for r, p in enumerate(paths):
                    maps.append(local if r == control.rank else self._open(p, size))
            except BaseException as e:
                error = e
            exchange_or_raise(control, None, error, "mapping peers' shared-memory heaps")
        finally:
            # Every rank has mapped our file (or the init failed): remove its name now.
            try:
                os.unlink(path)
            except FileNotFoundError:
                pass
        self._maps = maps
        self._views = [memoryview(m) for m in maps]
        self.bases = [_address(m) for m in maps]

    @staticmethod
    def _create(path: str, size: int) -> mmap.mmap:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
        try:
            try:
                os.posix_fallocate(fd, 0, size)
            except OSError as e:
                st = os.statvfs(os.path.dirname(path))
                avail = st.f_bavail * st.f_frsize
                raise HeapExhaustedError(
                    f"cannot reserve a {size}-byte heap in {os.path.dirname(path)}: {e.strerror}; "
                    f"{avail} bytes are available there. Ask for a smaller heap "
                    f"(iris.heap.init(size=...)) or free shared memory.",
                    requested=size,
                    free=avail,
                    largest_free_block=avail,
                ) from None
            return mmap.mmap(fd, size, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
        finally:
            os.close(fd)

    @staticmethod
    def _open(path: str, size: int) -> mmap.mmap:
        fd = os.open(path, os.O_RDWR | os.O_CLOEXEC)
        try:
            return mmap.mmap(fd, size, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
        finally:
            os.close(fd)

    def view(self, rank, offset, nbytes, dtype, shape=None):
        owner = self._views[rank][offset : offset + nbytes]
        t = torch.frombuffer(owner, dtype=dtype)
        return (t if shape is None or len(shape) == 1 else t.view(shape)), owner

    def close(self) -> None:
        # Mappings stay until the last tensor over them is gone; no tensor can dangle.
        self._views = []
        self._maps = []


TRANSPORT = ShmTransport
