"""The chunked variant: ``torch.matmul`` and the ``iris.ccl`` collective by row chunks, on two
streams, so that one chunk's collective runs beside the next chunk's GEMM.

Every operation with ``Config(variant="chunked")``: the rows are cut into ``chunks`` chunks
(``Config.chunks``; fewer where there are fewer rows, the first ones a row longer where they do
not split evenly). The reductions multiply chunk ``s`` on the caller's stream into a heap buffer
and queue its collective (``reduce_scatter`` of the chunk's rows of every rank's block, or
``all_reduce`` of the chunk) on a side stream once the product is ready, so it runs while chunk
``s+1`` is multiplied; ``matmul_all_gather`` does the same with ``all_gather`` of the products.
``all_gather_matmul`` turns it around: the side stream gathers chunk ``s`` of every rank's rows
while the caller's stream multiplies chunk ``s-1``. The collective's memory traffic then overlaps
cuBLAS's computation, and the operation approaches the longer of the two rather than their sum
(the unfused variant's), with cuBLAS's GEMM whole (the fused kernels' own GEMM core is slower).
On CPU ranks there are no streams and the chunks run one after the other (the same results).

Each chunk's buffers are heap buffers taken in turns (the staging roles ``ops.chunked.<n>``), so
the collectives move them in place; a chunk waits for the step two chunks before it, the last user
of its buffer (a collective's exit sees every peer done with its buffers, and peers store into a
rank's buffer only once that rank has entered). The side stream starts after the caller's earlier
work and the caller's stream waits for the side stream's last collective, so collectives keep one
order on every rank (the protocol's epochs follow stream order) and the result is ready in the
caller's stream order, as with every operation.

Rounding is the unfused variant's: each product rounded to the dtype, ranks combined in rank
order in fp32. A chunk's GEMM may take another cuBLAS algorithm than the whole product's, so the
bits can differ from the unfused variant's where the GEMMs' do; every rank gets the same bits from
``matmul_all_reduce``. Every rank must run the same variant with the same chunks: otherwise the
collectives differ and the call raises ``CollectiveMismatchError`` on every rank.
"""

from __future__ import annotations

import contextlib

import torch

import iris.ccl as ccl

from . import reference

__all__ = ["DEFAULT_CHUNKS", "all_gather_matmul", "bounds", "matmul_all_gather", "matmul_all_reduce", "matmul_reduce_scatter"]

#: Chunks per call where ``Config.chunks`` is None: on a GPU, enough that the last chunk's
#: collective (the part that overlaps nothing) is a quarter of the whole; two on CPU ranks.
DEFAULT_CHUNKS = {"cuda": 4, "cpu": 2}

_SIDE: dict = {}  # device -> the side stream of the chunks' collectives


def bounds(rows: int, chunks: int) -> list[tuple[int, int]]:
    """``[start, stop)`` of each of ``min(chunks, rows)`` chunks of ``rows`` rows, as even as they go
    (the first chunks one row longer); one empty chunk where ``rows`` is 0."""
    count = max(1, min(chunks, rows))
    size, extra = divmod(rows, count)
    out, start = [], 0
    for i in range(count):
        stop = start + size + (i < extra)
        out.append((start, stop))
        start = stop
    return out


class _Streams:
    """The caller's stream and the side stream of the collectives (GPU), or no streams at all (CPU
    ranks: everything runs in program order). ``collective()`` enters the side stream; ``side_waits()``
    / ``main_waits()`` order one stream after the other's work so far; ``done(s)`` marks step ``s``
    on the stream that runs it (``on_side``), and ``after(s)`` makes the other stream wait for it."""

    def __init__(self, device: torch.device):
        self.gpu = device.type == "cuda"
        self.marks: dict[int, torch.cuda.Event] = {}
        if self.gpu:
            self.main = torch.cuda.current_stream(device)
            if device not in _SIDE:
                _SIDE[device] = torch.cuda.Stream(device)
            self.side = _SIDE[device]
            self.side.wait_stream(self.main)  # the caller's earlier work, collectives included, first

    def collective(self):
        return torch.cuda.stream(self.side) if self.gpu else contextlib.nullcontext()

    def keep(self, t: torch.Tensor) -> None:
        """``t``, made on the caller's stream, is also used on the side stream (its memory is not
        handed out again before the side stream is done with it)."""
        if self.gpu:
            t.record_stream(self.side)

    def side_waits(self) -> None:
        if self.gpu:
            self.side.wait_stream(self.main)

    def main_waits(self) -> None:
        if self.gpu:
            self.main.wait_stream(self.side)

    def done(self, s: int, on_side: bool) -> None:
        if self.gpu:
            event = torch.cuda.Event()
            event.record(self.side if on_side else self.main)
            self.marks[s] = (event, on_side)

    def after(self, s: int) -> None:
        """The stream that did not run step ``s`` waits for it (nothing where there is no step ``s``)."""
        if self.gpu and s in self.marks:
            event, on_side = self.marks.pop(s)
            (self.main if on_side else self.side).wait_event(event)


def _buffer(heap, turn: int, shape: tuple[int, ...], dtype: torch.dtype) -> torch.Tensor:
    """Heap buffer ``turn`` (0 and 1 taken in turns; 2 and 3 beside them), a row-major ``shape``
    of ``dtype`` (the staging role ``ops.chunked.<turn>``)."""
    return reference._staging(heap, shape, dtype, f"ops.chunked.{turn}")


