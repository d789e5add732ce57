"""The collectives: what each one checks, stages, describes and launches (host code, both backends).

Each public function here reads as one call: its plan if an identical call ran before
(``iris.ccl.plans``), its argument checks (``iris.ccl.arguments``), then, inside a ``Call``
(``iris.ccl.call``), the buffers peers access, the description peers compare it with
(``iris.ccl.protocol``) and its kernels, with their arguments by name. Backends differ only in
their kernels (``_triton_kernels`` / ``_gluon_kernels``, the same signatures).
"""

from __future__ import annotations

import torch

import iris.heap
from iris.heap.log import get_logger

from . import custom_ops, plans
from .arguments import (
    check_all_gather,
    check_all_to_all,
    check_heap,
    check_op,
    check_pair,
    check_reduce_scatter,
    check_src,
    check_tensor,
    flat,
    words,
)
from .call import Call, Push, Staging
from .config import Config
from .protocol import REDUCE_OPS
from .tuning import all_reduce_auto
from .workspace import PUSH_BYTES, workspace_of

_log = get_logger("ccl")
#: True only while dynamo traces a call (torch.compile, strict torch.export): then each collective is
#: its ``torch.ops.iris`` op (``custom_ops``). Eager, a bound function that returns False: ~0.03 us
#: a call on the development CPU, where ``torch.compiler.is_compiling`` costs 0.13 (``custom_ops``).
_compiling = torch.compiler.is_dynamo_compiling

__all__ = ["all_reduce", "all_gather", "reduce_scatter", "all_to_all", "broadcast", "barrier", "reset"]

def _reduce_flags(op: str, world_size: int, dtype: torch.dtype) -> dict:
    """The reduction kernel's constexprs: the op's code, the world size it unrolls over, the accumulator."""
    return {"OP": REDUCE_OPS[op], "W": world_size, "ACC_F32": dtype in (torch.float16, torch.bfloat16),
            "IS_FLOAT": dtype.is_floating_point}  # fmt: skip


def _start(name: str, heap, config, extras: tuple, tensors: tuple, check=None, op: str | None = None,
           args: tuple = ()):  # fmt: skip
    """``(heap, call, layout)``: the checked heap, the ``Call`` (keyed for its plan by the arguments) and
    the tensors' memory order (one tensor's, or the pair's, which must agree); or None when the call
    is done: while dynamo traces it, as its ``torch.ops.iris`` op (``custom_ops``, given the tensors,
    then ``op`` or ``args``), when an identical call ran before and its plan was just launched again
    (``iris.ccl.plans``: no check runs twice), or when the input (the last tensor) has no elements:
    the call has then launched ``barrier()``, since it still pairs up with its peers' calls.
    ``check(*tensors, world_size)``: the collective's own checks, after the tensors' common ones;
    ``op``: a reduction's, checked against the dtype of the input (the last tensor) after them. The
    collective returns its tensor when this returns None (as the custom op does)."""
    if _compiling():
        getattr(custom_ops, name)(*tensors, *((op,) if op is not None else args), heap=heap, config=config)
        return None
    heap = check_heap(heap)
    if plans.replay_recent(heap, name, config, extras, tensors):
        return None
    key = plans.call_key(heap, name, config, extras, tensors)
    if plans.replay(heap, key, tensors):
        return None
    layout = check_tensor(tensors[0], "tensor", heap) if len(tensors) == 1 else check_pair(*tensors, heap)
    if check is not None:
        check(*tensors, heap.world_size)
    if op is not None:
        check_op(op, tensors[-1].dtype)
    call = Call(heap, config, name, key, tensors)
    if tensors[-1].numel() == 0:  # nothing to move, but the call still pairs up with its peers'
        with call:
            call.barrier()
        return None
    return heap, call, layout


def _source(call, inp: torch.Tensor, layout, on_heap: tuple = (), **fields) -> tuple:
    """``(buffer peers read, inp flat, staged)`` (``Call.source``), the call described by it:
    ``inp``'s elements and dtype, ``fields``, and whether it is ``inp`` itself after the ``on_heap``
    flags of the tensors before it."""
    data = flat(inp)
    src, staged = call.source(data)
    call.describe(inp.numel(), src, dtype=inp.dtype, on_heap=(*on_heap, src is data), layout=layout, **fields)
    return src, data, staged


