"""Starting the ranks: torch.distributed's elastic launcher, or in place under torchrun.

``launch(module, args)`` runs ``module.rank_main(args)`` on ``args.ranks`` processes started by
``torch.distributed.launcher.api.elastic_launch`` (spawned, one node, a c10d rendezvous on a
free localhost port, no restarts) and returns the per-rank results in rank order. Under torchrun
(``run_in_place``) this process is one of the ranks and runs its part where it is.

Each rank joins torch.distributed (gloo, from the launcher's ``env://`` variables) before the
example runs, and the results are gathered to rank 0 with ``gather_object``. A rank that raises
ends the run: the launcher stops the other ranks and ``launch`` raises ``RankFailedError`` with
the failing rank and its remote traceback (the one failure type of Iris, ``iris.heap.errors``'s,
which the test runner raises too; re-exported here).
"""

from __future__ import annotations

import importlib
import json
import logging
import os
import shutil
import tempfile
import time
import traceback
import uuid
from argparse import Namespace

from iris.heap.log import get_logger

# One failure type for every way Iris starts ranks, defined in the layer below (whose test runner
# raises it too, and which may not import this package) and re-exported here.
from iris.heap.errors import RankFailedError, RankFailure

__all__ = [
    "RankFailedError",
    "RankFailure",
    "cpu_ranks",
    "launch",
    "prepare_environment",
    "quiet_launcher",
    "run_in_place",
    "under_torchrun",
]


def under_torchrun() -> bool:
    """Whether this process was started by torchrun (or another launcher that sets ``RANK``/``WORLD_SIZE``)."""
    return "TORCHELASTIC_RUN_ID" in os.environ or ("RANK" in os.environ and "WORLD_SIZE" in os.environ)


def cpu_ranks(force_cpu: bool = False) -> bool:
    """Whether the ranks run on CPU under Triton's interpreter: forced, ``IRIS_DEVICE=cpu``,
    ``TRITON_INTERPRET=1`` already set, or no GPU."""
    import torch

    return (
        force_cpu
        or os.environ.get("IRIS_DEVICE", "").lower() == "cpu"
        or os.environ.get("TRITON_INTERPRET") == "1"
        or not torch.cuda.is_available()
    )


def prepare_environment(*, cpu: bool) -> None:
    """Set up this process (and the ranks it will spawn, which inherit it) before triton is imported.

    CPU ranks: ``TRITON_INTERPRET=1`` (kernels decorated after this run on CPU tensors),
    ``IRIS_DEVICE=cpu`` (the heap in shared memory), and one torch thread per rank unless
    ``OMP_NUM_THREADS`` says otherwise.
    """
    if cpu:
        os.environ["TRITON_INTERPRET"] = "1"
        os.environ["IRIS_DEVICE"] = "cpu"
        os.environ.setdefault("OMP_NUM_THREADS", "1")


def quiet_launcher(verbose: bool = False) -> None:
    """Silence torch.distributed.elastic's info and warning logging (the failures are reported by us)."""
    for name in ("torch.distributed.elastic", "torch.distributed.launcher", "torch.multiprocessing"):
        logger = logging.getLogger(name)
        if verbose:
            logger.propagate = True
            continue
        if not any(isinstance(h, logging.NullHandler) for h in logger.handlers):
            logger.addHandler(logging.NullHandler())
        logger.propagate = False


_FAILURE_DIR = "IRIS_EXAMPLES_FAILURE_DIR"  # where spawned ranks record how they failed

_logger = get_logger(__name__)


def _record_failure(error: BaseException) -> None:
    """Write this rank's failure (with a clock shared by the host's processes) for ``launch`` to read.

    The elastic launcher reports only one failed process, and a rank whose peer crashed fails
    too (connection closed); the earliest record names the root cause.
    """
    folder = os.environ.get(_FAILURE_DIR)
    if not folder:
        return
    record = {
        "rank": int(os.environ.get("RANK", "-1")),
        "time_ns": time.monotonic_ns(),
        "message": f"{type(error).__name__}: {error}",
        "traceback": "".join(traceback.format_exception(error)),
    }
    path = os.path.join(folder, f"rank-{record['rank']}.json")
    with open(path + ".tmp", "w") as f:
        json.dump(record, f)
    os.replace(path + ".tmp", path)
    _logger.debug("this rank failed (%s); recorded for the launcher in %s", record["message"], path)


def _rank_part(module_name: str, args: Namespace) -> list | None:
    """Run the example on this rank, then gather every rank's result on rank 0 (rank order)."""
    try:
        return _rank_work(module_name, args)
    except BaseException as e:
        _record_failure(e)
        raise


