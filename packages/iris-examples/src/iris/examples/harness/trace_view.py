"""``python -m iris.examples trace-view FILE [--png OUT] [--window START END]``: a trace written by
``heap.tracing.export`` (or ``--trace`` of any example), drawn for people without Perfetto.

Prints, per event name, how many events each rank recorded and how long they took, and with
``--png`` draws the timeline: one lane per (rank, multiprocessor), ranks stacked top to bottom
with a line between them, time in microseconds on the merged timeline, one colour per event
name; an event inside another on the same lane is drawn shorter, and instant events are ticks. Whether two phases overlapped is whether their bars share
columns (on one rank: the same time on different multiprocessors).

It reads any Chrome Trace Event JSON whose events are complete (``X``) or instant (``i``) with
``pid``/``tid``/``ts`` in microseconds, as Iris writes them; exit status 2 names what a file
lacked.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from collections import defaultdict
from pathlib import Path

from . import tables

__all__ = ["TraceError", "load", "main", "summarize", "draw"]

PROG = "python -m iris.examples trace-view"


class TraceError(ValueError):
    """The file is not a Chrome Trace Event JSON that trace-view can draw."""


def load(path: str | Path) -> dict:
    """The trace at ``path``: ``{"events": [...], "meta": otherData, "names": {(pid, tid): label}}``
    with ``events`` the ``X`` and ``i`` events (other phases are metadata or ignored)."""
    try:
        with open(path) as f:
            data = json.load(f)
    except OSError as e:
        raise TraceError(f"cannot read {path}: {e.strerror or e}") from e
    except json.JSONDecodeError as e:
        raise TraceError(f"{path} is not JSON ({e.msg} at line {e.lineno})") from e
    if isinstance(data, list):  # the JSON Array Format: events only
        data = {"traceEvents": data}
    if not isinstance(data, dict) or not isinstance(data.get("traceEvents"), list):
        raise TraceError(f"{path} is not a Chrome Trace Event file: no 'traceEvents' list")
    events, names = [], {}
    for i, e in enumerate(data["traceEvents"]):
        if not isinstance(e, dict):
            raise TraceError(f"{path}: traceEvents[{i}] is a {type(e).__name__}, not an object")
        ph = e.get("ph")
        if ph == "M" and e.get("name") in ("process_name", "thread_name"):
            key = (e.get("pid"), e.get("tid")) if e["name"] == "thread_name" else (e.get("pid"), None)
            names[key] = str(e.get("args", {}).get("name", ""))
        if ph not in ("X", "i", "I"):
            continue
        missing = [k for k in ("name", "pid", "tid", "ts") if k not in e] + (
            ["dur"] if ph == "X" and "dur" not in e else []
        )
        if missing:
            raise TraceError(f"{path}: traceEvents[{i}] ({ph!r} event) lacks {', '.join(missing)}")
        if not all(
            isinstance(e[k], (int, float)) and math.isfinite(e[k]) for k in ("ts", *(["dur"] if ph == "X" else []))
        ):
            raise TraceError(f"{path}: traceEvents[{i}] has a timestamp or duration that is not a finite number")
        events.append(e)
    return {"events": events, "meta": data.get("otherData", {}) or {}, "names": names}


def _window(events: list[dict], window) -> list[dict]:
    if window is None:
        return events
    lo, hi = window
    return [e for e in events if e["ts"] <= hi and e["ts"] + e.get("dur", 0) >= lo]


def summarize(trace: dict, window=None) -> list[dict]:
    """Rows ``{name, rank, events, total_us, mean_us, max_us, first_us, last_us}`` per event name
    and rank, in order of first appearance."""
    groups: dict = defaultdict(list)
    for e in _window(trace["events"], window):
        groups[(e["name"], e["pid"])].append(e)
    rows = []
    for (name, rank), evs in sorted(groups.items(), key=lambda kv: (min(e["ts"] for e in kv[1]), kv[0][1])):
        durs = [e.get("dur", 0.0) for e in evs]
        rows.append(
            {
                "name": name,
                "rank": rank,
                "events": len(evs),
                "total_us": sum(durs),
                "mean_us": sum(durs) / len(durs),
                "max_us": max(durs),
                "first_us": min(e["ts"] for e in evs),
                "last_us": max(e["ts"] + e.get("dur", 0.0) for e in evs),
            }
        )
    return rows


def draw(trace: dict, out: str | Path, *, window=None, title: str | None = None) -> int:
    """Draw the timeline into ``out`` (format from its suffix); the number of lanes drawn."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.patches import Patch

    events = _window(trace["events"], window)
    if not events:
        raise TraceError("the trace has no events to draw" + (" in that window" if window else ""))
    lanes = sorted({(e["pid"], e["tid"]) for e in events}, key=lambda k: (str(type(k[0])), k[0], str(k[1])))
    lane_of = {k: i for i, k in enumerate(lanes)}
    names = list(dict.fromkeys(e["name"] for e in sorted(events, key=lambda e: e["ts"])))
    cmap = plt.get_cmap("tab10" if len(names) <= 10 else "tab20")
    colour = {n: cmap(i % cmap.N) for i, n in enumerate(names)}

    # times from the window's start (or the first event), so the axis reads as durations
    origin = window[0] if window else min(e["ts"] for e in events)
    bars: dict = defaultdict(list)  # (name, lane, depth) -> spans
    ticks: dict = defaultdict(list)
    open_ends: dict = defaultdict(list)  # lane -> ends of the intervals still open, outermost first
    for e in sorted(events, key=lambda e: (e["ts"], -e.get("dur", 0.0))):
        lane = lane_of[(e["pid"], e["tid"])]
        if e["ph"] != "X":
            ticks[e["name"]].append((e["ts"] - origin, lane))
            continue
        stack = open_ends[lane]
        while stack and stack[-1] <= e["ts"]:
            stack.pop()
        depth = min(len(stack), 3)  # an event inside another is drawn shorter, so both show
        bars[(e["name"], lane, depth)].append((e["ts"] - origin, max(e["dur"], 0.0)))
        stack.append(e["ts"] + e["dur"])

    height = min(12.0, max(2.5, 0.22 * len(lanes) + 1.5))
    fig, ax = plt.subplots(figsize=(12, height))
    for (name, lane, depth), spans in sorted(bars.items(), key=lambda kv: kv[0][2]):
        ax.broken_barh(spans, (lane - 0.4 + 0.2 * depth, 0.8 - 0.2 * depth), facecolors=colour[name], edgecolors="none")
    for name, points in ticks.items():
        ax.scatter([t for t, _ in points], [lane for _, lane in points], marker="|", s=120, color=colour[name])

    ranks = [k[0] for k in lanes]
    boundaries = [i for i in range(1, len(ranks)) if ranks[i] != ranks[i - 1]]
    for b in boundaries:
        ax.axhline(b - 0.5, color="black", linewidth=0.8)
    if len(lanes) <= 48:
        ax.set_yticks(range(len(lanes)), [f"rank {p} {trace['names'].get((p, t), f'SM {t}')}" for p, t in lanes])
    else:  # too many lanes to name: one label per rank, at its middle
        starts = [0, *boundaries]
        ends = [*boundaries, len(lanes)]
        ax.set_yticks([(s + e - 1) / 2 for s, e in zip(starts, ends)], [f"rank {ranks[s]}" for s in starts])
    ax.set_ylim(len(lanes) - 0.5, -0.5)
    ax.set_xlabel(f"µs after {origin:.1f} µs of the merged timeline")
    ax.ticklabel_format(axis="x", useOffset=False)
    meta = trace["meta"]
    default = f"Iris trace: {meta.get('world_size', len(set(ranks)))} ranks, {len(events)} events"
    if meta.get("dropped_events"):
        default += f" ({meta['dropped_events']} dropped)"
    ax.set_title(title or default)
    ax.legend(handles=[Patch(color=colour[n], label=n) for n in names], loc="upper left", bbox_to_anchor=(1.0, 1.0),
              fontsize="small", frameon=False)  # fmt: skip
    ax.grid(axis="x", linewidth=0.3)
    fig.tight_layout()
    fig.savefig(out, dpi=150)
    plt.close(fig)
    return len(lanes)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog=PROG, description=__doc__.split("\n\n")[0].split(": ", 1)[1])
    parser.add_argument("file", metavar="FILE", help="a trace written by heap.tracing.export or --trace")
    parser.add_argument("--png", metavar="OUT", default=None, help="draw the timeline into OUT (.png, .svg, .pdf)")
    parser.add_argument("--window", nargs=2, type=float, metavar=("START", "END"), default=None,
                        help="only events overlapping [START, END] microseconds")  # fmt: skip
    parser.add_argument("--title", default=None, help="the picture's title")
    parser.add_argument("--csv", metavar="PATH", default=None, help="write the summary rows to this CSV file")
    try:
        args = parser.parse_args(argv)
    except SystemExit as e:
        return e.code if isinstance(e.code, int) else 2
    if args.window is not None and not args.window[0] < args.window[1]:
        print(f"{PROG}: --window START must be below END, got {args.window}", file=sys.stderr)
        return 2
    try:
        trace = load(args.file)
        rows = summarize(trace, args.window)
        meta = trace["meta"]
        caption = ", ".join(
            f"{k} {meta[k]}" for k in ("world_size", "dropped_events", "incomplete_events") if k in meta
        )
        tables.print_table(
            f"{args.file}",
            rows,
            [
                ("name", "event", ""),
                ("rank", "rank", ""),
                ("events", "events", ""),
                ("total_us", "total µs", ".1f"),
                ("mean_us", "mean µs", ".2f"),
                ("max_us", "max µs", ".2f"),
                ("first_us", "first µs", ".1f"),
                ("last_us", "last µs", ".1f"),
            ],  # fmt: skip
            caption=caption or None,
        )
        if args.csv:
            tables.write_csv(args.csv, rows)
        if args.png:
            lanes = draw(trace, args.png, window=args.window, title=args.title)
            print(f"drew {lanes} lanes into {args.png}")
    except TraceError as e:
        print(f"{PROG}: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
