"""``--trace FILE``: an example's device events, merged across ranks into one Chrome trace that
trace-view draws; refused where an example runs no kernels."""

import json

import pytest
from _cli import run_cli

MP = ["--blocks", "3", "--block-size", "1K", "--iters", "1"]
ROUNDS = 1 + 1 + 1  # the checked round, time_launches' warmup and one timed round


def _events(path):
    trace = json.loads(path.read_text())
    return trace, [e for e in trace["traceEvents"] if e["ph"] in ("X", "i")]


@pytest.mark.parametrize("example, ranks", [("message-passing", 3), ("message-passing-gluon", 2)])
def test_message_passing_trace_has_every_event_of_every_rank(tmp_path, example, ranks):
    path = tmp_path / "mp.json"
    done = run_cli(example, "--ranks", str(ranks), *MP, "--trace", str(path))
    assert done.returncode == 0, done.stderr
    assert f"trace: {path}" in done.stdout
    trace, events = _events(path)
    assert trace["otherData"]["world_size"] == ranks and trace["otherData"]["dropped_events"] == 0
    assert trace["otherData"]["incomplete_events"] == 0
    blocks = 3
    for rank in range(ranks):
        mine = [e for e in events if e["pid"] == rank]
        by_name = {n: [e for e in mine if e["name"] == n] for n in ("remote store", "signal", "flag wait", "copy out")}
        assert {n: len(v) for n, v in by_name.items()} == dict.fromkeys(by_name, ROUNDS * blocks), by_name
        assert all(e["args"]["target_rank"] == (rank + 1) % ranks for e in by_name["remote store"])
        assert all(e["args"]["bytes"] == 1024 for e in by_name["remote store"] + by_name["copy out"])
        assert all(e["ph"] == "i" for e in by_name["signal"]) and all(e["dur"] >= 0 for e in by_name["flag wait"])
    png = tmp_path / "mp.png"
    shown = run_cli("trace-view", str(path), "--png", str(png))
    assert shown.returncode == 0, shown.stderr
    assert png.read_bytes()[:4] == b"\x89PNG"


