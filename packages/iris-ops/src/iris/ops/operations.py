"""The fused operations: what each one checks, stages, describes and launches (host code, both backends).

Each public function reads as one call: its argument checks (``iris.ops.arguments``), then,
inside an ``iris.ccl.call.Call`` (the collectives' own: the same readiness checks, description,
launch and failure path), the buffers peers access, the description (``iris.ops.description``)
and its one kernel, with its arguments by name. Backends differ only in their kernels
(``_triton_kernels`` / ``_gluon_kernels``, the same signatures) and launch options.

Every operation is asynchronous like a collective: it queues its work and returns. The result is
a new tensor, or ``out``; tensors peers must reach are the caller's own where they are heap
tensors laid out as the kernel needs (row-major), else the operation's staging in the heap's
reserved space (``iris.ccl.workspace``), copied from or into the caller's tensor in stream order.
"""

from __future__ import annotations

import contextvars
import dataclasses
import functools
import weakref

import torch

import iris.ccl as ccl
from iris.ccl import _internals
from iris.ccl.call import Call, kernels_of
from iris.ccl.launch_shape import one_per_multiprocessor

from . import chunked, custom_ops, description, reference
from .arguments import check_heap, check_op, check_operands, check_out, output_like
from .config import DEFAULT, Config, resolve, variant_of

__all__ = ["all_gather_matmul", "local_matmul", "matmul_all_gather", "matmul_all_reduce", "matmul_reduce_scatter"]

#: Alignment of the partials in the exchange buffer, after its flags.
_PARTIALS_ALIGN = 256
#: Programs of a launch on CPU ranks (the interpreter runs them one after another): two still check
#: that programs share the tiles and wait only for their own index on other ranks.
_CPU_PROGRAMS = 2
_FLAG_MARKS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # workspace -> (exchange buffer, flags' extent)
#: True only while dynamo traces a call (torch.compile, strict torch.export): then each operation is
#: its ``torch.ops.iris`` op (``custom_ops``). Eager, a bound function that returns False: ~0.03 us
#: a call on the development CPU, where ``torch.compiler.is_compiling`` costs 0.13 (``custom_ops``).
_compiling = torch.compiler.is_dynamo_compiling


def _unfused(name: str, config: Config | None, heap) -> ccl.Config | None:
    """The collective's ``Config`` where ``name`` runs unfused with ``config`` on ``heap``
    (``Config.variant``; ``iris.ops.reference``), else None (it runs its fused kernel)."""
    if variant_of(config, name, heap.device) != "unfused":
        return None
    cfg = config or DEFAULT
    return reference.collective_config(cfg.backend, cfg.blocking, cfg.trace)


def _chunked(name: str, config: Config | None, heap) -> tuple[int, ccl.Config] | None:
    """``(chunks, the collectives' Config)`` where ``name`` runs its chunked variant with ``config``
    on ``heap`` (``iris.ops.chunked``), else None."""
    if variant_of(config, name, heap.device) != "chunked":
        return None
    chunks = config.chunks or chunked.DEFAULT_CHUNKS["cuda" if heap.device.type == "cuda" else "cpu"]
    collective = reference.collective_config(config.backend, config.blocking, config.trace)
    if config.num_programs is not None:
        collective = dataclasses.replace(collective, num_programs=config.num_programs)
    return chunks, collective


def _kernels(backend: str):
    return kernels_of(backend, "iris.ops")


@functools.cache
def _target(device: torch.device):
    """The compile target of ``device``'s kernels (None on CPU ranks)."""
    if device.type != "cuda":
        return None
    import triton

    return triton.runtime.driver.active.get_current_target()


def _precision(dtype: torch.dtype) -> str | None:
    """fp32 products on tensor cores (TF32) only where torch's own matmul would use them."""
    if dtype != torch.float32:
        return None
    return "tf32" if torch.backends.cuda.matmul.allow_tf32 else "ieee"


