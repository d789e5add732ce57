"""Run one pytest selection as several pytest processes at once (no pytest-xdist needed).

    python3 tools/parallel-tests.py --jobs 8 [--timeout 500] [--logs DIR] -- <pytest arguments>

For a GPU machine with a cold Triton cache: most of a GPU test's time is compiling, one kernel
after another in each process, and a test's world sizes compile different kernels (``W`` is a
constexpr), so tests that run side by side compile side by side. The selection is collected once
(``pytest --collect-only -q``); its tests are dealt to the jobs in collection order, one each in
turn and back again (0, 1, .., J-1, J-1, .., 0, ...), so the parametrizations of one test (its
world sizes, its dtypes) spread over the jobs: dealt one way only, J jobs and J world sizes gave
one job every test of the largest world. Each job is ``pytest -v <its tests> <the options among
the arguments>`` with its output in ``DIR/job-N.log`` (an earlier run's logs there are removed);
a job still running at ``--timeout`` seconds gets SIGINT, so pytest still prints what passed. The
tests no job reported an outcome for (a stopped or crashed job's rest) are written to
``DIR/not-run.txt`` and those that failed or errored to ``DIR/failed.txt``, one id a line, each
file removed when it would be empty: ``@DIR/not-run.txt`` as the pytest arguments of a later run
(pytest 8.2 or later) runs just those.
Prints each job's summary line and the totals, counted from the tests' own lines (a stopped job
may print no summary); exits 1 if a test failed, errored, was refused (below) or did not run, or a
job was stopped or ended other than by pytest's own exit.

``--times FILE`` (seconds per test of an earlier run: ``tools/gpu-test-times/<layer>.txt``, which
``tools/gpu-tests.sh`` passes where it exists) deals the longest tests first, each to the job with
the least time so far, so the jobs end together: dealt in turns, a cold iris-ccl run's eight jobs
ended between 297 and 429 s. The jobs then report their durations, and the run writes every
test's into ``DIR/times.txt`` (this run's over the file's), to replace the file with.

Tests marked ``alone`` (a process killed while its kernel runs: under MPS that faults the CUDA
context of every process on the GPU, so a parallel job's tests would fail with it) are held back
and run after the parallel jobs, in one job of their own (``DIR/job-alone.log``), before the same
``--timeout``.

Under MPS, mind the server's client limit (48 clients a GPU since Volta): each job's session
keeps one World per world size it ran (up to 1 + 2 + 3 + 4 = 10 processes with a CUDA context,
11 with the session's own), and some tests launch ranks of their own (an iris-examples CLI test:
up to 4 more). Past the limit CUDA refuses new processes ("CUDA-capable device(s) is/are busy or
unavailable"): four jobs over iris-ccl peaked at 41 CUDA processes, eight reached the limit (31
of 244 tests refused on an H100). A test whose failure report carries that message was refused,
not failed (``IRIS_TEST_MAX_RANKS=4`` bounds a job's session to 4 rank processes, 5 with its own, plus
what a test starts itself: ``iris.testing.world.WorldPool``): once the jobs have ended, the refused tests run again in half as many jobs, and again
until none is refused or one job was refused too (logs ``DIR/retry<N>-job-<M>.log``); the totals
and ``failed.txt`` count each test's last run, and the output says how many were retried. A test
that failed any other way is never run again.
"""

from __future__ import annotations

import argparse
import os
import re
import signal
import statistics
import subprocess
import sys
import time

from parallel_tests_plugin import REFUSED as _REFUSED  # beside this file: one spelling of the message

_COUNTS = re.compile(r"(\d+) (passed|failed|skipped|errors?|deselected|xfailed|xpassed)")


def _collect(pytest_args: list[str], marked: str | None = None) -> list[str]:
    """The selection's test ids; ``marked``: only those with that marker (none is no error)."""
    quiet = _without_verbosity(pytest_args)  # one -q: one id a line
    if marked is not None:
        quiet = [*quiet, "-m", marked]  # with a -m of the caller's: pytest takes the last
    done = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", *quiet],
                          capture_output=True, text=True)  # fmt: skip
    ids = [line for line in done.stdout.splitlines() if "::" in line and not line.startswith(" ")]
    if done.returncode not in (0, 5) or not (ids or marked):
        sys.stderr.write(done.stdout[-4000:] + done.stderr[-4000:])
        raise SystemExit(f"collection failed (pytest exit {done.returncode}, {len(ids)} tests)")
    return [_from_here(t, pytest_args) for t in ids]


