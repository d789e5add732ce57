"""How examples show results: rich tables on the terminal, CSV files, matplotlib plots, progress."""

from __future__ import annotations

import contextlib
import csv
import math
import os
import sys
from collections.abc import Callable, Iterator, Sequence

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

__all__ = ["console", "plot", "print_table", "progress", "write_csv"]

Column = tuple[str, str, "str | Callable[[object], str]"]


def console(*, stderr: bool = False) -> Console:
    """A rich console on stdout (or stderr); wide enough not to wrap tables when output is piped."""
    stream = sys.stderr if stderr else sys.stdout
    width = None if stream.isatty() or "COLUMNS" in os.environ else 200
    return Console(file=stream, width=width, stderr=stderr)


def _cell(value, spec) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    if callable(spec):
        return spec(value)
    if isinstance(value, bool):
        return "yes" if value else "no"
    return format(value, spec) if spec else str(value)


def print_table(title: str, rows: Sequence[dict], columns: Sequence[Column], *, caption: str | None = None) -> None:
    """Print ``rows`` as a table: ``columns`` is ``[(key, header, format_spec), ...]``.

    ``format_spec`` is a ``format()`` spec (``".3f"``, ``""``) or a callable taking the value;
    a row without the key, or with None/NaN, shows ``-``. ``caption`` goes under the table (the
    examples put ``environment.summary()`` there).
    """
    table = Table(title=title, title_justify="left")
    for i, (_key, header, spec) in enumerate(columns):
        numeric = isinstance(spec, str) and spec[-1:] in ("f", "g", "e", "d", "%")
        # The first column names the row: never cut (a table wider than the console wraps the others).
        table.add_column(header, justify="right" if numeric else "left", no_wrap=i == 0, overflow="fold")
    for row in rows:
        table.add_row(*(_cell(row.get(key), spec) for key, _, spec in columns))
    out = console()
    out.print(table)
    if caption:
        out.print(caption, style="dim", highlight=False)


def write_csv(path: str | os.PathLike, rows: Sequence[dict], columns: Sequence[str] | None = None) -> None:
    """Write ``rows`` to ``path`` as CSV: the ``columns`` given (keys a row lacks are left empty,
    keys not named are an error), or one column per key that any row has, in first-seen order."""
    keys: dict[str, None] = dict.fromkeys(columns or ())
    if columns is None:
        for row in rows:
            keys.update(dict.fromkeys(row))
    with open(path, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(keys), restval="")
        writer.writeheader()
        writer.writerows(rows)


def plot(path: str | os.PathLike, rows: Sequence[dict], *, x: str, y: str, series: str | Sequence[str] | None,
         title: str, xlabel: str, ylabel: str, logx: bool = True, logy: bool = False) -> None:  # fmt: skip
    """Save a line plot of ``rows`` to ``path`` (format from its suffix: .png, .svg, .pdf).

    One line per distinct value of ``series`` (a key, or several keys joined with " "), points
    ``(row[x], row[y])`` sorted by x; rows without ``x`` or ``y`` are left out.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    keys = [series] if isinstance(series, str) else list(series or [])
    lines: dict[str, list[tuple[float, float]]] = {}
    for row in rows:
        if row.get(x) is None or row.get(y) is None:
            continue
        label = " ".join(str(row.get(k, "")) for k in keys) or y
        lines.setdefault(label, []).append((row[x], row[y]))
    if not lines:
        raise ValueError(f"nothing to plot: no row has both {x!r} and {y!r}")
    fig, ax = plt.subplots(figsize=(8, 5))
    try:
        for label, points in lines.items():
            points.sort()
            ax.plot([p[0] for p in points], [p[1] for p in points], marker="o", label=label)
        if logx:
            ax.set_xscale("log", base=2)
        if logy:
            ax.set_yscale("log")
        ax.set_title(title)
        ax.set_xlabel(xlabel)
        ax.set_ylabel(ylabel)
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize="small")
        fig.tight_layout()
        fig.savefig(path)
    finally:
        plt.close(fig)


class _Steps:
    def __init__(self, bar: Progress | None, task):
        self._bar, self._task = bar, task

    def advance(self, steps: int = 1, description: str | None = None) -> None:
        if self._bar is not None:
            kwargs = {"description": description} if description is not None else {}
            self._bar.update(self._task, advance=steps, **kwargs)


@contextlib.contextmanager
def progress(description: str, total: int, *, enabled: bool = True) -> Iterator[_Steps]:
    """A transient progress bar on stderr for a long run; ``with progress(...) as p: p.advance()``.

    Shown only when ``enabled`` (examples pass ``rank == 0``) and stderr is a terminal;
    otherwise ``advance`` does nothing.
    """
    if not (enabled and sys.stderr.isatty()):
        yield _Steps(None, None)
        return
    bar = Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=console(stderr=True),
        transient=True,
    )
    with bar:
        yield _Steps(bar, bar.add_task(description, total=total))
