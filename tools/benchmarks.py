#!/usr/bin/env python3
"""Run every benchmark of the repository on this (GPU) machine and write ``BENCHMARKS.md``.

    python3 tools/benchmarks.py                     # all steps, then BENCHMARKS.md + docs/benchmarks/*.png
    python3 tools/benchmarks.py --steps ccl gemm    # some steps (results accumulate in --results)
    python3 tools/benchmarks.py --render-only       # BENCHMARKS.md from the results already there

A ``notes.md`` in the results folder is quoted at the top of the report.

Where one command may run only so long (the GPU machines' calls last ten minutes), run the steps in
several calls on one machine, each with ``--steps ... --budget SECONDS``, then ``--render-only``:
every call adds its steps' CSVs to ``--results`` and their exit status, seconds and commit to
``steps.json``, and the report says whether one commit ran them all.

No installs: the packages are put on PYTHONPATH from ``packages/*/src``. Ranks sharing one GPU
need MPS or every cross-rank wait costs a time slice; when run as root with
``nvidia-cuda-mps-control`` present and no daemon running, the script starts MPS for the runs
and stops it afterwards, and the report says whether MPS was on. Each step is one entry of the
examples' registry (``python -m iris.examples NAME``, one harness: options, timer, environment,
tables) that prints its tables and writes CSV (and a plot where it has one) into ``--results``;
the report quotes each figure next to its baseline from the same run.
"""

from __future__ import annotations

import argparse
import csv
import datetime
import json
import os
import platform
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import pyprojects  # beside this file: the packages' versions, each defined once

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = [sys.executable, "-m", "iris.examples"]
#: The GEMM core's sizes (MxNxK): issue targets name 8192^3, 4096^3 and 8192x8192x1024.
CORE_SIZES = ("8192x8192x8192", "4096x4096x4096", "8192x8192x1024")
#: all_reduce's auto table: every variant at sizes from one that one_shot_push holds to one at the roofline.
AUTO_VARIANTS = tuple(f"all_reduce:{v}" for v in ("one_shot", "two_shot", "rs_ag", "one_shot_push"))
AUTO_SIZES = ("1K", "4K", "16K", "32K", "64K", "256K", "1M", "4M", "16M", "64M")


@dataclass(frozen=True)
class Step:
    name: str
    title: str
    argv: tuple[str, ...]  # {csv}, {plot} and {trace} are replaced by paths in the results folder
    about: str  # what is measured and against which baseline
    plot: bool = False
    timeout: int = 900
    env: dict = field(default_factory=dict)
    then: tuple[str, ...] = ()  # a command run after argv succeeded (the same placeholders), within the same timeout


