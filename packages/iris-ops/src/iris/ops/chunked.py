"""The chunked variant of the reductions: ``torch.matmul`` by row chunks, each chunk's collective
on a side stream while the next chunk is multiplied.

``matmul_reduce_scatter`` and ``matmul_all_reduce`` with ``Config(variant="chunked")``: the
product is cut into ``chunks`` row chunks (``Config.chunks``; fewer where there are fewer rows).
Chunk ``s`` is multiplied on the caller's stream into a heap buffer, and its ``iris.ccl``
collective (``reduce_scatter`` of the chunk's rows of every rank's block, or ``all_reduce`` of the
chunk) is queued on a side stream as soon as the product is ready, so it runs while chunk ``s+1``
is multiplied: the collective's memory traffic overlaps cuBLAS's computation, and the operation
approaches the longer of the two rather than their sum (the unfused variant's). On CPU ranks
there are no streams and the chunks run one after the other (the same results).

The products live in two heap buffers taken in turns (the staging roles ``ops.chunked.0`` and
``.1``), so peers read them in place; chunk ``s`` waits for the collective of chunk ``s-2``, the
last reader of its buffer (a collective's exit sees every peer done with its input). The side
stream starts after the caller's earlier work and the caller's stream waits for its last
collective, so collectives keep their order on every rank (the protocol's epochs follow stream
order) and the result is ready in the caller's stream order, as with every operation.

Rounding is the unfused variant's: each product rounded to the dtype, ranks combined in rank
order in fp32. The chunk's GEMM may take another cuBLAS algorithm than the whole product's, so
the bits can differ from the unfused variant's where the GEMMs' do; every rank gets the same bits
from ``matmul_all_reduce``. Every rank must run the same variant with the same chunks: otherwise
the collectives differ and the call raises ``CollectiveMismatchError`` on every rank.
"""

from __future__ import annotations

import contextlib

import torch

import iris.ccl as ccl
from iris.ccl.workspace import workspace_of

__all__ = ["DEFAULT_CHUNKS", "bounds", "matmul_all_reduce", "matmul_reduce_scatter"]

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
    """The caller's stream and the side stream of the collectives (GPU), or no streams (CPU):
    ``collective()`` enters the side stream; ``handed(s)`` makes the side stream wait for chunk
    ``s``'s product; ``free(s)`` makes the caller's stream wait for chunk ``s``'s collective."""

    def __init__(self, device: torch.device):
        self.gpu = device.type == "cuda"
        self.done: dict[int, torch.cuda.Event] = {}
        if self.gpu:
            self.main = torch.cuda.current_stream(device)
            if device not in _SIDE:
                _SIDE[device] = torch.cuda.Stream(device)
            self.side = _SIDE[device]
            self.side.wait_stream(self.main)  # the caller's earlier work, collectives included, first

    def collective(self):
        return torch.cuda.stream(self.side) if self.gpu else contextlib.nullcontext()

    def handed(self) -> None:
        if self.gpu:
            self.side.wait_stream(self.main)

    def finished(self, s: int) -> None:
        if self.gpu:
            event = torch.cuda.Event()
            event.record(self.side)
            self.done[s] = event

    def free(self, s: int) -> None:
        if self.gpu and s in self.done:
            self.main.wait_event(self.done.pop(s))

    def join(self) -> None:
        if self.gpu:
            self.main.wait_stream(self.side)


def _buffer(heap, turn: int, shape: tuple[int, ...], dtype: torch.dtype) -> torch.Tensor:
    """Heap buffer ``turn`` (0 or 1) of the products, a row-major ``shape`` of ``dtype``."""
    return workspace_of(heap).staging(f"ops.chunked.{turn}", torch.empty(shape, dtype=dtype, device="meta"))


def matmul_reduce_scatter(a, b, op, out, heap, chunks: int, config: ccl.Config) -> torch.Tensor:
    """``out`` (M/W x N) = rows ``rank`` of ``op`` over ranks of ``a @ b``, chunk by chunk: chunk
    ``[s0, s1)`` of every rank's block of rows is multiplied into a W x (s1 - s0) x N buffer and
    reduce-scattered into ``out[s0:s1]``."""
    w, n = heap.world_size, b.shape[1]
    rows = a.shape[0] // w
    blocks = a.unflatten(0, (w, rows))  # a view whatever a's strides: W blocks of rows
    target = out if out.is_contiguous() else torch.empty(out.shape, dtype=out.dtype, device=out.device)
    streams = _Streams(heap.device)
    for s, (s0, s1) in enumerate(bounds(rows, chunks)):
        buf = _buffer(heap, s % 2, (w, s1 - s0, n), a.dtype)
        streams.free(s - 2)  # the collective that last read this buffer
        torch.matmul(blocks[:, s0:s1], b, out=buf)
        streams.handed()
        with streams.collective():
            ccl.reduce_scatter(target[s0:s1], buf.view(w * (s1 - s0), n), op, heap=heap, config=config)
        streams.finished(s)
    streams.join()
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
            streams.free(s - 2)
        torch.matmul(a[s0:s1], b, out=buf)
        streams.handed()
        with streams.collective():
            ccl.all_reduce(buf, op, heap=heap, config=config)
            if not in_place:
                out[s0:s1].copy_(buf)
        streams.finished(s)
    streams.join()
    return out