def _rank_work(module_name: str, args: Namespace) -> list | None:
    import torch.distributed as dist

    own_group = not dist.is_initialized()
    if own_group:
        _logger.debug("joining torch.distributed (gloo, env://): waits for every rank")
        dist.init_process_group(backend="gloo", init_method="env://")
    try:
        module = importlib.import_module(module_name)
        _logger.debug("running %s.rank_main", module_name)
        result = module.rank_main(args)
        rank, world_size = dist.get_rank(), dist.get_world_size()
        _logger.debug("%s.rank_main returned; gathering the results on rank 0", module_name)
        gathered = [None] * world_size if rank == 0 else None
        dist.gather_object(result, gathered, dst=0)
        return gathered
    finally:
        if own_group:
            dist.destroy_process_group()


def _rank_entry(module_name: str, args: Namespace) -> list | None:
    """The function each spawned rank runs (module level, so spawn can pickle it)."""
    from torch.distributed.elastic.multiprocessing.errors import record

    return record(_rank_part)(module_name, args)


def run_in_place(module_name: str, args: Namespace) -> list | None:
    """Under torchrun: run this rank's part here; rank 0 gets the results, the others None."""
    return _rank_part(module_name, args)


def _failure(rank: int, failure) -> RankFailure:
    data = getattr(failure, "error_file_data", None) or {}
    message = data.get("message") if isinstance(data, dict) else None
    traceback = ""
    if isinstance(message, dict):
        traceback = str(message.get("extraInfo", {}).get("py_callstack", ""))
        text = str(message.get("message", ""))
    else:
        text = str(failure.message or "")
    if not text and failure.exitcode < 0:
        text = f"killed by signal {-failure.exitcode}"
    if not text and not traceback:
        text = f"exited with code {failure.exitcode} and left no error record"
    return RankFailure(rank=rank, exitcode=failure.exitcode, message=text.strip(), traceback=traceback.strip())


def launch(module_name: str, args: Namespace, *, verbose: bool = False) -> list:
    """Run ``module_name``'s ``rank_main(args)`` on ``args.ranks`` new processes; the results in rank order.

    While the ranks run, this process's ``tempfile.tempdir`` is a folder of the launch's own,
    removed with all it holds when the launch ends: torch's launcher writes files there that it
    never removes. Temp files that other threads of this process create meanwhile land there too.
    """
    from torch.distributed.elastic.multiprocessing import DefaultLogsSpecs
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
    from torch.distributed.launcher.api import LaunchConfig, elastic_launch

    quiet_launcher(verbose)
    # One folder per launch, removed after it, for the ranks' failure records and all that torch's
    # launcher writes: left to itself it makes a torchelastic_* folder in the temp dir and, for each
    # rank that fails, a pytorch-errorfile-*.pickle, and removes neither.
    folder = tempfile.mkdtemp(prefix="iris-examples-")
    config = LaunchConfig(
        min_nodes=1,
        max_nodes=1,
        nproc_per_node=args.ranks,
        run_id=f"iris-examples-{uuid.uuid4().hex[:12]}",
        rdzv_backend="c10d",
        rdzv_endpoint="localhost:0",  # a free port, as torchrun --standalone
        max_restarts=0,
        monitor_interval=0.1,
        start_method="spawn",
        logs_specs=DefaultLogsSpecs(log_dir=os.path.join(folder, "launcher")),
    )
    previous = os.environ.get(_FAILURE_DIR)
    os.environ[_FAILURE_DIR] = folder  # the ranks inherit it
    _logger.info(
        "launching %d ranks of %s (spawned, c10d rendezvous on localhost, run id %s)",
        args.ranks, module_name, config.run_id,
    )  # fmt: skip
    previous_tempdir, tempfile.tempdir = tempfile.tempdir, folder  # the launcher runs in this process
    try:
        outputs = elastic_launch(config, _rank_entry)(module_name, args)
    except ChildFailedError as e:
        failures = _failures(folder, e)
        _logger.debug("ranks %s failed; the earliest record first", [f.rank for f in failures])
        raise RankFailedError(failures=failures) from None
    finally:
        tempfile.tempdir = previous_tempdir
        if previous is None:
            os.environ.pop(_FAILURE_DIR, None)
        else:
            os.environ[_FAILURE_DIR] = previous
        shutil.rmtree(folder, ignore_errors=True)
    return outputs[0]


def _failures(folder: str, error) -> list[RankFailure]:
    """Every rank's recorded failure, earliest first; the launcher's own report for ranks that left none."""
    records = []
    for name in os.listdir(folder):
        if name.endswith(".json"):
            with open(os.path.join(folder, name)) as f:
                records.append(json.load(f))
    records.sort(key=lambda r: r["time_ns"])
    exitcodes = {rank: f.exitcode for rank, f in error.failures.items()}
    failures = [
        RankFailure(r["rank"], exitcodes.get(r["rank"], 1), r["message"], r["traceback"].strip()) for r in records
    ]
    seen = {f.rank for f in failures}
    failures += [_failure(rank, f) for rank, f in sorted(error.failures.items()) if rank not in seen]
    return failures
