"""Rank-tagged logging: the ``iris`` loggers, the rank in every record, ``IRIS_LOG_LEVEL``, silence by default."""

import logging
import os
import re
import resource
import signal
import socket
import subprocess
import sys
import textwrap
import time

import pytest
from _ranks import new_heap

import iris.heap
from iris.heap import context as abi
from iris.heap import log

TIMEOUT = 120  # seconds for a subprocess that makes a heap or two
LINE = re.compile(r"^\[iris rank (\S+)/(\S+) pid \d+\] \d\d:\d\d:\d\d\.\d{3} ([A-Z]+) (iris\.[\w.]+): (.*)$")


class Records(logging.Handler):
    """Keeps every record that reaches it."""

    def __init__(self):
        super().__init__(logging.DEBUG)
        self.records = []

    def emit(self, record):
        self.records.append(record)


def _capture(name="iris"):
    """A ``Records`` handler on logger ``name`` at DEBUG, and a function that takes it off again."""
    logger = logging.getLogger(name)
    handler, level = Records(), logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.DEBUG)

    def undo():
        logger.removeHandler(handler)
        logger.setLevel(level)

    return handler, undo


def _python(code, env=None, **kwargs):
    """Run ``code`` in a fresh interpreter (CPU heap) with ``env`` added to this environment."""
    full = {**os.environ, "IRIS_DEVICE": "cpu"}
    full.pop("IRIS_LOG_LEVEL", None)
    full.update(env or {})
    return subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(code)],
        env=full,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        **kwargs,
    )


def _finish(proc):
    out, err = proc.communicate(timeout=TIMEOUT)
    return proc.returncode, out, err


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# -- in the rank processes: every record names its rank ----------------------------------------------


def _records_of_a_heaps_life(rank, world_size):
    handler, undo = _capture()
    try:
        heap = new_heap()
        heap.reserve("test.flags", 256)
        dog = heap.watchdog(interval=0.02)
        # What device code does on a failed wait: the context's word, then the record, its code last.
        heap.context[abi.error_code_index(world_size)] = abi.ERROR_WAIT_TIMEOUT
        heap._record.words[abi.RECORD_AUX] = 10
        heap._record.words[abi.RECORD_CODE] = abi.ERROR_WAIT_TIMEOUT
        deadline = time.monotonic() + 30
        while dog.running and time.monotonic() < deadline:
            time.sleep(0.01)
        with pytest.raises(iris.heap.WaitTimeoutError):
            heap.check_device_errors()
        heap.close()
    finally:
        undo()
    return [(r.rank, r.world_size, r.name, r.levelname, r.getMessage()) for r in handler.records]


@pytest.mark.parametrize("world_size", [1, 2])
def test_every_record_of_a_heaps_life_names_its_rank(world, world_size):
    for rank, records in enumerate(world.run(_records_of_a_heaps_life, world_size)):
        assert records, "a heap's life logs at DEBUG"
        for tag_rank, tag_world, name, _, message in records:
            assert (tag_rank, tag_world) == (rank, world_size), (rank, message)
            assert name == "iris.heap", message
        messages = [(level, message) for *_, level, message in records]
        assert any(level == "INFO" and m.startswith("heap ready") for level, m in messages)
        assert any(level == "DEBUG" and "reserved 'test.flags'" in m for level, m in messages)
        assert any(
            level == "DEBUG" and m.startswith("device error read from the record: wait timeout")
            for level, m in messages
        )
        assert any(level == "ERROR" and m.startswith("watchdog: device error") for level, m in messages)
        assert any(level == "INFO" and m.startswith("heap closed") for level, m in messages)


def test_before_any_heap_the_rank_is_the_launchers_or_a_dash(monkeypatch):
    monkeypatch.setattr(log, "_rank", None)
    handler, undo = _capture()
    try:
        monkeypatch.setenv("RANK", "3")
        monkeypatch.setenv("WORLD_SIZE", "4")
        log.get_logger("examples").debug("under torchrun")
        monkeypatch.delenv("RANK")
        monkeypatch.delenv("WORLD_SIZE")
        log.get_logger("examples").debug("alone")
        log.set_rank(1, 2)
        log.get_logger("examples").debug("with a heap")
    finally:
        undo()
    assert [(r.rank, r.world_size) for r in handler.records] == [(3, 4), ("-", "-"), (1, 2)]


