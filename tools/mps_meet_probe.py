"""Why does ccl-bench at 4 ranks on one GPU under MPS sometimes time out? A probe, GPU only.

What is known (docs/architecture.md, section "Ranks sharing a GPU: a timeout under MPS"): on an
H100 under MPS, about one full ccl-bench run in two ends in CollectiveTimeoutError at an
all_reduce or reduce_scatter; during the wait every rank's host has queued all its calls (it
waits in the sample's closing event), so a rank's kernel is queued on the device and does not
start while a peer's kernel waits for it. The launch's programs fit (the occupancy probe agrees
with the driver), and halving them (2 per multiprocessor over all ranks) does not help. Most
failures fall on the call that follows the sample's spin, which every rank runs for the same
time, so the ranks' kernels become ready at nearly the same moment.

This probe repeats groups of ``--reps`` all_reduce calls behind a spin on every rank, the arms
taking turns so that each sees the same machine:

- ``equal``: the ranks agree on the spin (as ccl-bench's timing does) and spin for it;
- ``random``: each rank spins for its own random time (up to the same length);
- ``none``: no spin (the calls follow the host agreement);
- ``equal-33``, ``equal-1``: ``equal`` with ``Config(num_programs=33)`` or ``1`` (fewer programs
  polling the flags; one program is also the shape of every small call);
- ``single``: ``equal`` with one call per group, so no rank has a next call queued behind the one
  its peers wait in (if only the queued arms fail, a rank's queued successor holds the others'
  launches back);
- ``barrier``: ``equal`` with a ``ccl.barrier()`` (one program) before each call, so the call's
  many programs start once every rank has arrived and spin only briefly at its entry (if only
  this arm never fails, programs waiting at an entry keep a late rank's kernel off the GPU, and a
  one-program meeting before every multi-program launch would cure it). A failure's place counts
  launches here: even the barrier, odd the all_reduce after it.

On an H100 (docs/architecture.md, section "Ranks sharing a GPU: a timeout under MPS, and the
launch that avoids it") only ``equal``, ``random`` and ``single`` failed, never ``equal-33`` (one
program per multiprocessor over 4 ranks), so the collectives now launch that way wherever ranks
share a GPU (``iris.ccl.launch_shape.LaunchShape``; a 16 MiB two_shot at 4 ranks in 16-warp
programs over 16384 elements): the default arms now run the cure, and a run in which they no
longer fail is the check that it holds (``equal`` and ``equal-33`` are then one launch at 4
ranks of a GPU of 132 multiprocessors).

Per arm: groups, calls, failures, each failure's place in its group (0: the call after the
spin), the ranks that gave up (``CollectiveTimeoutError``) and the first rank each found missing.
``heap.wait_timeout`` is ``--timeout`` seconds, so a failure costs that much. Run under MPS
(``nvidia-cuda-mps-control -d``) and without it::

    python3 tools/mps_meet_probe.py --ranks 4 --seconds 240 --csv probe.csv

``--stamps FILE``: every rank also launches a one-program kernel before each call of a group and
after its last, which writes the device's clock (``iris.mem.triton.clock_ns``: the global timer,
one clock for every client of the GPU) when its stream reaches it, that is once the call before
has ended. After a failed group every rank's stamps go to FILE (arm, group, rank, call index,
milliseconds after the group's first stamp on any rank): a late rank whose stamp before the
failing call is on time had its call ready and not started; one whose stamp is late had its
previous call (or the stamp kernel itself) held back. The extra launches change the timing, so
run it beside a run without.
"""

from __future__ import annotations

import argparse
import csv
import random
import re
import time

import triton
import triton.language as tl

import iris.mem.triton as imt

ARMS = ("equal", "random", "none", "equal-33", "equal-1", "single", "barrier")


@imt.interpret()
@triton.jit
def _stamp(out, i):
    """Writes the device clock into ``out[i]`` once its stream reaches it (``--stamps``)."""
    tl.store(out + i, imt.clock_ns())


