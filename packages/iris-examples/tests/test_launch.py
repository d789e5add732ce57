"""The launcher: a failing rank's exception and rank reach the caller, the other ranks stop, nothing leaks."""

import os
import subprocess
import sys
from pathlib import Path

from _cli import TIMEOUT, shm_entries

HERE = Path(__file__).parent

SCRIPT = """
import sys
from iris.examples.harness import cli, registry
registry.EXAMPLES["failing"] = registry.Example("failing", "_failing_example", "triton", "fails on rank 1")
sys.exit(cli.main(["failing", "--ranks", "3", "--cpu"]))
"""


def test_a_failing_rank_is_reported_with_its_rank_and_traceback(tmp_path):
    before = shm_entries()
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(HERE), os.environ.get("PYTHONPATH", "")]),
               TMPDIR=str(tmp_path))  # fmt: skip
    done = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, timeout=TIMEOUT, env=env)
    assert done.returncode == 1, (done.stdout, done.stderr)
    lines = done.stderr.strip().splitlines()
    # the root cause first, with its traceback; the peers that lost their connection after it
    assert lines[0] == "rank 1 failed (exit code 1): ZeroDivisionError: rank 1 divides by zero on purpose (sum 0.0)"
    assert "--- traceback of rank 1 ---" in lines
    assert 'File "' in done.stderr and "_failing_example.py" in done.stderr
    assert sum(line.startswith("rank 0 also failed") or line.startswith("rank 2 also failed") for line in lines) <= 2
    assert "elastic" not in done.stderr and "SIGTERM" not in done.stderr  # the launcher's logging is silenced
    assert shm_entries() - before == set()
    assert list(tmp_path.iterdir()) == []  # the failure records and the launcher's log folder are gone


def test_a_run_leaves_nothing_in_the_temp_dir(tmp_path):
    """Neither our failure-record folder nor torch's launcher log folder (torchelastic_*) stays behind."""
    env = dict(os.environ, TMPDIR=str(tmp_path))
    done = subprocess.run([sys.executable, "-m", "iris.examples", "heap-bench", "--ranks", "2", "--cpu",
                           "--pairs", "10", "--init-sizes", "1M", "--repeats", "1"],
                          capture_output=True, text=True, timeout=TIMEOUT, env=env, cwd=tmp_path)  # fmt: skip
    assert done.returncode == 0, (done.stdout, done.stderr)
    assert list(tmp_path.iterdir()) == []


def test_one_failure_type_for_the_launcher_and_the_test_runner():
    """RankFailedError is defined once, in iris.heap.errors (the layer below may not import this
    one); the launcher and the test runner re-export it, with its per-rank failures, and it survives pickling."""
    import pickle

    import iris.heap
    from iris.examples.harness import launch
    from iris.testing import world

    assert launch.RankFailedError is iris.heap.RankFailedError is world.RankFailedError
    assert launch.RankFailure is iris.heap.RankFailure is world.RankFailure
    err = launch.RankFailedError(failures=[launch.RankFailure(1, 1, "ZeroDivisionError: x", "tb"),
                                           launch.RankFailure(0, 1, "connection closed")])  # fmt: skip
    assert str(err) == "rank 1 failed (exit code 1): ZeroDivisionError: x"
    again = pickle.loads(pickle.dumps(err))
    assert str(again) == str(err) and again.failures == err.failures
    assert world.RankFailedError("as the runner raises it").failures == []
