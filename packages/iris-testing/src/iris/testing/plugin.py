"""The pytest plugin of Iris's test suites: the fixtures, markers and CPU-rank set-up every layer's tests share.

Loaded by ``-p iris.testing.plugin`` (the workspace pyproject's addopts: runs from the source
tree with ``packages/*/src`` on ``PYTHONPATH``) or by its ``pytest11`` entry point of the same name
(installed runs); the one name makes the two one registration.

- Without a GPU, ``TRITON_INTERPRET=1`` before any conftest or test module loads: ``@triton.jit``
  fixes the mode when it runs, and the spawned ranks inherit the variable. Restored at the end
  of the session.
- ``world``: spawned ranks kept per world size for the session (``world.run(fn, n, *args)``).
  With ``IRIS_TEST_MAX_RANKS`` set, at most that many rank processes live at once
  (``iris.testing.world.WorldPool``), and the session runs its tests in order of their
  ``world_size`` parameter (tests without one first; otherwise collection order), so it starts
  each world size about once.
- ``compiler``: two compiled-mode processes (``TRITON_INTERPRET=0``) for compile-only checks, which
  need no GPU: rank r compiles for ``iris.testing.COMPILE_TARGETS[r]`` (NVIDIA, AMD).
- ``backend``: each device backend to test (``IRIS_TEST_BACKEND`` picks one, as the noxfile's
  backend axis does; otherwise triton, and gluon where ``iris.mem.gluon`` is installed).
- Markers: ``gpu`` (skipped without a CUDA device), ``cpu_ranks`` (checks CPU execution under the
  interpreter: skipped with a CUDA device).
"""

from __future__ import annotations

import importlib.util
import os

import pytest
import torch

from iris.testing.world import World, WorldPool, default_max_ranks
from iris.testing import COMPILE_TARGETS

__all__ = ["backend", "backends", "compiler", "world"]

_INTERPRET = "TRITON_INTERPRET"
_BACKEND = "IRIS_TEST_BACKEND"
_MARKERS = (
    "gpu: needs a CUDA device (skipped without one)",
    "cpu_ranks: checks CPU execution under Triton's interpreter (skipped with a CUDA device)",
    "alone: kills a process while its kernel runs, which under MPS faults every process sharing the GPU; "
    "tools/parallel-tests.py runs these after the others, one at a time",
)
_SAVED = pytest.StashKey["str | None"]()  # TRITON_INTERPRET before this session set it
_KNOWN = ("triton", "gluon")  # the device backends, in the order a session tests them


def backends() -> list[str]:
    """The device backends under test: ``IRIS_TEST_BACKEND`` if set, else every installed one."""
    chosen = os.environ.get(_BACKEND)
    if chosen:
        return [chosen]
    try:
        gluon = importlib.util.find_spec("iris.mem.gluon") is not None
    except ModuleNotFoundError:  # no iris.mem at all (iris-heap's tests)
        gluon = False
    return [b for b in _KNOWN if b != "gluon" or gluon]


@pytest.hookimpl(tryfirst=True)
def pytest_load_initial_conftests(early_config, parser, args):
    if not torch.cuda.is_available():
        early_config.stash[_SAVED] = os.environ.get(_INTERPRET)
        os.environ[_INTERPRET] = "1"


def pytest_unconfigure(config):
    if _SAVED in config.stash:
        saved = config.stash[_SAVED]
        if saved is None:
            os.environ.pop(_INTERPRET, None)
        else:
            os.environ[_INTERPRET] = saved


def pytest_configure(config):
    chosen = os.environ.get(_BACKEND)
    if chosen and chosen not in _KNOWN:
        known = " or ".join(map(repr, _KNOWN))
        raise pytest.UsageError(f"{_BACKEND}={chosen!r}: a backend is {known} (unset: every installed one)")
    for line in _MARKERS:
        config.addinivalue_line("markers", line)


def pytest_collection_modifyitems(config, items):
    if default_max_ranks() is not None:  # a bounded pool: each world size's tests together
        items.sort(key=world_size_of)
    gpu = torch.cuda.is_available()
    for item in items:
        if "gpu" in item.keywords and not gpu:
            item.add_marker(pytest.mark.skip(reason="needs a CUDA device"))
        if "cpu_ranks" in item.keywords and gpu:
            item.add_marker(pytest.mark.skip(reason="checks CPU execution (CPU ranks only)"))


def world_size_of(item) -> int:
    """The ``world_size`` parameter of a collected test (0 where it has none)."""
    callspec = getattr(item, "callspec", None)
    size = callspec.params.get("world_size", 0) if callspec is not None else 0
    return size if isinstance(size, int) and not isinstance(size, bool) else 0


@pytest.fixture(scope="session")
def world():
    """Spawned ranks, kept per world size for the whole session: ``world.run(fn, n, *args)``."""
    pool = WorldPool()
    yield pool
    pool.close()


@pytest.fixture(scope="session")
def compiler():
    """Two compiled-mode processes (``TRITON_INTERPRET=0``): rank r compiles for ``COMPILE_TARGETS[r]``."""
    with World(len(COMPILE_TARGETS), env={_INTERPRET: "0"}) as w:
        yield w


@pytest.fixture(params=backends())
def backend(request):
    return request.param