STEPS = [
    Step("heap", "iris.heap: allocation and heap start-up",
         (*EXAMPLES, "heap-bench", "--ranks", "1", "2", "4", "--transports", "cuda-ipc", "cuda-vmm", "--csv", "{csv}"),
         "heap.empty + free pairs (mixed 64 B .. 1 MiB) in microseconds per pair, next to torch.empty + drop "
         "of the same sizes (target: <= 1.5x torch); `init` is the collective start-up of a heap of the given "
         "size per transport (target: cuda-vmm within 1.2x of cuda-ipc at 4 ranks)."),
    Step("rma", "iris.mem.triton: translated remote access against a local copy (cuda-ipc heap)",
         (*EXAMPLES, "rma-bench", "--ranks", "4", "--transport", "cuda-ipc", "--csv", "{csv}"),
         "Bandwidth (bytes read + written) of remote load/store/get/put/copy through translated "
         "pointers; `ratio_vs_local` is against a plain local Triton copy of the same size in the same "
         "run (target >= 0.97 at >= 64 MiB). Atomic latency is a dependent chain on one program."),
    Step("rma_vmm", "iris.mem.triton: the same on a cuda-vmm heap",
         (*EXAMPLES, "rma-bench", "--ranks", "4", "--transport", "cuda-vmm", "--csv", "{csv}"),
         "As above, on heaps mapped through CUDA's virtual memory API (target >= 0.97 at >= 64 MiB)."),
    Step("gluon_rma", "iris.mem.gluon: Gluon remote copy against the Triton backend",
         (*EXAMPLES, "rma-bench", "--backend", "gluon", "--ops", "put", "get", "copy", "--all-turns", "--ranks", "2",
          "--csv", "{csv}"),
         "Gluon put/get/copy bandwidth; `vs_triton` is against iris.mem.triton's same operation in the "
         "same run (target >= 0.97 at >= 64 MiB), `vs_local` against a local copy."),
    Step("all_load", "iris.examples all-load", (*EXAMPLES, "all-load", "--ranks", "4", "--csv", "{csv}"),
         "Every rank loads a buffer from every rank; against a local copy."),
    Step("all_store", "iris.examples all-store", (*EXAMPLES, "all-store", "--ranks", "4", "--csv", "{csv}"),
         "Every rank stores its buffer into every rank; against a local copy."),
    Step("atomic_latency", "iris.examples atomic-latency",
         (*EXAMPLES, "atomic-latency", "--ranks", "2", "--csv", "{csv}"),
         "Round trip of a remote atomic flag between two ranks, and contended atomic_add throughput."),
    Step("ccl", "iris.ccl (Triton backend): collectives against the copy roofline",
         (*EXAMPLES, "ccl-bench", "--ranks", "4", "--csv", "{csv}", "--plot", "{plot}"),
         "Effective traffic (the bytes every rank must read and write, summed: `ccl_bench.traffic`) over "
         "the time, divided by the bandwidth of torch's copy_ moving as many bytes per device in the same "
         "run (`ratio_vs_copy`; targets: every collective >= 0.95 at >= 64 MiB and >= 0.8 at 1-16 MiB, the "
         "best all_reduce variant). The latency rows: 1 KiB from CUDA-graph replay <= 6 us at 4 ranks, "
         "eager host time <= 1.3x a bare torch launch.", plot=True),
    Step("ccl_latency2", "iris.ccl: small all_reduce at 2 ranks",
         (*EXAMPLES, "ccl-bench", "--ranks", "2", "--collectives", "all_reduce:two_shot", "--sizes", "1M",
          "--csv", "{csv}"),
         "The latency rows at 2 ranks (target: 1 KiB from CUDA-graph replay <= 4 us)."),
    Step("ccl_auto", "iris.ccl: all_reduce's variants per size, 4 ranks (the auto table)",
         (*EXAMPLES, "ccl-bench", "--ranks", "4", "--collectives", *AUTO_VARIANTS, "--sizes", *AUTO_SIZES,
          "--latency-sizes", "--csv", "{csv}"),
         "Every all_reduce variant queued at each size; the fastest against the variant `auto` picks "
         "(`iris.ccl.tuning.ALL_REDUCE_AUTO` for this device kind and world size; target: auto picks the "
         "fastest, `pick_vs_fastest` <= 1.03). The run prints the rows the table should hold."),
    Step("ccl_auto2", "iris.ccl: all_reduce's variants per size, 2 ranks (the auto table)",
         (*EXAMPLES, "ccl-bench", "--ranks", "2", "--collectives", *AUTO_VARIANTS, "--sizes", *AUTO_SIZES,
          "--latency-sizes", "--csv", "{csv}"),
         "As above at 2 ranks."),
    Step("trace", "iris.heap.tracing: a traced ccl-bench step, exported",
         (*EXAMPLES, "ccl-bench", "--ranks", "4", "--collectives", "all_reduce:two_shot", "all_gather", "--sizes",
          "64M", "--latency-sizes", "--iters", "2", "--trace", "{trace}", "--trace-events", str(1 << 20),
          "--csv", "{csv}"),
         "Two collectives at 64 MiB traced into buffers of 2^20 events a rank (4 M in all), then exported into "
         "one Chrome trace (`trace_export_s`: gathering, formatting and writing every rank's events; target "
         "< 10 s for 4 M events). The times are the traced calls'; the untraced ones are in the ccl step."),
    Step("ccl_gluon", "iris.ccl (Gluon backend)",
         (*EXAMPLES, "ccl-bench", "--ranks", "4", "--backend", "gluon", "--sizes", "1M", "16M", "64M", "256M",
          "--csv", "{csv}"),
         "As above, with `Config(backend='gluon')`."),
    Step("core", "iris.ops: the Triton GEMM core against torch.matmul (one rank)",
         (*EXAMPLES, "gemm-all-scatter", "--ranks", "1", "--sizes", *CORE_SIZES, "--csv", "{csv}"),
         "`local_gemm_ms` is `iris.ops.local_matmul` (the fused kernels' GEMM with communication off), "
         "`matmul_ms` torch.matmul on the same operands (target: >= 0.85x torch's TFLOP/s at 8192^3)."),
    Step("core_gluon", "iris.ops: the Gluon GEMM core against torch.matmul (one rank)",
         (*EXAMPLES, "gemm-all-scatter", "--ranks", "1", "--backend", "gluon", "--sizes", *CORE_SIZES,
          "--csv", "{csv}"),
         "As above with the Gluon backend (targets: >= 0.9x at 8192^3, >= 0.85x at 4096^3 and 8192x8192x1024)."),
    Step("ops", "iris.ops: fused GEMM + communication against unfused and against the limit (Triton)",
         (*EXAMPLES, "ops-bench", "--ranks", "4", "--csv", "{csv}", "--plot", "{plot}"),
         "Per op and MLP shape: the fused op, torch.matmul + the iris.ccl collective (unfused), the two parts "
         "alone, the GEMM core with communication off, and the limit max(matmul, traffic at the copy rate) "
         "measured in the same run (targets where communication is >= 30% of the parts: fused <= 1.25x the "
         "limit and >= 1.2x faster than unfused; never slower than unfused).", plot=True, timeout=1200),
    Step("ops_gluon", "iris.ops (Gluon backend)",
         (*EXAMPLES, "ops-bench", "--ranks", "4", "--backend", "gluon", "--csv", "{csv}"),
         "As above with the Gluon backend (targets: the Triton backend's, and no slower than it at any size).",
         timeout=1200),
    Step("tp_mlp_trace", "iris.ops: the merged trace of tp-mlp blocks (Triton)",
         (*EXAMPLES, "tp-mlp", "--ranks", "4", "--shapes", "4096x8192x28672", "--iters", "1", "--reps", "1",
          "--variant", "fused", "--trace", "{trace}", "--trace-events", str(1 << 20)),
         "One MLP shape traced (`Config(trace=True)` in every fused operation and collective; both operations "
         "their fused kernels, `--variant fused`), drawn by "
         "`trace-view`: one lane per rank and multiprocessor, each kernel's tiles, remote stores and loads, and "
         "waits; the table sums each phase per rank. Where computation and communication overlap, a tile's "
         "product and its peers' stores share the same stretch of time.",
         plot=True, then=(*EXAMPLES, "trace-view", "{trace}", "--png", "{plot}", "--csv", "{csv}")),
    Step("tp_mlp", "iris.ops: a tensor-parallel MLP block, fused against unfused (Triton)",
         (*EXAMPLES, "tp-mlp", "--ranks", "4", "--csv", "{csv}", "--plot", "{plot}"),
         "all_gather_matmul + GELU + matmul_reduce_scatter, each as a call without a variant runs it "
         "(`variant=\"auto\"`: the table's `fused_block` says which ran fused), against all_gather + matmul + "
         "GELU + matmul + reduce_scatter (iris.ccl), hidden 4096/8192, 1k-16k tokens (target: fused faster at "
         "every width).",
         plot=True),
]  # fmt: skip
BY_NAME = {s.name: s for s in STEPS}


