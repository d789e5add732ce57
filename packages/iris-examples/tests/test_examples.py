"""Every example of this package through the real CLI at small sizes: each checks itself against torch.

Sizes are given explicitly so the runs stay small on a GPU too. A run exits 0 only if every
rank's result matched torch.
"""

import csv

import torch
from _cli import run_cli, shm_entries

from iris.heap import transport

#: The transport the examples' heaps get by default: the CLI's ranks run on the GPU where there is one.
AUTO = transport.select("auto", torch.device("cuda" if torch.cuda.is_available() else "cpu")).name

MP = ["--blocks", "4", "--block-size", "4K", "--iters", "2"]


def _ok(done):
    assert done.returncode == 0, f"stdout:\n{done.stdout}\nstderr:\n{done.stderr}"
    assert "MISMATCH" not in done.stdout
    return done.stdout


def test_message_passing_4_ranks_every_rank_sends_and_receives():
    before = shm_entries()
    out = _ok(run_cli("message-passing", "--ranks", "4", *MP))
    assert "message passing (triton): 4 ranks" in out
    assert out.count(" ok ") == 4
    assert shm_entries() - before == set()


def test_message_passing_gluon_2_ranks_bfloat16():
    out = _ok(run_cli("message-passing-gluon", "--ranks", "2", *MP, "--dtype", "bfloat16"))
    assert "message passing (gluon): 2 ranks" in out and out.count(" ok ") == 2


def test_message_passing_world_size_1_sends_to_itself():
    out = _ok(run_cli("message-passing", "--ranks", "1", "--blocks", "2", "--block-size", "1K", "--iters", "1"))
    assert out.count(" ok ") == 1


def test_message_passing_under_torchrun():
    out = _ok(run_cli("message-passing", *MP, torchrun=2))
    assert "message passing (triton): 2 ranks" in out and out.count(" ok ") == 2


def test_all_load_writes_csv_and_plot(tmp_path):
    table, figure = tmp_path / "all_load.csv", tmp_path / "all_load.png"
    out = _ok(run_cli("all-load", "16K", "--ranks", "2", "--iters", "1", "--csv", str(table), "--plot", str(figure)))
    assert "all-load (triton): 2 ranks" in out
    with open(table) as f:
        rows = list(csv.DictReader(f))
    assert {(r["rank"], r["op"]) for r in rows} == {
        (str(k), op) for k in (0, 1) for op in ("all-load", "triton local copy", "torch copy_")
    }
    assert all(float(r["GBps"]) > 0 for r in rows)
    assert figure.stat().st_size > 0


def test_all_store_gluon():
    out = _ok(run_cli("all-store", "16K", "--ranks", "2", "--iters", "1", "--backend", "gluon"))
    assert "all-store (gluon): 2 ranks" in out


def test_atomic_latency():
    out = _ok(run_cli("atomic-latency", "--ranks", "2", "--rounds", "10", "--iters", "1", "--programs", "1",
                      "--lanes", "64", "--reps", "2"))  # fmt: skip
    assert "atomic_add ping-pong" in out and "atomic_cas ping-pong" in out and "all ranks (sum)" in out


def test_ccl_bench(tmp_path):
    table = tmp_path / "ccl.csv"
    out = _ok(run_cli("ccl-bench", "--ranks", "2", "--sizes", "16K", "--iters", "1", "--latency-sizes", "1K",
                      "--latency-iters", "1", "--block-size", "1024", "--num-warps", "2", "--csv", str(table)))  # fmt: skip
    for name in ("all_reduce:two_shot", "all_gather", "reduce_scatter", "all_to_all", "broadcast"):
        assert name in out
    assert "2 warps, blocks of 1024 a launch" in out  # the launch shape the run set, in the table's title
    with open(table) as f:
        rows = list(csv.DictReader(f))
    assert {r["check"] for r in rows if r["check"]} == {"ok"}
    assert {(r["block_size"], r["num_warps"], r["num_programs"]) for r in rows} == {("1024", "2", "")}


