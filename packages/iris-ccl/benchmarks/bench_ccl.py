"""iris.ccl against the copy roofline (and NCCL where every rank has its own GPU).

    python benchmarks/bench_ccl.py [--ranks 4] [--sizes 1M 16M 64M 256M 1G] [--iters 10]
                                   [--backend triton|gluon] [--collectives ...] [--csv ccl.csv] [--plot ccl.png]

The benchmark lives in iris-examples (``iris.examples.ccl_bench``, one implementation): this
script runs ``python -m iris.examples ccl-bench`` with the same options, 4 ranks unless
``--ranks`` says otherwise. See ``python -m iris.examples ccl-bench --help``.
"""

from __future__ import annotations

import os
import sys


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        from iris.examples import cli
    except ImportError as e:
        print(
            f"bench_ccl.py runs the ccl-bench example of iris-examples, which is not importable here ({e}). "
            "Install it (pip install iris-examples) or put packages/iris-examples/src on PYTHONPATH, then run "
            "this again or `python -m iris.examples ccl-bench`.",
            file=sys.stderr,
        )
        return 2
    started_by_torchrun = "TORCHELASTIC_RUN_ID" in os.environ or ("RANK" in os.environ and "WORLD_SIZE" in os.environ)
    if not started_by_torchrun and not any(a == "--ranks" or a.startswith("--ranks=") for a in argv):
        argv = ["--ranks", "4", *argv]  # this script's default since it was written
    return cli.main(["ccl-bench", *argv])


if __name__ == "__main__":
    sys.exit(main())
