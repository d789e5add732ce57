"""A/B one benchmark of iris.examples: one package's source at a revision against the working tree.

    python3 tools/ab-bench.py REV PACKAGE [--rounds 2] [--out DIR] [--metric time_us] -- NAME [ARGS...]

e.g. ``python3 tools/ab-bench.py 4fbf8d6 iris-ccl -- ccl-bench --ranks 4 --sizes 1M 64M``: the
benchmark ``NAME`` runs ``--rounds`` times with ``packages/PACKAGE/src`` as it was at ``REV`` (``old``)
and as it is in the working tree (``new``), alternately (old, new, old, new, ...: a slow spell of the
machine falls on both), every other package from the working tree, from the source folders (no
install; the GPU machines' way). Each run writes ``DIR/{old,new}-ROUND.csv`` and ``.log``; a run
that fails is reported with its log's last lines and left out. Then one row per CSV row key (its
columns that are not numbers, and ``bytes_per_rank``, ``ranks``, ``M``, ``N``, ``K`` where present): the
median of ``--metric`` over each side's runs, every run's value, and new / old. Compare only runs of
one call on one machine; start MPS first where ranks share a GPU.
"""

from __future__ import annotations

import argparse
import csv
import os
import statistics
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
_KEYS = ("bytes_per_rank", "ranks", "M", "N", "K")


def _source_at(rev: str, package: str, dest: Path) -> Path:
    """``packages/PACKAGE/src`` at ``rev``, extracted under ``dest``; the folder for PYTHONPATH."""
    inner = f"packages/{package}/src"
    with tempfile.TemporaryFile() as archive:
        subprocess.run(["git", "-C", str(ROOT), "archive", rev, inner], stdout=archive, check=True)
        archive.seek(0)
        with tarfile.open(fileobj=archive) as tar:
            safe = {"filter": "data"} if hasattr(tarfile, "data_filter") else {}  # Python 3.10.12+
            tar.extractall(dest, **safe)
    return dest / inner


def _python_path(package: str, replacement: Path | None) -> str:
    folders = sorted(ROOT.glob("packages/*/src"))
    if not any(f.parent.name == package for f in folders):
        raise SystemExit(f"no packages/{package}/src in {ROOT}")
    return os.pathsep.join(str(replacement if (replacement and f.parent.name == package) else f) for f in folders)


def _run(side: str, round_: int, path: str, out: Path, bench: list[str]) -> Path | None:
    stem = out / f"{side}-{round_}"
    env = {**os.environ, "PYTHONPATH": path}
    env.pop("TRITON_INTERPRET", None)
    with open(f"{stem}.log", "w") as log:
        done = subprocess.run([sys.executable, "-m", "iris.examples", *bench, "--csv", f"{stem}.csv"], env=env,
                              stdout=log, stderr=subprocess.STDOUT)  # fmt: skip
    tail = Path(f"{stem}.log").read_text(errors="replace").splitlines()[-6:]
    if done.returncode != 0 or not Path(f"{stem}.csv").exists():
        print(f"{side} run {round_}: exit {done.returncode}\n  " + "\n  ".join(line[:300] for line in tail))
        return None
    print(f"{side} run {round_}: ok")
    return Path(f"{stem}.csv")


def _rows(path: Path, metric: str) -> dict:
    rows = {}
    with open(path, newline="") as f:
        for row in csv.DictReader(f):
            if not row.get(metric):
                continue
            key = tuple((k, v) for k, v in row.items() if k in _KEYS or (v and not _is_number(v)))
            rows[key] = float(row[metric])
    return rows


def _is_number(v: str) -> bool:
    try:
        float(v)
    except ValueError:
        return False
    return True


def report(old: list[Path], new: list[Path], metric: str) -> None:
    """One line per row key: each side's median of ``metric``, every run's value, new / old."""
    sides = [[_rows(p, metric) for p in paths] for paths in (old, new)]
    keys = [k for k in (sides[0] or sides[1])[0] if all(k in r for runs in sides for r in runs)]
    constant = {k for k, v in keys[0] if all((k, v) in key for key in keys)} if len(keys) > 1 else set()
    print(f"\n{metric}: old (the revision) against new (the working tree), median of the runs")
    for key in keys:
        values = [[r[key] for r in runs] for runs in sides]
        medians = [statistics.median(v) for v in values]
        label = " ".join(k if v == "True" else v for k, v in key if k not in constant and k != "check")
        runs = " | ".join(" ".join(f"{x:.4g}" for x in v) for v in values)
        ratio = medians[1] / medians[0] if medians[0] else float("nan")
        print(f"  {label:<40} old {medians[0]:>10.4g}  new {medians[1]:>10.4g}  new/old {ratio:6.3f}   ({runs})")


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if "--" not in argv:
        raise SystemExit(__doc__)
    split = argv.index("--")
    parser = argparse.ArgumentParser(prog="ab-bench.py", description=__doc__.splitlines()[0])
    parser.add_argument("rev", help="the revision of the old side (any git revision)")
    parser.add_argument("package", help="the distribution whose source differs, e.g. iris-ccl")
    parser.add_argument("--rounds", type=int, default=2, help="runs per side, alternated (default 2)")
    parser.add_argument(
        "--out", type=Path, default=None, help="where CSVs and logs go (default: a new temporary folder)"
    )
    parser.add_argument("--metric", default="time_us", help="the CSV column compared (default time_us)")
    args = parser.parse_args(argv[:split])
    bench = argv[split + 1 :]
    if not bench or args.rounds < 1:
        raise SystemExit("give the benchmark after --, e.g. -- ccl-bench --ranks 4; and --rounds >= 1")
    out = args.out or Path(tempfile.mkdtemp(prefix="ab-bench-"))
    out.mkdir(parents=True, exist_ok=True)
    paths = {"old": _python_path(args.package, _source_at(args.rev, args.package, out / "old-source")),
             "new": _python_path(args.package, None)}  # fmt: skip
    print(f"A/B of {args.package} at {args.rev} (old) against the working tree (new): {' '.join(bench)}; in {out}")
    csvs: dict[str, list[Path]] = {"old": [], "new": []}
    for i in range(1, args.rounds + 1):
        for side in ("old", "new"):
            if (found := _run(side, i, paths[side], out, bench)) is not None:
                csvs[side].append(found)
    if not (csvs["old"] and csvs["new"]):
        print("no comparison: a side has no successful run")
        return 1
    report(csvs["old"], csvs["new"], args.metric)
    return 0 if len(csvs["old"]) == len(csvs["new"]) == args.rounds else 1


if __name__ == "__main__":
    sys.exit(main())
