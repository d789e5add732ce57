"""Who owns the torch.distributed groups a heap uses: Iris destroys what it made, and only that."""

import os
import socket
import subprocess
import sys
import textwrap

import pytest

TIMEOUT = 120  # seconds for a subprocess that makes a heap

# Registered before ``import iris.heap``, so it runs after Iris's own exit hook (last in, first out).
_REPORT_AT_EXIT = """
    import atexit
    import torch.distributed as dist

    def report():
        print("initialized at exit:", dist.is_initialized())
        if dist.is_initialized():
            dist.destroy_process_group()

    atexit.register(report)
    import iris.heap
"""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _run(code: str, launcher: bool) -> list[str]:
    """Run ``_REPORT_AT_EXIT + code`` as rank 0 of 1 on a CPU heap; its stdout lines."""
    env = {**os.environ, "IRIS_DEVICE": "cpu", "OMP_NUM_THREADS": "1"}
    for name in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT", "IRIS_LOG_LEVEL"):
        env.pop(name, None)
    port = _free_port()
    if launcher:
        env.update(RANK="0", LOCAL_RANK="0", WORLD_SIZE="1", MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    code = textwrap.dedent(_REPORT_AT_EXIT) + textwrap.dedent(code).replace("PORT", str(port))
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=TIMEOUT)
    assert done.returncode == 0, done.stderr
    return done.stdout.splitlines()


def test_the_group_iris_joined_from_the_environment_stays_until_exit_and_is_destroyed_there():
    # Left to the interpreter's teardown, such a gloo group aborted 4 of 60 processes
    # on CPU ranks ("terminate called without an active exception"), after everything had worked.
    out = _run(
        """
        iris.heap.init(1 << 20).close()
        print("after close:", dist.is_initialized(), dist.get_rank(), dist.get_world_size())
        """,
        launcher=True,
    )
    assert out == ["after close: True 0 1", "initialized at exit: False"]


@pytest.mark.parametrize("when", ["before init", "after iris joined and the caller destroyed it"])
def test_a_group_the_caller_made_is_left_to_the_caller(when):
    make = 'dist.init_process_group("gloo", init_method="tcp://127.0.0.1:PORT", rank=0, world_size=1)'
    if when == "before init":
        code = f"{make}\niris.heap.init(1 << 20).close()\n"
    else:  # Iris joined from the environment; the caller replaced that group with one of its own
        code = f"iris.heap.init(1 << 20).close()\ndist.destroy_process_group()\n{make}\n"
    out = _run(code, launcher=when != "before init")
    assert out == ["initialized at exit: True"]


def test_a_gloo_group_made_for_a_heap_is_destroyed_by_its_close_and_a_given_one_is_not():
    out = _run(
        """
        from iris.heap.bootstrap import ControlGroup

        dist.init_process_group("gloo", init_method="tcp://127.0.0.1:PORT", rank=0, world_size=1)
        made, given = dist.new_group(backend="gloo"), dist.new_group(backend="gloo")
        for group, owned in ((made, True), (given, False)):
            control = ControlGroup(rank=0, world_size=1, group=dist.group.WORLD, gloo=group, owns_gloo=owned)
            control.barrier()
            control.close()
            control.close()  # idempotent, as heap.close() is
            try:
                print(owned, dist.get_backend(group))
            except ValueError:
                print(owned, "destroyed")
        """,
        launcher=False,
    )
    assert out == ["True destroyed", "False gloo", "initialized at exit: True"]
