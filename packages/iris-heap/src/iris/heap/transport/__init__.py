"""Transports: how each rank's heap region is created and mapped into its peers.

A transport is one module in this package that defines a :class:`Transport` subclass and names
it ``TRANSPORT``. Modules are found by listing the package, so adding a transport (CUDA VMM,
HIP IPC) is adding one module.
"""

from __future__ import annotations

import importlib
import pkgutil

import torch

from .base import Transport

__all__ = ["Transport", "available", "select"]


def available() -> dict[str, type[Transport]]:
    """Every transport, by name, in module order."""
    found = {}
    for info in sorted(pkgutil.iter_modules(__path__), key=lambda m: m.name):
        if info.name == "base":
            continue
        cls = getattr(importlib.import_module(f"{__name__}.{info.name}"), "TRANSPORT", None)
        if cls is not None:
            found[cls.name] = cls
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