def test_ops_bench_and_tp_mlp_check_every_path_against_torch(tmp_path):
    table = tmp_path / "ops.csv"
    out = _ok(run_cli("ops-bench", "--ranks", "2", "--shapes", "32x16x24", "--csv", str(table)))
    for name in ("all_gather_matmul", "matmul_reduce_scatter", "matmul_all_reduce", "matmul_all_gather"):
        assert name in out
    with open(table) as f:
        assert {r["check"] for r in csv.DictReader(f)} == {"ok"}
    out = _ok(run_cli("tp-mlp", "--ranks", "2", "--shapes", "32x16x24"))
    assert "tp-mlp, 2 ranks" in out and "MISMATCH" not in out


def _csv(path):
    with open(path, newline="") as f:
        reader = csv.DictReader(f)
        return reader.fieldnames, list(reader)


def test_heap_bench_sweeps_world_sizes(tmp_path):
    """One launch per world size; the CSV columns are those tools/benchmarks.py renders (the
    profile of init is printed only)."""
    table = tmp_path / "heap.csv"
    out = _ok(run_cli("heap-bench", "--ranks", "1", "2", "--pairs", "200", "--init-sizes", "1M", "--repeats", "1",
                      "--profile-init", "3", "--csv", str(table)))  # fmt: skip
    assert "heap.empty+free us/pair" in out and "init ms" in out
    assert "where init + close spends its time" in out and "own ms" in out
    columns, rows = _csv(table)
    assert columns == ["allocator_us", "bench", "close_ms", "collective_calls", "device", "full_us", "heap_bytes",
                       "init_ms", "ranks", "torch_empty_us", "transport"]  # fmt: skip
    assert {r["transport"] for r in rows if r["bench"] == "init"} == {AUTO}
    assert [(r["bench"], r["ranks"]) for r in rows] == [("alloc_free", "1"), ("alloc_free", "2"), ("init", "1"),
                                                        ("init", "2")]  # fmt: skip
    assert {r["collective_calls"] for r in rows if r["bench"] == "alloc_free"} == {"0"}


def test_rma_bench(tmp_path):
    table = tmp_path / "rma.csv"
    out = _ok(run_cli("rma-bench", "--ranks", "2", "--sizes", "16K", "--iters", "1", "--csv", str(table)))
    assert "remote atomic latency" in out and "remote atomic throughput" in out
    columns, rows = _csv(table)
    assert columns == ["rank", "section", "op", "bytes", "ranks", "ms", "GBps", "ratio_vs_local", "latency_us",
                       "ops_per_s", "transport"]  # fmt: skip
    assert {r["transport"] for r in rows} == {AUTO}
    assert [r["op"] for r in rows if r["section"] == "bandwidth"] == [
        "torch copy_", "triton local copy", "remote load", "remote store", "remote get", "remote put", "remote copy"
    ]  # fmt: skip
    assert {r["rank"] for r in rows} == {"0"}  # rank 0 measures, the others wait


def test_rma_bench_gluon(tmp_path):
    """The Gluon kernels against the Triton ones; the CSV columns are those tools/benchmarks.py reads."""
    table = tmp_path / "gluon_rma.csv"
    out = _ok(run_cli("rma-bench", "--backend", "gluon", "--ranks", "2", "--sizes", "16K", "--iters", "1", "--ops",
                      "put", "copy", "--csv", str(table)))  # fmt: skip
    assert "iris.mem.gluon" in out and "remote atomic" not in out
    columns, rows = _csv(table)
    assert columns == ["size_bytes", "op", "impl", "ranks", "seconds", "rank_gbps", "total_gbps", "vs_local",
                       "vs_triton", "launches", "dtype", "block", "warps", "device", "mps", "triton",
                       "transport"]  # fmt: skip
    assert [(r["impl"], r["op"]) for r in rows] == [(impl, op) for impl in ("gluon", "triton")
                                                    for op in ("local", "put", "copy")]  # fmt: skip
    assert all(float(r["vs_local"]) > 0 for r in rows)


def test_gluon_rma_bench_is_a_deprecated_name_of_rma_bench_backend_gluon():
    done = run_cli("gluon-rma-bench", "--ranks", "2", "--sizes", "16K", "--iters", "1", "--ops", "get")
    out = _ok(done)
    assert "gluon-rma-bench is deprecated" in done.stderr and "rma-bench --backend gluon" in done.stderr
    assert "iris.mem.gluon" in out