def _env() -> dict:
    env = dict(os.environ)
    src = [str(p) for p in sorted((ROOT / "packages").glob("*/src"))]
    env["PYTHONPATH"] = os.pathsep.join(src + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
    env["PYTHONUNBUFFERED"] = "1"
    env.pop("TRITON_INTERPRET", None)
    return env


def _mps_running() -> bool:
    """Whether an MPS daemon runs, by the examples' own probe (``iris.examples.harness.environment.mps``)."""
    probe = "from iris.examples.harness.environment import mps; print(mps())"
    out = subprocess.run([sys.executable, "-c", probe], env=_env(), cwd=ROOT, capture_output=True, text=True)
    return out.stdout.strip() == "on"


def _start_mps() -> bool:
    """Start MPS if we may and it is not running; True when this script started it."""
    if _mps_running() or not shutil.which("nvidia-cuda-mps-control") or os.geteuid() != 0:
        return False
    return subprocess.run(["nvidia-cuda-mps-control", "-d"]).returncode == 0


def _stop_mps() -> None:
    subprocess.run(["nvidia-cuda-mps-control"], input=b"quit\n")


def run_steps(
    steps: list[Step], results: Path, step_timeout: int | None = None, budget: float | None = None
) -> dict[str, dict]:
    """Run the steps in order; with a budget (seconds), each gets at most what is left of it."""
    results.mkdir(parents=True, exist_ok=True)
    env = _env()
    commit = _commit()
    status = {}
    deadline = time.time() + budget if budget else None
    for step in steps:
        paths = {kind: results / f"{step.name}.{suffix}" for kind, suffix in (("csv", "csv"), ("plot", "png"),
                                                                                ("trace", "json"))}  # fmt: skip
        argv = [a.format(**paths) for a in step.argv]
        then = [a.format(**paths) for a in step.then]
        limit = step_timeout or step.timeout
        if deadline is not None:
            left = int(deadline - time.time())
            if left < 15:
                status[step.name] = {"rc": "skipped: the --budget was spent", "seconds": 0}
                print(f"\n=== {step.name}: skipped, {left} s of the budget left", flush=True)
                continue
            limit = min(limit, left)
        print(f"\n=== {step.name}: {' '.join(argv)}" + (f" && {' '.join(then)}" if then else ""), flush=True)
        (results / f"{step.name}.csv").unlink(missing_ok=True)
        t0 = time.time()
        with open(results / f"{step.name}.log", "w") as log:
            rc = _run(argv, env, log, limit)
            if rc == 0 and then:
                rc = _run(then, env, log, max(1, int(limit - (time.time() - t0))))
        status[step.name] = {"rc": rc, "seconds": round(time.time() - t0, 1), "commit": commit}
        print(f"=== {step.name}: rc {rc} in {status[step.name]['seconds']} s", flush=True)
        _record(results, step.name, status[step.name])
    return status


def _run(argv: list[str], env: dict, log, limit: int):
    """``argv`` under ``timeout limit`` (a hung step must not eat the whole session), its output
    to stdout and ``log``; its exit status, or why it could not start."""
    if shutil.which("timeout"):
        argv = ["timeout", str(limit), *argv]
    try:
        proc = subprocess.Popen(argv, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        for line in proc.stdout:
            sys.stdout.write(line)
            log.write(line)
        return proc.wait()
    except OSError as e:
        return f"could not start: {e}"


def _record(results: Path, name: str, entry: dict) -> None:
    """Step ``name``'s outcome into ``steps.json`` of the results, beside earlier calls' steps (a run
    split over several calls of this script keeps every step's commit and time)."""
    path = results / "steps.json"
    steps = json.loads(path.read_text()) if path.exists() else {}
    steps[name] = entry
    path.write_text(json.dumps(steps, indent=1) + "\n")


# -- the report -----------------------------------------------------------------------------------


def _fmt(value: str) -> str:
    try:
        x = float(value)
    except ValueError:
        return value
    if x != x:
        return ""
    if x.is_integer() and abs(x) < 1e15:
        return f"{int(x)}"
    return f"{x:.4g}"


def _table(rows: list[dict]) -> str:
    keys = list(rows[0])
    for r in rows[1:]:
        keys += [k for k in r if k not in keys]
    lines = ["| " + " | ".join(keys) + " |", "|" + "---|" * len(keys)]
    lines += ["| " + " | ".join(_fmt(r.get(k, "") or "") for k in keys) + " |" for r in rows]
    return "\n".join(lines)


def _machine() -> list[str]:
    env = _env()
    probe = (
        "import torch, triton, importlib.metadata as md\n"
        "print('device:', torch.cuda.get_device_name() if torch.cuda.is_available() else 'CPU only')\n"
        "print('gpus:', torch.cuda.device_count())\n"
        "print('torch:', torch.__version__, '| cuda:', torch.version.cuda, '| triton:', triton.__version__)\n"
    )
    out = subprocess.run([sys.executable, "-c", probe], env=env, capture_output=True, text=True, cwd=ROOT).stdout
    lines = out.strip().splitlines()
    try:
        smi = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version,memory.total", "--format=csv,noheader"],
                             capture_output=True, text=True).stdout.strip()  # fmt: skip
        lines.append(f"nvidia-smi: {smi}")
    except FileNotFoundError:
        pass
    versions = [f"{p.name} {p.version}" for p in sorted(pyprojects.read(ROOT).values(), key=lambda p: p.name)]
    lines.append("iris: " + ", ".join(versions))
    lines.append(f"commit: {_commit()} | python {platform.python_version()} | host CPUs {os.cpu_count()}")
    return lines


def _commit() -> str:
    """The commit measured: ``IRIS_COMMIT``, else git's HEAD (marked when the tree has changes)."""
    commit = (
        os.environ.get("IRIS_COMMIT")
        or subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True
        ).stdout.strip()
    )
    dirty = subprocess.run(
        ["git", "status", "--porcelain", "--untracked-files=no"], cwd=ROOT, capture_output=True, text=True
    ).stdout.strip()
    if commit and dirty and not os.environ.get("IRIS_COMMIT"):
        commit += " with uncommitted changes"  # what ran is not exactly that commit
    return commit or "unknown"


