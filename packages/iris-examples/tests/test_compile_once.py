"""iris.testing.compile_once (what tools/gpu-tests.sh compiles with): processes that miss Triton's
cache on the same kernel at once compile it once between them; a compile that never finishes or
ends without a result holds nobody up for good. Compile-only (no GPU): kernels for sm_90."""

import os
import subprocess
import sys
import textwrap
import time

import pytest

pytest.importorskip("triton")

_KERNEL = textwrap.dedent(
    """
    import json, os, sys, time
    import triton, triton.language as tl
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource
    from iris.testing import compile_once

    @triton.jit
    def scale(x, y, n, B: tl.constexpr):
        o = tl.program_id(0) * B + tl.arange(0, B)
        tl.store(y + o, tl.load(x + o, mask=o < n) * 3, mask=o < n)

    start = float(sys.argv[1])
    while time.time() < start:  # the processes miss the cache together
        time.sleep(0.001)
    src = ASTSource(scale, {"x": "*fp32", "y": "*fp32", "n": "i32", "B": "constexpr"}, {"B": 128})
    k = triton.compile(src, target=GPUTarget("cuda", 90, 32))
    print(json.dumps({"compiled": len(compile_once.compiled_here()), "hash": k.hash}))
    """
)


def _env(tmp_path, **extra):
    src = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    return dict(os.environ, TRITON_CACHE_DIR=str(tmp_path / "cache"), TRITON_INTERPRET="0",
                TRITON_CACHE_MANAGER="iris.testing.compile_once:CompileOnce", PYTHONPATH=os.pathsep.join(src),
                **extra)  # fmt: skip


def _compile_together(tmp_path, n, **extra):
    import json

    script = tmp_path / "k.py"
    script.write_text(_KERNEL)
    start = time.time() + 3  # after every interpreter started
    procs = [subprocess.Popen([sys.executable, str(script), str(start)], env=_env(tmp_path, **extra),
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for _ in range(n)]  # fmt: skip
    out = []
    for p in procs:
        stdout, stderr = p.communicate(timeout=300)
        assert p.returncode == 0, stderr[-3000:]
        out.append(json.loads(stdout.strip().splitlines()[-1]))
    return out


def test_processes_that_miss_together_compile_once(tmp_path):
    log = tmp_path / "compiles.tsv"
    results = _compile_together(tmp_path, 3, IRIS_COMPILE_LOG=str(log))
    assert sorted(r["compiled"] for r in results) == [0, 0, 1], results
    assert len({r["hash"] for r in results}) == 1
    # the log: one compile, and a wait of each other process for it (it lasts as long as the compile)
    lines = [line.split("\t") for line in log.read_text().splitlines()]
    compiles = [line for line in lines if line[0] == "compile"]
    waits = [line for line in lines if line[0] == "wait"]
    assert len(compiles) == 1 and compiles[0][4] == "scale.json", lines
    assert len(waits) == 2 and {w[3] for w in waits} != {compiles[0][3]}, lines
    assert all(float(line[2]) >= 0 and float(line[1]) > 1e9 for line in lines), lines


def test_a_waiter_compiles_itself_once_the_wait_runs_out(tmp_path):
    """A holder that never puts its result (stuck) costs the others WAIT seconds, not forever."""
    from triton.runtime.cache import FileCacheManager

    from iris.testing import compile_once

    cache = tmp_path / "cache"
    # take the lock of every key this kernel can have: hold the lock files the first run makes
    first = _compile_together(tmp_path, 1)
    assert first[0]["compiled"] == 1
    locks = [os.path.join(d, f) for d, _, fs in os.walk(cache) for f in fs if f.endswith(".compiling")]
    assert locks, "the compile left no lock file"
    for d, _, fs in os.walk(cache):  # empty the cache: the next run misses again
        for f in fs:
            if not f.endswith(".compiling"):
                os.remove(os.path.join(d, f))
    fds = [os.open(p, os.O_RDWR) for p in locks]
    try:
        for fd in fds:
            import fcntl

            fcntl.flock(fd, fcntl.LOCK_EX)
        t0 = time.monotonic()
        again = _compile_together(tmp_path, 1, IRIS_COMPILE_WAIT="1")
        assert again[0]["compiled"] == 1 and time.monotonic() - t0 >= 1
    finally:
        for fd in fds:
            os.close(fd)
    assert compile_once.WAIT > 0 and issubclass(compile_once.CompileOnce, FileCacheManager)


def test_a_compile_without_a_result_releases_its_lock_at_the_next(tmp_path, monkeypatch):
    """In one process: a miss whose compile raised (no put_group) leaves the lock held; asking
    for the same key again compiles again instead of waiting for itself, and the next other key
    drops the lock, so another process gets it."""
    import fcntl

    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path / "cache"))
    from iris.testing import compile_once

    a, b = compile_once.CompileOnce("KEYA"), compile_once.CompileOnce("KEYB")
    assert a.get_group("k.json") is None  # a miss: this process compiles, holding the lock
    lock = os.path.join(a.cache_dir, "k.json.compiling")
    other = os.open(lock, os.O_RDWR)
    try:
        with pytest.raises(BlockingIOError):
            fcntl.flock(other, fcntl.LOCK_EX | fcntl.LOCK_NB)
        t0 = time.monotonic()
        assert a.get_group("k.json") is None and time.monotonic() - t0 < 1  # again, without waiting
        assert b.get_group("k.json") is None  # another key: the first compile ended
        fcntl.flock(other, fcntl.LOCK_EX | fcntl.LOCK_NB)  # free now
        fcntl.flock(other, fcntl.LOCK_UN)
        b.put_group("k.json", {})  # a result: its lock goes too
        assert not compile_once._held
    finally:
        os.close(other)


def test_a_cache_without_room_for_the_lock_compiles_as_triton_would(tmp_path, monkeypatch):
    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path / "cache"))
    from iris.testing import compile_once

    real_open = os.open

    def refuse(path, *args, **kwargs):
        if str(path).endswith(".compiling"):
            raise PermissionError(13, "read-only", path)
        return real_open(path, *args, **kwargs)

    monkeypatch.setattr(compile_once.os, "open", refuse)
    manager = compile_once.CompileOnce("KEYC")
    assert manager.get_group("c.json") is None  # a miss, compiled here, with no lock held
    assert not any(p.endswith("c.json.compiling") for p in compile_once._held)
