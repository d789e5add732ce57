"""Rank-tagged logging: the ``iris`` logger, one child per layer, the rank in every record.

>>> from iris.heap.log import get_logger
>>> logger = get_logger(__name__)  # in iris/heap/heap.py: logging.getLogger("iris.heap")
>>> logger.debug("mapped %d peers", 3)

**Loggers.** ``iris``, and under it one per layer (``LAYERS``): ``iris.heap``, ``iris.mem.triton``,
``iris.mem.gluon``, ``iris.ccl``, ``iris.ops``, ``iris.examples``. Each is the standard library's
logger of that name, so ``logging.getLogger("iris.heap").setLevel(logging.DEBUG)`` does what a
torch.distributed user expects.

**The rank in every record.** Every record an Iris layer logs carries ``rank`` and ``world_size``
attributes, for any formatter (``"%(rank)s/%(world_size)s"``): those of the heap this process made
last (``set_rank``, which ``iris.heap.init`` calls); before there is one, torch.distributed's
default group when it is initialized, else the ``RANK``/``WORLD_SIZE`` variables a launcher such as
torchrun sets, else ``"-"``.

**Where records go.** As a library should, Iris attaches only a ``NullHandler``: records go where
the application's logging configuration sends them, and nowhere when it has none (no output by
default, warnings included). ``IRIS_LOG_LEVEL`` (``DEBUG``, ``INFO``, ``WARNING``, ``ERROR`` or
``CRITICAL``, any case), read once when ``iris.heap`` is imported, sets the ``iris`` logger's
level and gives it a stderr handler of its own, as ``NCCL_DEBUG`` does for NCCL::

    [iris rank 1/4 pid 4242] 12:00:01.234 WARNING iris.heap: ...

Records then stop at ``iris`` (a root handler does not print them twice). Any other value refuses
the import with a ``ValueError`` that names the allowed ones.
"""

from __future__ import annotations

import logging
import os
import sys

__all__ = ["FORMAT", "LAYERS", "LEVEL_VARIABLE", "LEVELS", "RankFilter", "fatal", "get_logger", "set_rank"]

#: The layers' loggers, each ``iris.<layer>``.
LAYERS = ("heap", "mem.triton", "mem.gluon", "ccl", "ops", "examples")
#: The environment variable that turns Iris's own stderr output on, and the levels it accepts.
LEVEL_VARIABLE = "IRIS_LOG_LEVEL"
LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")
#: The format of Iris's stderr handler (``IRIS_LOG_LEVEL``).
FORMAT = (
    "[iris rank %(rank)s/%(world_size)s pid %(process)d] %(asctime)s.%(msecs)03d %(levelname)s %(name)s: %(message)s"
)
_DATE_FORMAT = "%H:%M:%S"

_ROOT = "iris"
_rank: tuple[int, int] | None = None  # the last heap's (rank, world size)


def set_rank(rank: int, world_size: int) -> None:
    """Tag this process's records with ``rank`` of ``world_size`` (``iris.heap.init`` calls it)."""
    global _rank
    _rank = (int(rank), int(world_size))


def _current_rank() -> tuple[int | str, int | str]:
    if _rank is not None:
        return _rank
    dist = sys.modules.get("torch.distributed")  # never imported for this
    try:
        if dist is not None and dist.is_available() and dist.is_initialized():
            return dist.get_rank(), dist.get_world_size()
    except Exception:  # noqa: BLE001 - a group being torn down in another thread: fall back
        pass
    return _env_int("RANK"), _env_int("WORLD_SIZE")


def _env_int(name: str) -> int | str:
    value = os.environ.get(name, "").strip()
    return int(value) if value.isdigit() else "-"


class RankFilter(logging.Filter):
    """Adds ``record.rank`` and ``record.world_size`` (see the module's docstring); drops nothing."""

    def filter(self, record: logging.LogRecord) -> bool:
        record.rank, record.world_size = _current_rank()
        return True


_FILTER = RankFilter()


def get_logger(name: str) -> logging.Logger:
    """The rank-tagged logger of a layer: ``get_logger("heap")``, or a module's ``__name__``.

    ``name`` is a layer of ``LAYERS`` (``"ccl"``, ``"mem.gluon"``), the same with ``iris.`` in
    front, or the name of a module inside one (``"iris.heap.transport.shm"``), which gives its
    layer's logger (``iris.heap``).
    """
    if not isinstance(name, str):
        raise TypeError(f"get_logger() takes a layer name or a module's __name__, got {name!r}")
    dotted = name.removeprefix(_ROOT + ".")
    layer = next((la for la in LAYERS if dotted == la or dotted.startswith(la + ".")), None)
    if layer is None:
        raise ValueError(
            f"get_logger({name!r}): not an Iris layer nor a module inside one; layers are "
            f"{', '.join(LAYERS)} (each logs as iris.<layer>)"
        )
    logger = logging.getLogger(f"{_ROOT}.{layer}")
    if _FILTER not in logger.filters:
        logger.addFilter(_FILTER)
    return logger


def _shown(logger: logging.Logger, level: int) -> bool:
    """Whether a record of ``level`` on ``logger`` reaches a handler that writes it somewhere."""
    if not logger.isEnabledFor(level):
        return False
    current = logger
    while current is not None:
        if any(not isinstance(h, logging.NullHandler) and level >= h.level for h in current.handlers):
            return True
        if not current.propagate:
            return False
        current = current.parent
    return False


def fatal(logger: logging.Logger, message: str, *args) -> None:
    """Log ``message`` at CRITICAL before the process dies, and make sure it is seen.

    When no handler would write it (the application configured no logging and ``IRIS_LOG_LEVEL``
    is unset), it goes to stderr in Iris's format: a process about to abort says why. Every
    handler on the way is flushed.
    """
    logger.critical(message, *args)
    if not _shown(logger, logging.CRITICAL):
        record = logger.makeRecord(logger.name, logging.CRITICAL, "(fatal)", 0, message, args, None)
        _FILTER.filter(record)
        sys.stderr.write(_formatter().format(record) + "\n")
    sys.stderr.flush()
    current = logger
    while current is not None:
        for handler in current.handlers:
            handler.flush()
        current = current.parent if current.propagate else None


def _formatter() -> logging.Formatter:
    return logging.Formatter(FORMAT, datefmt=_DATE_FORMAT)


def _level(raw: str | None) -> int | None:
    """``IRIS_LOG_LEVEL``'s level, None when unset or empty; a ValueError naming the choices otherwise."""
    if raw is None or not raw.strip():
        return None
    name = raw.strip().upper()
    if name not in LEVELS:
        raise ValueError(
            f"{LEVEL_VARIABLE}={raw!r} is not a logging level: use one of {', '.join(LEVELS)} (any case), "
            "or unset it to leave Iris's logging to the application's configuration"
        )
    return getattr(logging, name)


def _configure(raw: str | None) -> None:
    """Set up the ``iris`` logger: a NullHandler, plus a stderr handler at the level ``raw`` names."""
    level = _level(raw)
    root = logging.getLogger(_ROOT)
    if not any(isinstance(h, logging.NullHandler) for h in root.handlers):
        root.addHandler(logging.NullHandler())
    if level is None or any(getattr(h, "_iris_stderr", False) for h in root.handlers):
        return
    handler = logging.StreamHandler(sys.stderr)
    handler._iris_stderr = True
    handler.setFormatter(_formatter())
    handler.addFilter(_FILTER)  # records of loggers made without get_logger get the rank too
    root.addHandler(handler)
    root.setLevel(level)
    root.propagate = False


_configure(os.environ.get(LEVEL_VARIABLE))
