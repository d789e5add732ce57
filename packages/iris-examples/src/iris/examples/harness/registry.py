"""The examples the CLI knows, by name, without importing them (``--list`` stays fast)."""

from __future__ import annotations

import importlib
import types
from dataclasses import dataclass

__all__ = ["BACKENDS", "EXAMPLES", "Example", "get"]

BACKENDS = ("triton", "gluon")


@dataclass(frozen=True)
class Example:
    """An example: its CLI ``name``, the ``module`` that implements it, its default ``backend``
    (None for one that runs no kernels), a one-line ``summary`` (the module's ``SUMMARY``) and, for
    a name kept for one release, the command that ``replaced_by`` it.

    A name ending in ``-gluon`` fixes the backend to gluon. A module may declare ``BACKENDS``
    (the backends it implements; default both; empty for none). What a module provides is
    described in ``iris.examples.harness.cli``.
    """

    name: str
    module: str
    backend: str | None
    summary: str
    #: For a deprecated name: the command it runs, which the CLI names on stderr.
    replaced_by: str | None = None

    @property
    def fixed_backend(self) -> bool:
        """Whether the name fixes the backend (``message-passing-gluon``), so ``--backend`` may not change it."""
        return self.name.endswith("-gluon")

    def load(self) -> types.ModuleType:
        """Import the module (after the launcher has set up the environment for kernels)."""
        return importlib.import_module(self.module)


def _examples(*examples: Example) -> dict[str, Example]:
    return {e.name: e for e in examples}


EXAMPLES: dict[str, Example] = _examples(
    Example(
        "message-passing",
        "iris.examples.message_passing",
        "triton",
        "producer puts blocks into a peer's heap and releases a flag per block; the consumer waits (acquire) and checks",
    ),
    Example(
        "message-passing-gluon",
        "iris.examples.message_passing",
        "gluon",
        "message-passing with Gluon kernels (iris.mem.gluon)",
    ),
    Example(
        "gemm-all-scatter",
        "iris.examples.gemm_all_scatter",
        "triton",
        "persistent GEMM whose tiles are stored straight into every rank's C (fused all-scatter) vs matmul + all_gather",
    ),
    Example(
        "gemm-all-scatter-gluon",
        "iris.examples.gemm_all_scatter",
        "gluon",
        "gemm-all-scatter with Gluon kernels",
    ),
    Example(
        "all-load",
        "iris.examples.all_peers",
        "triton",
        "every rank loads a buffer from every rank through translated pointers: bandwidth vs a local copy",
    ),
    Example(
        "all-store",
        "iris.examples.all_peers",
        "triton",
        "every rank stores its buffer into every rank through translated pointers: bandwidth vs a local copy",
    ),
    Example(
        "atomic-latency",
        "iris.examples.atomic_latency",
        "triton",
        "remote atomic round trip (atomic_add/atomic_cas ping-pong) and contended atomic_add throughput",
    ),
    Example(
        "ccl-bench",
        "iris.examples.ccl_bench",
        "triton",
        "iris.ccl collectives against the torch copy roofline (and NCCL where every rank has a GPU)",
    ),
    Example(
        "tp-mlp",
        "iris.examples.tp_mlp",
        "triton",
        "a tensor-parallel transformer MLP block: iris.ops fused vs torch.matmul + iris.ccl (and NCCL)",
    ),
    Example(
        "ops-bench",
        "iris.examples.ops_bench",
        "triton",
        "iris.ops fused GEMM + communication against torch.matmul + iris.ccl, and against max(GEMM, traffic)",
    ),
    Example(
        "heap-bench",
        "iris.examples.heap_bench",
        None,
        "iris.heap allocation cost per alloc+free pair (vs torch.empty) and heap init time, per world size",
    ),
    Example(
        "rma-bench",
        "iris.examples.rma_bench",
        "triton",
        "remote load/store/get/put/copy bandwidth vs a local copy (Triton, or Gluon vs Triton); "
        "Triton: remote atomic latency and throughput",
    ),
    Example(
        "gluon-rma-bench",
        "iris.examples.rma_bench",
        "gluon",
        "deprecated name of rma-bench --backend gluon",
        replaced_by="rma-bench --backend gluon",
    ),
)


def get(name: str) -> Example:
    """The example called ``name``; ``KeyError`` with the known names otherwise."""
    try:
        return EXAMPLES[name]
    except KeyError:
        raise KeyError(f"no example called {name!r}; the examples are: {', '.join(EXAMPLES)} (see --list)") from None