def _rows(results: Path, name: str) -> list[dict]:
    path = results / f"{name}.csv"
    if not path.exists():
        return []
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def _num(row: dict, key: str) -> float | None:
    try:
        return float(row.get(key) or "nan")
    except ValueError:
        return None


BIG = 64 << 20  # the targets' ">= 64 MiB"
MID = (1 << 20, 16 << 20)  # the targets' "1-16 MiB"
COLLECTIVES = ("all_reduce", "all_gather", "reduce_scatter", "all_to_all", "broadcast")


def _int(row: dict, key: str) -> int:
    return int(float(row[key]))


def _worst(what: str, target: str, values: dict, fmt: str, low_is_bad: bool = True) -> tuple[str, str, str, str]:
    """A targets row: the worst of ``values`` (label -> number) and every value in the detail."""
    worst = min(values, key=values.get) if low_is_bad else max(values, key=values.get)
    detail = ", ".join(f"{k}: {v:{fmt}}" for k, v in values.items())
    return what, target, f"{values[worst]:{fmt}} ({worst})", detail


def _ccl_targets(rows: list[dict], backend: str, ranks: int) -> list[tuple[str, str, str, str]]:
    """Per collective, the worst size of its best variant against the copy roofline, at >= 64 MiB
    (target 0.95) and at 1-16 MiB (target 0.8); the latency rows' graph replay and host cost."""
    out = []
    for label, keep, target in (
        (">= 64 MiB", lambda n: n >= BIG, 0.95),
        ("1-16 MiB", lambda n: MID[0] <= n <= MID[1], 0.8),
    ):
        worst: dict[str, float] = {}
        for coll in COLLECTIVES:
            best: dict[int, float] = {}  # size -> the best variant's ratio there
            for r in rows:
                if (
                    r.get("ratio_vs_copy")
                    and r["collective"].partition(":")[0] == coll
                    and keep(_int(r, "bytes_per_rank"))
                ):
                    size, ratio = _int(r, "bytes_per_rank"), _num(r, "ratio_vs_copy")
                    if ratio is not None:
                        best[size] = max(best.get(size, -1.0), ratio)
            if best:
                worst[coll] = min(best.values())
        if worst:
            out.append(_worst(f"ccl {backend}: collective / copy_ roofline at {label} ({ranks} ranks; worst size, "
                              "best all_reduce variant)", f">= {target}", worst, ".2f"))  # fmt: skip
    out += _latency_targets(rows, backend, ranks)
    return out


