"""CPU execution of Gluon kernels (iris.mem.gluon.interpret): the forwarded language computes what
torch does, unsupported constructs fail naming themselves, the language is restored after a
launch, and kernels need no change (not even to be decorated after iris.mem.gluon is imported)."""

import os
import subprocess
import sys
from pathlib import Path

import _gluon_cpu as cpu
import pytest

pytestmark = pytest.mark.cpu_ranks


def test_layout_agnostic_gluon_runs_on_cpu_ranks(world):
    world.run(cpu.check_language, 1)


def test_register_operand_mma_v2_runs_on_cpu_as_a_dot(world):
    world.run(cpu.check_mma_v2, 1)


def test_dot_fma_runs_on_cpu_as_a_dot(world):
    world.run(cpu.check_dot_fma, 1)


def test_constructs_the_cpu_cannot_model_raise_naming_the_construct(world):
    world.run(cpu.check_unsupported, 1)


def test_the_gluon_language_is_restored_after_a_cpu_launch(world):
    world.run(cpu.check_language_restored, 1)


def test_a_kernel_decorated_before_iris_is_imported_runs_unchanged():
    tests = Path(__file__).parent
    env = {**os.environ, "TRITON_INTERPRET": "1"}
    env["PYTHONPATH"] = os.pathsep.join([str(tests), *filter(None, [env.get("PYTHONPATH")])])
    done = subprocess.run(
        [sys.executable, str(tests / "_gluon_plain_kernel.py")], env=env, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0 and done.stdout.strip().endswith("ok"), done.stderr[-3000:]