def _body(rank, world_size, seconds, reps, nbytes, timeout, variant, stamps=False, late_rank=-1):
    import torch

    import iris.ccl as ccl
    import iris.heap

    heap = iris.heap.init(nbytes * 4 + (64 << 20))
    heap.wait_timeout = timeout
    x = heap.randn(nbytes // 4)
    gpu = heap.device.type == "cuda"  # on CPU ranks (a check of this script) there is no spin
    rate = _spin_rate() if gpu else 0.0
    rng = random.Random(rank)
    spin_s = 2e-3
    stats = {arm: {"groups": 0, "calls": 0, "failures": 0, "places": [], "gave_up": [], "missing": []} for arm in ARMS}
    stamp = _stamp if stamps else None
    clocks = torch.zeros(reps + 1, dtype=torch.int64, device=heap.device)
    stamped = []  # (arm, group, rank, call, ms): the stamps of failed groups, on rank 0
    stop = time.monotonic() + seconds
    arm_index = 0
    since_reset = 0  # collectives since the last reset: a failure's "collective #N" counts from there
    while True:
        go = max(heap.all_gather_object(time.monotonic() < stop))  # the ranks stop together
        if not go:
            break
        arm = ARMS[arm_index % len(ARMS)]
        arm_index += 1
        cfg = ccl.Config(variant=variant, num_programs={"equal-33": 33, "equal-1": 1}.get(arm))
        if gpu:
            torch.cuda.synchronize()
        heap.all_gather_object(None)  # lines the hosts up
        spin = rng.uniform(0, spin_s) if arm == "random" else 0.0 if arm == "none" else spin_s
        if gpu and spin:
            torch.cuda._sleep(int(spin * rate))
        first = since_reset + 1
        calls = 1 if arm == "single" else reps
        launches = 2 * calls if arm == "barrier" else calls  # what "collective #N" counts
        stats[arm]["groups"] += 1
        stats[arm]["calls"] += calls
        if rank == late_rank and stats[arm]["groups"] == 1 and arm == ARMS[0]:  # --late-rank: the failure path
            time.sleep(timeout + 1)
        if stamp is not None:
            clocks.zero_()
        error = None
        try:
            for i in range(calls):
                if stamp is not None:
                    stamp[(1,)](clocks, i)
                if arm == "barrier":
                    ccl.barrier(config=cfg)
                ccl.all_reduce(x, config=cfg)
            if stamp is not None:
                stamp[(1,)](clocks, calls)
            heap.barrier()
        except Exception as e:  # a collective of the group timed out: where, then start afresh
            error = e
        if stamp is not None and max(heap.all_gather_object(error is not None)):
            if gpu:
                torch.cuda.synchronize()  # every stamp that will run has run (waits end within the bound)
            everyone = heap.all_gather_object(clocks[: calls + 1].tolist())
            t0 = min((c for row in everyone for c in row if c > 0), default=0)  # none ran: all blank
            stamped += [(arm, stats[arm]["groups"], r, i, round((c - t0) / 1e6, 3) if c > 0 else "")
                        for r, row in enumerate(everyone) for i, c in enumerate(row)]  # fmt: skip
        if error is not None:
            stats[arm]["failures"] += 1
            m = re.search(r"collective #(\d+)", str(error))
            stats[arm]["places"].append(int(m.group(1)) - first if m else -1)
            if type(error).__name__ == "CollectiveTimeoutError":  # this rank gave up, on its first missing peer
                stats[arm]["gave_up"].append(rank)
                stats[arm]["missing"].append(getattr(error, "missing_rank", -1))
            if gpu:
                torch.cuda.synchronize()
            ccl.reset()
            since_reset = -launches
        since_reset += launches
    heap.close()
    return stats, stamped


def _spin_rate() -> float:
    import torch

    cycles = 50_000_000
    torch.cuda._sleep(cycles)
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    torch.cuda._sleep(cycles)
    end.record()
    end.synchronize()
    return cycles / (start.elapsed_time(end) * 1e-3)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--ranks", type=int, default=4)
    p.add_argument("--seconds", type=float, default=240)
    p.add_argument("--reps", type=int, default=11, help="calls per group (ccl-bench: 1 line-up + 10 timed)")
    p.add_argument("--bytes", type=int, default=16 << 20)
    p.add_argument("--timeout", type=float, default=3.0, help="heap.wait_timeout (seconds)")
    p.add_argument("--variant", default="two_shot")
    p.add_argument("--csv")
    p.add_argument("--stamps", help="a CSV of the device clock around every call of each failed group")
    p.add_argument("--late-rank", type=int, default=-1,
                   help="this rank arrives --timeout + 1 s late at the first group (checks the failure path)")  # fmt: skip
    args = p.parse_args()
    from iris.testing.world import run

    done = run(_body, args.ranks, args.seconds, args.reps, args.bytes, args.timeout, args.variant, bool(args.stamps),
               args.late_rank, timeout=args.seconds + 600)  # fmt: skip
    results = [stats for stats, _ in done]
    if args.stamps:
        with open(args.stamps, "w", newline="") as f:
            w = csv.writer(f)
            w.writerow(["arm", "group", "rank", "call", "ms"])
            w.writerows(done[0][1])
    rows = []
    for arm in ARMS:
        groups = results[0][arm]["groups"]
        calls = results[0][arm]["calls"]
        failures = max(r[arm]["failures"] for r in results)
        places = sorted({p for r in results for p in r[arm]["places"]})
        gave_up = sorted(g for r in results for g in r[arm]["gave_up"])
        missing = sorted(m for r in results for m in r[arm]["missing"])
        rows.append({"arm": arm, "ranks": args.ranks, "groups": groups, "calls": calls, "failures": failures,
                     "places": " ".join(map(str, places)), "gave_up": " ".join(map(str, gave_up)),
                     "missing": " ".join(map(str, missing))})  # fmt: skip
        print(
            f"{arm:10s} groups {groups:6d} calls {calls:7d} failures {failures:4d} places {places} "
            f"gave up (ranks) {gave_up} first missing {missing}"
        )
    if args.csv:
        with open(args.csv, "w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=list(rows[0]))
            w.writeheader()
            w.writerows(rows)


if __name__ == "__main__":
    main()
