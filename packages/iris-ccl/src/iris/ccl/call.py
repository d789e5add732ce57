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

__all__ = ["FOLD_BYTES", "Call", "Push", "Staging", "kernels_of"]

_KERNELS: dict = {}  # (package, backend) -> its kernel module, once imported

#: A tensor off the heap of at most this many bytes per rank is staged inside the collective's
#: kernel (one program copies it into the staging before the entry and, for the two-shot all_reduce,
#: back after the exit): one launch instead of a copy, the kernel and a copy back, whose host time
#: is most of a small call's (BENCHMARKS.md, section "iris.ccl (Triton backend): collectives against
#: the copy roofline"). A larger one keeps the copies, which then run at full bandwidth (a kernel's
#: copy in must end before its entry, so one program makes it: its programs never wait for one
#: another).
FOLD_BYTES = 64 * 1024


def kernels_of(backend: str, package: str = "iris.ccl"):
    """The kernel module of ``backend`` in ``package`` (``_triton_kernels`` / ``_gluon_kernels``: the
    same kernels), imported once; ``iris.ops`` finds its own kernels here too. Without
    iris-mem-gluon, the gluon backend's ImportError names the package's extra to install."""
    module = _KERNELS.get((package, backend))
    if module is not None:
        return module
    name = {"triton": "_triton_kernels", "gluon": "_gluon_kernels"}[backend]
    try:
        module = _KERNELS[package, backend] = importlib.import_module(f"{package}.{name}")
    except ImportError as e:
        if backend == "gluon" and "iris.mem.gluon" in str(e):
            extra = package.replace(".", "-")
            raise ImportError(f"the gluon backend needs iris-mem-gluon: pip install '{extra}[gluon]'") from e
        raise
    return module


class Staging:
    """How a collective's kernel stages a tensor off the heap itself (its ``staged`` argument):
    never (``NONE``: the tensor is on the heap, or ``copy_`` launches around the kernel stage it),
    or into the staging before its entry (``IN``). The copy back out after the exit (the two-shot
    all_reduce, whose result lands in every rank's staging) is the reduction kernel's constexpr
    ``COPY_BACK``, not a value of its own here. A staged kernel runs one program (``FOLD_BYTES``)."""

    NONE = 0
    IN = 1


class Push:
    """What ``push_kernel`` stores into every rank's output (its ``MODE``): this rank's input
    (``SAME``: all_gather), chunk r of it into rank r (``CHUNKS``: all_to_all), or piece
    ``rank`` of the root's tensor into every rank but the root (``RELAY``: broadcast)."""

    SAME = 0
    CHUNKS = 1
    RELAY = 2