def _latency_targets(rows: list[dict], backend: str, ranks: int) -> list[tuple[str, str, str, str]]:
    """1 KiB all_reduce: CUDA-graph replay (<= 4 us at 2 ranks, <= 6 at 4) and eager host time
    against a bare torch launch (<= 1.3x), per variant."""
    small = [r for r in rows if r.get("latency") in ("True", "true", "1") and _int(r, "bytes_per_rank") == 1024]
    out = []
    graph = {r["collective"].partition(":")[2]: _num(r, "graph_us") for r in small if _num(r, "graph_us")}
    if graph:
        bound = {2: "<= 4 us", 4: "<= 6 us"}.get(ranks, "reported")
        best = min(graph, key=graph.get)
        detail = ", ".join(f"{k}: {v:.2f} us" for k, v in graph.items())
        out.append((f"ccl {backend}: 1 KiB all_reduce replayed from a CUDA graph ({ranks} ranks, best variant)", bound,
                    f"{graph[best]:.2f} us ({best})", detail))  # fmt: skip
    host = {r["collective"].partition(":")[2]: _num(r, "host_vs_launch") for r in small if _num(r, "host_vs_launch")}
    if host:
        out.append(_worst(f"ccl {backend}: 1 KiB all_reduce eager host time / bare torch launch ({ranks} ranks)",
                          "<= 1.3x", host, ".2f", low_is_bad=False))  # fmt: skip
    return out


def _auto_targets(rows: list[dict], ranks: int) -> list[tuple[str, str, str, str]]:
    """all_reduce ``"auto"``: per size, the time of the variant it picks (``auto_pick``) over the
    fastest variant's (<= 1.03: auto picks the fastest, up to noise)."""
    times: dict[int, dict[str, float]] = {}
    picks: dict[int, str] = {}
    for r in rows:
        variant = r["collective"].partition(":")[2]
        if r.get("latency") in ("True", "true", "1") or variant in ("", "auto") or not _num(r, "time_us"):
            continue
        size = _int(r, "bytes_per_rank")
        times.setdefault(size, {})[variant] = _num(r, "time_us")
        picks[size] = r.get("auto_pick") or picks.get(size, "")
    ratios = {f"{size >> 10} KiB ({picks[size]})": t[picks[size]] / min(t.values())
              for size, t in sorted(times.items()) if len(t) > 1 and picks.get(size) in t}  # fmt: skip
    if not ratios:
        return []
    return [_worst(f"ccl: all_reduce auto's pick / the fastest variant, per size ({ranks} ranks)", "<= 1.03",
                   ratios, ".2f", low_is_bad=False)]  # fmt: skip


