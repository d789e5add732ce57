"""Rank-side checks of ``Config(trace=True)`` (module-level: spawned ranks import it).

A traced collective records, per program, one "entry wait" and one "exit wait"; per tile a
"tile"; per tile and peer a "remote load" or "remote store" whose bytes are what that access
moved. The checks count bytes per peer against what each collective must move, look at every
event's fields, and keep a canary allocation after every tensor.
"""

import collections
import dataclasses

import torch

import iris.ccl as ccl
import iris.heap
from iris.heap.tracing import EVENTS

BLOCK = 64
N = 300  # several tiles per rank at every world size tested


def _canary(heap):
    c = heap.full((256,), 7, dtype=torch.int32)
    return c, c.clone()


def _events(heap):
    heap.barrier()
    return [e for e in heap.tracing.events()]


def _by_peer(events, name):
    out = collections.Counter()
    for e in events:
        if e["name"] == name:
            out[e["target_rank"]] += e["bytes"]
    return dict(out)


def _well_formed(events, rank):
    ids = {v: k for k, v in EVENTS.items()}
    programs = collections.Counter()
    for e in events:
        assert e["end_ns"] is not None and e["end_ns"] >= e["start_ns"], e
        assert e["rank"] == rank and not e["instant"] and ids[e["id"]] == e["name"], e
        if e["name"] == "entry wait":
            programs[e["program"]] += 1
    exits = collections.Counter(e["program"] for e in events if e["name"] == "exit wait")
    return programs, exits


def _enable(heap, max_events: int) -> None:
    """``heap.tracing.enable``; a GPU heap's calibration reads the device clock (iris.mem.triton's)."""
    clock = None
    if heap.device.type == "cuda":
        from iris.mem.triton import device_clock as clock
    heap.tracing.enable(max_events, clock=clock)


