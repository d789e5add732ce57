"""``python -m iris.examples NAME [--ranks N] [--backend triton|gluon] [--csv PATH] [--plot PATH] [options]``.

Runs the example NAME on N ranks and prints its tables. Started by hand, it launches the ranks
through torch.distributed's elastic launcher; started by torchrun
(``python -m torch.distributed.run --nproc-per-node 2 -m iris.examples NAME``) each process is
one rank and rank 0 reports. Without a GPU (or with ``--cpu``) the ranks run on CPU under
Triton's interpreter, at small default sizes.

Exit status: 0 when every rank's result matched torch; 1 on a mismatch or a failed rank (its rank
and traceback are printed); 2 on bad usage.

An example is a module (named in ``iris.examples.harness.registry``) with ``SUMMARY``,
``add_arguments(parser, gpu=)``, ``rank_main(args)`` (run on every rank; rank 0 gets every
rank's result) and ``report(results, args)`` (prints, writes ``--csv``/``--plot``, returns the
exit status), and optionally ``check_arguments(args)`` (raises ValueError on bad usage),
``BACKENDS`` (the backends it implements; empty: it runs no kernels and takes no ``--backend``)
and ``SWEEPS_RANKS = True``: ``--ranks`` then takes several world sizes (``--ranks 1 2 4``), the
ranks are launched once per size, and ``report`` gets ``{world_size: results}``.
"""

from __future__ import annotations

import argparse
import os
import sys

from . import launch, tables, trace
from .options import positive_int
from .registry import BACKENDS, EXAMPLES, Example

__all__ = ["main"]

PROG = "python -m iris.examples"
TRACE_VIEW = "trace-view"  # the one tool beside the examples: ``trace-view FILE --png OUT``


def _common(parser: argparse.ArgumentParser, *, sweeps: bool = False) -> None:
    g = parser.add_argument_group("common options")
    g.add_argument("--list", action="store_true", help="name every example and exit")
    if sweeps:
        g.add_argument("--ranks", type=positive_int, nargs="+", default=None, metavar="N",
                       help="world sizes to run, one launch each (default 2; under torchrun: its world size)")  # fmt: skip
    else:
        g.add_argument("--ranks", type=positive_int, default=None,
                       help="ranks to start (default 2; under torchrun: its world size)")  # fmt: skip
    g.add_argument("--backend", choices=BACKENDS, default=None,
                   help="kernel language (default: the example's; a -gluon name fixes gluon)")  # fmt: skip
    g.add_argument("--csv", metavar="PATH", default=None, help="write the result rows to this CSV file")
    g.add_argument("--plot", metavar="PATH", default=None, help="save a plot of the results (.png, .svg, .pdf)")
    g.add_argument("--cpu", action="store_true", help="run on CPU ranks under Triton's interpreter even with a GPU")
    trace.add_arguments(g)
    g.add_argument("--verbose", action="store_true", help="show torch.distributed.elastic's own logging")


def _list_examples() -> int:
    rows = [{"name": e.name, "backend": e.backend, "summary": e.summary} for e in EXAMPLES.values()]
    rows.append(
        {
            "name": TRACE_VIEW,
            "backend": None,
            "summary": "draw a trace file (--trace, heap.tracing.export) as a PNG timeline; no ranks",
        }
    )
    tables.print_table(
        "iris.examples",
        rows,
        [("name", "example", ""), ("backend", "backend", ""), ("summary", "what it does", "")],
        caption=f"run one: {PROG} NAME [--ranks N] [--help]",
    )
    return 0