def _core_targets(rows: list[dict], backend: str, bounds: dict[str, float]) -> list[tuple[str, str, str, str]]:
    """The GEMM core (``local_gemm_ms``) against torch.matmul (``matmul_ms``) on the same operands."""
    ratios = {r["size"]: _num(r, "matmul_ms") / _num(r, "local_gemm_ms") for r in rows
              if _num(r, "local_gemm_ms") and _num(r, "matmul_ms")}  # fmt: skip
    out = []
    for size, bound in bounds.items():
        if size in ratios:
            out.append((f"ops {backend}: GEMM core / torch.matmul TFLOP/s at {size} (bf16, one rank)", f">= {bound}",
                        f"{ratios[size]:.2f}", ", ".join(f"{k}: {v:.2f}" for k, v in ratios.items())))  # fmt: skip
    return out


def _ops_targets(rows: list[dict], backend: str) -> list[tuple[str, str, str, str]]:
    """Where communication is >= 30% of the parts: fused <= 1.25x the limit and >= 1.2x faster than
    unfused; everywhere: never slower than unfused."""
    rows = [r for r in rows if _num(r, "fused_ms")]
    if not rows:
        return []
    key = lambda r: f"{r['op']} {r['shape']}"  # noqa: E731
    heavy = [r for r in rows if (_num(r, "comm_share") or 0) >= 0.3]
    out = []
    if heavy:
        out.append(_worst(f"ops {backend}: fused / limit where communication >= 30%", "<= 1.25x",
                          {key(r): _num(r, "fused_vs_limit") for r in heavy}, ".2f", low_is_bad=False))  # fmt: skip
        out.append(_worst(f"ops {backend}: unfused / fused where communication >= 30%", ">= 1.2x",
                          {key(r): _num(r, "speedup") for r in heavy}, ".2f"))  # fmt: skip
    out.append(_worst(f"ops {backend}: unfused / fused kernel, every op and shape", ">= 1.0x",
                      {key(r): _num(r, "speedup") for r in rows}, ".2f"))  # fmt: skip
    auto = {key(r) + f" ({r.get('auto_variant')})": _num(r, "auto_speedup") for r in rows if _num(r, "auto_speedup")}
    if auto:
        out.append(_worst(f"ops {backend}: unfused / the operation as called (variant auto), every op and shape",
                          ">= 1.0x", auto, ".2f"))  # fmt: skip
    return out


def _gluon_vs_triton(triton_rows: list[dict], gluon_rows: list[dict]) -> list[tuple[str, str, str, str]]:
    """Gluon's fused time over Triton's, per op and shape (no slower: <= 1.0)."""
    triton = {(r["op"], r["shape"]): _num(r, "fused_ms") for r in triton_rows if _num(r, "fused_ms")}
    ratios = {f"{op} {shape}": _num(r, "fused_ms") / triton[op, shape] for r in gluon_rows
              for op, shape in [(r["op"], r["shape"])] if (op, shape) in triton and _num(r, "fused_ms")}  # fmt: skip
    if not ratios:
        return []
    return [_worst("ops: Gluon fused time / Triton fused time, every op and shape", "<= 1.0", ratios, ".2f",
                   low_is_bad=False)]  # fmt: skip


def _rma_targets(rows: list[dict], transport: str) -> list[tuple[str, str, str, str]]:
    rma = [r for r in rows if r.get("section") == "bandwidth" and r.get("ratio_vs_local")
           and int(float(r["bytes"])) >= BIG and "local" not in r["op"] and "torch" not in r["op"]]  # fmt: skip
    if not rma:
        return []
    per_op: dict[str, float] = {}
    for r in rma:
        per_op[r["op"]] = min(per_op.get(r["op"], 9.0), _num(r, "ratio_vs_local"))
    return [_worst(f"mem.triton on a {transport} heap: remote access / local Triton copy at >= 64 MiB (worst size)",
                   ">= 0.97", per_op, ".3f")]  # fmt: skip


