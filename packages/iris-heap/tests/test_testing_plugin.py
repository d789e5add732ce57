"""The shared pytest plugin (iris.testing.plugin) refuses a backend it does not know, before any test runs."""

import os
import subprocess
import sys


def test_an_unknown_backend_is_a_usage_error(tmp_path):
    (tmp_path / "test_one.py").write_text("def test_backend(backend):\n    pass\n")
    env = dict(os.environ, IRIS_TEST_BACKEND="mem")
    done = subprocess.run([sys.executable, "-m", "pytest", "-p", "iris.testing.plugin", "-p", "no:cacheprovider",
                           str(tmp_path)], capture_output=True, text=True, cwd=tmp_path, env=env, timeout=120)  # fmt: skip
    assert done.returncode == 4, (done.stdout, done.stderr)  # pytest's usage error
    assert "IRIS_TEST_BACKEND='mem': a backend is 'triton' or 'gluon'" in done.stderr
