"""The pytest plugin of ``tools/parallel-tests.py`` (each job loads it with ``-p``): the id of every
test whose failure report carries CUDA's refusal of a new process (under MPS, past the server's
client limit) goes to the file named by ``PARALLEL_TESTS_REFUSED``, one a line, so that the
runner can tell a refused test from a failed one and run it again with fewer jobs."""

import os

REFUSED = "CUDA-capable device(s) is/are busy or unavailable"


def pytest_runtest_logreport(report):
    path = os.environ.get("PARALLEL_TESTS_REFUSED")
    if path and report.failed and REFUSED in str(report.longrepr):
        with open(path, "a") as f:
            f.write(report.nodeid + "\n")
