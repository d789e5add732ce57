"""iris.examples: runnable examples and benchmarks of Iris, behind one command line.

    python -m iris.examples --list
    python -m iris.examples message-passing --ranks 2

Each example runs on N ranks (started through torch.distributed's elastic launcher, or by
torchrun), validates its result against torch and prints rich tables. The modules here are the
examples, one per file, to read and copy; ``iris.examples.harness`` is what runs them (CLI,
launcher, timer, tables). See ``iris.examples.harness.cli``.
"""

from __future__ import annotations

from .harness.registry import EXAMPLES, Example

__version__ = "0.2.0"

__all__ = ["EXAMPLES", "Example", "__version__"]
