"""What a benchmark ran on: device, MPS (the one probe, ``mps``), package versions, date. Printed under every table."""

from __future__ import annotations

import datetime
import importlib
import os
import platform

import torch

__all__ = ["describe", "mps", "summary"]

_PACKAGES = {
    "iris-heap": "iris.heap",
    "iris-mem-triton": "iris.mem.triton",
    "iris-mem-gluon": "iris.mem.gluon",
    "iris-ccl": "iris.ccl",
    "iris-examples": "iris.examples",
}


def mps() -> str:
    """``"on"`` when an NVIDIA MPS daemon (control or server) runs on this host, ``"off"`` when none
    does, ``"unknown"`` when the process table cannot be read. The one MPS probe of the examples,
    the benchmarks and ``tools/benchmarks.py``.

    Reads process names from ``/proc`` (``nvidia-cuda-mps-control`` and ``-server`` both show as
    ``nvidia-cuda-mps``, the kernel's 15 characters): no external tool, and no false match on a
    shell whose command line merely mentions MPS.
    """
    try:
        pids = [p for p in os.listdir("/proc") if p.isdigit()]
    except OSError:
        return "unknown"
    for pid in pids:
        try:
            with open(f"/proc/{pid}/comm") as f:
                if f.read().strip().startswith("nvidia-cuda-mps"):
                    return "on"
        except OSError:  # the process ended, or is not ours to read
            continue
    return "off"


def _version(dist: str, module: str) -> str:
    from importlib import metadata

    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        pass
    try:  # on PYTHONPATH (a checkout), not installed
        return getattr(importlib.import_module(module), "__version__", "unknown") + " (source)"
    except ImportError:
        return "not installed"


def describe(*, gpu: bool | None = None) -> dict:
    """A dict: ``device``, ``mps``, ``torch``, ``triton``, ``python``, each iris package's version, ``date``.

    ``gpu`` says whether the ranks ran on a GPU; left out, whether torch sees one (and
    ``IRIS_DEVICE`` does not force CPU).
    """
    if gpu is None:
        gpu = torch.cuda.is_available() and os.environ.get("IRIS_DEVICE", "").lower() != "cpu"
    try:
        import triton

        triton_version = triton.__version__
    except ImportError:
        triton_version = "not installed"
    info = {
        "device": torch.cuda.get_device_name(0) if gpu else "CPU (Triton interpreter)",
        "mps": mps() if gpu else "n/a",
        "torch": torch.__version__,
        "triton": triton_version,
        "python": platform.python_version(),
    }
    info.update({dist: _version(dist, module) for dist, module in _PACKAGES.items()})
    info["date"] = datetime.datetime.now().astimezone().isoformat(timespec="seconds")
    return info


def summary(info: dict | None = None) -> str:
    """``describe()`` as one line for a table caption."""
    info = describe() if info is None else info
    return ", ".join(f"{k} {v}" for k, v in info.items())
