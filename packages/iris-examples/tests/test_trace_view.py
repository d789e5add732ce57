"""trace-view: the summary and the PNG timeline of a trace as heap.tracing.export writes it, and a
clear exit status 2 for a file it cannot draw."""

import csv
import json

import numpy as np
import pytest

from iris.examples.harness import cli, trace_view
from iris.heap import context as abi
from iris.heap.tracing import EVENTS, chrome_trace

NAMES = {v: k for k, v in EVENTS.items()}


def _row(start, end, event, program, sm, rank, target=0, nbytes=0, instant=False):
    row = np.zeros(abi.TRACE_EVENT_WORDS, dtype=np.int64)
    row[abi.EVENT_START_NS], row[abi.EVENT_END_NS] = start, end
    row[abi.EVENT_ID] = event + (abi.EVENT_INSTANT if instant else 0)
    row[abi.EVENT_PROGRAM], row[abi.EVENT_SM], row[abi.EVENT_RANK] = program, sm, rank
    row[abi.EVENT_TARGET_RANK], row[abi.EVENT_BYTES] = target, nbytes
    return row


def _trace(tmp_path, world_size=3):
    """A merged trace of ``world_size`` ranks: per rank an entry wait, two tiles on two SMs with a
    remote store each, an exit wait and an instant; clocks offset differently per rank."""
    payloads = []
    for rank in range(world_size):
        base = 1_000_000 * (rank + 1)  # each rank's device clock starts elsewhere ...
        rows = [_row(base, base + 2_000, EVENTS["entry wait"], 0, 0, rank)]
        for p in range(2):
            t = base + 2_000 + 500 * p
            rows.append(_row(t, t + 3_000, EVENTS["tile"], p, p, rank))
            rows.append(_row(t + 1_000, t + 2_000, EVENTS["remote store"], p, p, rank, (rank + 1) % world_size, 4096))
        rows.append(_row(base + 6_000, base + 7_000, EVENTS["exit wait"], 0, 0, rank))
        rows.append(_row(base + 7_000, base + 7_000, EVENTS["exit wait"], 0, 1, rank, instant=True))
        rows.append(_row(base + 8_000, 0, EVENTS["tile"], 1, 1, rank))  # started, never ended
        payloads.append(
            {
                "rank": rank,
                "host": "h",
                "device": "cpu",
                "calibration": {"offset_ns": -1_000_000 * rank, "uncertainty_ns": 10, "source": "test"},
                "capacity": 16,
                "claimed": len(rows) + 1,  # one dropped
                "events": np.stack(rows),
            }
        )
    path = tmp_path / "trace.json"
    path.write_text(json.dumps(chrome_trace(payloads, world_size, lambda i: NAMES.get(i, f"event {i}"))))
    return path


def test_summary_png_and_csv_of_a_merged_trace(tmp_path, capsys):
    path, png, table = _trace(tmp_path), tmp_path / "t.png", tmp_path / "t.csv"
    assert cli.main(["trace-view", str(path), "--png", str(png), "--csv", str(table)]) == 0
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 10_000
    assert "drew 6 lanes" in capsys.readouterr().out  # 3 ranks x 2 SMs
    rows = list(csv.DictReader(table.open()))
    counts = {(r["name"], int(r["rank"])): int(r["events"]) for r in rows}
    for rank in range(3):
        assert counts[("entry wait", rank)] == 1 and counts[("remote store", rank)] == 2
        assert counts[("tile", rank)] == 2, "the tile never ended must not be drawn"
        assert counts[("exit wait", rank)] == 2  # the interval and the instant
    tiles = [r for r in rows if r["name"] == "tile"]
    assert all(float(r["max_us"]) == pytest.approx(3.0) for r in tiles)
    # the offsets put every rank's entry wait at the same merged time
    assert {float(r["first_us"]) for r in rows if r["name"] == "entry wait"} == {0.0}


def test_a_window_keeps_the_events_overlapping_it(tmp_path):
    trace = trace_view.load(_trace(tmp_path))
    rows = trace_view.summarize(trace, window=(0.0, 1.0))
    assert {r["name"] for r in rows} == {"entry wait"} and len(rows) == 3


def test_the_list_names_the_tool(capsys):
    assert cli.main(["--list"]) == 0
    assert "trace-view" in capsys.readouterr().out


@pytest.mark.parametrize(
    "content, message",
    [
        ("not json", "is not JSON"),
        (json.dumps({"events": []}), "no 'traceEvents' list"),
        (json.dumps({"traceEvents": [1]}), "is a int, not an object"),
        (json.dumps({"traceEvents": [{"ph": "X", "name": "a", "pid": 0, "tid": 0, "ts": 1}]}), "lacks dur"),
        (json.dumps({"traceEvents": [{"ph": "i", "name": "a", "pid": 0, "tid": 0, "ts": "x"}]}), "not a finite number"),
    ],
)
def test_a_file_it_cannot_draw_is_a_clear_error(tmp_path, capsys, content, message):
    path = tmp_path / "bad.json"
    path.write_text(content)
    assert cli.main(["trace-view", str(path), "--png", str(tmp_path / "x.png")]) == 2
    assert message in capsys.readouterr().err
    assert not (tmp_path / "x.png").exists()


def test_bad_usage(tmp_path, capsys):
    assert cli.main(["trace-view", str(tmp_path / "missing.json")]) == 2
    assert "cannot read" in capsys.readouterr().err
    path = _trace(tmp_path)
    assert cli.main(["trace-view", str(path), "--window", "5", "1"]) == 2
    assert cli.main(["trace-view", str(path), "--png", str(tmp_path / "e.png"), "--window", "1e9", "2e9"]) == 2
    assert "no events to draw in that window" in capsys.readouterr().err
