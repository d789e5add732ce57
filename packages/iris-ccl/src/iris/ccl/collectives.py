"""The collectives: argument checks, staging, variant choice and launches (shared by both backends).

Backends differ only in their kernels (``_triton_kernels`` / ``_gluon_kernels``, the same
signatures); everything here is host code written once.
"""

from __future__ import annotations

import importlib
import os

import torch

import iris.heap

from . import _launch, protocol
from .config import Config
from .errors import CollectiveError
from .workspace import Workspace, workspace_of

__all__ = ["all_reduce", "all_gather", "reduce_scatter", "all_to_all", "broadcast", "barrier", "reset"]

OPS = {"sum": 0, "max": 1, "min": 2, "avg": 3}
_REDUCIBLE = {torch.float16, torch.bfloat16, torch.float32, torch.float64,
              torch.int8, torch.int16, torch.int32, torch.int64, torch.uint8}  # fmt: skip
# Data movement needs only the element size; 16-byte elements move as two 8-byte words.
_WORDS = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64, 16: torch.int64}
_DEFAULT = Config()
_MAX_ELEMENTS = 2**31  # kernels index elements (and all_gather's W * n outputs) with int32
#: all_reduce "auto": per world size, ``(max bytes per rank, variant)`` rows tried in order; the
#: first row whose bound admits the message wins. From the H200 sweeps (ranks sharing the GPU under
#: MPS; BENCHMARKS.md): two_shot was fastest at every size measured, 1 KiB .. 64 MiB per rank at
#: 2 ranks (1 KiB: 78 vs 155 us one_shot) and 1 KiB .. 1 GiB at 4 ranks, on both backends (4 ranks,
#: Triton: 1 KiB 86 us vs 114 one_shot and 149 rs_ag; 256 MiB 777 us vs 2303 and 939; 1 GiB 3000 us
#: vs 9080 and 3566), so it is the choice until a measurement says otherwise.
AUTO_VARIANTS: dict[int | None, tuple[tuple[int | None, str], ...]] = {
    None: ((None, "two_shot"),),  # any world size without a row of its own
}


def _auto_variant(world_size: int, nbytes: int) -> str:
    rows = AUTO_VARIANTS.get(world_size, AUTO_VARIANTS[None])
    return next(variant for bound, variant in rows if bound is None or nbytes <= bound)


_KERNELS: dict = {}  # backend -> its kernel module, once imported


def _kernels(backend: str):
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


def _heap(heap):
    if heap is not None and not isinstance(heap, iris.heap.SymmetricHeap):
        raise TypeError(f"heap must be an iris.heap.SymmetricHeap or None, got {type(heap).__name__}")
    heap = heap if heap is not None else iris.heap.default_heap()
    if heap.closed:
        raise iris.heap.HeapClosedError("the heap given to the collective is closed")
    return heap


