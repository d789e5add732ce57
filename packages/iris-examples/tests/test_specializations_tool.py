"""tools/specializations, the count of kernel specializations CPU ranks launch (a proxy for what a
GPU test run compiles): the key it gives a launch, and a count through a spawned process."""

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

TOOL = Path(__file__).resolve().parents[3] / "tools" / "specializations"


@pytest.fixture(scope="module")
def hook():
    spec = importlib.util.spec_from_file_location("spec_hook", TOOL / "sitecustomize.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)  # without IRIS_SPEC_LOG in this process: installs nothing
    return module


def test_the_key_follows_tritons_specialization(hook):
    import torch

    names, constexprs, skip = ["x", "n", "m", "k", "flag", "BLOCK"], {"BLOCK"}, {"k"}
    x = torch.zeros(64)

    def key(n, m, k, block=128, **options):
        return hook._key(names, constexprs, skip, (x, n, m, k, True, block), options)

    assert key(5, 7, 9) == key(3, 9, 11)  # ints alike but for == 1, % 16 and their width
    assert key(1, 7, 9) != key(5, 7, 9) != key(32, 7, 9)
    assert key(5, 7, 1) == key(5, 7, 32)  # do_not_specialize: only the width counts
    assert key(5, 7, 2**40) != key(5, 7, 9)
    assert key(5, 7, 9, block=256) != key(5, 7, 9)  # constexpr values
    assert key(5, 7, 9, num_warps=8) != key(5, 7, 9, num_warps=4)  # launch options
    assert hook._key(names, constexprs, skip, (x[1:], 5, 7, 9, True, 128), {}) != key(5, 7, 9)  # alignment
    assert hook._key(names, constexprs, skip, (x.int(), 5, 7, 9, True, 128), {}) != key(5, 7, 9)  # dtype


def test_an_int_annotated_with_its_type_keeps_it_at_any_value(hook):
    import inspect

    import torch

    def kernel(x, code: "i64", n):  # noqa: F821 - Triton reads the string as the type
        pass

    params = inspect.signature(kernel).parameters.values()
    typed = hook._typed(params)
    assert typed == {"code": "i64"}
    x = torch.zeros(4)

    def key(code, n):
        return hook._key(["x", "code", "n"], set(), {"code"}, (x, code, n), {}, typed)

    assert key(5, 3) == key(2**40, 3)  # an i64 parameter at either width
    assert key(5, 3) != key(5, 2**40)  # an unannotated one changes type with its value


def test_a_spawned_process_logs_each_distinct_launch_once(tmp_path):
    code = (
        "import os, torch, triton, triton.language as tl\n"
        "@triton.jit\n"
        "def k(x, n, B: tl.constexpr):\n"
        "    o = tl.arange(0, B)\n"
        "    tl.store(x + o, o.to(tl.float32), mask=o < n)\n"
        "x = torch.zeros(16)\n"
        "for n in (3, 5, 16, 3):\n"
        "    k[(1,)](x, n, B=16)\n"
    )
    src = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    env = dict(os.environ, IRIS_SPEC_LOG=str(tmp_path / "log"), TRITON_INTERPRET="1",
               PYTHONPATH=os.pathsep.join([str(TOOL), *src]))  # fmt: skip
    subprocess.run([sys.executable, "-c", code], env=env, check=True, timeout=120)
    done = subprocess.run([sys.executable, str(TOOL / "summary.py"), str(tmp_path / "log")], capture_output=True,
                          text=True, check=True)  # fmt: skip
    assert "2 distinct specializations of 1 kernels" in done.stdout  # n = 3 and 5 alike, 16 apart
