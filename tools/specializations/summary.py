"""Tabulate what ``sitecustomize.py`` logged: distinct kernel specializations, per kernel and per test code.

    python3 tools/specializations/summary.py DIR [--most 25]

A key counts once however many processes launched it (a GPU's cache is shared by its processes);
per test code, a key counts for every test code that launched it.
"""

import argparse
import collections
import pathlib


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("dir", type=pathlib.Path)
    parser.add_argument("--most", type=int, default=25, help="rows per table")
    args = parser.parse_args()
    keys, by_caller, errors = set(), collections.defaultdict(set), []
    for f in sorted(args.dir.glob("*.tsv")):
        for line in f.read_text().splitlines():
            kernel, key, caller = (line.split("\t") + ["?", "?"])[:3]
            if kernel == "?":
                errors.append(key)
                continue
            keys.add((kernel, key))
            by_caller[caller].add((kernel, key))
    per_kernel = collections.Counter(k for k, _ in keys)
    print(f"{len(keys)} distinct specializations of {len(per_kernel)} kernels")
    for kernel, n in per_kernel.most_common(args.most):
        print(f"  {n:6d}  {kernel}")
    print("per test code (a key launched by several counts for each):")
    for caller, ks in sorted(by_caller.items(), key=lambda kv: -len(kv[1]))[: args.most]:
        print(f"  {len(ks):6d}  {caller}")
    if errors:
        print(f"{len(errors)} launches not counted: {collections.Counter(errors).most_common(3)}")


if __name__ == "__main__":
    main()
