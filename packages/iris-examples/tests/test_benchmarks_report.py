"""tools/benchmarks.py's Targets table: each issue target computed from the steps' CSVs alone, the
worst case named (a target row that reads the wrong column or the wrong size passes silently)."""

import csv
import sys
from pathlib import Path

import pytest

TOOLS = Path(__file__).resolve().parents[3] / "tools"


@pytest.fixture(scope="module")
def benchmarks():
    sys.path.insert(0, str(TOOLS))
    try:
        import benchmarks

        yield benchmarks
    finally:
        sys.path.remove(str(TOOLS))


def _write(folder: Path, name: str, rows: list[dict]) -> None:
    keys = list(dict.fromkeys(k for r in rows for k in r))
    with open(folder / f"{name}.csv", "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=keys)
        w.writeheader()
        w.writerows(rows)


def _ccl(coll, size, ratio):
    return {"collective": coll, "ranks": 4, "bytes_per_rank": size, "ratio_vs_copy": ratio}


def _latency(variant, graph, host):
    return {"collective": f"all_reduce:{variant}", "bytes_per_rank": 1024, "latency": "True", "graph_us": graph,
            "host_vs_launch": host}  # fmt: skip


def test_every_target_is_computed_from_its_step_and_names_its_worst_case(benchmarks, tmp_path):
    M = 1 << 20
    _write(tmp_path, "heap", [
        {"bench": "alloc_free", "ranks": 1, "full_us": 3.0, "torch_empty_us": 2.5, "collective_calls": 0},
        {"bench": "alloc_free", "ranks": 4, "full_us": 8.4, "torch_empty_us": 3.7, "collective_calls": 0},
        {"bench": "init", "ranks": 4, "heap_bytes": 16 * M, "transport": "cuda-ipc", "init_ms": 100.0},
        {"bench": "init", "ranks": 4, "heap_bytes": 16 * M, "transport": "cuda-vmm", "init_ms": 130.0},
        {"bench": "init", "ranks": 2, "heap_bytes": 16 * M, "transport": "cuda-vmm", "init_ms": 900.0},
    ])  # fmt: skip
    _write(tmp_path, "ccl", [
        _ccl("all_reduce:one_shot", 64 * M, 0.45), _ccl("all_reduce:two_shot", 64 * M, 0.96),
        _ccl("all_gather", 64 * M, 0.97), _ccl("broadcast", 64 * M, 0.56), _ccl("broadcast", 1024 * M, 0.99),
        _ccl("reduce_scatter", 16 * M, 0.48), _ccl("all_to_all", 1 * M, 0.85), _ccl("all_to_all", 512 * 1024, 0.1),
        _latency("one_shot", 7.5, 1.2), _latency("two_shot", 6.6, 1.4),
    ])  # fmt: skip
    _write(tmp_path, "ccl_latency2", [_latency("two_shot", 4.9, 1.25)])
    auto = lambda v, size, us, pick: {"collective": f"all_reduce:{v}", "bytes_per_rank": size, "time_us": us,  # noqa: E731
                                      "auto_pick": pick}  # fmt: skip
    _write(tmp_path, "ccl_auto", [
        auto("one_shot_push", 1024, 5.0, "one_shot_push"), auto("two_shot", 1024, 7.0, "one_shot_push"),
        auto("one_shot", 65536, 9.0, "two_shot"), auto("two_shot", 65536, 10.8, "two_shot"),
        auto("two_shot", 1 << 24, 100.0, "two_shot"),  # one variant: nothing to compare
        dict(auto("one_shot", 1024, 1.0, "one_shot_push"), latency="True"),  # not the sweep's
    ])  # fmt: skip
    _write(tmp_path, "trace", [{"collective": "all_gather", "trace_export_s": 6.0, "trace_events": 4194304,
                                "trace_dropped": 17}])  # fmt: skip
    _write(tmp_path, "core_gluon", [
        {"size": "8192x8192x8192", "local_gemm_ms": 1.0, "matmul_ms": 0.95},
        {"size": "4096x4096x4096", "local_gemm_ms": 1.0, "matmul_ms": 0.9},
    ])  # fmt: skip
    ops = [{"op": "matmul_reduce_scatter", "shape": "1024x4096x16384", "fused_ms": 1.0, "fused_vs_limit": 1.4,
            "speedup": 1.1, "comm_share": 0.5, "auto_variant": "unfused", "auto_speedup": 1.0},
           {"op": "all_gather_matmul", "shape": "16384x8192x28672", "fused_ms": 2.0, "fused_vs_limit": 1.05,
            "speedup": 0.98, "comm_share": 0.1, "auto_variant": "fused", "auto_speedup": 0.98}]  # fmt: skip
    _write(tmp_path, "ops", ops)
    _write(tmp_path, "ops_gluon", [dict(ops[0], fused_ms=1.1), dict(ops[1], fused_ms=1.9)])
    _write(
        tmp_path, "tp_mlp", [{"shape": "1024x4096x16384", "speedup": 1.1}, {"shape": "4096x8192x28672", "speedup": 0.9}]
    )

    found = {what: (target, measured) for what, target, measured, _ in benchmarks.targets(tmp_path)}
    # each target's row, by the start of its name: target | measured, with its worst case
    expected = """
        heap: heap.empty | <= 1.5x | 2.27 (4 ranks)
        heap: collective calls | 0 | 0
        heap: init time | <= 1.2x | 1.30 (16 MiB)
        ccl triton: collective / copy_ roofline at >= 64 MiB | >= 0.95 | 0.56 (broadcast)
        ccl triton: collective / copy_ roofline at 1-16 MiB | >= 0.8 | 0.48 (reduce_scatter)
        ccl triton: 1 KiB all_reduce replayed from a CUDA graph (4 ranks | <= 6 us | 6.60 us (two_shot)
        ccl triton: 1 KiB all_reduce replayed from a CUDA graph (2 ranks | <= 4 us | 4.90 us (two_shot)
        ccl triton: 1 KiB all_reduce eager host time / bare torch launch (4 | <= 1.3x | 1.40 (two_shot)
        ops gluon: GEMM core / torch.matmul TFLOP/s at 8192x8192x8192 | >= 0.9 | 0.95
        ops gluon: GEMM core / torch.matmul TFLOP/s at 4096x4096x4096 | >= 0.85 | 0.90
        ops triton: fused / limit | <= 1.25x | 1.40 (matmul_reduce_scatter 1024x4096x16384)
        ops triton: unfused / fused where | >= 1.2x | 1.10 (matmul_reduce_scatter 1024x4096x16384)
        ops triton: unfused / fused kernel, every | >= 1.0x | 0.98 (all_gather_matmul 16384x8192x28672)
        ops triton: unfused / the operation as called | >= 1.0x | 0.98 (all_gather_matmul 16384x8192x28672 (fused))
        ops: Gluon fused time / Triton | <= 1.0 | 1.10 (matmul_reduce_scatter 1024x4096x16384)
        tp-mlp | > 1.0x | 0.90 (4096x8192x28672)
        trace: export | < 10 s for 4 M events | 6.0 s for 4194304 events
        ccl: all_reduce auto's pick / the fastest variant, per size (4 ranks) | <= 1.03 | 1.20 (64 KiB (two_shot))
    """  # the heap's init row counts 4 ranks only
    expected = dict(
        (name, (target, measured))
        for name, target, measured in (line.strip().split(" | ") for line in expected.strip().splitlines())
    )
    for start, want in expected.items():
        rows = [v for k, v in found.items() if k.startswith(start)]
        assert rows == [want], (start, rows)
    assert not any(k.startswith("ops gluon: GEMM core / torch.matmul TFLOP/s at 8192x8192x1024") for k in found)
    assert not any(k.startswith("mem.") for k in found)  # steps not run: no row

    (tmp_path / "machine.txt").write_text("device: test\n")
    out = tmp_path / "BENCHMARKS.md"
    (tmp_path / "steps.json").write_text('{"rma": {"rc": 124, "seconds": 900.0, "commit": "aaaa"}}')
    benchmarks.render(tmp_path, out, mps=True)
    text = out.read_text()
    assert "## Targets" in text and "| ccl triton: collective / copy_ roofline at >= 64 MiB" in text
    # a step that failed or was not run has no section (no older figure stands in): the Steps table says so
    assert "| rma | 124 (no table) | 900.0 | aaaa |" in text and "| heap | not run | | |" in text
    assert "## iris.mem.triton: translated remote access" not in text and "## iris.ccl (Triton backend)" in text


def test_a_run_split_over_calls_says_whether_its_steps_ran_at_one_commit(benchmarks, tmp_path, monkeypatch):
    """Each call of the script records its steps' exit, seconds and commit in ``steps.json``
    beside the earlier calls'; the report lists them and says when the commits differ."""
    write = (sys.executable, "-c", "import sys; open(sys.argv[1], 'w').write('a\\n1\\n')", "{csv}")
    fake = benchmarks.Step("heap", "heap", write, "about")
    monkeypatch.setenv("IRIS_COMMIT", "aaaa")
    benchmarks.run_steps([fake], tmp_path)
    monkeypatch.setenv("IRIS_COMMIT", "bbbb")
    benchmarks.run_steps([benchmarks.Step("rma", "rma", write, "about")], tmp_path)
    (tmp_path / "machine.txt").write_text("device: test\n")
    out = tmp_path / "BENCHMARKS.md"
    benchmarks.render(tmp_path, out, mps=True)
    text = out.read_text()
    assert "**The steps ran at different commits** (aaaa: heap; bbbb: rma)" in text, text
    assert "| heap | 0 |" in text and "| aaaa |" in text
    benchmarks.run_steps([fake], tmp_path)  # heap again, at bbbb: one commit now
    benchmarks.render(tmp_path, out, mps=True)
    assert "Every step below ran at commit bbbb." in out.read_text()


def test_a_step_s_follow_up_command_runs_only_after_it_succeeded(benchmarks, tmp_path):
    """``then`` (e.g. trace-view drawing the trace the step wrote) runs after ``argv`` exits 0, with
    the same paths; after a failure it does not, and the step reports the failure."""
    make = (sys.executable, "-c", "import sys; open(sys.argv[1], 'w').write('x')", "{trace}")
    draw = (sys.executable, "-c", "import sys; open(sys.argv[2], 'w').write(open(sys.argv[1]).read())", "{trace}",
            "{csv}")  # fmt: skip
    ok = benchmarks.run_steps([benchmarks.Step("tp_mlp_trace", "t", make, "about", then=draw)], tmp_path)
    assert ok["tp_mlp_trace"]["rc"] == 0 and (tmp_path / "tp_mlp_trace.csv").read_text() == "x"
    fail = (sys.executable, "-c", "raise SystemExit(3)")
    bad = benchmarks.run_steps([benchmarks.Step("tp_mlp_trace", "t", fail, "about", then=draw)], tmp_path)
    assert bad["tp_mlp_trace"]["rc"] == 3 and not (tmp_path / "tp_mlp_trace.csv").exists()
