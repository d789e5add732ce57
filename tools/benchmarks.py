#!/usr/bin/env python3
"""Run every benchmark of the repository on this (GPU) machine and write ``BENCHMARKS.md``.

    python3 tools/benchmarks.py                     # all steps, then BENCHMARKS.md + docs/benchmarks/*.png
    python3 tools/benchmarks.py --steps ccl gemm    # some steps (results accumulate in --results)
    python3 tools/benchmarks.py --render-only       # BENCHMARKS.md from the results already there

A ``notes.md`` in the results folder is quoted at the top of the report.

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


@dataclass(frozen=True)
class Step:
    name: str
    title: str
    argv: tuple[str, ...]  # {csv} and {plot} are replaced by paths in the results folder
    about: str  # what is measured and against which baseline
    plot: bool = False
    timeout: int = 900
    env: dict = field(default_factory=dict)


STEPS = [
    Step("heap", "iris.heap: allocation and heap start-up",
         (*EXAMPLES, "heap-bench", "--ranks", "1", "2", "4", "--csv", "{csv}"),
         "heap.empty + free pairs (mixed 64 B .. 1 MiB) in microseconds per pair; target <= 5 us. "
         "`init` is the collective start-up of a heap of the given size."),
    Step("rma", "iris.mem.triton: translated remote access against a local copy",
         (*EXAMPLES, "rma-bench", "--ranks", "4", "--csv", "{csv}"),
         "Bandwidth (bytes read + written) of remote load/store/get/put/copy through translated "
         "pointers; `ratio_vs_local` is against a plain local Triton copy of the same size in the same "
         "run (target >= 0.97 at >= 64 MiB). Atomic latency is a dependent chain on one program."),
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
         "Effective traffic (bytes every rank must read and write, summed) over the time, divided by "
         "the bandwidth of torch's copy_ in the same run (`ratio_vs_copy`; target >= 0.85 at >= 64 MiB "
         "for all_gather, reduce_scatter and the best all_reduce).", plot=True),
    Step("ccl_gluon", "iris.ccl (Gluon backend)",
         (*EXAMPLES, "ccl-bench", "--ranks", "4", "--backend", "gluon", "--sizes", "1M", "64M", "256M",
          "--csv", "{csv}"),
         "As above, with `Config(backend='gluon')`."),
    Step("gemm", "Fused GEMM all-scatter against matmul + all_gather (Triton)",
         (*EXAMPLES, "gemm-all-scatter", "--ranks", "4", "--csv", "{csv}", "--plot", "{plot}"),
         "Each rank computes its column block of C = A.B and stores every tile into every rank's C; "
         "the baseline is torch.matmul then iris.ccl.all_gather (target: fused >= 1.3x).", plot=True),
    Step("gemm_gluon", "Fused GEMM all-scatter (Gluon)",
         (*EXAMPLES, "gemm-all-scatter-gluon", "--ranks", "4", "--csv", "{csv}", "--plot", "{plot}"),
         "The same with the Gluon kernel.", plot=True),
    Step("ops", "iris.ops: fused GEMM + communication against unfused and against the limit (Triton)",
         (*EXAMPLES, "ops-bench", "--ranks", "4", "--csv", "{csv}", "--plot", "{plot}"),
         "Per op and MLP shape: the fused op, torch.matmul + the iris.ccl collective (unfused), the two parts "
         "alone, the GEMM core with communication off, and the limit max(matmul, traffic at the copy rate) "
         "measured in the same run (targets: fused <= 1.25x the limit where communication >= 30%, never "
         "slower than unfused; core >= 0.85x torch.matmul at 8192^3).", plot=True, timeout=1200),
    Step("tp_mlp", "iris.ops: a tensor-parallel MLP block, fused against unfused (Triton)",
         (*EXAMPLES, "tp-mlp", "--ranks", "4", "--csv", "{csv}", "--plot", "{plot}"),
         "all_gather_matmul + GELU + matmul_reduce_scatter against all_gather + matmul + GELU + matmul + "
         "reduce_scatter (iris.ccl), hidden 4096/8192, 1k-16k tokens (target: fused faster at every width).",
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
    status = {}
    deadline = time.time() + budget if budget else None
    for step in steps:
        argv = [a.format(csv=results / f"{step.name}.csv", plot=results / f"{step.name}.png") for a in step.argv]
        limit = step_timeout or step.timeout
        if deadline is not None:
            left = int(deadline - time.time())
            if left < 15:
                status[step.name] = {"rc": "skipped: the --budget was spent", "seconds": 0}
                print(f"\n=== {step.name}: skipped, {left} s of the budget left", flush=True)
                continue
            limit = min(limit, left)
        if shutil.which("timeout"):  # a hung step must not eat the whole session
            argv = ["timeout", str(limit), *argv]
        print(f"\n=== {step.name}: {' '.join(argv)}", flush=True)
        (results / f"{step.name}.csv").unlink(missing_ok=True)
        t0 = time.time()
        with open(results / f"{step.name}.log", "w") as log:
            try:
                proc = subprocess.Popen(
                    argv, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
                )
                for line in proc.stdout:
                    sys.stdout.write(line)
                    log.write(line)
                rc = proc.wait()
            except OSError as e:
                rc = f"could not start: {e}"
        status[step.name] = {"rc": rc, "seconds": round(time.time() - t0, 1)}
        print(f"=== {step.name}: rc {rc} in {status[step.name]['seconds']} s", flush=True)
    return status


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
    lines.append(f"commit: {commit or 'unknown'} | python {platform.python_version()} | host CPUs {os.cpu_count()}")
    return lines


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


def _ccl_targets(rows: list[dict], backend: str) -> list[tuple[str, str, str, str]]:
    """Worst size at >= 64 MiB of all_gather, reduce_scatter and the best all_reduce variant."""
    out = []
    main = [r for r in rows if r.get("ratio_vs_copy") and int(float(r["bytes_per_rank"])) >= BIG]
    for coll in ("all_gather", "reduce_scatter", "all_reduce"):
        best: dict[int, tuple[float, str]] = {}  # size -> (best ratio, its variant)
        for r in main:
            name, _, variant = r["collective"].partition(":")
            if name == coll:
                size, ratio = int(float(r["bytes_per_rank"])), _num(r, "ratio_vs_copy")
                if ratio is not None and ratio > best.get(size, (-1.0, ""))[0]:
                    best[size] = (ratio, variant or "auto")
        if best:
            worst = min(best, key=lambda k: best[k][0])
            detail = ", ".join(f"{k >> 20} MiB: {best[k][0]:.2f} ({best[k][1]})" for k in sorted(best))
            out.append(
                (f"ccl {backend}: {coll} / copy_ at >= 64 MiB (4 ranks)", ">= 0.85", f"{best[worst][0]:.2f}", detail)
            )
    latency = [
        r for r in rows if r.get("latency") in ("True", "true", "1") and int(float(r["bytes_per_rank"])) <= 64 << 10
    ]
    if latency:
        by_size: dict[int, tuple[float, str, float | None]] = {}
        for r in latency:
            size, t = int(float(r["bytes_per_rank"])), _num(r, "time_us")
            if t is not None and t < by_size.get(size, (float("inf"), ""))[0]:
                by_size[size] = (t, r["collective"].partition(":")[2], _num(r, "call_us"))
        # time_us: device time per call in a queued stream; call_us (newer CSVs): one lone call,
        # the host's launch path included
        detail = ", ".join(
            f"{k >> 10} KiB: {v[0]:.1f} us" + (f" ({v[2]:.1f} us alone)" if v[2] is not None else "") + f" ({v[1]})"
            for k, v in sorted(by_size.items())
        )
        calls = [v[2] for v in by_size.values() if v[2] is not None]
        measured = f"{max(v[0] for v in by_size.values()):.1f} us"
        if calls:
            measured += f" queued, {max(calls):.1f} us alone"
        out.append((f"ccl {backend}: all_reduce latency <= 64 KiB (best variant)", "reported", measured, detail))
    return out


def targets(results: Path) -> list[tuple[str, str, str, str]]:
    """(what, target, measured, detail) for every target the issues name, from the CSVs alone."""
    out = []
    heap = [r for r in _rows(results, "heap") if r.get("bench") == "alloc_free"]
    if heap:
        worst = max(heap, key=lambda r: _num(r, "full_us") or 0)
        calls = sum(int(float(r["collective_calls"])) for r in heap)
        detail = ", ".join(f"{r['ranks']} ranks: {float(r['full_us']):.2f} us" for r in heap)
        out.append(
            (
                "heap: heap.empty + free, us per pair (worst world size)",
                "<= 5 us",
                f"{float(worst['full_us']):.2f} us",
                detail,
            )
        )
        out.append(
            (
                "heap: collective calls during the timed allocations",
                "0",
                str(calls),
                "summed over ranks and world sizes",
            )
        )
    rma = [r for r in _rows(results, "rma") if r.get("section") == "bandwidth" and r.get("ratio_vs_local")
           and int(float(r["bytes"])) >= BIG and "local" not in r["op"] and "torch" not in r["op"]]  # fmt: skip
    if rma:
        worst = min(rma, key=lambda r: _num(r, "ratio_vs_local"))
        per_op: dict[str, float] = {}
        for r in rma:
            per_op[r["op"]] = min(per_op.get(r["op"], 9.0), _num(r, "ratio_vs_local"))
        detail = ", ".join(f"{op}: {v:.3f}" for op, v in per_op.items())
        out.append(("mem.triton: translated remote access / local Triton copy at >= 64 MiB (worst op, size, rank)",
                    ">= 0.97", f"{_num(worst, 'ratio_vs_local'):.3f}", f"worst per op: {detail}"))  # fmt: skip
    gluon = [r for r in _rows(results, "gluon_rma") if r.get("impl") == "gluon" and r.get("vs_triton")
             and r.get("op") != "local" and int(float(r["size_bytes"])) >= BIG]  # fmt: skip
    if gluon:
        worst = min(gluon, key=lambda r: _num(r, "vs_triton"))
        detail = ", ".join(
            f"{r['op']} {int(float(r['size_bytes'])) >> 20} MiB: {float(r['vs_triton']):.3f}" for r in gluon
        )
        out.append(("mem.gluon: Gluon put/get/copy / Triton backend at >= 64 MiB (worst)", ">= 0.97",
                    f"{_num(worst, 'vs_triton'):.3f}", detail))  # fmt: skip
    out += _ccl_targets(_rows(results, "ccl"), "triton")
    out += _ccl_targets(_rows(results, "ccl_gluon"), "gluon")
    for name in ("gemm", "gemm_gluon"):
        rows = [r for r in _rows(results, name) if r.get("speedup")]
        if rows:
            best = max(rows, key=lambda r: _num(r, "speedup"))
            detail = ", ".join(
                f"{r['M']}x{r['N']}x{r['K']}: {float(r['speedup']):.2f}x (comm {float(r['comm_share']):.0%})"
                for r in rows
            )
            out.append((f"{name.replace('_', ' ')}: fused / (matmul + all_gather), best of the sweep", ">= 1.3x",
                        f"{float(best['speedup']):.2f}x", detail))  # fmt: skip
    return out


def render(results: Path, out: Path, status: dict, mps: bool) -> None:
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
    found = targets(results)
    if found:
        parts += ["## Targets", "", "Each target the issues name, against its figure in the tables below.", ""]
        parts += ["| what | target | measured | detail |", "|---|---|---|---|"]
        parts += [f"| {w} | {t} | {m} | {d} |" for w, t, m, d in found]
        parts += [""]
    for step in STEPS:
        parts += [f"## {step.title}", "", step.about, ""]
        if not (results / f"{step.name}.csv").exists():
            why = status.get(step.name, {}).get("rc", "not run")
            parts += [f"_Not measured in this report (step `{step.name}`: {why})._", ""]
            continue
        rows = _rows(results, step.name)
        parts += [f"Command: `{' '.join(a.replace(sys.executable, 'python3') for a in step.argv)}`", ""]
        parts += [_table(rows) if rows else "_(no rows)_", ""]
        png = results / f"{step.name}.png"
        if step.plot and png.exists():
            plots.mkdir(parents=True, exist_ok=True)
            shutil.copy(png, plots / png.name)
            parts += [f"![{step.title}](docs/benchmarks/{png.name})", ""]
    out.write_text("\n".join(parts))
    print(f"wrote {out}")


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
    render(args.results, args.out, status, mps)
    failed = [n for n, s in status.items() if s["rc"] != 0]
    if failed:
        print(f"steps that failed: {', '.join(failed)}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