def _from_here(test_id: str, pytest_args: list[str]) -> str:
    """``test_id`` as the jobs, run from this directory, find it. pytest names a test by its file's
    path from the run's root directory, which is not this one when the selection lies elsewhere:
    then the id's file is looked for under each selected path's folder and their parents."""
    path, sep, rest = test_id.partition("::")
    if os.path.exists(path):
        return test_id
    for arg in pytest_args:
        base = os.path.abspath(arg.partition("::")[0])
        if not os.path.exists(base):
            continue
        folder = base if os.path.isdir(base) else os.path.dirname(base)
        while True:
            candidate = os.path.join(folder, path)
            if os.path.exists(candidate):
                return candidate + sep + rest
            parent = os.path.dirname(folder)
            if parent == folder:
                break
            folder = parent
    return test_id  # not found: the job reports it not run


def _without_verbosity(pytest_args: list[str]) -> list[str]:
    return [a for a in pytest_args if not re.fullmatch(r"-[qv]+|--quiet|--verbose", a)]


def _deal(ids: list[str], jobs: int, times: dict[str, float] | None = None) -> list[list[str]]:
    """Round after round, one test to each job, every other round in reverse job order; with
    ``times`` (seconds per test id, from an earlier run), longest first, each to the job with the
    least time so far (a test without a time counts the median of those with one). Each job's
    tests keep their collection order."""
    shards: list[list[str]] = [[] for _ in range(min(jobs, len(ids)))]
    if times:
        median = statistics.median([times[t] for t in ids if t in times] or [1.0])
        weight = {t: times.get(t, median) for t in ids}
        load = [0.0] * len(shards)
        for test in sorted(ids, key=lambda t: -weight[t]):  # stable: ties in collection order
            seat = load.index(min(load))
            shards[seat].append(test)
            load[seat] += weight[test]
        order = {t: i for i, t in enumerate(ids)}
        return [sorted(shard, key=order.__getitem__) for shard in shards]
    for i, test in enumerate(ids):
        turn, seat = divmod(i, len(shards))
        shards[seat if turn % 2 == 0 else len(shards) - 1 - seat].append(test)
    return shards


_DURATION = re.compile(r"^([0-9.]+)s?\s+(?:(?:call|setup|teardown)\s+)?(\S+::\S.*?)\s*$")


def read_times(path: str) -> dict[str, float]:
    """Seconds per test id from ``path``: lines ``SECONDS TEST_ID`` (what ``--times`` writes) or
    pytest's ``--durations`` lines (``1.23s call TEST_ID``: a test's phases add up)."""
    times: dict[str, float] = {}
    with open(path) as f:
        for line in f:
            m = _DURATION.match(line.strip())
            if m:
                times[m.group(2)] = times.get(m.group(2), 0.0) + float(m.group(1))
    return times


def _write_times(path: str, logs: list[str], earlier: dict[str, float]) -> None:
    """``earlier`` updated with the durations the jobs' logs report, one ``SECONDS TEST_ID`` a line."""
    times = dict(earlier)
    for log in logs:
        ran = read_times(log)
        times.update(ran)
    with open(path, "w") as f:
        f.writelines(f"{times[t]:.2f} {t}\n" for t in sorted(times))


_OUTCOMES = ("PASSED", "FAILED", "SKIPPED", "ERROR", "XFAIL", "XPASS")
_TOTALS = {"PASSED": "passed", "FAILED": "failed", "SKIPPED": "skipped", "ERROR": "errors", "XFAIL": "xfailed",
           "XPASS": "xpassed", "REFUSED": "refused"}  # fmt: skip


def _outcomes(log: str, shard: list[str]) -> dict[str, set[str]]:
    """Each test of ``shard`` with the outcomes its verbose log lines report (none: it never ran;
    a test that fails in teardown reports both PASSED and ERROR)."""
    return {t: {o for o in _OUTCOMES if any(f"{name} {o}" in log for name in _printed(t))} for t in shard}


