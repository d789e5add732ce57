"""Running the real CLI in a subprocess, as a user would."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile

TIMEOUT = 240  # seconds: a run that takes longer is a hang, not a slow machine


def run_cli(*argv: str, torchrun: int | None = None, cwd=None) -> subprocess.CompletedProcess:
    """``python -m iris.examples *argv`` (or under torchrun with ``torchrun`` ranks); output captured."""
    if torchrun is None:
        cmd = [sys.executable, "-m", "iris.examples", *argv]
    else:
        cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={torchrun}",
               "-m", "iris.examples", *argv]  # fmt: skip
    # A temp dir of the run's own: torchrun leaves a torchelastic_* log folder in it (our launcher
    # removes what it makes; torchrun is torch's).
    with tempfile.TemporaryDirectory(prefix="iris-examples-test-") as tmp:
        env = dict(os.environ, COLUMNS="200", TMPDIR=tmp)
        return subprocess.run(cmd, capture_output=True, text=True, timeout=TIMEOUT, env=env, cwd=cwd)


def shm_entries() -> set[str]:
    """Entries in /dev/shm named iris-*: iris-heap makes none (its regions are anonymous memfds), so a leak shows."""
    try:
        return {name for name in os.listdir("/dev/shm") if name.startswith("iris")}
    except FileNotFoundError:
        return set()
