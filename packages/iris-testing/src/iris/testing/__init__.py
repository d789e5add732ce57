"""iris.testing: what every Iris layer's tests share, written once. Test support only: no layer
depends on it at run time.

- :mod:`iris.testing.plugin`, the pytest plugin each layer's tests load (CPU ranks under Triton's
  interpreter without a GPU, the ``world`` and ``compiler`` fixtures, the ``gpu`` and
  ``cpu_ranks`` markers, the ``backend`` fixture);
- :mod:`iris.testing.mem`, the conformance suite that iris-mem-triton and iris-mem-gluon both run
  through a small adapter;
- :mod:`iris.testing.guarded`, guard bytes and canary allocations around the tensors of a fault
  test (the collectives' and the fused operations' suites);
- :mod:`iris.testing.world`, the multi-rank test runner (``World``, ``WorldPool``, ``run``): spawned
  ranks with a gloo group, kept between calls, failures re-raised with their rank;
- :mod:`iris.testing.processes`, ranks as plain processes for tests in which one dies;
- :mod:`iris.testing.compiled`, torch.compile checks (bits against eager, one graph);
- :func:`refusing`, functions of a module replaced by ones that fail while a block runs.
"""

import contextlib

__version__ = "0.2.0"

#: The ``heap.context`` layout this package's checks read (the trace buffer's words in
#: ``iris.testing.mem.tracing``): an iris-heap with another layout fails here at import.
CONTEXT_ABI_VERSION = 2

from iris.heap import context as _context  # noqa: E402 - after the version it checks

_context.check_version("iris-testing", __version__, CONTEXT_ABI_VERSION)

#: The world sizes a multi-rank behaviour is tested at (1: a rank alone; 3: not a power of two).
WORLD_SIZES = (1, 2, 3, 4)

#: The compile-only targets (``iris.testing.mem.lowering.TARGETS``), one per rank of the ``compiler``
#: fixture's world: compiling for both needs no GPU, and the two compile side by side.
COMPILE_TARGETS = ("cuda", "hip")

__all__ = ["COMPILE_TARGETS", "CONTEXT_ABI_VERSION", "WORLD_SIZES", "gather", "refusing"]


def gather(obj, world_size):
    """Every rank's ``obj``, in rank order (in a rank body; a world of one needs no group)."""
    if world_size == 1:
        return [obj]
    import torch.distributed as dist

    out = [None] * world_size
    dist.all_gather_object(out, obj)
    return out


@contextlib.contextmanager
def refusing(module, names, why: str):
    """While the block runs, every function ``names`` of ``module`` raises AssertionError(``why``)
    when called (a path the code under test must not take, e.g. eager calls through the
    ``torch.library`` ops); the originals are restored on every way out."""
    saved = {name: getattr(module, name) for name in names}

    def refuse(*args, **kwargs):
        raise AssertionError(why)

    try:
        for name in saved:
            setattr(module, name, refuse)
        yield
    finally:
        for name, fn in saved.items():
            setattr(module, name, fn)