def _printed(test_id: str) -> tuple[str, ...]:
    """How a job's verbose lines may name ``test_id``: as given, and for an absolute path (a
    selection outside this directory, ``_from_here``) by its path from here, as pytest prints it."""
    path, sep, rest = test_id.partition("::")
    if not os.path.isabs(path):
        return (test_id,)
    return test_id, os.path.relpath(path) + sep + rest


def _options(pytest_args: list[str]) -> list[str]:
    """The arguments that are not paths or node ids (what every job passes on)."""
    out, skip_next = [], False
    takes_value = {"-k", "-m", "-p", "-c", "-o", "--deselect", "--durations", "--rootdir", "--basetemp"}
    for a in pytest_args:
        if skip_next:
            out.append(a)
            skip_next = False
        elif a.startswith("-"):
            out.append(a)
            skip_next = a in takes_value
        # a path or a node id: the collected ids stand for it
    return out


def _summary(log: str) -> str:
    lines = [line for line in log.splitlines() if _COUNTS.search(line) and " in " in line]
    return lines[-1].strip("= ") if lines else "(no summary: the job stopped before pytest printed one)"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 2)
    parser.add_argument("--timeout", type=float, default=None, help="seconds before a job gets SIGINT")
    parser.add_argument("--logs", default="parallel-tests-logs")
    parser.add_argument("--times", help="seconds per test from an earlier run (see read_times): deal the longest "
                        "first, each to the least loaded job; the run writes its own into LOGS/times.txt")  # fmt: skip
    parser.add_argument("pytest_args", nargs=argparse.REMAINDER)
    args = parser.parse_args(argv)
    pytest_args = args.pytest_args[1:] if args.pytest_args[:1] == ["--"] else args.pytest_args
    if args.jobs < 1:
        parser.error("--jobs must be at least 1")
    ids = _collect(pytest_args)
    alone = [t for t in _collect(pytest_args, "alone") if t in ids]
    os.makedirs(args.logs, exist_ok=True)
    for name in os.listdir(args.logs):  # an earlier run's logs would be read as this run's
        if re.fullmatch(r"(retry\d+-)?job-(\d+|alone)\.(log|refused)", name):
            os.remove(os.path.join(args.logs, name))
    options = ["-v", *_without_verbosity(_options(pytest_args))]  # -v: each test's outcome by id
    times = None
    if args.times is not None:
        times = read_times(args.times) if os.path.exists(args.times) else {}
        options += ["--durations=0", "--durations-min=0.5"]  # this run's times, for the next run's deal
    outcomes, ok = _round(ids, alone, args.jobs, options, args.logs, "", args.timeout, times)
    jobs, retry = args.jobs, 0
    while True:
        refused = [t for t in ids if outcomes[t] == {"REFUSED"}]
        if not refused or jobs == 1:
            break
        jobs, retry = max(1, jobs // 2), retry + 1
        print(f"{len(refused)} tests were refused a CUDA context ({_REFUSED!r}: under MPS, past the server's "
              f"client limit of 48): running them again in {jobs} jobs")  # fmt: skip
        again, ok_again = _round(refused, [t for t in alone if t in refused], jobs, options, args.logs,
                                 f"retry{retry}-", args.timeout)  # fmt: skip
        outcomes.update(again)
        ok = ok and ok_again
    totals: dict[str, int] = {}
    for found in outcomes.values():
        for kind in found or ["not run"]:
            kind = _TOTALS.get(kind, kind)
            totals[kind] = totals.get(kind, 0) + 1
    print("total: " + ", ".join(f"{v} {k}" for k, v in sorted(totals.items())) + f" of {len(ids)} tests"
          + (f" (the last run of each; {retry} retries of refused tests)" if retry else ""))  # fmt: skip
    not_run = [t for t in ids if not outcomes[t]]
    failed = [t for t in ids if outcomes[t] & {"FAILED", "ERROR", "REFUSED"}]
    _write_ids(os.path.join(args.logs, "not-run.txt"), not_run, ids, "tests not run")
    _write_ids(os.path.join(args.logs, "failed.txt"), failed, ids, "tests failed, errored or were refused")
    if times is not None:
        logs = [os.path.join(args.logs, n) for n in sorted(os.listdir(args.logs)) if n.endswith(".log")]
        _write_times(os.path.join(args.logs, "times.txt"), logs, times)
    return 0 if ok and not failed and not not_run else 1


def _round(ids: list[str], alone: list[str], jobs: int, options: list[str], logs: str, prefix: str,
           timeout: float | None, times: dict[str, float] | None = None) -> tuple[dict[str, set[str]], bool]:  # fmt: skip
    """``ids`` over ``jobs`` parallel jobs, then ``alone`` (a subset) in one job; logs named
    ``<prefix>job-N.log``. Each test's outcomes (``{"REFUSED"}``: it failed only because CUDA
    refused a process) and whether every job ended well."""
    shards = _deal([t for t in ids if t not in alone], jobs, times)
    print(f"{len(ids)} tests in {len(shards)} jobs" + (f", then {len(alone)} alone" if alone else "")
          + f" (logs in {logs}/{prefix}job-*.log)", flush=True)  # fmt: skip
    start = time.monotonic()
    stopped: set = set()
    started = [_start(n, shard, options, logs, prefix) for n, shard in enumerate(shards)]
    _wait(started, start, timeout, stopped)
    if alone:
        started.append(_start("alone", alone, options, logs, prefix))
        _wait(started[-1:], start, timeout, stopped)
    outcomes: dict[str, set[str]] = {}
    ok = True
    for n, proc, log, shard in started:
        log.close()
        with open(log.name) as f:
            text = f.read()
        state = "stopped" if n in stopped else f"exit {proc.returncode}"
        print(f"{prefix}job {n} ({len(shard)} tests, {state}): {_summary(text)}")
        ok = ok and proc.returncode in (0, 1, 5) and n not in stopped  # 1: tests failed (listed below)
        refused_path = os.path.join(logs, f"{prefix}job-{n}.refused")
        refused = open(refused_path).read().split("\n") if os.path.exists(refused_path) else []
        found = _outcomes(text, shard)  # from the tests' own lines: a stopped job may print no summary
        for t in shard:
            if found[t] in ({"FAILED"}, {"ERROR"}) and any(name in refused for name in _printed(t)):
                found[t] = {"REFUSED"}
        outcomes.update(found)
    return outcomes, ok


def _start(n, shard: list[str], options: list[str], logs: str, prefix: str = ""):
    """Job ``n``: a pytest process on ``shard``, its output in ``logs/<prefix>job-<n>.log``, the tests
    CUDA refused in ``<prefix>job-<n>.refused`` (written by ``parallel_tests_plugin``, beside this file)."""
    log = open(os.path.join(logs, f"{prefix}job-{n}.log"), "w")
    here = os.path.dirname(os.path.abspath(__file__))
    path = os.environ.get("PYTHONPATH")
    env = dict(os.environ, PYTHONPATH=here + (os.pathsep + path if path else ""),
               PARALLEL_TESTS_REFUSED=os.path.abspath(os.path.join(logs, f"{prefix}job-{n}.refused")))  # fmt: skip
    command = [sys.executable, "-m", "pytest", "-p", "parallel_tests_plugin", *options, *shard]
    proc = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, env=env)
    return n, proc, log, shard