def traced_collectives(rank, world_size, backend):
    """Every collective traced once; each one's events checked against what it must move."""
    heap = iris.heap.init(1 << 22)
    try:
        w, e = world_size, 4
        cfg = ccl.Config(backend=backend, block_size=BLOCK, trace=True)
        _enable(heap, 1 << 14)
        x = heap.full((N,), float(rank + 1))
        canary, want = _canary(heap)
        report = {}

        def run(name, fn, exit=True):
            heap.tracing.reset()
            fn()
            events = _events(heap)
            assert heap.tracing.dropped == 0
            programs, exits = _well_formed(events, rank)
            assert programs and programs == (exits if exit else {0: 1}), (name, programs, exits)
            report[name] = events
            return events

        # two_shot: this rank reduces its chunk, reading it from every rank and writing it to every rank
        events = run("two_shot", lambda: ccl.all_reduce(x, config=dataclasses.replace(cfg, variant="two_shot")))
        chunk = -(-N // w)
        mine = max(0, min(N, (rank + 1) * chunk) - rank * chunk)
        assert _by_peer(events, "remote load") == dict.fromkeys(range(w), mine * e) if mine else {}, events
        assert _by_peer(events, "remote store") == (dict.fromkeys(range(w), mine * e) if mine else {})
        tiles = [t for t in events if t["name"] == "tile"]
        assert len(tiles) == -(-mine // BLOCK) and sum(t["bytes"] for t in tiles) == mine * e
        assert torch.equal(x.cpu(), torch.full((N,), float(w * (w + 1) // 2)))

        # one_shot: every element from every rank, nothing stored remotely
        x.fill_(rank + 1)
        events = run("one_shot", lambda: ccl.all_reduce(x, config=dataclasses.replace(cfg, variant="one_shot")))
        assert _by_peer(events, "remote load") == dict.fromkeys(range(w), N * e)
        assert _by_peer(events, "remote store") == {}

        # all_gather into a heap output pushes this rank's input into every rank
        out = heap.zeros((w * N,))
        canary_out, want_out = _canary(heap)
        x.fill_(rank + 1)
        events = run("all_gather", lambda: ccl.all_gather(out, x, config=cfg))
        assert _by_peer(events, "remote store") == dict.fromkeys(range(w), N * e)
        assert torch.equal(out.cpu(), torch.arange(1, w + 1, dtype=torch.float32).repeat_interleave(N))

        # all_to_all into a heap output pushes chunk r of this rank's input into rank r
        a2a_in, a2a_out = heap.full((w * 8,), float(rank)), heap.zeros((w * 8,))
        events = run("all_to_all", lambda: ccl.all_to_all(a2a_out, a2a_in, config=cfg))
        assert _by_peer(events, "remote store") == dict.fromkeys(range(w), 8 * e)
        assert _by_peer(events, "remote load") == {}

        # broadcast of a heap tensor from the last rank: every rank reads its piece of the root's
        # tensor (pieces of whole 16 words) and stores it into every rank but the root
        events = run("broadcast", lambda: ccl.broadcast(x, w - 1, config=cfg))
        piece = ((N + w - 1) // w + 15) // 16 * 16
        mine = max(0, min(N, (rank + 1) * piece) - rank * piece)
        assert _by_peer(events, "remote load") == {w - 1: mine * e}, events
        assert _by_peer(events, "remote store") == {r: mine * e for r in range(w) if r != w - 1}, events
        assert torch.equal(x.cpu(), torch.full((N,), float(w)))

        # barrier: one program, its entry only
        events = run("barrier", lambda: ccl.barrier(config=cfg), exit=False)
        assert [ev["name"] for ev in events] == ["entry wait"]

        assert torch.equal(canary.cpu(), want.cpu()) and torch.equal(canary_out.cpu(), want_out.cpu())
        heap.check_symmetry()
        return sorted(report)
    finally:
        heap.close()


def untraced(rank, world_size, backend):
    """trace=False records nothing with tracing on; trace=True records nothing with it off."""
    heap = iris.heap.init(1 << 22)
    try:
        x = heap.full((N,), 1.0)
        _enable(heap, 1024)
        ccl.all_reduce(x, config=ccl.Config(backend=backend, block_size=BLOCK))
        assert _events(heap) == []
        heap.tracing.disable()
        ccl.all_reduce(x, config=ccl.Config(backend=backend, block_size=BLOCK, trace=True))
        _enable(heap, 1024)
        assert _events(heap) == [], "a traced collective recorded while tracing was off"
        assert torch.equal(x.cpu(), torch.full((N,), float(world_size**2)))
        return True
    finally:
        heap.close()


def overflow(rank, world_size, backend):
    """A buffer too small for a traced collective: the overflow is counted, the result is right,
    and nothing outside the buffer changes."""
    heap = iris.heap.init(1 << 22)
    try:
        _enable(heap, 3)
        x = heap.full((N,), 1.0)
        canary, want = _canary(heap)
        ccl.all_reduce(x, config=ccl.Config(backend=backend, block_size=BLOCK, trace=True, variant="one_shot"))
        heap.barrier()
        assert len(heap.tracing.events()) == 3 and heap.tracing.dropped > 0
        assert torch.equal(x.cpu(), torch.full((N,), float(world_size)))
        assert torch.equal(canary.cpu(), want.cpu())
        return heap.tracing.dropped
    finally:
        heap.close()


def logged(rank, world_size, backend):
    """What iris.ccl logs (``iris.ccl``, rank-tagged): staging growth and recorded plans at DEBUG,
    a reset at INFO."""
    import logging

    records = []

    class Keep(logging.Handler):
        def emit(self, record):
            records.append(record)

    logger = logging.getLogger("iris.ccl")
    handler, level = Keep(logging.DEBUG), logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.DEBUG)
    heap = iris.heap.init(1 << 22)
    try:
        x = torch.ones(N, device=heap.device)  # not on the heap: staged
        ccl.all_reduce(x, config=ccl.Config(backend=backend, block_size=BLOCK, variant="two_shot"))  # stages
        ccl.reset()
        messages = [r.getMessage() for r in records]
        assert any("staging 'in' grown" in m for m in messages), messages
        assert any("all_reduce: plan recorded" in m for m in messages), messages
        assert any(m.startswith("reset: done") for m in messages), messages
        assert {(r.rank, r.world_size) for r in records} == {(rank, world_size)}
        return True
    finally:
        heap.close()
        logger.removeHandler(handler)
        logger.setLevel(level)