def test_without_trace_nothing_is_written(tmp_path):
    done = run_cli("message-passing", "--ranks", "2", *MP, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "trace:" not in done.stdout and list(tmp_path.iterdir()) == []


def test_an_example_without_kernels_refuses_trace(tmp_path):
    done = run_cli("heap-bench", "--ranks", "1", "--trace", str(tmp_path / "t.json"))
    assert done.returncode == 2 and "nothing to trace" in done.stderr
    assert not (tmp_path / "t.json").exists()


# -- the RMA examples and benchmarks: per rank, exactly the events their kernels record ----------


def _traced(tmp_path, *argv, ranks):
    """Run ``argv`` on ``ranks`` ranks with --trace; per rank, a Counter of the merged file's events
    as (name, program, target rank, bytes). Every event is an interval, none dropped or unfinished."""
    from collections import Counter

    path = tmp_path / "trace.json"
    done = run_cli(*argv, "--ranks", str(ranks), "--trace", str(path))
    assert done.returncode == 0, done.stderr
    assert f"trace: {path}" in done.stdout and "dropped" not in done.stdout
    trace, events = _events(path)
    meta = trace["otherData"]
    assert (meta["world_size"], meta["dropped_events"], meta["incomplete_events"]) == (ranks, 0, 0)
    assert all(e["ph"] == "X" and e["dur"] >= 0 for e in events)
    return [
        Counter((e["name"], e["args"]["program"], e["args"]["target_rank"], e["args"]["bytes"]) for e in events
                if e["pid"] == rank)
        for rank in range(ranks)
    ]  # fmt: skip


SWEEP = ["1536", "--block", "256", "--iters", "1"]  # per peer, a tile of 256 floats and one of 128
TILES = (1024, 512)  # bytes of tile 0 and tile 1
SWEEP_CALLS = 1 + 1  # time_launches' warmup and one timed call


def _sweep_events(name, rank, ranks):
    """all-load/all-store: program (p, j), flattened p + 2 j, moves tile p with rank (rank + j) % W, every call."""
    return {(name, p + 2 * j, (rank + j) % ranks, TILES[p]): SWEEP_CALLS for p in (0, 1) for j in range(ranks)}


@pytest.mark.parametrize(
    "example, backend, ranks, event",
    [("all-load", "triton", 2, "remote load"), ("all-load", "gluon", 2, "remote load"),
     ("all-store", "triton", 2, "remote store"), ("all-store", "gluon", 3, "remote store")],
)  # fmt: skip
def test_all_load_and_all_store_trace_every_program_of_the_remote_kernel(tmp_path, example, backend, ranks, event):
    per_rank = _traced(tmp_path, example, *SWEEP, "--backend", backend, ranks=ranks)
    assert per_rank == [_sweep_events(event, rank, ranks) for rank in range(ranks)]


# two programs per copy: 1024 and 512 bytes. The counts below are those of CPU ranks' shapes (the
# benchmarks pick larger chains, lanes, warm-ups and queued repetitions on a GPU), so these two
# run on CPU ranks (--cpu) on every machine; the other examples here check their events on a GPU too.
BENCH = ["--sizes", "1536", "--block", "256", "--iters", "1", "--cpu"]


def test_rma_bench_traces_each_copy_program_and_atomic_kernel(tmp_path):
    per_rank = _traced(tmp_path, "rma-bench", *BENCH, "--all-turns", ranks=2)
    calls = 1 + 1  # a warm-up launch and one timed (--iters is cut to a tenth, at least 1, on CPU ranks)
    chain, programs, lanes, reps = 20, 2, 64, 2  # the atomic kernels' shapes on CPU ranks
    for rank, found in enumerate(per_rank):
        peer = 1 - rank  # with 2 ranks a copy's written rank is the peer too
        expected = {(f"remote {op}", p, peer, TILES[p]): calls for op in ("load", "store", "get", "put", "copy")
                    for p in (0, 1)}  # fmt: skip
        expected[("atomic chain", 0, peer, 4 * chain)] = 3 * calls  # add relaxed, add acq_rel, cas acq_rel
        for p in range(programs):
            expected[("atomic batch", p, peer, 4 * lanes * reps)] = 4 * calls  # distinct/one word x two sems
        assert found == expected, rank


def test_rma_bench_gluon_traces_each_program_of_both_implementations(tmp_path):
    per_rank = _traced(tmp_path, "rma-bench", "--backend", "gluon", *BENCH, "--all-turns", ranks=2)
    calls = 1 + 1  # a warm-up launch (--warmup 1 on CPU ranks) and one timed
    for rank, found in enumerate(per_rank):
        peer = 1 - rank  # the rank read or written; copy writes rank - 1: the peer with 2 ranks
        assert found == {(f"remote {op} ({impl})", p, peer, TILES[p]): calls for impl in ("gluon", "triton")
                         for op in ("load", "store", "get", "put", "copy") for p in (0, 1)}, rank  # fmt: skip


@pytest.mark.parametrize("ranks", [2, 3])
def test_atomic_latency_traces_each_ping_pong_kernel_and_contended_program(tmp_path, ranks):
    rounds, programs, lanes, reps = 3, 2, 4, 2
    per_rank = _traced(tmp_path, "atomic-latency", "--rounds", str(rounds), "--iters", "1", "--programs", str(programs),
                       "--lanes", str(lanes), "--reps", str(reps), ranks=ranks)  # fmt: skip
    calls = 1 + 1  # time_launches' warm-up and one timed kernel
    for rank, found in enumerate(per_rank):
        expected = {("atomic_add contended", p, 0, 8 * lanes * reps): calls for p in range(programs)}
        if rank ^ 1 < ranks:  # paired; the last rank of an odd world has no ping-pong
            for op in ("add", "cas"):
                expected[(f"atomic_{op} ping-pong", 0, rank ^ 1, 4 * rounds)] = calls
        assert found == expected, rank


def test_a_full_trace_buffer_drops_events_and_the_run_still_checks(tmp_path):
    path = tmp_path / "t.json"
    done = run_cli("all-load", *SWEEP, "--ranks", "2", "--trace", str(path), "--trace-events", "3")
    assert done.returncode == 0, done.stderr
    assert "MISMATCH" not in done.stdout
    claimed = 2 * 2 * SWEEP_CALLS  # per rank: 2 tiles x 2 peers x calls recorded, 3 kept
    dropped = 2 * (claimed - 3)
    assert f"{dropped} dropped: pass --trace-events {1 << (claimed - 1).bit_length()}" in done.stdout
    trace, events = _events(path)
    assert trace["otherData"]["dropped_events"] == dropped
    assert [sum(e["pid"] == rank for e in events) for rank in (0, 1)] == [3, 3]


def test_the_summary_reads_other_data_from_the_end_or_else_the_whole_file(tmp_path):
    from iris.examples.harness import trace

    other = {"world_size": 2, "dropped_events": 5, "ranks": [
        {"events": 4, "incomplete": 1, "dropped": 5}, {"events": 10, "incomplete": 0, "dropped": 0}]}  # fmt: skip
    last = tmp_path / "last.json"  # as export writes it: otherData last, after many events
    last.write_text('{"traceEvents":[' + ",".join(['{"ph":"X","name":"a \\"}"}'] * 50_000) + ']'
                    + ',"displayTimeUnit":"ns","otherData":' + json.dumps(other) + "}")  # fmt: skip
    first = tmp_path / "first.json"  # any other order: the whole file is read
    first.write_text(json.dumps({"otherData": other, "traceEvents": []}))
    for path in (last, first):
        line = trace.summary(str(path))
        assert f"trace: {path} (14 events of 2 ranks, 5 dropped: pass --trace-events 16;" in line, line
    assert "could not be read back" in trace.summary(str(tmp_path / "missing.json"))


# -- compile-only for sm_90 (no GPU needed): the tracing is in the kernel with TRACE, gone without ---


def compile_instrumented_kernels(rank, world_size):
    """Every instrumented kernel lowered for sm_90 with TRACE False and True: its PTX's reads of
    ``%globaltimer`` and ``%smid``, by (name, TRACE). Runs in a rank process (no interpreter)."""
    import torch
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    import iris.mem.gluon as img
    from iris.examples import all_peers, atomic_latency, rma_bench

    target = GPUTarget("cuda", 90, 32)
    layout = img.blocked_layout(1024, 4, target=target, dtype=torch.float32)
    sweep = {"src": "*fp32", "dst": "*fp32", "context_ptr": "*i64", "n": "i32", "EVENT": "i32"}
    bench = {"src": "*fp32", "dst": "*fp32", "n": "i32", "context_ptr": "*i64", "EVENT": "i32"}
    counters = {"counters": "*i32", "context_ptr": "*i64", "EVENT": "i32"}
    kernels = {  # name: (kernel, source, runtime arguments' types, constexprs but TRACE)
        "all-load": (all_peers.all_peers_kernel, ASTSource, sweep, {"STORE": False, "BLOCK": 1024}),
        "all-load gluon": (all_peers.gluon_all_peers_kernel, img.GluonASTSource, sweep,
                           {"STORE": False, "BLOCK": 1024, "LAYOUT": layout}),
        "all-store": (all_peers.all_peers_kernel, ASTSource, sweep, {"STORE": True, "BLOCK": 1024}),
        "all-store gluon": (all_peers.gluon_all_peers_kernel, img.GluonASTSource, sweep,
                            {"STORE": True, "BLOCK": 1024, "LAYOUT": layout}),
        "rma-bench copy": (rma_bench.remote_copy_kernel, ASTSource, bench, {"OP": "copy", "BLOCK": 1024, "WIDE": False}),
        "rma-bench chain": (rma_bench.atomic_chain_kernel, ASTSource, {"counter": "*i32", "context_ptr": "*i64", "K": "i32", "EVENT": "i32"},
                            {"OP": "cas", "SEM": "acq_rel"}),
        "rma-bench batch": (rma_bench.atomic_throughput_kernel, ASTSource, counters,
                            {"REPS": 2, "LANES": 64, "CONTENDED": False, "SEM": "relaxed"}),
        "rma-bench gluon": (rma_bench.gluon_remote_copy_kernel, img.GluonASTSource, bench,
                            {"OP": "copy", "BLOCK": 1024, "L": layout}),
        "atomic-latency ping-pong": (atomic_latency.ping_pong_kernel, ASTSource,
                                     {"flag": "*i32", "context_ptr": "*i64", "peer": "i32", "base": "i32", "rounds": "i32",
                                      "EVENT": "i32"}, {"FIRST": True, "OP": "cas"}),
        "atomic-latency contended": (atomic_latency.contended_add_kernel, ASTSource,
                                     {"counter": "*i64", "context_ptr": "*i64", "to_rank": "i32", "EVENT": "i32"},
                                     {"REPS": 2, "LANES": 64}),
    }  # fmt: skip
    reads = {}
    for name, (kernel, source, signature, constexprs) in kernels.items():
        for trace in (False, True):
            consts = dict(constexprs, TRACE=trace)
            sig = dict(signature, **dict.fromkeys(consts, "constexpr"))
            ptx = triton.compile(source(kernel, sig, consts), target=target, options={"num_warps": 4}).asm["ptx"]
            reads[name, trace] = (ptx.count("%globaltimer"), ptx.count("%smid"))
    return reads


def test_each_instrumented_kernel_has_its_tracing_only_with_trace():
    from iris.testing.world import run

    [reads] = run(compile_instrumented_kernels, 1, env={"TRITON_INTERPRET": "0"})
    for name in sorted({name for name, _ in reads}):
        clock, sm = reads[name, False]  # the kernel's own clock reads (the ping-pong's bounded waits)
        assert sm == 0, name
        assert reads[name, True] == (clock + 2, 1), name  # one event per program: start and end, its SM once


def _bytes_to(counts, name):
    """Bytes of the ``name`` events, by target rank."""
    out = {}
    for (event, _, target, nbytes), k in counts.items():
        if event == name:
            out[target] = out.get(target, 0) + k * nbytes
    return out


@pytest.mark.parametrize("example", ["gemm-all-scatter", "gemm-all-scatter-gluon"])
def test_gemm_all_scatter_traces_the_operation_and_the_baseline_collective(tmp_path, example):
    """iris.ops.matmul_all_gather's entry and exit waits, its tile and its stores to every rank, and
    the baseline's iris.ccl.all_gather (Config(trace=True) for both)."""
    m, n, ranks = 32, 32, 2
    tile = ["--block-m", str(m), "--block-n", str(n // ranks)]  # each rank's block is one tile, on any device
    per_rank = _traced(tmp_path, example, "--sizes", f"{m}x{n}x16", *tile, "--iters", "0", ranks=ranks)
    block = m * (n // ranks) * 2  # the M x N/W bfloat16 (the default) block each rank computes
    for rank, counts in enumerate(per_rank):
        # nothing but the two calls' own phases: no barrier around the operation
        assert {name for name, *_ in counts} == {"entry wait", "tile", "remote store", "exit wait"}, counts
        assert counts[("tile", 0, rank, block)] >= 1, counts  # the operation's one tile
        # every rank receives this rank's block from the operation, and again from the baseline's
        # all_gather (which pushes into a heap output)
        assert _bytes_to(counts, "remote store") == dict.fromkeys(range(ranks), 2 * block)


def test_ccl_bench_traces_every_collective(tmp_path):
    table = tmp_path / "ccl.csv"
    per_rank = _traced(tmp_path, "ccl-bench", "--sizes", "1K", "--iters", "1", "--reps", "1",
                       "--collectives", "all_gather", "--latency-sizes", "--csv", str(table), ranks=2)  # fmt: skip
    import csv

    with open(table, newline="") as f:  # the export's time and size, for tools/benchmarks.py's target
        (row,) = list(csv.DictReader(f))
    assert float(row["trace_export_s"]) > 0 and int(row["trace_dropped"]) == 0
    assert int(row["trace_events"]) == sum(sum(c.values()) for c in per_rank)
    for counts in per_rank:
        names = {name for name, *_ in counts}
        assert {"entry wait", "tile", "remote store", "exit wait"} <= names, names
        pushed = _bytes_to(counts, "remote store")
        assert set(pushed) == {0, 1} and pushed[0] == pushed[1] and pushed[0] % 1024 == 0
