"""The harness's old paths (``iris.examples.timing``, ...) still import for one release, with a
DeprecationWarning that names the new path, and give the new module's public names."""

import importlib
import sys

import pytest

MOVED = ["cli", "environment", "launch", "options", "registry", "tables", "timing", "trace", "trace_view", "units",
         "validation"]  # fmt: skip


@pytest.mark.parametrize("name", MOVED)
def test_an_old_path_warns_and_gives_the_same_names(name):
    old, new = f"iris.examples.{name}", f"iris.examples.harness.{name}"
    sys.modules.pop(old, None)
    with pytest.warns(DeprecationWarning, match=f"{old} moved to {new}") as warned:
        __import__(old)  # as an import statement does
    module = sys.modules[old]
    assert warned[0].filename == __file__  # the warning points at the importing line
    harness = importlib.import_module(new)
    assert module.__all__ == harness.__all__
    for attr in harness.__all__:
        assert getattr(module, attr) is getattr(harness, attr)


def test_the_package_and_its_examples_import_no_old_path():
    code = ("import warnings; warnings.simplefilter('error', DeprecationWarning); import iris.examples, "
            "iris.examples.__main__, iris.examples.harness.cli")  # fmt: skip
    import subprocess

    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
