"""``--trace FILE``: an example's device events, merged across ranks into one Chrome trace that
trace-view draws; refused where an example runs no kernels."""

import json

import pytest
from _cli import run_cli

MP = ["--blocks", "3", "--block-size", "1K", "--iters", "1"]
ROUNDS = 1 + 1 + 1  # the checked round, time_launches' warmup and one timed round


def _events(path):
    trace = json.loads(path.read_text())
    return trace, [e for e in trace["traceEvents"] if e["ph"] in ("X", "i")]


@pytest.mark.parametrize("example, ranks", [("message-passing", 3), ("message-passing-gluon", 2)])
def test_message_passing_trace_has_every_event_of_every_rank(tmp_path, example, ranks):
    path = tmp_path / "mp.json"
    done = run_cli(example, "--ranks", str(ranks), *MP, "--trace", str(path))
    assert done.returncode == 0, done.stderr
    assert f"trace: {path}" in done.stdout
    trace, events = _events(path)
    assert trace["otherData"]["world_size"] == ranks and trace["otherData"]["dropped_events"] == 0
    assert trace["otherData"]["incomplete_events"] == 0
    blocks = 3
    for rank in range(ranks):
        mine = [e for e in events if e["pid"] == rank]
        by_name = {n: [e for e in mine if e["name"] == n] for n in ("remote store", "signal", "flag wait", "copy out")}
        assert {n: len(v) for n, v in by_name.items()} == dict.fromkeys(by_name, ROUNDS * blocks), by_name
        assert all(e["args"]["target_rank"] == (rank + 1) % ranks for e in by_name["remote store"])
        assert all(e["args"]["bytes"] == 1024 for e in by_name["remote store"] + by_name["copy out"])
        assert all(e["ph"] == "i" for e in by_name["signal"]) and all(e["dur"] >= 0 for e in by_name["flag wait"])
    png = tmp_path / "mp.png"
    shown = run_cli("trace-view", str(path), "--png", str(png))
    assert shown.returncode == 0, shown.stderr
    assert png.read_bytes()[:4] == b"\x89PNG"


def test_without_trace_nothing_is_written(tmp_path):
    done = run_cli("message-passing", "--ranks", "2", *MP, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "trace:" not in done.stdout and list(tmp_path.iterdir()) == []


def test_an_example_without_kernels_refuses_trace(tmp_path):
    done = run_cli("heap-bench", "--ranks", "1", "--trace", str(tmp_path / "t.json"))
    assert done.returncode == 2 and "nothing to trace" in done.stderr
    assert not (tmp_path / "t.json").exists()