def _heap_targets(rows: list[dict]) -> list[tuple[str, str, str, str]]:
    out = []
    alloc = [r for r in rows if r.get("bench") == "alloc_free"]
    if alloc:
        ratios = {f"{r['ranks']} ranks": _num(r, "full_us") / _num(r, "torch_empty_us") for r in alloc
                  if _num(r, "torch_empty_us")}  # fmt: skip
        if ratios:
            out.append(_worst("heap: heap.empty + free / torch.empty + drop, per pair", "<= 1.5x", ratios, ".2f",
                              low_is_bad=False))  # fmt: skip
        calls = sum(int(float(r["collective_calls"])) for r in alloc)
        out.append(("heap: collective calls during the timed allocations", "0", str(calls),
                    "summed over ranks and world sizes"))  # fmt: skip
    init = {(r.get("transport"), _int(r, "heap_bytes")): _num(r, "init_ms") for r in rows
            if r.get("bench") == "init" and r.get("ranks") == "4"}  # fmt: skip
    ratios = {f"{size >> 20} MiB": init["cuda-vmm", size] / init["cuda-ipc", size] for _, size in init
              if ("cuda-vmm", size) in init and ("cuda-ipc", size) in init and init["cuda-ipc", size]}  # fmt: skip
    if ratios:
        out.append(_worst("heap: init time at 4 ranks, cuda-vmm / cuda-ipc", "<= 1.2x", ratios, ".2f",
                          low_is_bad=False))  # fmt: skip
    return out


def targets(results: Path) -> list[tuple[str, str, str, str]]:
    """(what, target, measured, detail) for every target the issues name, from the CSVs alone."""
    out = _heap_targets(_rows(results, "heap"))
    out += _rma_targets(_rows(results, "rma"), "cuda-ipc")
    out += _rma_targets(_rows(results, "rma_vmm"), "cuda-vmm")
    gluon = [r for r in _rows(results, "gluon_rma") if r.get("impl") == "gluon" and r.get("vs_triton")
             and r.get("op") != "local" and int(float(r["size_bytes"])) >= BIG]  # fmt: skip
    if gluon:
        values = {f"{r['op']} {int(float(r['size_bytes'])) >> 20} MiB": _num(r, "vs_triton") for r in gluon}
        out.append(_worst("mem.gluon: Gluon put/get/copy / Triton backend at >= 64 MiB", ">= 0.97", values, ".3f"))
    out += _ccl_targets(_rows(results, "ccl"), "triton", 4)
    out += _latency_targets(_rows(results, "ccl_latency2"), "triton", 2)
    out += _auto_targets(_rows(results, "ccl_auto"), 4)
    out += _auto_targets(_rows(results, "ccl_auto2"), 2)
    traced = [r for r in _rows(results, "trace") if _num(r, "trace_export_s")]
    if traced:
        r = traced[0]
        seconds, events = _num(r, "trace_export_s"), _int(r, "trace_events")
        out.append(("trace: export of a traced ccl-bench step (4 ranks, buffers of 2^20 events)",
                    "< 10 s for 4 M events", f"{seconds:.1f} s for {events} events",
                    f"{seconds / max(events, 1) * 4e6:.1f} s per 4 M events; {r.get('trace_dropped')} events found "
                    "the buffers full"))  # fmt: skip
    out += _ccl_targets(_rows(results, "ccl_gluon"), "gluon", 4)
    out += _core_targets(_rows(results, "core"), "triton", {"8192x8192x8192": 0.85})
    out += _core_targets(_rows(results, "core_gluon"), "gluon",
                         {"8192x8192x8192": 0.9, "4096x4096x4096": 0.85, "8192x8192x1024": 0.85})  # fmt: skip
    out += _ops_targets(_rows(results, "ops"), "triton")
    out += _ops_targets(_rows(results, "ops_gluon"), "gluon")
    out += _gluon_vs_triton(_rows(results, "ops"), _rows(results, "ops_gluon"))
    tp = [r for r in _rows(results, "tp_mlp") if _num(r, "speedup")]
    if tp:
        out.append(_worst("tp-mlp: unfused / fused block, every width and token count", "> 1.0x",
                          {f"{r['shape']}": _num(r, "speedup") for r in tp}, ".2f"))  # fmt: skip
    return out


