"""Transports: how each rank's heap region is created and mapped into its peers.

A transport is one module in this package that defines a :class:`Transport` subclass and names
it ``TRANSPORT``, and one row of :data:`REGISTRY`. The registry's order is ``"auto"``'s: for a
device, the first transport that serves its type (``Transport.device_types``). Today that is
``cuda-ipc`` for CUDA devices and ``shm`` for CPU ones; a transport that should win over another
on the same device type goes above it. ``cuda-vmm`` (heaps mapped by every rank through CUDA's
virtual memory API) sits below ``cuda-ipc``, so it is chosen only by name: it costs a descriptor
exchange and gains nothing measured over ``cuda-ipc`` (under MPS a killed peer's survivor loses
its CUDA context on both: docs/architecture.md, "The cuda-vmm transport"). Modules are imported
when first asked for, so a transport's dependencies (cuda-bindings) load only where it is chosen
or listed.
"""

from __future__ import annotations

import importlib

import torch

from .base import Transport

__all__ = ["REGISTRY", "Transport", "available", "select"]

#: Every transport: its name (what ``iris.heap.init(transport=...)`` accepts) and the module of
#: this package that defines it, in the order ``"auto"`` tries them.
REGISTRY: tuple[tuple[str, str], ...] = (
    ("cuda-ipc", "cuda_ipc"),
    ("cuda-vmm", "cuda_vmm"),
    ("shm", "shm"),
)


def available() -> dict[str, type[Transport]]:
    """Every transport class, by name, in :data:`REGISTRY`'s order."""
    found = {}
    for name, module in REGISTRY:
        cls = importlib.import_module(f"{__name__}.{module}").TRANSPORT
        if cls.name != name:  # a registry row and its module disagree: a packaging bug, not a user error
            raise RuntimeError(f"transport module {module!r} defines {cls.name!r}, registered as {name!r}")
        found[name] = cls
    return found


def select(name: str, device: torch.device) -> type[Transport]:
    """The transport called ``name`` (or the one for ``device`` when ``name == "auto"``)."""
    transports = available()
    if name == "auto":
        for cls in transports.values():
            if device.type in cls.device_types:
                return cls
        raise ValueError(f"no transport serves device type {device.type!r}; have {sorted(transports)}")
    if name not in transports:
        raise ValueError(f"unknown transport {name!r}; choose 'auto' or one of {sorted(transports)}")
    cls = transports[name]
    if device.type not in cls.device_types:
        raise ValueError(f"transport {name!r} serves {', '.join(cls.device_types)} devices, not {device}")
    return cls
