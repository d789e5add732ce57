"""The launcher: a failing rank's exception and rank reach the caller, the other ranks stop, nothing leaks."""

import os
import subprocess
import sys
from pathlib import Path

from _cli import TIMEOUT, shm_entries

HERE = Path(__file__).parent

SCRIPT = """
import argparse
from iris.examples import launch
launch.prepare_environment(cpu=True)
try:
    launch.launch("_failing_example", argparse.Namespace(ranks=2))
except launch.RankFailedError as e:
    first = e.failures[0]
    print("FIRST", first.rank, first.message)
    print("TRACEBACK", first.traceback.splitlines()[-1])
    raise SystemExit(1)
raise SystemExit(0)
"""


def test_a_failing_rank_is_reported_with_its_rank_and_traceback():
    before = shm_entries()
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(HERE), os.environ.get("PYTHONPATH", "")]))
    done = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, timeout=TIMEOUT, env=env)
    assert done.returncode == 1, (done.stdout, done.stderr)
    assert "FIRST 1 ZeroDivisionError: rank 1 divides by zero on purpose" in done.stdout
    assert "TRACEBACK ZeroDivisionError: rank 1 divides by zero on purpose" in done.stdout
    assert "Starting elastic_operator" not in done.stderr  # the launcher's logging is silenced
    assert shm_entries() - before == set()