class _Launch:
    """One operation's resolved configuration, programs and kernels on ``heap``: its output is
    ``blocks`` blocks of ``rows`` x ``n``, each cut into tiles that the programs deal among them."""

    def __init__(self, config: Config | None, a: torch.Tensor, heap, rows: int, n: int, blocks: int = 1):
        self.target = target = _target(heap.device)
        self.gpu = heap.device.type == "cuda"
        self.kernels = _kernels(config.backend if isinstance(config, Config) else "triton")
        self.dtype = a.dtype
        self.config = cfg = resolve(config, a.dtype, heap, path=self.kernels.product_path(target, a.dtype))
        if cfg.num_programs is not None:
            programs = cfg.num_programs
        elif heap.device.type == "cuda":  # every program of every rank on the GPU resident at once
            programs = one_per_multiprocessor(heap.device, heap.ranks_per_device)
        else:
            programs = _CPU_PROGRAMS
        tiles = blocks * -(-rows // cfg.block_m) * -(-n // cfg.block_n)
        self.programs = max(1, min(programs, tiles))
        self.options = self.kernels.launch_options(cfg, a.dtype, target)
        self.constexprs = dict(BLOCK_M=cfg.block_m, BLOCK_N=cfg.block_n, BLOCK_K=cfg.block_k, GROUP_M=cfg.group_m,
                               PRECISION=_precision(a.dtype))  # fmt: skip

    def describe(self, call: Call, rows: int, k: int, n: int, a_buffer=None, b_buffer=None, **fields) -> None:
        """The call's description (``iris.ops.description``): ``rows`` of a, K, N, the buffers peers access."""
        cfg = self.config
        tiles = description.tiles_code(cfg.block_m, cfg.block_n, cfg.block_k, cfg.group_m)
        call.describe(rows, a_buffer, b_buffer, shape=description.shape_word(k, n), dtype=self.dtype,
                      src=tiles, layout=self.programs, **fields)  # fmt: skip

    def modes(self, a: torch.Tensor, b: torch.Tensor, row_step: int | None = None) -> dict:
        """How the kernel reads ``a`` and ``b`` (the backend's ``operand_modes``: TMA descriptors
        where the Triton backend runs on Hopper and their layout allows); ``row_step``: the rows
        between the first rows of ``a``'s tiles (``block_m`` unless a kernel offsets them)."""
        step = self.config.block_m if row_step is None else row_step
        return self.kernels.operand_modes(self.target, self.config, a, b, step)

    def run(self, call: Call, kernel, row_step: int | None = None, **arguments) -> None:
        """Launch ``kernel`` (persistent: this launch's programs) with ``arguments`` and the tiling."""
        params = _params(kernel)
        modes = self.modes(arguments["a"], arguments["b"], row_step)
        extra = {**self.constexprs, **self.options}
        launch = functools.partial(call.launch, kernel, grid=self.programs, num_warps=self.config.num_warps,
                                   options={k: v for k, v in extra.items() if k not in params},
                                   **{k: v for k, v in extra.items() if k in params}, **modes, **arguments)  # fmt: skip
        _with_scratch(launch, self.gpu and any(modes.values()))


def _scratch(size: int, alignment: int, stream) -> torch.Tensor:
    """Global memory a kernel asks for at launch (Triton's allocator protocol): the TMA
    descriptors that the Triton kernels build on the device, 128 bytes each a program. A block of
    torch's caching allocator on the current stream, so it is reused only after the kernel."""
    return torch.empty(size, dtype=torch.int8, device=torch.cuda.current_device())


def _with_scratch(launch, needed: bool) -> None:
    """``launch()``, with ``_scratch`` as Triton's allocator where ``needed``: in a copy of the
    caller's context (Triton keeps its allocator in a context variable), so the caller's own
    allocator, if any, is left as it was."""
    if not needed:
        launch()
        return

    def run():
        import triton

        triton.set_allocator(_scratch)
        launch()

    contextvars.copy_context().run(run)


@functools.cache
def _params(kernel) -> frozenset:
    return frozenset(name for name, _, _ in _internals.parameters(kernel))


def _heap_buffer(heap, t: torch.Tensor) -> bool:
    """Whether peers can use ``t`` in place: a row-major heap tensor (peers address it with their
    own strides, which are then the same)."""
    return heap.is_symmetric(t) and t.is_contiguous()


def _exchange(workspace, tiles: int, numel: int, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    """This rank's exchange buffer for a reduction: ``(flags, partials)``, one FLAGS-wide row of
    int64 flags per tile of a group, then ``numel`` partial elements.

    The flags come first and their region only grows (its high-water mark is kept per buffer), so
    a flag word never sits where an earlier call's partials were: a value left there could pass
    for a current epoch. Bytes that join the region are zeroed here, before this rank's entry in
    stream order, so before any peer may signal into them. A buffer the workspace reserves anew
    holds zeros already (``heap.reserve``).
    """
    role = "ops.exchange"
    old = workspace.staging_buffer(role)
    kept = _FLAG_MARKS.get(workspace)
    mark = kept[1] if kept is not None and kept[0] is old else 0
    flags_bytes = tiles * workspace.flags * 8
    start = -(-max(mark, flags_bytes) // _PARTIALS_ALIGN) * _PARTIALS_ALIGN
    nbytes = numel * torch.empty((), dtype=dtype).element_size()
    exchange = workspace.staging_bytes(role, start + nbytes)
    buffer = workspace.staging_buffer(role)
    if buffer is old and start > mark:
        exchange[mark:start].zero_()
    _FLAG_MARKS[workspace] = (buffer, max(mark, start) if buffer is old else start)
    flags = exchange[:flags_bytes].view(torch.int64)
    workspace.name_flags("partial tiles", flags)
    return flags, exchange[start : start + nbytes].view(dtype)


def _staging(call: Call, role: str, shape: tuple[int, int], dtype: torch.dtype) -> torch.Tensor:
    """The operation's reserved buffer for ``role``, viewed as a row-major ``shape`` of ``dtype``."""
    return call.staging(f"ops.{role}", torch.empty(shape, dtype=dtype, device="meta"))


def all_gather_matmul(a: torch.Tensor, b: torch.Tensor, *, out: torch.Tensor | None = None,
                      return_gathered: bool = False, heap=None, config: Config | None = None):  # fmt: skip
    """``cat_r(a_r) @ b``: every rank's rows of ``a`` gathered, times ``b``, on every rank.

    ``a``: this rank's rows (m x K, the same m on every rank); ``b``: K x N; the result: W*m x N
    (``out`` if given). The sequence-parallel input of a column-parallel linear layer. Unfused, it
    is ``all_gather`` of ``a`` then ``torch.matmul`` (``iris.ops.reference.all_gather_matmul``).

    Every rank reads the A tiles of rank s's rows straight from rank s's ``a`` inside its GEMM's
    K loop, its own rows first, so no gathered copy of ``a`` is made unless asked for:
    ``return_gathered=True`` returns ``(cat_r(a_r), c)``, as torch's ``fused_all_gather_matmul``
    does (the gathered rows are stored as they are read). ``a`` is read in place where it is a
    row-major heap tensor on every rank, else copied into the operation's staging first.
    """
    if _compiling():
        return custom_ops.all_gather_matmul(a, b, out=out, return_gathered=return_gathered, heap=heap, config=config)
    heap = check_heap(heap)
    check_operands("all_gather_matmul", a, b, heap)
    if not isinstance(return_gathered, bool):
        raise TypeError(f"return_gathered must be True or False, got {return_gathered!r}")
    w = heap.world_size
    (m, k), n = a.shape, b.shape[1]
    out = check_out("all_gather_matmul", out, (w * m, n), a, heap, a, b)
    if (unfused := _unfused("all_gather_matmul", config, heap)) is not None:
        return reference.all_gather_matmul(a, b, out=out, return_gathered=return_gathered, heap=heap, config=unfused)
    gathered = output_like((w * m, k), a) if return_gathered else None
    if (split := _chunked("all_gather_matmul", config, heap)) is not None:
        chunked.all_gather_matmul(a, b, out, gathered, heap, *split)
        return out if gathered is None else (gathered, out)
    launch = _Launch(config, a, heap, m, n, blocks=w)
    if m * n == 0:  # no product to compute; the gathered rows (if any) by the collective alone
        if gathered is not None and gathered.numel():
            ccl.all_gather(gathered, a, heap=heap, config=ccl.Config(backend=launch.config.backend,
                                                                       blocking=launch.config.blocking))  # fmt: skip
        else:
            with Call(heap, launch.config, "all_gather_matmul", kernels=launch.kernels) as call:
                call.barrier()  # a call of nothing still pairs up with its peers' calls
        return out if gathered is None else (gathered, out)
    with Call(heap, launch.config, "all_gather_matmul", kernels=launch.kernels) as call:
        source = a if _heap_buffer(heap, a) else _staging(call, "a", (m, k), a.dtype)
        if source is not a:
            call.copy(source, a)
        launch.describe(call, m, k, n, source, variant="pull", on_heap=(source is a,))
        g = gathered if gathered is not None else out
        launch.run(call, launch.kernels.all_gather_matmul_kernel, a=source, b=b, c=out, g=g, m=m, N=n, K=k,
                   stride_am=source.stride(0), stride_ak=source.stride(1), stride_bk=b.stride(0),
                   stride_bn=b.stride(1), stride_cm=out.stride(0), stride_cn=out.stride(1), stride_gm=g.stride(0),
                   stride_gk=g.stride(1), GATHER=gathered is not None)  # fmt: skip
    return out if gathered is None else (gathered, out)


def matmul_all_gather(a: torch.Tensor, b: torch.Tensor, *, out: torch.Tensor | None = None, heap=None,
                      config: Config | None = None) -> torch.Tensor:  # fmt: skip
    """``c[:, r*n : (r+1)*n] = a_r @ b_r`` on every rank: every rank's product, side by side.

    ``a``: M x K (the same M and K on every rank); ``b``: this rank's K x n columns; the result:
    M x W*n. The GEMM of a column-parallel linear layer whose output every rank needs whole.
    Unfused, it is ``torch.matmul`` then ``all_gather`` of the products and a permute
    (``iris.ops.reference.matmul_all_gather``).

    ``out`` may also be W x M x n: the products stacked, ``out[r] = a_r @ b_r`` (what an
    ``all_gather`` of the products gives, with no permute; every rank must pass the same form).

    Each finished tile is stored into every rank's result at once (the next rank first), while
    the next tile is computed. The result is written in place where ``out`` is a row-major heap
    tensor on every rank, else into the operation's staging and copied into the result after the
    kernel (in stream order).
    """
    if _compiling():
        return custom_ops.matmul_all_gather(a, b, out=out, heap=heap, config=config)
    heap = check_heap(heap)
    check_operands("matmul_all_gather", a, b, heap)
    w = heap.world_size
    (m, k), n = a.shape, b.shape[1]
    stacked = isinstance(out, torch.Tensor) and out.dim() == 3
    shape = (w, m, n) if stacked else (m, w * n)
    out = check_out("matmul_all_gather", out, shape, a, heap, a, b)
    if (unfused := _unfused("matmul_all_gather", config, heap)) is not None:
        return reference.matmul_all_gather(a, b, out=out, heap=heap, config=unfused)
    if (split := _chunked("matmul_all_gather", config, heap)) is not None:
        return chunked.matmul_all_gather(a, b, out, heap, *split)
    launch = _Launch(config, a, heap, m, n)
    with Call(heap, launch.config, "matmul_all_gather", kernels=launch.kernels) as call:
        if m * n == 0:
            call.barrier()  # a call of nothing still pairs up with its peers' calls
            return out
        target = out if _heap_buffer(heap, out) else _staging(call, "out", shape, a.dtype)
        launch.describe(call, m, k, n, target, variant="push stacked" if stacked else "push", on_heap=(target is out,))
        if stacked:  # rank r's block starts at target[r]
            stride_cr, stride_cm, stride_cn = target.stride()
        else:  # rank r's block starts at column r*n
            (stride_cm, stride_cn), stride_cr = target.stride(), n * target.stride(1)
        launch.run(call, launch.kernels.matmul_all_gather_kernel, a=a, b=b, c=target, M=m, N=n, K=k,
                   stride_am=a.stride(0), stride_ak=a.stride(1), stride_bk=b.stride(0), stride_bn=b.stride(1),
                   stride_cm=stride_cm, stride_cn=stride_cn, stride_cr=stride_cr)  # fmt: skip
        if target is not out:
            call.copy(out, target)
    return out


def matmul_reduce_scatter(a: torch.Tensor, b: torch.Tensor, op: str = "sum", *, out: torch.Tensor | None = None,
                          heap=None, config: Config | None = None) -> torch.Tensor:  # fmt: skip
    """Rows ``[rank*M/W, (rank+1)*M/W)`` of ``op`` over ranks of ``a_r @ b_r``, on each rank.

    ``a``: M x k (W divides M), ``b``: k x N, this rank's slices of the inner dimension; the
    result: M/W x N (``out`` if given). The row-parallel linear layer whose output is scattered by
    rows. ``op``: ``sum``, ``avg``, ``max`` or ``min``, over ranks in rank order (fp32, rounded
    once). Unfused, it is ``torch.matmul`` then ``reduce_scatter`` (``iris.ops.reference``), and
    it rounds alike: each rank's product is rounded to the dtype before ranks are combined.

    Each rank computes each output tile's partials for every group of rows, the next ranks'
    first and its own last; each partial tile goes to the rank that owns its rows while the next
    is computed, and an owner reduces a tile as soon as it has computed its own partial of it and
    every rank's has arrived (so reductions run all through the kernel, not at its end).
    """
    if _compiling():
        return custom_ops.matmul_reduce_scatter(a, b, op, out=out, heap=heap, config=config)
    return _matmul_reduce("matmul_reduce_scatter", a, b, op, out, heap, config)


def matmul_all_reduce(a: torch.Tensor, b: torch.Tensor, op: str = "sum", *, out: torch.Tensor | None = None,
                      heap=None, config: Config | None = None) -> torch.Tensor:  # fmt: skip
    """``op`` over ranks of ``a_r @ b_r`` on every rank, bitwise the same on every rank.

    ``a``: M x k, ``b``: k x N (this rank's slices of the inner dimension); the result: M x N
    (``out`` if given). Unfused, it is ``torch.matmul`` then ``all_reduce``
    (``iris.ops.reference``). As ``matmul_reduce_scatter``, with rows split as evenly as they go
    (W need not divide M), and each reduced tile stored into every rank's result by the rank that
    reduced it. The result is written in place where ``out`` is a row-major heap tensor on every
    rank, else into the operation's staging and copied into the result after the kernel.
    """
    if _compiling():
        return custom_ops.matmul_all_reduce(a, b, op, out=out, heap=heap, config=config)
    return _matmul_reduce("matmul_all_reduce", a, b, op, out, heap, config)


def _matmul_reduce(name: str, a, b, op, out, heap, config) -> torch.Tensor:
    heap = check_heap(heap)
    check_operands(name, a, b, heap)
    code = check_op(op, a.dtype)
    w = heap.world_size
    (m, k), n = a.shape, b.shape[1]
    reduce_scatter = name == "matmul_reduce_scatter"
    if reduce_scatter and m % w:
        raise ValueError(f"{name}: a's rows ({m}) must split evenly over the world size {w} (each rank gets M/W)")
    rows = m // w if reduce_scatter else -(-m // w)
    out = check_out(name, out, (rows, n) if reduce_scatter else (m, n), a, heap, a, b)
    if (unfused := _unfused(name, config, heap)) is not None:
        return getattr(reference, name)(a, b, op, out=out, heap=heap, config=unfused)
    if (split := _chunked(name, config, heap)) is not None:
        return getattr(chunked, name)(a, b, op, out, heap, *split)
    launch = _Launch(config, a, heap, rows, n)
    with Call(heap, launch.config, name, kernels=launch.kernels) as call:
        if m * n == 0:
            call.barrier()  # a call of nothing still pairs up with its peers' calls
            return out
        cfg = launch.config
        tiles = -(-rows // cfg.block_m) * -(-n // cfg.block_n)
        flags, partials = _exchange(call.workspace, tiles, w * rows * n, a.dtype)
        if reduce_scatter:
            target = out
        else:
            target = out if _heap_buffer(heap, out) else _staging(call, "out", (m, n), a.dtype)
        launch.describe(call, m, k, n, partials, None if reduce_scatter else target, op=op,
                        on_heap=(False, not reduce_scatter and target is out))  # fmt: skip
        launch.run(call, launch.kernels.matmul_reduce_kernel, row_step=rows, a=a, b=b, out=target, partials=partials,
                   flags=flags, M=m, N=n, K=k, rows=rows, stride_am=a.stride(0), stride_ak=a.stride(1),
                   stride_bk=b.stride(0), stride_bn=b.stride(1), stride_om=target.stride(0),
                   stride_on=target.stride(1), OP=code, ALL_REDUCE=not reduce_scatter, W=w)  # fmt: skip
        if target is not out:
            call.copy(out, target)
    return out


def local_matmul(a: torch.Tensor, b: torch.Tensor, *, out: torch.Tensor | None = None, heap=None,
                 config: Config | None = None) -> torch.Tensor:  # fmt: skip
    """``a @ b`` on this rank alone, by the operations' GEMM core (the same persistent tiling and
    product as the fused operations, with every store local and no synchronization with peers).

    A baseline, not a collective: what the fused operations' computation costs without their
    communication (``ops-bench`` compares it with ``torch.matmul``). Programs default to the
    fused operations' share of the GPU, so the two are comparable."""
    heap = check_heap(heap)
    check_operands("local_matmul", a, b, heap)
    (m, k), n = a.shape, b.shape[1]
    out = check_out("local_matmul", out, (m, n), a, heap, a, b)
    if m * n == 0:
        return out
    launch = _Launch(config, a, heap, m, n)
    kernel, modes = launch.kernels.matmul_kernel, launch.modes(a, b)
    _with_scratch(functools.partial(kernel[(launch.programs,)], a, b, out, m, n, k, a.stride(0), a.stride(1),
                                    b.stride(0), b.stride(1), out.stride(0), out.stride(1),
                                    num_warps=launch.config.num_warps, **launch.constexprs, **launch.options,
                                    **modes), launch.gpu and any(modes.values()))  # fmt: skip
    return out
