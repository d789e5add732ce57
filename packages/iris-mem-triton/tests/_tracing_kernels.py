"""The Triton kernels of the tracing suite (iris.testing.mem.tracing, which test_triton_tracing runs;
imported in the ranks, once TRITON_INTERPRET is settled).

``traced_kernel`` records, in every program, N intervals around a read-modify-write of its own
counter and then one instant; with ``FREE=True`` it uses the free functions of
``iris.mem.triton.tracing`` instead of the ``Tracing`` aggregate, so the tests cover both APIs.
``untraced_kernel`` is the same kernel without tracing: with ``TRACE=False`` the traced kernel
must compile to exactly it. ``barrier_instant_kernel`` records an instant right after a
device-side barrier of every rank (the clock alignment measurement on GPUs).
"""

import triton
import triton.language as tl
from triton.compiler import ASTSource

from iris.mem.triton import Context, Tracing
from iris.mem.triton import tracing as trc

#: What iris.testing.mem.lowering.compile_one needs of a kernels module.
NUM_WARPS = 4
SOURCE = ASTSource


@triton.jit
def traced_kernel(counts, context_ptr, EVENT: tl.constexpr, INSTANT: tl.constexpr, N: tl.constexpr,
                  TRACE: tl.constexpr, FREE: tl.constexpr):  # fmt: skip
    """counts[program] += N; interval i targets rank (rank + i) % W with 8 * (i + 1) bytes; then an
    instant targeting this rank with 0 bytes. The program is its (x, y) grid position, flattened."""
    ctx = Context.initialize(context_ptr)
    tr = Tracing.initialize(context_ptr, TRACE)
    if FREE:
        buffer, capacity, rank = trc.trace_state(context_ptr)
    pid = tl.program_id(0) + tl.num_programs(0) * tl.program_id(1)
    for i in tl.static_range(N):
        target = (ctx.rank + i) % ctx.world_size
        if FREE:
            h = trc.record_start(buffer, capacity, rank, EVENT, target, 8 * (i + 1))
        else:
            h = tr.record_start(EVENT, target, 8 * (i + 1))
        tl.store(counts + pid, tl.load(counts + pid) + 1)
        if FREE:
            trc.record_end(buffer, capacity, h)
        else:
            tr.record_end(h)
    if FREE:
        trc.record_instant(buffer, capacity, rank, INSTANT, ctx.rank, 0)
    else:
        tr.record_instant(INSTANT, ctx.rank, 0)


@triton.jit
def untraced_kernel(counts, context_ptr, EVENT: tl.constexpr, INSTANT: tl.constexpr, N: tl.constexpr,
                    TRACE: tl.constexpr, FREE: tl.constexpr):  # fmt: skip
    """``traced_kernel`` without its tracing."""
    ctx = Context.initialize(context_ptr)
    pid = tl.program_id(0) + tl.num_programs(0) * tl.program_id(1)
    for i in tl.static_range(N):
        target = (ctx.rank + i) % ctx.world_size  # noqa: F841 - as in the traced kernel
        tl.store(counts + pid, tl.load(counts + pid) + 1)


@triton.jit
def barrier_instant_kernel(flags, context_ptr, EVENT: tl.constexpr):
    """Every rank adds 1 to every rank's flag, waits until its own flag counts every rank, then
    records an instant: the ranks' instants are one barrier release apart."""
    ctx = Context.initialize(context_ptr)
    tr = Tracing.initialize(context_ptr, True)
    for r in range(ctx.world_size):
        ctx.atomic_add(flags, 1, r)
    ctx.wait(flags, ctx.world_size, ">=")
    tr.record_instant(EVENT, ctx.rank, 0)
