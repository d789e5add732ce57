"""One collective call: its checks before anything is published, its description, its launches.

Every collective, ``barrier()`` included, goes through ``Call``: it checks the configuration and
that the collectives are ready (``Workspace.check_ready``), stages what peers must read, describes
the call to its peers (``iris.ccl.protocol``), launches the backend's kernels in this call's launch
shape (``LaunchShape``) and, with a plan key, records it all as a plan for the next call with the
same key (``iris.ccl.plans``).
"""

from __future__ import annotations

import importlib

import torch

from . import _launch, protocol
from .config import DEFAULT, Config
from .launch_shape import LaunchShape
from .plans import MAX_PLANS, Plan
from .workspace import Workspace, workspace_of

__all__ = ["FOLD_BYTES", "Call", "kernels"]

_KERNELS: dict = {}  # backend -> its kernel module, once imported

#: A tensor off the heap of at most this many bytes per rank is staged inside the collective's
#: kernel (one program copies it into the staging before the entry and, for the two-shot
#: all_reduce, back after the exit): one launch instead of a copy, the kernel and a copy back, whose
#: host time is most of a small call's (BENCHMARKS.md). A larger one keeps the copies, which then
#: run at full bandwidth (a kernel's copy in must end before its entry, so one program makes it:
#: its programs never wait for one another).
FOLD_BYTES = 64 * 1024


def kernels(backend: str):
    """The kernel module of ``backend`` (``_triton_kernels`` / ``_gluon_kernels``: the same kernels)."""
    module = _KERNELS.get(backend)
    if module is not None:
        return module
    name = {"triton": "_triton_kernels", "gluon": "_gluon_kernels"}[backend]
    try:
        module = _KERNELS[backend] = importlib.import_module(f"iris.ccl.{name}")
    except ImportError as e:
        if backend == "gluon" and "iris.mem.gluon" in str(e):
            raise ImportError("the gluon backend needs iris-mem-gluon: pip install 'iris-ccl[gluon]'") from e
        raise
    return module


class Call:
    """One collective call (``with Call(...) as run:``).

    With a ``key`` (``plans.call_key``) it also records its launches and staging copies as a plan
    that later calls with the same key run again without any of this (``plans.replay``); the plan
    is kept when the ``with`` block ends without an exception.
    """

    def __init__(self, heap, config: Config | None, name: str, key=None, tensors: tuple = ()):
        self.heap = heap
        self.cfg = config if config is not None else DEFAULT
        if not isinstance(self.cfg, Config):
            raise TypeError(f"config must be an iris.ccl.Config, got {type(self.cfg).__name__}")
        self.name = name
        self.k = kernels(self.cfg.backend)
        self.ws: Workspace = workspace_of(heap)
        self.ws.check_ready(name)
        self.gpu = heap.device.type == "cuda"
        self.shape = LaunchShape(self.cfg, heap)
        self.desc = (0, 0, -1, -1)
        self.key = key
        self.plan = Plan(name, self.gpu) if key is not None else None
        self.tensors = tensors

    def __enter__(self) -> Call:
        return self

    def __exit__(self, kind, error, tb) -> None:
        if kind is None and self.plan is not None and self.plan.steps:
            self.ws.keep_plan(self.key, self.plan, MAX_PLANS)

    def staging(self, role: str, like: torch.Tensor) -> torch.Tensor:
        """``ws.staging``; the plan holds on to the buffer it used (valid while it is the role's)."""
        view = self.ws.staging(role, like)
        if self.plan is not None:
            self.plan.buffers[role] = self.ws.staging_buffer(role)
        return view

    def copy(self, dst: torch.Tensor, src: torch.Tensor) -> None:
        """``dst.copy_(src)``, between a tensor of the call and its staging, recorded in the plan."""
        dst.copy_(src)
        if self.plan is not None:
            self.plan.add_copy(dst, src, self.tensors)

    def source(self, flat: torch.Tensor) -> tuple[torch.Tensor, int]:
        """``(buffer peers read, STAGED)`` for an input: ``flat`` itself if it is on the heap (0);
        else its staging buffer, which the kernel fills itself (1: ``folds``) or a copy here did (0)."""
        if self.heap.is_symmetric(flat):
            return flat, 0
        staged = self.staging("in", flat)
        if self.folds(flat):
            return staged, 1
        self.copy(staged, flat)
        return staged, 0

    @staticmethod
    def folds(flat: torch.Tensor) -> bool:
        """Whether a tensor off the heap is staged inside the kernel (``FOLD_BYTES``)."""
        return flat.numel() * flat.element_size() <= FOLD_BYTES

    def describe(self, numel: int, a=None, b=None, **fields) -> None:
        """This call's description (``iris.ccl.protocol``); ``a``/``b``: the buffers peers access."""
        base = self.heap.base  # a and b are heap tensors or staging: their offsets are plain differences
        code = protocol.describe(self.name, **fields)
        self.desc = (code, numel, -1 if a is None else a.data_ptr() - base, -1 if b is None else b.data_ptr() - base)

    def run(self, kernel, **arguments) -> None:
        """Launch ``kernel`` with ``arguments`` (by its parameters' names; the description, the
        sync block and the launch shape are added), then wait if the config is blocking."""
        code, numel, off_a, off_b = self.desc
        arguments.update(context_ptr=self.heap.context, sync=self.ws.sync, CODE=code, NUMEL=numel, OFF_A=off_a,
                         OFF_B=off_b, FLAGS=self.ws.flags, SCOPE=self.ws.scope,
                         TRACE=self.cfg.trace,
                         **self.shape.constexprs(kernel))  # fmt: skip
        args, constexprs = _launch.positional(kernel, arguments)
        grid = (self.shape.programs(kernel, arguments, args, constexprs),)
        warps = self.shape.warps
        self.ws.record(self.name)
        try:
            if self.gpu and _launch.DIRECT_LAUNCH:
                _launch.launch(kernel, grid, args, constexprs, warps)
            else:
                kernel[grid](*args, num_warps=warps, **constexprs)
        except BaseException as e:
            # Programs may have published this rank's entry before the failure (CPU ranks run them
            # one after another): the epochs can no longer be trusted until a reset.
            self.ws.mark_broken(f"a failure inside {self.name}'s launch ({type(e).__name__}: {e})")
            raise
        if self.plan is not None:
            self.plan.add_launch(kernel, grid, args, constexprs, warps, self.tensors)
            if self.plan.steps is None:
                self.plan = None
        if self.cfg.blocking:
            self.wait()

    def barrier(self) -> None:
        """The barrier kernel, described as this call with no elements: ``barrier()`` itself, and
        any collective of nothing (which still pairs up with its peers' calls)."""
        self.describe(0)
        self.run(self.k.barrier_kernel)

    def empty(self, numel: int) -> bool:
        """Whether the call has no elements (``numel`` 0); if so it has launched ``barrier()``,
        since it still pairs up with its peers' calls."""
        if numel:
            return False
        self.barrier()
        return True

    def wait(self) -> None:
        """``Config(blocking=True)``: wait for the device, then raise what it recorded. Not while
        the stream captures a CUDA graph (which cannot sync)."""
        if self.gpu:
            if torch.cuda.is_current_stream_capturing():
                return
            torch.cuda.current_stream(self.heap.device).synchronize()
        self.heap.check_device_errors()
