"""What a benchmark ran on: device, MPS, package versions, date. Printed under every table."""

from __future__ import annotations

import datetime
import importlib
import os
import platform
import shutil
import subprocess

import torch

__all__ = ["describe", "summary"]

_PACKAGES = {
    "iris-heap": "iris.heap",
    "iris-mem-triton": "iris.mem.triton",
    "iris-mem-gluon": "iris.mem.gluon",
    "iris-ccl": "iris.ccl",
    "iris-examples": "iris.examples",
}


def _mps() -> str:
    """``"on"`` when an NVIDIA MPS control daemon runs on this host, else ``"off"``."""
    if shutil.which("pgrep") is None:
        return "unknown (no pgrep)"
    try:
        out = subprocess.run(["pgrep", "-f", "nvidia-cuda-mps"], capture_output=True, text=True, timeout=5)
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    return "on" if out.stdout.strip() else "off"


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
        "mps": _mps() if gpu else "n/a",
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