def _parse(argv: list[str]) -> tuple[Example, argparse.Namespace, object]:
    top = argparse.ArgumentParser(prog=PROG, description=__doc__.split("\n\n")[1], add_help=False)
    top.add_argument("name", nargs="?", metavar="NAME", help="the example to run (see --list)")
    top.add_argument("-h", "--help", action="store_true")
    _common(top)
    known, _ = top.parse_known_args(argv)
    if known.list:
        return None, known, None
    if known.name is None:
        if known.help:
            top.print_help()
            top.exit(0)
        top.error(f"name an example to run ({', '.join(EXAMPLES)}), or ask for --list")
    if known.name not in EXAMPLES:
        top.error(f"no example called {known.name!r}; the examples are: {', '.join(EXAMPLES)} (see --list)")
    example = EXAMPLES[known.name]
    if example.replaced_by is not None:
        print(f"{example.name} is deprecated and goes in 0.3: it runs {example.replaced_by}; run that instead",
              file=sys.stderr)  # fmt: skip

    cpu = launch.cpu_ranks(known.cpu)
    launch.prepare_environment(cpu=cpu)  # before the example module imports triton
    module = example.load()

    parser = argparse.ArgumentParser(prog=f"{PROG} {example.name}", description=example.summary)
    parser.add_argument("name", choices=[example.name], metavar="NAME", help=argparse.SUPPRESS)
    sweeps = getattr(module, "SWEEPS_RANKS", False)
    _common(parser, sweeps=sweeps)
    module.add_arguments(parser, gpu=not cpu)
    args = parser.parse_args(argv)

    implemented = tuple(getattr(module, "BACKENDS", BACKENDS))
    if not implemented:  # an example that runs no kernels (heap-bench)
        if args.backend is not None:
            parser.error(f"{example.name} runs no kernels; leave --backend out")
    elif args.backend is None:
        args.backend = example.backend
    elif example.fixed_backend and args.backend != example.backend:
        parser.error(f"{example.name} runs the {example.backend} backend; for --backend {args.backend} run "
                     f"{example.name.removesuffix('-gluon')}")  # fmt: skip
    if args.trace is not None and not implemented:
        parser.error(f"{example.name} runs no kernels, so it has nothing to trace; leave --trace out")
    if implemented and args.backend not in implemented:
        parser.error(f"{example.name} implements only the {'/'.join(implemented)} backend, not --backend "
                     f"{args.backend}; leave --backend out")  # fmt: skip

    if launch.under_torchrun():
        world_size = int(os.environ.get("WORLD_SIZE", "1"))
        if args.ranks is not None and args.ranks != ([world_size] if sweeps else world_size):
            parser.error(f"--ranks {args.ranks} was asked for, but torchrun started {world_size} ranks; "
                         "leave --ranks out under torchrun")  # fmt: skip
        args.ranks = world_size
    elif args.ranks is None:
        args.ranks = 2
    if sweeps:  # the world sizes, each once, in the order asked
        args.ranks = list(dict.fromkeys(args.ranks if isinstance(args.ranks, list) else [args.ranks]))
    args.example = example.name
    args.gpu = not cpu
    check = getattr(module, "check_arguments", None)
    if check is not None:
        try:
            check(args)
        except ValueError as e:
            parser.error(str(e))
    return example, args, module


def _print_failures(err: launch.RankFailedError) -> None:
    out = sys.stderr
    for i, f in enumerate(err.failures):
        if i == 0:
            print(f"\nrank {f.rank} failed (exit code {f.exitcode}): {f.message}", file=out)
            if f.traceback:
                print(f"--- traceback of rank {f.rank} ---\n{f.traceback}", file=out)
        else:
            message = f.message if len(f.message) <= 160 else f.message[:157] + "..."
            print(f"rank {f.rank} also failed, later (exit code {f.exitcode}): {message}", file=out)
    out.flush()


def _at(args: argparse.Namespace, world_size: int) -> argparse.Namespace:
    """``args`` for one world size of an example that sweeps them."""
    at = {**vars(args), "ranks": world_size}
    if args.trace is not None:
        at["trace"] = trace.path_for(args.trace, world_size)
    return argparse.Namespace(**at)


def _run_torchrun(module, args) -> int:
    sweeps = getattr(module, "SWEEPS_RANKS", False)
    run = _at(args, args.ranks[0]) if sweeps else args
    results = launch.run_in_place(module.__name__, run)
    if results is None:  # not rank 0
        return 0
    status = module.report({args.ranks[0]: results} if sweeps else results, args)
    _print_traces([run])
    return status


def _print_traces(runs) -> None:
    for run in runs:
        if run.trace is not None:
            print(trace.summary(run.trace))


def _run(module, args) -> list | dict:
    """Launch the ranks: once, or for an example that sweeps world sizes once per size
    (``{world_size: results}``, in the order asked)."""
    if not getattr(module, "SWEEPS_RANKS", False):
        return launch.launch(module.__name__, args, verbose=args.verbose)
    return {w: launch.launch(module.__name__, _at(args, w), verbose=args.verbose) for w in args.ranks}


def _runs(module, args) -> list:
    """The arguments each launch got (one per world size of an example that sweeps them)."""
    return [_at(args, w) for w in args.ranks] if getattr(module, "SWEEPS_RANKS", False) else [args]


def main(argv: list[str] | None = None) -> int:
    """Run the CLI; returns the exit status (0 ok, 1 mismatch or failed rank, 2 bad usage)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == [TRACE_VIEW]:  # a tool that reads a trace file, not an example run on ranks
        from . import trace_view

        return trace_view.main(argv[1:])
    try:
        example, args, module = _parse(argv)
    except SystemExit as e:  # argparse: --help (0) or a usage error (2)
        return e.code if isinstance(e.code, int) else 2
    if example is None:
        return _list_examples()
    if launch.under_torchrun():
        from torch.distributed.elastic.multiprocessing.errors import record

        return record(_run_torchrun)(module, args)
    try:
        results = _run(module, args)
    except launch.RankFailedError as e:
        _print_failures(e)
        return 1
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    status = int(module.report(results, args))
    _print_traces(_runs(module, args))
    return status
