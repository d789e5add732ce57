"""The Gluon kernels of the tracing suite (iris.testing.mem.tracing; imported in the ranks, once
TRITON_INTERPRET is settled): the Gluon twins of iris-mem-triton's ``_tracing_kernels``.

``traced_kernel`` records, in every program, N intervals around a read-modify-write of its own
counter and then one instant; with ``FREE=True`` through the free functions of
``iris.mem.gluon.tracing`` instead of the ``Tracing`` aggregate. ``untraced_kernel`` is it without
tracing: with ``TRACE=False`` the traced kernel must compile to exactly it.
``barrier_instant_kernel`` records an instant right after a device-side barrier of every rank (the
clock alignment on GPUs). All scalar code: no layouts.
"""

from triton.experimental import gluon
from triton.experimental.gluon import language as gl

import iris.mem.gluon as img
from iris.mem.gluon import Context, GluonASTSource, Tracing
from iris.mem.gluon import tracing as trc

#: What iris.testing.mem.lowering.compile_one needs of a kernels module.
NUM_WARPS = 4
SOURCE = GluonASTSource


@img.interpret()
@gluon.jit
def traced_kernel(counts, context_ptr, EVENT: gl.constexpr, INSTANT: gl.constexpr, N: gl.constexpr,
                  TRACE: gl.constexpr, FREE: gl.constexpr):  # fmt: skip
    """counts[program] += N; interval i targets rank (rank + i) % W with 8 * (i + 1) bytes; then an
    instant targeting this rank with 0 bytes. The program is its (x, y) grid position, flattened."""
    ctx = Context.initialize(context_ptr)
    tr = Tracing.initialize(context_ptr, TRACE)
    if FREE:
        buffer, capacity, rank = trc.trace_state(context_ptr)
    pid = gl.program_id(0) + gl.num_programs(0) * gl.program_id(1)
    for i in gl.static_range(N):
        target = (ctx.rank + i) % ctx.world_size
        if FREE:
            h = trc.record_start(buffer, capacity, rank, EVENT, target, 8 * (i + 1))
        else:
            h = tr.record_start(EVENT, target, 8 * (i + 1))
        gl.store(counts + pid, gl.load(counts + pid) + 1)
        if FREE:
            trc.record_end(buffer, capacity, h)
        else:
            tr.record_end(h)
    if FREE:
        trc.record_instant(buffer, capacity, rank, INSTANT, ctx.rank, 0)
    else:
        tr.record_instant(INSTANT, ctx.rank, 0)


@img.interpret()
@gluon.jit
def untraced_kernel(counts, context_ptr, EVENT: gl.constexpr, INSTANT: gl.constexpr, N: gl.constexpr,
                    TRACE: gl.constexpr, FREE: gl.constexpr):  # fmt: skip
    """``traced_kernel`` without its tracing."""
    ctx = Context.initialize(context_ptr)
    pid = gl.program_id(0) + gl.num_programs(0) * gl.program_id(1)
    for i in gl.static_range(N):
        target = (ctx.rank + i) % ctx.world_size  # noqa: F841 - as in the traced kernel
        gl.store(counts + pid, gl.load(counts + pid) + 1)


@img.interpret()
@gluon.jit
def barrier_instant_kernel(flags, context_ptr, EVENT: gl.constexpr):
    """Every rank adds 1 to every rank's flag, waits until its own flag counts every rank, then
    records an instant: the ranks' instants are one barrier release apart."""
    ctx = Context.initialize(context_ptr)
    tr = Tracing.initialize(context_ptr, True)
    for r in range(ctx.world_size):
        ctx.atomic_add(flags, 1, r)
    ctx.wait(flags, ctx.world_size, ">=")
    tr.record_instant(EVENT, ctx.rank, 0)