def test_get_logger_gives_each_layer_its_child_of_iris():
    for layer in log.LAYERS:
        logger = log.get_logger(layer)
        assert logger is logging.getLogger(f"iris.{layer}") and logger.parent is logging.getLogger("iris")
        assert log.get_logger(f"iris.{layer}") is logger
    assert log.get_logger("iris.heap.transport.shm") is logging.getLogger("iris.heap"), "a module: its layer's"
    assert log.get_logger("iris.mem.gluon._cpu") is logging.getLogger("iris.mem.gluon")
    with pytest.raises(ValueError, match="not an Iris layer.*heap, mem.triton"):
        log.get_logger("nccl")
    with pytest.raises(ValueError, match="not an Iris layer"):
        log.get_logger("iris.memory")


# -- what reaches stderr: nothing by default, IRIS_LOG_LEVEL's level with it -------------------------

_A_HEAP = """
    import logging
    import iris.heap
    heap = iris.heap.init(1 << 20)
    logging.getLogger("iris.heap").warning("a warning")
    logging.getLogger("iris.heap").error("an error")
    heap.close()
    print("done")
"""


def test_nothing_reaches_stderr_by_default():
    code, out, err = _finish(_python(_A_HEAP))
    assert code == 0 and out.strip() == "done", err
    assert err == "", f"Iris wrote to stderr without IRIS_LOG_LEVEL:\n{err}"


@pytest.mark.parametrize("setting, lowest", [("debug", "DEBUG"), ("INFO", "INFO"), ("Warning", "WARNING")])
def test_iris_log_level_prints_that_level_and_above_with_the_rank(setting, lowest):
    code, out, err = _finish(_python(_A_HEAP, {"IRIS_LOG_LEVEL": setting}))
    assert code == 0 and out.strip() == "done", err
    lines = [LINE.match(line) for line in err.splitlines()]
    assert lines and all(lines), f"every stderr line in Iris's format:\n{err}"
    levels = {m[3] for m in lines}
    order = list(log.LEVELS)
    assert min(levels, key=order.index) == lowest, levels
    assert {"WARNING", "ERROR"} <= levels
    messages = [m[5] for m in lines]
    assert ("heap ready" in " ".join(messages)) == (lowest != "WARNING")
    tags = [(m[1], m[2]) for m in lines]
    if lowest == "DEBUG":  # before the heap exists, and with no launcher's RANK: a dash
        assert tags[0] == ("-", "-") and "a single rank" in messages[0], err
        tags = tags[1:]
    assert set(tags) == {("0", "1")}, err


def test_iris_log_level_at_two_ranks_under_a_launchers_environment():
    port = _free_port()
    code = """
        import iris.heap
        iris.heap.init(1 << 20).close()
    """
    env = {"IRIS_LOG_LEVEL": "DEBUG", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port), "WORLD_SIZE": "2"}
    procs = [_python(code, {**env, "RANK": str(r), "LOCAL_RANK": str(r)}) for r in range(2)]
    for rank, proc in enumerate(procs):
        status, _, err = _finish(proc)
        assert status == 0, err
        lines = [LINE.match(line) for line in err.splitlines()]
        assert lines and all(lines), err
        assert all((m[1], m[2]) == (str(rank), "2") for m in lines), err
        assert "joining torch.distributed from the environment" in lines[0][5], "before the heap: the launcher's rank"
        assert any(m[3] == "INFO" and m[5].startswith("heap ready") for m in lines)


def test_a_bad_iris_log_level_is_refused_with_the_allowed_values():
    code, _, err = _finish(_python("import iris.heap", {"IRIS_LOG_LEVEL": "verbose"}))
    assert code != 0
    assert "ValueError: IRIS_LOG_LEVEL='verbose' is not a logging level" in err
    for name in log.LEVELS:
        assert name in err.splitlines()[-1]


def test_a_watchdog_that_aborts_says_why_on_stderr_without_any_logging_configured():
    code = """
        import time
        import iris.heap
        from iris.heap import context as abi
        heap = iris.heap.init(1 << 20)
        heap.watchdog(interval=0.02, on_error="abort")
        heap.context[abi.error_code_index(1)] = abi.ERROR_WAIT_TIMEOUT
        heap._record.words[abi.RECORD_AUX] = 10
        heap._record.words[abi.RECORD_CODE] = abi.ERROR_WAIT_TIMEOUT
        time.sleep(60)
        print("still alive")
    """

    def no_core_file():
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))

    status, out, err = _finish(_python(code, preexec_fn=no_core_file))
    assert status == -signal.SIGABRT and "still alive" not in out, (status, err)
    line = next(m for m in map(LINE.match, err.splitlines()) if m)
    assert line.group(1, 2, 3, 4) == ("0", "1", "CRITICAL", "iris.heap"), err
    assert "aborting the process" in line[5] and "device-side wait gave up" in line[5], err
