"""The package surface: what it exports, its version, and the context ABI it checks."""

import importlib
import re
from pathlib import Path

import iris.heap
import iris.mem.triton as imt

OPERATIONS = ["translate", "load", "store", "get", "put", "copy", "atomic_add", "atomic_sub", "atomic_xchg",
              "atomic_cas", "atomic_and", "atomic_or", "atomic_xor", "atomic_min", "atomic_max", "wait"]  # fmt: skip


def test_exports_the_context_and_every_operation_as_a_free_function():
    assert set(OPERATIONS) | {"Context"} <= set(imt.__all__)
    for name in imt.__all__:
        assert hasattr(imt, name), name


def test_context_has_every_operation_as_a_method():
    for name in OPERATIONS + ["initialize"]:
        assert callable(getattr(imt.Context, name, None)), f"Context.{name} is missing"


def test_version_and_context_abi():
    pyproject = (Path(__file__).parents[1] / "pyproject.toml").read_text()
    assert imt.__version__ == re.search(r'^version = "([^"]+)"', pyproject, re.M).group(1), "one version, two places"
    assert imt.CONTEXT_ABI_VERSION == iris.heap.CONTEXT_ABI_VERSION


def test_a_different_context_abi_refuses_to_import(monkeypatch):
    monkeypatch.setattr(iris.heap, "CONTEXT_ABI_VERSION", imt.CONTEXT_ABI_VERSION + 1)
    try:
        importlib.reload(imt)
    except ImportError as e:
        assert "ABI version" in str(e) and "iris-heap" in str(e)
    else:
        raise AssertionError("iris.mem.triton imported against a different context ABI")
    finally:
        monkeypatch.undo()
        importlib.reload(imt)


def test_iris_and_iris_mem_are_namespace_packages():
    import iris
    import iris.mem

    assert getattr(iris, "__file__", None) is None
    assert getattr(iris.mem, "__file__", None) is None