def render(results: Path, out: Path, mps: bool) -> None:
    plots = out.parent / "docs" / "benchmarks"
    parts = [
        "# Benchmarks",
        "",
        f"Produced by `python3 tools/benchmarks.py` on {datetime.date.today().isoformat()}. "
        f"Ranks shared the GPU{' under MPS' if mps else ' without MPS (each cross-rank wait costs a time slice)'}. "
        "Every ratio is against a baseline measured in the same run of the same program.",
        "",
        *[f"- {line}" for line in (results / "machine.txt").read_text().splitlines()],
        "",
    ]
    notes = results / "notes.md"  # what the runs' own output cannot say (how they were split, corrections)
    if notes.exists():
        parts += ["## About this report", "", notes.read_text().strip(), ""]
    parts += _steps_section(results)
    found = targets(results)
    if found:
        parts += ["## Targets", "", "Each target the issues name, against its figure in the tables below.", ""]
        parts += ["| what | target | measured | detail |", "|---|---|---|---|"]
        parts += [f"| {w} | {t} | {m} | {d} |" for w, t, m, d in found]
        parts += [""]
    for step in STEPS:
        if not (results / f"{step.name}.csv").exists():
            continue  # not run, or failed: the Steps table says which, and no older figure stands in
        parts += [f"## {step.title}", "", step.about, ""]
        rows = _rows(results, step.name)
        shown = " ".join(a.replace(sys.executable, "python3") for a in step.argv)
        if step.then:
            shown += " && " + " ".join(a.replace(sys.executable, "python3") for a in step.then)
        parts += [f"Command: `{shown}`", ""]
        parts += [_table(rows) if rows else "_(no rows)_", ""]
        png = results / f"{step.name}.png"
        if step.plot and png.exists():
            plots.mkdir(parents=True, exist_ok=True)
            shutil.copy(png, plots / png.name)
            parts += [f"![{step.title}](docs/benchmarks/{png.name})", ""]
    out.write_text("\n".join(parts))
    print(f"wrote {out}")


def _steps_section(results: Path) -> list[str]:
    """The steps behind the report: each one's exit status, seconds and commit (``steps.json``), and
    whether they all ran at one commit (a report whose tables come from several is said to be)."""
    path = results / "steps.json"
    if not path.exists():
        return []
    steps = json.loads(path.read_text())
    ran = [n for n in BY_NAME if n in steps]
    commits = sorted({steps[n].get("commit", "unknown") for n in ran})
    if len(commits) == 1:
        head = f"Every step below ran at commit {commits[0]}."
    else:
        head = (
            "**The steps ran at different commits** ("
            + "; ".join(f"{c}: {', '.join(n for n in ran if steps[n].get('commit', 'unknown') == c)}" for c in commits)
            + "): the tables do not describe one program."
        )
    lines = ["## Steps", "", head, "", "| step | exit | seconds | commit |", "|---|---|---|---|"]
    for n in BY_NAME:
        if n not in steps:
            lines.append(f"| {n} | not run | | |")
        elif not (results / f"{n}.csv").exists():
            lines.append(f"| {n} | {steps[n]['rc']} (no table) | {steps[n]['seconds']} | {steps[n].get('commit', '')} |")
        else:
            lines.append(f"| {n} | {steps[n]['rc']} | {steps[n]['seconds']} | {steps[n].get('commit', '')} |")
    return lines + [""]


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--steps", nargs="+", choices=list(BY_NAME), help="run only these steps (default: all)")
    p.add_argument("--results", type=Path, default=ROOT / "benchmark-results", help="CSV/PNG/log folder")
    p.add_argument("--out", type=Path, default=ROOT / "BENCHMARKS.md")
    p.add_argument("--render-only", action="store_true", help="write the report from the results already there")
    p.add_argument("--no-mps", action="store_true", help="do not start MPS")
    p.add_argument("--step-timeout", type=int, help="seconds each step may run (default: the step's own)")
    p.add_argument("--budget", type=float, help="seconds all the steps together may run; later steps are skipped")
    args = p.parse_args(argv)
    status, started = {}, False
    if not args.render_only:
        started = not args.no_mps and _start_mps()
        try:
            steps = [BY_NAME[n] for n in args.steps] if args.steps else STEPS
            status = run_steps(steps, args.results, args.step_timeout, args.budget)
        finally:
            mps = _mps_running()
            if started:
                _stop_mps()
        (args.results / "mps.txt").write_text("on\n" if mps else "off\n")
        (args.results / "machine.txt").write_text("\n".join(_machine()) + "\n")
    mps_file = args.results / "mps.txt"
    mps = mps_file.exists() and mps_file.read_text().strip() == "on"
    render(args.results, args.out, mps)
    failed = [n for n, s in status.items() if s["rc"] != 0]
    if failed:
        print(f"steps that failed: {', '.join(failed)}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