def _wait(jobs: list, start: float, timeout: float | None, stopped: set) -> None:
    """Until every job of ``jobs`` ended; past ``timeout`` seconds from ``start`` each gets SIGINT
    (pytest prints its summary and exits; its number goes into ``stopped``), 30 s later SIGKILL."""
    while any(proc.poll() is None for _, proc, _, _ in jobs):
        late = timeout is not None and time.monotonic() - start > timeout
        for n, proc, _, _ in jobs:
            if late and proc.poll() is None:
                if n not in stopped:
                    proc.send_signal(signal.SIGINT)
                    stopped.add(n)
                elif time.monotonic() - start > timeout + 30:
                    proc.kill()  # ignored SIGINT for 30 s
        time.sleep(0.5)


def _write_ids(path: str, chosen: list[str], ids: list[str], what: str) -> None:
    """``chosen`` one id a line in collection order, for ``pytest @path``; an earlier run's file goes
    when there are none (it would name tests this run settled)."""
    if not chosen:
        if os.path.exists(path):
            os.remove(path)
        return
    with open(path, "w") as f:
        f.write("".join(t + "\n" for t in sorted(chosen, key=ids.index)))
    print(f"{len(chosen)} {what}; to run just those: pytest @{path}")


if __name__ == "__main__":
    raise SystemExit(main())