class Call:
    """One call on the protocol (``with Call(...) as call:``): a collective, or a fused operation
    of a layer above (``kernels``: its kernel module; ``config``: its own configuration, which
    has the ``backend``, ``blocking`` and ``trace`` fields the call reads).

    With a ``key`` (``plans.call_key``) it also records its launches and staging copies as a plan
    that later calls with the same key run again without any of this (``plans.replay``); the plan
    is kept when the ``with`` block ends without an exception.
    """

    def __init__(self, heap, config, name: str, key=None, tensors: tuple = (), *, kernels=None):
        self.heap = heap
        if kernels is None:  # a collective: an iris.ccl.Config, whose backend picks the kernels
            config = DEFAULT if config is None else config
            if not isinstance(config, Config):
                raise TypeError(f"config must be an iris.ccl.Config, got {type(config).__name__}")
            kernels = kernels_of(config.backend)
        self.config = config
        self.name = name
        self.kernels = kernels
        self.workspace: Workspace = workspace_of(heap)
        self.workspace.check_ready(name)
        self.gpu = heap.device.type == "cuda"
        self._shape: LaunchShape | None = None
        self.desc = (0, 0, -1, -1, 0)
        self.key = key
        self.plan = Plan(name, self.gpu) if key is not None else None
        self.tensors = tensors

    def __enter__(self) -> Call:
        return self

    def __exit__(self, kind, error, tb) -> None:
        if kind is None and self.plan is not None and self.plan.steps:
            self.workspace.keep_plan(self.key, self.plan, MAX_PLANS)

    @property
    def shape(self) -> LaunchShape:
        """The collectives' launch shape of this call (``iris.ccl.launch_shape``)."""
        if self._shape is None:
            self._shape = LaunchShape(self.config, self.heap)
        return self._shape

    def staging(self, role: str, like: torch.Tensor) -> torch.Tensor:
        """``Workspace.staging``; the plan holds on to the buffer it used (valid while it is the role's)."""
        view = self.workspace.staging(role, like)
        if self.plan is not None:
            self.plan.buffers[role] = self.workspace.staging_buffer(role)
        return view

    def copy(self, dst: torch.Tensor, src: torch.Tensor) -> None:
        """``dst.copy_(src)``, between a tensor of the call and its staging, recorded in the plan."""
        dst.copy_(src)
        if self.plan is not None:
            self.plan.add_copy(dst, src, self.tensors)

    def source(self, flat: torch.Tensor) -> tuple[torch.Tensor, int]:
        """``(buffer peers read, staged)`` for an input: ``flat`` itself if it is on the heap
        (``Staging.NONE``); else its staging buffer, which the kernel fills itself (``Staging.IN``:
        ``folds``) or a copy here did (``Staging.NONE``)."""
        if self.heap.is_symmetric(flat):
            return flat, Staging.NONE
        staged = self.staging("in", flat)
        if self.folds(flat):
            return staged, Staging.IN
        self.copy(staged, flat)
        return staged, Staging.NONE

    @staticmethod
    def folds(flat: torch.Tensor) -> bool:
        """Whether a tensor off the heap is staged inside the kernel (``FOLD_BYTES``)."""
        return flat.numel() * flat.element_size() <= FOLD_BYTES

    def describe(self, numel: int, a=None, b=None, *, shape: int = 0, **fields) -> None:
        """This call's description (``iris.ccl.protocol``); ``a``/``b``: the buffers peers access
        (heap tensors or staging); ``shape``: the SHAPE word (0 for a collective)."""
        base = self.heap.base  # a and b are heap tensors or staging: their offsets are plain differences
        code = protocol.describe(self.name, **fields)
        off_a = -1 if a is None else a.data_ptr() - base
        off_b = -1 if b is None else b.data_ptr() - base
        self.desc = (code, numel, off_a, off_b, shape)

    def launch(self, kernel, *, grid: int | None = None, num_warps: int | None = None, options: dict | None = None,
               **arguments) -> None:  # fmt: skip
        """Launch ``kernel`` with ``arguments`` (by its parameters' names; the description, the
        sync block and, unless ``grid`` and ``num_warps`` are given, the collectives' launch shape
        are added), then wait if the config is blocking. ``options``: launch options beyond
        ``num_warps`` (``num_stages``), which only the JIT's launch takes."""
        self._launch(kernel, grid, num_warps, options, arguments)
        if self.config.blocking:
            self.wait()

    def _launch(self, kernel, grid, num_warps, options, arguments) -> None:
        """One launch of ``kernel``, described by the call's words, recorded in the plan."""
        code, numel, off_a, off_b, shape = self.desc
        workspace = self.workspace
        arguments.update(context_ptr=self.heap.context, sync=workspace.sync, CODE=code, NUMEL=numel, OFF_A=off_a,
                         OFF_B=off_b, SHAPE=shape, FLAGS=workspace.flags, SCOPE=workspace.scope,
                         TRACE=self.config.trace)  # fmt: skip
        block, warps = self.shape.tile(kernel, arguments) if grid is None else (None, self.shape.warps)
        if block is not None:
            arguments["BLOCK"] = block
        warps = warps if num_warps is None else num_warps
        args, constexprs = _launch.positional(kernel, arguments)
        grid = (self.shape.programs(kernel, arguments, args, constexprs, warps) if grid is None else grid,)
        with workspace.launching(self.name):
            if self.gpu and _launch.DIRECT_LAUNCH and not options:
                _launch.launch(kernel, grid, args, constexprs, warps)
            else:
                kernel[grid](*args, num_warps=warps, **(options or {}), **constexprs)
        if self.plan is not None:
            if options:  # a plan's launches take no options
                self.plan.steps = None
            else:
                self.plan.add_launch(kernel, grid, args, constexprs, warps, self.tensors)
            if self.plan.steps is None:
                self.plan = None

    def barrier(self) -> None:
        """The barrier kernel, described as this call with no elements: ``barrier()`` itself, and
        any collective of nothing (which still pairs up with its peers' calls)."""
        self.describe(0)
        self.launch(kernels_of(self.config.backend).barrier_kernel, grid=1, num_warps=self._warps())

    def _warps(self) -> int:
        num_warps = getattr(self.config, "num_warps", None)
        return num_warps if num_warps is not None else self.shape.warps

    def wait(self) -> None:
        """``Config(blocking=True)``: wait for the device, then raise what it recorded. Not while
        the stream captures a CUDA graph (which cannot sync)."""
        if self.gpu:
            if torch.cuda.is_current_stream_capturing():
                return
            try:
                torch.cuda.current_stream(self.heap.device).synchronize()
            except RuntimeError as e:  # a peer's process ended under MPS, maybe: say so
                lost = self.heap.explain_failure(f"{self.name}'s wait for the device", e)
                if lost is not None:
                    raise lost from e
                raise
        self.heap.check_device_errors()