def _check_tensor(t, name: str, heap) -> int:
    """Checks of one tensor argument; its memory layout (``_layout``)."""
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
    if t.device != heap.device:
        raise ValueError(f"{name} is on {t.device}, but the heap (rank {heap.rank}) is on {heap.device}")
    if t.layout != torch.strided:
        raise TypeError(f"{name} is a {t.layout} tensor; the collectives take strided (dense) tensors")
    layout = _layout(t, name)
    if t.numel() * max(1, t.element_size() // 8) >= _MAX_ELEMENTS:
        raise ValueError(
            f"{name} has {t.numel()} elements; the collectives index elements with 32-bit integers, so a "
            f"tensor must have fewer than 2**31 (split it into several collectives)"
        )
    if t.element_size() not in _WORDS:
        raise TypeError(
            f"{name} has {t.element_size()}-byte elements ({t.dtype}); the collectives move 1, 2, 4, 8 or 16-byte elements"
        )
    return layout


#: Dims (of more than one element) that a tensor in another order than row-major may have: the
#: order is described to peers by its Lehmer code in 16 bits (8! < 2**16).
MAX_PERMUTED_DIMS = 8


def _layout(t: torch.Tensor, name: str) -> int:
    """Which order ``t``'s elements have in memory: 0 for row-major (contiguous), else the Lehmer
    code of the order of its dims (those of more than one element) by decreasing stride. Two
    tensors of one shape hold their elements in the same memory order exactly when these agree.

    The collectives work on a tensor's memory as one flat run of elements, so it must be dense and
    non-overlapping (contiguous, channels_last, a permutation of a contiguous tensor, ...).
    """
    if t.numel() == 0 or t.is_contiguous():
        return 0
    dims = [d for d in range(t.dim()) if t.shape[d] > 1]
    order = sorted(dims, key=lambda d: -t.stride(d))  # stable
    span = 1
    for d in reversed(order):
        if t.stride(d) != span:
            raise ValueError(
                f"{name} is not dense (shape {tuple(t.shape)}, strides {t.stride()}): the collectives take "
                "tensors whose elements fill one block of memory, in any order of dims; call .contiguous() first"
            )
        span *= t.shape[d]
    if len(dims) > MAX_PERMUTED_DIMS:
        raise ValueError(
            f"{name} has {len(dims)} dims of more than one element in an order other than row-major; the "
            f"collectives describe at most {MAX_PERMUTED_DIMS} (call .contiguous() first)"
        )
    perm = [dims.index(d) for d in order]
    code = 0
    for i, p in enumerate(perm):
        code = code * (len(perm) - i) + sum(q < p for q in perm[i + 1 :])
    return code


def _flat(t: torch.Tensor) -> torch.Tensor:
    """The memory of a dense tensor (``_layout``) as one dim, in memory order (a view, never a copy)."""
    return t.as_strided((t.numel(),), (1,))


def _check_chunks(name: str, whole: torch.Tensor, part: torch.Tensor, whole_name: str, part_name: str) -> None:
    """``whole``'s chunks along dim 0 must each be one run of memory laid out as ``part`` is."""
    if whole.numel() == 0:
        return
    if whole.shape[0] > 1 and whole.stride(0) * whole.shape[0] != whole.numel():
        raise ValueError(
            f"{name}: {whole_name}'s dim 0 must be its outermost in memory (each rank's chunk one block); got "
            f"shape {tuple(whole.shape)}, strides {whole.stride()}"
        )
    chunk = whole[0] if whole.dim() == part.dim() + 1 else whole[: part.shape[0] if part.dim() else 1]
    if chunk.numel() and _layout(chunk, whole_name) != _layout(part, part_name):
        raise ValueError(
            f"{name}: {whole_name} and {part_name} must lay their elements out alike (strides {whole.stride()} and "
            f"{part.stride()} for shapes {tuple(whole.shape)} and {tuple(part.shape)})"
        )


def _check_op(op: str, dtype: torch.dtype) -> int:
    if not isinstance(op, str) or op not in OPS:
        raise ValueError(f"unknown op {op!r}; choose one of {sorted(OPS)}")
    if dtype not in _REDUCIBLE:
        raise TypeError(f"cannot reduce {dtype} tensors; supported: {sorted(str(d) for d in _REDUCIBLE)}")
    if op == "avg" and not dtype.is_floating_point:
        raise TypeError(f"op 'avg' needs a floating-point tensor, got {dtype}; use 'sum' and divide")
    return OPS[op]


def _check_same_dtype(out, inp) -> None:
    if out.dtype != inp.dtype:
        raise TypeError(f"out and inp must have the same dtype, got out {out.dtype} and inp {inp.dtype}")


def _check_disjoint(out, inp) -> None:
    a0, a1 = out.data_ptr(), out.data_ptr() + out.numel() * out.element_size()
    b0, b1 = inp.data_ptr(), inp.data_ptr() + inp.numel() * inp.element_size()
    if out.numel() and inp.numel() and a0 < b1 and b0 < a1:
        raise ValueError("out and inp overlap in memory; the collective needs separate tensors")


def _words(t: torch.Tensor) -> torch.Tensor:
    """``t`` as 1-D integers of its element's size (16-byte elements as pairs of 8-byte words):
    data movement does not care what the bytes mean."""
    return _flat(t).view(_WORDS[t.element_size()])


#: Launch compiled kernels directly after the first call of each argument shape (``_launch``):
#: the JIT's own dispatch costs the host more than a small collective takes on the GPU. Set the
#: environment variable ``IRIS_CCL_DIRECT_LAUNCH=0`` to launch every call through the JIT.
DIRECT_LAUNCH = os.environ.get("IRIS_CCL_DIRECT_LAUNCH", "1") != "0"

#: Programs per multiprocessor that each kernel is launched with, at most (fewer when fewer fit
#: at once; see ``_resident_per_sm``), shared among the ranks on one GPU. From the H200 sweep with
#: 4 ranks sharing the GPU (BENCHMARKS.md, 64 MiB .. 1 GiB per rank): the reduction kernels need
#: many loads in flight (reduce_scatter at 1 GiB: 0.61 of the copy roofline at 1 program per
#: multiprocessor, 0.86 at 2, 0.97 at 4; two_shot 0.78, 0.93, 0.93), while the gather kernel does
#: best at 1 (all_gather by pulls 0.82, 0.74, 0.79).
PROGRAMS_PER_SM = {"one_shot_kernel": 4, "reduce_kernel": 4, "gather_kernel": 1, "push_kernel": 1}
_RESIDENT: dict[tuple, int] = {}  # (kernel, launch shape, argument dtypes) -> programs per SM that fit


def _resident_per_sm(kernel, args, launch: dict, device: torch.device) -> int:
    """How many programs of this kernel one multiprocessor holds at once (registers, threads, shared memory).

    Every program of every rank on a GPU must be resident together (they wait for one another),
    so a launch may not ask for more. Compiles the kernel (``warmup``: no launch) the first time a
    shape is seen; 1 when the compiled kernel or the device does not say.
    """
    key = (kernel, tuple(launch.items()), tuple(a.dtype for a in args if isinstance(a, torch.Tensor)))
    if key in _RESIDENT:
        return _RESIDENT[key]
    try:
        compiled = kernel.warmup(*args, grid=(1,), **launch)
        compiled._init_handles()
        regs, shared = int(compiled.n_regs), int(compiled.metadata.shared)
        props = torch.cuda.get_device_properties(device)
        threads = 32 * launch["num_warps"]
        warp_regs = -(-max(regs, 1) * 32 // 256) * 256  # registers are given to warps in 256s
        limits = [
            props.regs_per_multiprocessor // (warp_regs * launch["num_warps"]),
            props.max_threads_per_multi_processor // threads,
            32,  # resident blocks per multiprocessor
        ]
        if shared:
            limits.append(props.shared_memory_per_multiprocessor // shared)
        fits = max(1, min(limits))
    except Exception:  # a torch/triton without these fields, or a probe that fails: the safe default
        fits = 1  # (a kernel that does not compile fails again, with its own error, at the launch)
    _RESIDENT[key] = fits
    return fits


class _Launch:
    """One collective call: its checks before anything is published, its description, its launches.

    With a ``key`` (``_call_key``) it also records its launches and staging copies as a plan that
    later calls with the same key run again without any of this (``_replay``); the plan is kept
    when the ``with`` block of the call ends without an exception.
    """

    def __init__(self, heap, config: Config | None, name: str, key=None, tensors: tuple = ()):
        self.heap = heap
        self.cfg = config if config is not None else _DEFAULT
        if not isinstance(self.cfg, Config):
            raise TypeError(f"config must be an iris.ccl.Config, got {type(self.cfg).__name__}")
        self.name = name
        self.k = _kernels(self.cfg.backend)
        self.ws: Workspace = workspace_of(heap)
        _check_ready(heap, self.ws, name)
        self.gpu = heap.device.type == "cuda"
        self.block = self.cfg.block_size or 4096
        self.warps = self.cfg.num_warps or (8 if self.gpu else 4)
        self.flags = self.ws.flags
        self.desc = (0, 0, -1, -1)
        self.key = key
        self.plan = _Plan(name, self.gpu) if key is not None else None
        self.tensors = tensors

    def __enter__(self) -> _Launch:
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

    def describe(self, kind: str, numel: int, a=None, b=None, **fields) -> None:
        """This call's description (``iris.ccl.protocol``); ``a``/``b``: the buffers peers access."""
        base = self.heap.base  # a and b are heap tensors or staging: their offsets are plain differences
        code = protocol.describe(kind, **fields)
        self.desc = (code, numel, -1 if a is None else a.data_ptr() - base, -1 if b is None else b.data_ptr() - base)

    def programs(self, kernel, n: int, args, constexprs) -> int:
        tiles = max(1, -(-n // self.block))
        if self.cfg.num_programs:
            return min(tiles, self.cfg.num_programs)
        if not self.gpu:
            return min(tiles, 2)
        per_sm = PROGRAMS_PER_SM.get(kernel.__name__, 1)
        if per_sm > 1:  # one program per multiprocessor always fits; more needs the compiled kernel's size
            launch = {"BLOCK": self.block, "num_warps": self.warps, **constexprs}
            per_sm = min(per_sm, _resident_per_sm(kernel, args, launch, self.heap.device))
        # Ranks that share this GPU must all have their programs resident at once (they wait
        # for each other), so each takes its share of the multiprocessors.
        return min(tiles, max(1, per_sm * self.ws.multiprocessors // self.ws.ranks_per_device))

    def run(self, kernel, n: int, *args, programs: int | None = None, **constexprs) -> None:
        ws = self.ws
        head = (self.heap.context, ws.sync, *self.desc)
        constexprs = {**constexprs, "FLAGS": self.flags}
        launch = {"BLOCK": self.block, **constexprs} if programs is None else constexprs
        p = programs if programs is not None else self.programs(kernel, n, (*head, *args), constexprs)
        ws.record(self.name)
        try:
            if self.gpu and DIRECT_LAUNCH:
                _launch.launch(kernel, (p,), (*head, *args), launch, self.warps)
            else:
                kernel[(p,)](*head, *args, num_warps=self.warps, **launch)
        except BaseException as e:
            # Programs may have published this rank's entry before the failure (CPU ranks run them
            # one after another): the epochs can no longer be trusted until a reset.
            ws.broken = f"a failure inside {self.name}'s launch ({type(e).__name__}: {e})"
            raise
        if self.plan is not None:
            self.plan.add_launch(kernel, (p,), (*head, *args), launch, self.warps, self.tensors)
            if self.plan.steps is None:
                self.plan = None
        if self.cfg.blocking:
            self.wait()

    def wait(self) -> None:
        """``Config(blocking=True)``: wait for the device, then raise what it recorded. Not while
        the stream captures a CUDA graph (which cannot sync)."""
        if self.gpu:
            if torch.cuda.is_current_stream_capturing():
                return
            torch.cuda.current_stream(self.heap.device).synchronize()
        self.heap.check_device_errors()


def _check_ready(heap, ws: Workspace, name: str) -> None:
    """Raise what stops any collective on this heap before it publishes anything: an error an
    earlier (asynchronous) collective recorded (read without a sync), or an error raised before
    that ``reset()`` has not cleared."""
    heap.check_device_errors()
    if ws.broken is not None:
        raise CollectiveError(
            f"{name} on rank {heap.rank}: the collectives of this heap are in an unknown state after "
            f"{ws.broken}; call iris.ccl.reset() on every rank first",
            collective=name,
            rank=heap.rank,
        )


# -- plans: a repeated call launches what the first one did ---------------------------------------


class _Plan:
    """The launches and staging copies of one call, kept to run again for the next call with the same key.

    The key (``_call_key``) holds everything the call's checks and launches depended on: the
    collective, its ``Config`` and scalars (op, src), the current device and, per tensor, its
    address, shape, strides, dtype, device and whether it is on the heap. Calls with the same key
    pass the same checks and launch the same kernels with the same arguments (addresses included),
    so a plan skips straight to its steps, after the checks that may change between calls (the
    heap is open, no device error is pending, the collectives are not broken) and one more: the
    staging buffers it copies through are still the workspace's (``buffers``; they change only
    when a larger call grows one, or at ``reset()``). Every rank's staging grows at the same calls,
    whichever of them ran from a plan, so ranks keep describing the same offsets.

    Steps, in the call's order: on GPUs a launch is a ``_launch.Bound`` (addresses fixed); on CPU
    ranks the kernel with the call's tensors filled in again (``_slotted``), so the same plans run
    under the interpreter; a copy is between a (flat) tensor of the call and a staging view.
    """

    __slots__ = ("name", "gpu", "steps", "device", "buffers", "launches")

    def __init__(self, name: str, gpu: bool):
        self.name, self.gpu = name, gpu
        self.steps: list | None = []
        self.device = torch.cuda.current_device() if gpu else -1
        self.buffers: dict[str, torch.Tensor] = {}  # staging role -> the whole buffer the steps use
        self.launches = 0

    def add_launch(self, kernel, grid, args, launch, warps, tensors) -> None:
        """Record a launch just made (``steps`` becomes None when it cannot be repeated as is)."""
        if self.steps is None:
            return
        if self.gpu:
            bound = _launch.bind(kernel, grid, args, launch, warps) if DIRECT_LAUNCH else None
            step = None if bound is None else ("launch", bound)
        else:
            step = _slotted(kernel, grid, args, launch, warps, tensors)
        if step is None:
            self.steps = None
        else:
            self.steps.append(step)
            self.launches += 1

    def add_copy(self, dst: torch.Tensor, src: torch.Tensor, tensors) -> None:
        if self.steps is not None:
            ends = (_slot(dst, tensors), _slot(src, tensors))
            self.steps = None if None in ends else [*self.steps, ("copy", *ends)]

    def valid(self, ws: Workspace) -> bool:
        return all(ws.staging_buffer(role) is buf for role, buf in self.buffers.items())

    def run(self, tensors: tuple) -> None:
        stream = _launch.stream(self.device) if self.gpu else None
        for step in self.steps:
            what = step[0]
            if what == "launch":
                step[1](stream)
            elif what == "copy":
                _filled(step[1], tensors).copy_(_filled(step[2], tensors))
            else:  # "cpu": a launch under the interpreter
                _, kernel, grid, args, launch, warps = step
                kernel[grid](*[_filled(a, tensors) for a in args], num_warps=warps, **launch)


def _slot(a, tensors):
    """``a`` itself, or ``("slot", index, dtype)`` when it is the flat memory of the call's tensor
    ``index`` (as ``_flat`` / ``_words`` give it); None when it views a tensor of the call otherwise."""
    if not isinstance(a, torch.Tensor):
        return a
    for i, t in enumerate(tensors):
        if t.data_ptr() == a.data_ptr():
            if a.dim() != 1 or a.numel() * a.element_size() != t.numel() * t.element_size():
                return None
            return ("slot", i, a.dtype)
    return a


def _filled(a, tensors):
    return _flat(tensors[a[1]]).view(a[2]) if type(a) is tuple else a


def _slotted(kernel, grid, args, launch, warps, tensors):
    """A CPU launch step: each argument that views one of the call's tensors becomes a slot
    (``_slot``); other tensors (context, sync block, staging) are the heap's own."""
    filled = tuple(_slot(a, tensors) for a in args)
    if any(f is None for f in filled):
        return None
    return ("cpu", kernel, grid, filled, launch, warps)


#: Plans kept per heap (the oldest is dropped first).
MAX_PLANS = 256


def _call_key(heap, name: str, config, scalars: tuple, tensors: tuple):
    """What a call's plan depends on (``_Plan``); None for a call that is never planned (a
    blocking config, launch hooks installed, the JIT path forced, or arguments the full path
    must reject)."""
    cfg = _DEFAULT if config is None else config
    if type(cfg) is not Config or cfg.blocking:
        return None
    if heap.device.type == "cuda":
        if not (DIRECT_LAUNCH and _launch.hooks_idle()):
            return None
        device = _current_device()
    else:
        device = -1
    try:
        parts = [(t.data_ptr(), t.shape, t.stride(), t.dtype, t.device, heap.is_symmetric(t)) for t in tensors]
    except (AttributeError, TypeError):  # not tensors: the full path says what is wrong
        return None
    return (name, cfg, scalars, device, *parts)


_current_device = getattr(torch._C, "_cuda_getDevice", None) or torch.cuda.current_device  # without the lazy-init check


def _replay(heap, key, tensors: tuple) -> bool:
    """Launch the plan recorded for ``key``, if there is one."""
    if key is None:
        return False
    ws = workspace_of(heap)
    try:
        plan = ws.plans.get(key)
    except TypeError:  # an unhashable scalar (op, src): the full path rejects it
        return False
    if plan is None or not plan.valid(ws):
        return False
    _check_ready(heap, ws, plan.name)
    for _ in range(plan.launches):
        ws.record(plan.name)
    try:
        plan.run(tensors)
    except BaseException as e:
        ws.broken = f"a failure inside {plan.name}'s launch ({type(e).__name__}: {e})"
        raise
    return True


def _reduce_flags(dtype: torch.dtype) -> dict:
    return {"ACC_F32": dtype in (torch.float16, torch.bfloat16), "IS_FLOAT": dtype.is_floating_point}


def _on_heap(heap, t: torch.Tensor) -> bool:
    return heap.is_symmetric(t)


# -- collectives ------------------------------------------------------------------------------------


def all_reduce(tensor: torch.Tensor, op: str = "sum", *, heap=None, config: Config | None = None) -> torch.Tensor:
    """In place: every rank's ``tensor`` becomes ``op`` over all ranks' tensors (ranks combined in order).

    fp16/bf16 accumulate in fp32. Variants: ``one_shot`` (each rank stages its input, then reads
    every peer's copy and reduces all of it), ``two_shot`` (rank r reduces chunk r and writes it into every rank: each
    byte read once and written once), ``rs_ag`` (reduce-scatter into a workspace, then an
    all-gather by reads: only remote reads), ``auto`` (by world size and size: ``AUTO_VARIANTS``).
    Asynchronous: returns once the work is queued (``Config(blocking=True)`` waits).
    """
    heap = _heap(heap)
    key = _call_key(heap, "all_reduce", config, (op,), (tensor,))
    if _replay(heap, key, (tensor,)):
        return tensor
    layout = _check_tensor(tensor, "tensor", heap)
    code = _check_op(op, tensor.dtype)
    with _Launch(heap, config, "all_reduce", key, (tensor,)) as run:  # keeps the call's plan if it completes
        variant = run.cfg.variant
        n = tensor.numel()
        if variant == "auto":
            variant = _auto_variant(heap.world_size, n * tensor.element_size())
        if n == 0:
            _barrier(run, "all_reduce")
            return tensor
        flat = _flat(tensor)
        flags = {"OP": code, "W": heap.world_size, **_reduce_flags(tensor.dtype)}
        in_place = variant != "one_shot" and _on_heap(heap, tensor)
        buf = flat if in_place else run.staging("in", flat)
        mid = run.staging("out", flat) if variant == "rs_ag" else None
        run.describe("all_reduce", n, buf, mid, variant=variant, op=op, dtype=tensor.dtype, on_heap=(in_place,),
                     layout=layout)  # fmt: skip
        if not in_place:
            run.copy(buf, flat)
        if variant == "one_shot":
            run.run(run.k.one_shot_kernel, n, buf, flat, n, **flags)
            return tensor
        chunk = -(-n // heap.world_size)
        if variant == "two_shot":
            run.run(run.k.reduce_kernel, chunk, buf, buf, n, chunk, PUSH=True, DST_CHUNKED=True, **flags)
            if not in_place:
                run.copy(flat, buf)
            return tensor
        # rs_ag: reduce chunk `rank` into the workspace, then every rank reads every chunk.
        run.run(run.k.reduce_kernel, chunk, buf, mid, n, chunk, PUSH=False, DST_CHUNKED=True, **flags)
        src, dst = _words(mid), _words(flat)
        per = src.numel() // n  # words per element
        run.run(run.k.gather_kernel, chunk * per, src, dst, chunk * per, n * per, chunk * per, 0, chunk * per, heap.rank,
                COUNT=heap.world_size)  # fmt: skip
        return tensor


def all_gather(out: torch.Tensor, inp: torch.Tensor, *, heap=None, config: Config | None = None) -> torch.Tensor:
    """``out`` = every rank's ``inp`` concatenated along dim 0, in rank order.

    ``out`` has shape ``(W * inp.shape[0], *inp.shape[1:])`` (or ``(W, *inp.shape)``). With ``out``
    on the heap every rank stores its ``inp`` (read once, from anywhere on the device) straight
    into every rank's ``out``; otherwise ``inp`` is staged on the heap (unless it is there) and
    every rank reads every rank's input into its own ``out``.
    """
    heap = _heap(heap)
    key = _call_key(heap, "all_gather", config, (), (out, inp))
    if _replay(heap, key, (out, inp)):
        return out
    _check_tensor(out, "out", heap)
    layout = _check_tensor(inp, "inp", heap)
    _check_same_dtype(out, inp)
    w = heap.world_size
    cat = (w * inp.shape[0], *inp.shape[1:]) if inp.dim() else (w,)
    if tuple(out.shape) not in (cat, (w, *inp.shape)):
        raise ValueError(
            f"all_gather: out must have shape {cat} (or {(w, *inp.shape)}) for inp of shape {tuple(inp.shape)} and world size {w}; got {tuple(out.shape)}"
        )
    _check_chunks("all_gather", out, inp, "out", "inp")
    _check_disjoint(out, inp)
    with _Launch(heap, config, "all_gather", key, (out, inp)) as run:  # keeps the call's plan if it completes
        n = inp.numel()
        if n == 0:
            _barrier(run, "all_gather")
            return out
        fields = {"dtype": inp.dtype, "layout": layout}
        if _on_heap(heap, out):  # push: read the input once, store it into every rank's out
            run.describe("all_gather", n, out, variant="push", on_heap=(True, _on_heap(heap, inp)), **fields)
            src, dst = _words(inp), _words(out)
            m = src.numel()
            run.run(run.k.push_kernel, m, src, dst, m, heap.rank * m, W=w)
            return out
        flat = _flat(inp)
        src = _staged_input(run, heap, flat)  # pull: every rank reads every rank's input
        run.describe("all_gather", n, src, variant="pull", on_heap=(False, src is flat), **fields)
        if src is not flat:
            run.copy(src, flat)
        src, dst = _words(src), _words(out)
        m = src.numel()
        run.run(run.k.gather_kernel, m, src, dst, m, w * m, 0, 0, m, heap.rank, COUNT=w)
        return out


def reduce_scatter(
    out: torch.Tensor, inp: torch.Tensor, op: str = "sum", *, heap=None, config: Config | None = None
) -> torch.Tensor:
    """``out`` = ``op`` over ranks of chunk ``rank`` of ``inp`` (``inp`` is W equal chunks along dim 0)."""
    heap = _heap(heap)
    key = _call_key(heap, "reduce_scatter", config, (op,), (out, inp))
    if _replay(heap, key, (out, inp)):
        return out
    _check_tensor(out, "out", heap)
    layout = _check_tensor(inp, "inp", heap)
    _check_same_dtype(out, inp)
    code = _check_op(op, inp.dtype)
    w = heap.world_size
    if inp.dim() == 0 or inp.shape[0] % w:
        raise ValueError(f"reduce_scatter: inp's dim 0 ({tuple(inp.shape)}) must be divisible by the world size {w}")
    chunk_shape = (inp.shape[0] // w, *inp.shape[1:])
    if tuple(out.shape) != chunk_shape:
        raise ValueError(
            f"reduce_scatter: out must have shape {chunk_shape} for inp of shape {tuple(inp.shape)} and world size {w}; got {tuple(out.shape)}"
        )
    _check_chunks("reduce_scatter", inp, out, "inp", "out")
    _check_disjoint(out, inp)
    with _Launch(heap, config, "reduce_scatter", key, (out, inp)) as run:  # keeps the call's plan if it completes
        chunk = out.numel()
        if chunk == 0:
            _barrier(run, "reduce_scatter")
            return out
        flat = _flat(inp)
        src = _staged_input(run, heap, flat)
        run.describe("reduce_scatter", inp.numel(), src, op=op, dtype=inp.dtype, on_heap=(src is flat,), layout=layout)
        if src is not flat:
            run.copy(src, flat)
        flags = {"OP": code, "W": w, **_reduce_flags(inp.dtype)}
        run.run(run.k.reduce_kernel, chunk, src, _flat(out), w * chunk, chunk,
                PUSH=False, DST_CHUNKED=False, **flags)  # fmt: skip
        return out


def all_to_all(out: torch.Tensor, inp: torch.Tensor, *, heap=None, config: Config | None = None) -> torch.Tensor:
    """Chunk j of ``inp`` goes to rank j; chunk i of ``out`` came from rank i (W equal chunks along dim 0)."""
    heap = _heap(heap)
    key = _call_key(heap, "all_to_all", config, (), (out, inp))
    if _replay(heap, key, (out, inp)):
        return out
    _check_tensor(out, "out", heap)
    layout = _check_tensor(inp, "inp", heap)
    _check_same_dtype(out, inp)
    w = heap.world_size
    if inp.dim() == 0 or inp.shape[0] % w:
        raise ValueError(f"all_to_all: inp's dim 0 ({tuple(inp.shape)}) must be divisible by the world size {w}")
    if out.shape != inp.shape:
        raise ValueError(f"all_to_all: out must have inp's shape {tuple(inp.shape)}; got {tuple(out.shape)}")
    piece = inp[: inp.shape[0] // w]  # what one rank sends another
    _check_chunks("all_to_all", inp, piece, "inp", "inp")
    _check_chunks("all_to_all", out, piece, "out", "inp")
    _check_disjoint(out, inp)
    with _Launch(heap, config, "all_to_all", key, (out, inp)) as run:  # keeps the call's plan if it completes
        if inp.numel() == 0:
            _barrier(run, "all_to_all")
            return out
        flat = _flat(inp)
        src = _staged_input(run, heap, flat)
        run.describe("all_to_all", inp.numel(), src, dtype=inp.dtype, on_heap=(src is flat,), layout=layout)
        if src is not flat:
            run.copy(src, flat)
        words = _words(src)
        c = words.numel() // w
        run.run(run.k.gather_kernel, c, words, _words(out), c, w * c, 0, heap.rank * c, c, heap.rank, COUNT=w)
        return out


def broadcast(tensor: torch.Tensor, src: int, *, heap=None, config: Config | None = None) -> torch.Tensor:
    """In place: every rank's ``tensor`` becomes rank ``src``'s."""
    heap = _heap(heap)
    key = _call_key(heap, "broadcast", config, (src, type(src)), (tensor,))
    if _replay(heap, key, (tensor,)):
        return tensor
    layout = _check_tensor(tensor, "tensor", heap)
    if isinstance(src, bool) or not isinstance(src, int):
        raise TypeError(f"src must be an int rank, got {src!r}")
    if not 0 <= src < heap.world_size:
        raise ValueError(f"src rank {src} is out of range for world size {heap.world_size}")
    with _Launch(heap, config, "broadcast", key, (tensor,)) as run:  # keeps the call's plan if it completes
        if tensor.numel() == 0:
            _barrier(run, "broadcast")
            return tensor
        flat = _flat(tensor)
        data = flat if _on_heap(heap, tensor) else run.staging("in", flat)
        run.describe(
            "broadcast", tensor.numel(), data, dtype=tensor.dtype, on_heap=(data is flat,), src=src, layout=layout
        )
        if data is not flat and heap.rank == src:
            run.copy(data, flat)
        words = _words(data)
        n = words.numel()
        count = 0 if heap.rank == src else 1
        run.run(run.k.gather_kernel, n, words, _words(tensor), n, n, 0, 0, 0, src, COUNT=count)
        return tensor


def barrier(*, heap=None, config: Config | None = None) -> None:
    """Device-side barrier of every rank of the heap, in stream order (epoch counted).

    Asynchronous like every collective: a rank that never arrives is reported (without a host
    sync) by the next Iris call, ``heap.check_device_errors()`` or the heap's watchdog;
    ``Config(blocking=True)`` waits and raises at once. Only ``backend`` and ``blocking`` of
    ``config`` apply.
    """
    heap = _heap(heap)
    key = _call_key(heap, "barrier", config, (), ())
    if not _replay(heap, key, ()):
        with _Launch(heap, config, "barrier", key) as run:
            _barrier(run, "barrier")


def _barrier(run: _Launch, name: str) -> None:
    """The barrier kernel, described as ``name`` (an empty collective still pairs up with its peers')."""
    run.describe(name, 0)
    run.run(run.k.barrier_kernel, 1, programs=1)


def reset(*, heap=None) -> None:
    """Collective (host): make the collectives usable again after any of their errors.

    Every rank must call it. It waits for this rank's device work (a kernel still waiting gives up
    within ``heap.wait_timeout``) and for every rank, drops the errors the device recorded,
    forgets every epoch, gives back every staging buffer (so ranks whose staging diverged are
    symmetric again) and waits for every rank once more. CUDA graphs captured before it must not
    be replayed after it.
    """
    heap = _heap(heap)
    if heap.device.type == "cuda":
        torch.cuda.synchronize(heap.device)
    _drop_device_errors(heap)
    heap.barrier()  # every rank's device work is done and its errors dropped
    workspace_of(heap).reset()
    heap.barrier()  # the zeros have landed on every rank before any rank signals again


def _drop_device_errors(heap) -> None:
    while True:
        try:
            heap.check_device_errors()
            return
        except (iris.heap.HeapError, TimeoutError):
            continue


def _staged_input(run: _Launch, heap, inp: torch.Tensor) -> torch.Tensor:
    """``inp`` itself if peers can read it (it is on the heap), else its staging buffer (not yet filled)."""
    if _on_heap(heap, inp):
        return inp
    return run.staging("in", inp)