def matmul_reduce_scatter(a, b, op, out, heap, chunks: int, config: ccl.Config) -> torch.Tensor:
    """``out`` (M/W x N) = rows ``rank`` of ``op`` over ranks of ``a @ b``, chunk by chunk: chunk
    ``[s0, s1)`` of every rank's block of rows is multiplied into a W x (s1 - s0) x N buffer and
    reduce-scattered into ``out[s0:s1]``."""
    w, n = heap.world_size, b.shape[1]
    rows = a.shape[0] // w
    blocks = a.unflatten(0, (w, rows))  # a view whatever a's strides: W blocks of rows
    streams = _Streams(heap.device)
    target = out
    if not out.is_contiguous():
        target = torch.empty(out.shape, dtype=out.dtype, device=out.device)
        streams.keep(target)
    for s, (s0, s1) in enumerate(bounds(rows, chunks)):
        buf = _buffer(heap, s % 2, (w, s1 - s0, n), a.dtype)
        streams.after(s - 2)  # the collective that last read this buffer
        torch.bmm(blocks[:, s0:s1], b.expand(w, *b.shape), out=buf)  # one batched GEMM, no copy of a
        streams.side_waits()
        with streams.collective():
            ccl.reduce_scatter(target[s0:s1], buf.view(w * (s1 - s0), n), op, heap=heap, config=config)
        streams.done(s, on_side=True)
    streams.main_waits()
    return out if target is out else out.copy_(target)


def matmul_all_reduce(a, b, op, out, heap, chunks: int, config: ccl.Config) -> torch.Tensor:
    """``out`` (M x N) = ``op`` over ranks of ``a @ b``, chunk by chunk: rows ``[s0, s1)`` are
    multiplied into ``out`` itself where peers can reach it (a row-major heap tensor), else into a
    heap buffer copied into ``out`` after its all_reduce (on the side stream)."""
    m, n = a.shape[0], b.shape[1]
    in_place = heap.is_symmetric(out) and out.is_contiguous()
    streams = _Streams(heap.device)
    for s, (s0, s1) in enumerate(bounds(m, chunks)):
        if in_place:
            buf = out[s0:s1]
        else:
            buf = _buffer(heap, s % 2, (s1 - s0, n), a.dtype)
            streams.after(s - 2)  # the collective (and copy) that last used this buffer
        torch.matmul(a[s0:s1], b, out=buf)
        streams.side_waits()
        with streams.collective():
            ccl.all_reduce(buf, op, heap=heap, config=config)
            if not in_place:
                out[s0:s1].copy_(buf)
        streams.done(s, on_side=True)
    streams.main_waits()
    return out


def all_gather_matmul(a, b, out, gathered, heap, chunks: int, config: ccl.Config) -> torch.Tensor:
    """``out`` (W*m x N) = every rank's ``a`` (m x K) gathered, times ``b``, chunk by chunk: rows
    ``[s0, s1)`` of every rank's ``a`` are all-gathered (on the side stream) into a W x (s1 - s0) x K
    heap buffer, which the caller's stream multiplies into those rows of every rank's block of
    ``out`` once it has arrived, while the next chunk is gathered; ``gathered`` (W*m x K), if
    given, receives the gathered rows."""
    w, (m, k) = heap.world_size, a.shape
    streams = _Streams(heap.device)
    src = a
    if not a.is_contiguous():  # the collective moves dense rows: one copy in, on the caller's stream
        src = a.contiguous()
        streams.keep(src)
        streams.side_waits()
    out3 = out.unflatten(0, (w, m))  # rank r's block of rows is out3[r]
    got3 = gathered.unflatten(0, (w, m)) if gathered is not None else None
    for s, (s0, s1) in enumerate(bounds(m, chunks)):
        buf = _buffer(heap, s % 2, (w, s1 - s0, k), a.dtype)
        with streams.collective():
            streams.after(s - 2)  # the product that last read this buffer (peers store into it once this rank enters)
            ccl.all_gather(buf.view(w * (s1 - s0), k), src[s0:s1], heap=heap, config=config)
        streams.main_waits()
        torch.bmm(buf, b.expand(w, *b.shape), out=out3[:, s0:s1])  # (torch.matmul's out= must be contiguous here)
        if got3 is not None:
            got3[:, s0:s1].copy_(buf)
        streams.done(s, on_side=False)
    return out


def matmul_all_gather(a, b, out, heap, chunks: int, config: ccl.Config) -> torch.Tensor:
    """``out`` = every rank's ``a @ b`` (M x n), side by side (M x W*n) or stacked (W x M x n),
    chunk by chunk: rows ``[s0, s1)`` of the product are multiplied into a heap buffer, then
    all-gathered on the side stream into a W x (s1 - s0) x n heap buffer and copied into those rows
    of ``out`` there, while the next chunk is multiplied."""
    w, m, n = heap.world_size, a.shape[0], b.shape[1]
    stacked = out.dim() == 3
    streams = _Streams(heap.device)
    for s, (s0, s1) in enumerate(bounds(m, chunks)):
        c = s1 - s0
        part = _buffer(heap, 2 + s % 2, (c, n), a.dtype)
        blocks = _buffer(heap, s % 2, (w, c, n), a.dtype)
        streams.after(s - 2)  # the collective and copy that last used these buffers
        torch.matmul(a[s0:s1], b, out=part)
        streams.side_waits()
        with streams.collective():
            ccl.all_gather(blocks, part, heap=heap, config=config)
            if stacked:
                out[:, s0:s1].copy_(blocks)
            else:
                out[s0:s1].unflatten(1, (w, n)).copy_(blocks.permute(1, 0, 2))
        streams.done(s, on_side=True)
    streams.main_waits()
    return out