def all_reduce(tensor: torch.Tensor, op: str = "sum", *, heap=None, config: Config | None = None) -> torch.Tensor:
    """In place: every rank's ``tensor`` becomes ``op`` over all ranks' tensors (ranks combined in order).

    fp16/bf16 accumulate in fp32. Variants: ``one_shot`` (each rank stages its input, then reads
    every peer's copy and reduces all of it), ``two_shot`` (rank r reduces chunk r and writes it into every rank: each
    byte read once and written once), ``rs_ag`` (reduce-scatter into a workspace, then an
    all-gather by reads: only remote reads), ``one_shot_push`` (at most ``PUSH_BYTES`` per rank:
    each rank stores its input into a slot of every rank's workspace and reduces its own slots;
    one meeting of the ranks instead of an entry and an exit, for small tensors anywhere on the
    device), ``auto`` (the variant measured fastest on this device kind at this world size and size:
    ``iris.ccl.tuning``).
    Asynchronous: returns once the work is queued (``Config(blocking=True)`` waits).
    """
    if (started := _start("all_reduce", heap, config, (op,), (tensor,), op=op)) is None:
        return tensor
    heap, call, layout = started
    with call:  # keeps the call's plan if it completes
        variant = call.config.variant
        n, w = tensor.numel(), heap.world_size
        if variant == "auto":
            variant = all_reduce_auto(n * tensor.element_size(), w, tensor.device)
        data = flat(tensor)
        if variant == "one_shot_push":
            _push_all_reduce(call, data, op, layout)
            return tensor
        in_place = variant != "one_shot" and heap.is_symmetric(tensor)
        buf = data if in_place else call.staging("in", data)
        mid = call.staging("out", data) if variant == "rs_ag" else None
        call.describe(n, buf, mid, variant=variant, op=op, dtype=tensor.dtype, on_heap=(in_place,), layout=layout)
        # A small staged call copies in (and back) inside its kernel, one launch instead of three.
        fold = not in_place and variant != "rs_ag" and call.folds(data)
        if not in_place and not fold:
            call.copy(buf, data)
        reduce = {"src": buf, "N": n, "user": data, **_reduce_flags(op, w, tensor.dtype)}  # user: if staged
        if variant == "one_shot":  # every element, from every rank's staged copy, into this rank's tensor
            call.launch(call.kernels.reduce_kernel, dst=data, chunk_index=0, chunk=n, PUSH=False, DST_CHUNKED=True,
                        COPY_BACK=False, staged=Staging.IN if fold else Staging.NONE, **reduce)  # fmt: skip
            return tensor
        chunk = -(-n // w)
        if variant == "two_shot":  # chunk `rank`, in place, pushed into every rank's copy
            call.launch(call.kernels.reduce_kernel, dst=buf, chunk_index=heap.rank, chunk=chunk, PUSH=True, DST_CHUNKED=True,
                    COPY_BACK=fold, staged=Staging.IN if fold else Staging.NONE, **reduce)  # fmt: skip
            if not in_place and not fold:
                call.copy(data, buf)
            return tensor
        # rs_ag: reduce chunk `rank` into the workspace, then every rank reads every chunk.
        call.launch(call.kernels.reduce_kernel, dst=mid, chunk_index=heap.rank, chunk=chunk, PUSH=False, DST_CHUNKED=True,
                COPY_BACK=False, staged=Staging.NONE, **reduce)  # fmt: skip
        src, dst = words(mid), words(data)
        per = src.numel() // n  # words per element
        call.launch(call.kernels.gather_kernel, src=src, dst=dst, piece=chunk * per, dst_numel=n * per, src_stride=chunk * per,
                piece_index=0, dst_stride=chunk * per, first_rank=heap.rank, RANKS=w, user=src, user_numel=0,
                staged=Staging.NONE)  # fmt: skip
        return tensor


def _push_all_reduce(call, data: torch.Tensor, op: str, layout: int) -> None:
    """all_reduce's ``one_shot_push`` variant: ``data`` (any memory of the device) through the
    workspace's push slots (``push_reduce_kernel``), in place."""
    nbytes = data.numel() * data.element_size()
    if nbytes > PUSH_BYTES:
        raise ValueError(
            f"all_reduce: variant 'one_shot_push' takes at most {PUSH_BYTES} bytes per rank (the workspace's push "
            f"slots), got {nbytes}; use 'two_shot' or 'auto' for larger tensors"
        )
    workspace = call.workspace
    slots, slot = workspace.push_slots(data.dtype)
    verified = workspace.push_verified
    if not verified:  # the first call compares the slots' offsets first: no plan keeps it
        call.plan = None
    call.describe(data.numel(), slots, variant="one_shot_push", op=op, dtype=data.dtype, on_heap=(False,),
                  layout=layout)  # fmt: skip
    call.launch(call.kernels.push_reduce_kernel, grid=1, num_warps=call.shape.warps, src=data, dst=data, slots=slots,
                N=data.numel(), slot=slot, verified=int(verified), BLOCK=_PUSH_BLOCK,
                **_reduce_flags(op, call.heap.world_size, data.dtype))  # fmt: skip
    workspace.push_verified = True


#: Elements a push_reduce_kernel tile holds (its one program walks the input BLOCK at a time).
_PUSH_BLOCK = 2048


def all_gather(out: torch.Tensor, inp: torch.Tensor, *, heap=None, config: Config | None = None) -> torch.Tensor:
    """``out`` = every rank's ``inp`` concatenated along dim 0, in rank order.

    ``out`` has shape ``(W * inp.shape[0], *inp.shape[1:])`` (or ``(W, *inp.shape)``). With ``out``
    on the heap every rank stores its ``inp`` (read once, from anywhere on the device) straight
    into every rank's ``out``; otherwise ``inp`` is staged on the heap (unless it is there) and
    every rank reads every rank's input into its own ``out``.
    """
    if (started := _start("all_gather", heap, config, (), (out, inp), check_all_gather)) is None:
        return out
    heap, call, layout = started
    with call:  # keeps the call's plan if it completes
        n, w = inp.numel(), heap.world_size
        if heap.is_symmetric(out):  # push: read the input once, store it into every rank's out
            call.describe(n, out, variant="push", on_heap=(True, heap.is_symmetric(inp)), dtype=inp.dtype, layout=layout)
            src = words(inp)
            m = src.numel()
            call.launch(call.kernels.push_kernel, src=src, dst=words(out), n=m, chunk_index=heap.rank, dst_numel=0,
                        src_rank=0, W=w, MODE=Push.SAME)  # fmt: skip
            return out
        src, data, staged = _source(call, inp, layout, (False,), variant="pull")  # every rank reads every input
        src = words(src)
        m = src.numel()
        call.launch(call.kernels.gather_kernel, src=src, dst=words(out), piece=m, dst_numel=w * m, src_stride=0, piece_index=0,
                dst_stride=m, first_rank=heap.rank, RANKS=w, user=words(data), user_numel=m, staged=staged)  # fmt: skip
        return out


def reduce_scatter(
    out: torch.Tensor, inp: torch.Tensor, op: str = "sum", *, heap=None, config: Config | None = None
) -> torch.Tensor:
    """``out`` = ``op`` over ranks of chunk ``rank`` of ``inp`` (``inp`` is W equal chunks along dim 0)."""
    if (started := _start("reduce_scatter", heap, config, (op,), (out, inp), check_reduce_scatter, op)) is None:
        return out
    heap, call, layout = started
    with call:  # keeps the call's plan if it completes
        chunk, w = out.numel(), heap.world_size
        src, data, staged = _source(call, inp, layout, op=op)
        call.launch(call.kernels.reduce_kernel, src=src, dst=flat(out), N=w * chunk, chunk_index=heap.rank, chunk=chunk,
                user=data, PUSH=False, DST_CHUNKED=False, COPY_BACK=False, staged=staged,
                **_reduce_flags(op, w, inp.dtype))  # fmt: skip
        return out


def all_to_all(out: torch.Tensor, inp: torch.Tensor, *, heap=None, config: Config | None = None) -> torch.Tensor:
    """Chunk j of ``inp`` goes to rank j; chunk i of ``out`` came from rank i (W equal chunks along dim 0)."""
    if (started := _start("all_to_all", heap, config, (), (out, inp), check_all_to_all)) is None:
        return out
    heap, call, layout = started
    with call:  # keeps the call's plan if it completes
        w = heap.world_size
        if heap.is_symmetric(out):  # push: chunk j of the input, read once where it is, into rank j's out
            call.describe(inp.numel(), out, variant="push", on_heap=(True, heap.is_symmetric(inp)), dtype=inp.dtype,
                          layout=layout)  # fmt: skip
            src = words(inp)
            call.launch(call.kernels.push_kernel, src=src, dst=words(out), n=src.numel() // w, chunk_index=heap.rank,
                        dst_numel=0, src_rank=0, W=w, MODE=Push.CHUNKS)  # fmt: skip
            return out
        src, data, staged = _source(call, inp, layout, (False,), variant="pull")  # every rank reads its chunks
        src = words(src)
        c = src.numel() // w
        call.launch(call.kernels.gather_kernel, src=src, dst=words(out), piece=c, dst_numel=w * c, src_stride=0,
                piece_index=heap.rank, dst_stride=c, first_rank=heap.rank, RANKS=w, user=words(data),
                user_numel=w * c, staged=staged)  # fmt: skip
        return out


def broadcast(tensor: torch.Tensor, src: int, *, heap=None, config: Config | None = None) -> torch.Tensor:
    """In place: every rank's ``tensor`` becomes rank ``src``'s."""
    started = _start(
        "broadcast", heap, config, (src, type(src)), (tensor,), lambda _, w: check_src(src, w), args=(src,)
    )
    if started is None:
        return tensor
    heap, call, layout = started
    with call:  # keeps the call's plan if it completes
        data = flat(tensor)
        if heap.is_symmetric(tensor):  # relay: rank r reads piece r of the root's tensor once, stores it into the rest
            call.describe(tensor.numel(), data, variant="push", dtype=tensor.dtype, on_heap=(True,), src=src,
                          layout=layout)  # fmt: skip
            buf = words(data)
            n, w = buf.numel(), heap.world_size
            piece = (n + w - 1) // w
            piece = (piece + 15) // 16 * 16  # whole 16 words: every rank's piece starts aligned
            call.launch(call.kernels.push_kernel, src=buf, dst=buf, n=piece, chunk_index=heap.rank, dst_numel=n,
                        src_rank=src, W=w, MODE=Push.RELAY)  # fmt: skip
            return tensor
        buf = call.staging("in", data)  # pull: every other rank reads the root's staging
        call.describe(tensor.numel(), buf, variant="pull", dtype=tensor.dtype, on_heap=(False,), src=src, layout=layout)
        staged = Staging.IN if heap.rank == src else Staging.NONE  # only the source's is read
        if staged and not call.folds(data):
            call.copy(buf, data)
            staged = Staging.NONE
        buf = words(buf)
        n = buf.numel()
        call.launch(call.kernels.gather_kernel, src=buf, dst=words(tensor), piece=n, dst_numel=n, src_stride=0, piece_index=0,
                dst_stride=0, first_rank=src, RANKS=0 if heap.rank == src else 1, user=words(data), user_numel=n,
                staged=staged)  # fmt: skip
        return tensor


def barrier(*, heap=None, config: Config | None = None) -> None:
    """Device-side barrier of every rank of the heap, in stream order (epoch counted).

    Asynchronous like every collective: a rank that never arrives is reported (without a host
    sync) by the next Iris call, ``heap.check_device_errors()`` or the heap's watchdog;
    ``Config(blocking=True)`` waits and raises at once. Only ``backend`` and ``blocking`` of
    ``config`` apply.
    """
    if _compiling():
        return custom_ops.barrier(heap=heap, config=config)
    heap = check_heap(heap)
    key = plans.call_key(heap, "barrier", config, (), ())
    if plans.replay(heap, key, ()):
        return
    with Call(heap, config, "barrier", key) as call:  # keeps the call's plan if it completes
        call.barrier()


def reset(*, heap=None) -> None:
    """Collective (host): make the collectives usable again after any of their errors.

    Every rank must call it. It waits for this rank's device work (a kernel still waiting gives up
    within ``heap.wait_timeout``) and for every rank, drops the errors the device recorded,
    forgets every epoch, gives back every staging buffer (so ranks whose staging diverged are
    symmetric again) and waits for every rank once more. CUDA graphs captured before it must not
    be replayed after it.
    """
    heap = check_heap(heap)
    _log.info("reset: waiting for this rank's device work")
    if heap.device.type == "cuda":
        torch.cuda.synchronize(heap.device)
    _drop_device_errors(heap)
    _log.info("reset: waiting for every rank (first barrier)")
    heap.barrier()  # every rank's device work is done and its errors dropped
    workspace_of(heap).reset()
    heap.barrier()  # the zeros have landed on every rank before any rank signals again
    _log.info("reset: done, the collectives are usable again")


def _drop_device_errors(heap) -> None:
    while True:
        try:
            heap.check_device_errors()
            return
        except (iris.heap.HeapError, TimeoutError) as e:
            _log.debug("reset: dropped a recorded error (%s: %s)", type(e).__name__, e)
            continue
